"""Running statistics for observation normalisation and reward scaling (pure functions).

Statistics are merged one batch at a time with the parallel-variance formula (Chan et
al.), so a batch of any size costs one merge:

    n = n_a + n_b,   d = mean_b - mean_a
    mean = mean_a + d * n_b / n
    var  = (var_a * n_a + var_b * n_b + d² * n_a * n_b / n) / n

Empty statistics (count 0) have mean 0 and variance 1: normalising with them changes
nothing, and the first merge replaces them by the batch's own mean and variance.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from purejaxppo import pytree


EPS = 1e-8  # added to the variance before its square root


@pytree.dataclass
class RunningStats:
    """Mean and (population) variance of everything merged so far, per feature."""

    count: jnp.ndarray  # float32 scalar: samples merged
    mean: jnp.ndarray
    var: jnp.ndarray


def init_stats(shape=()) -> RunningStats:
    return RunningStats(jnp.float32(0.0), jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32))


def merge(stats: RunningStats, batch) -> RunningStats:
    """`stats` with a batch [..., *feature shape] merged in (every leading axis is samples)."""
    batch = jnp.reshape(batch, (-1, *stats.mean.shape)).astype(jnp.float32)
    n_b = jnp.float32(batch.shape[0])
    mean_b, var_b = jnp.mean(batch, axis=0), jnp.var(batch, axis=0)
    n = stats.count + n_b
    delta = mean_b - stats.mean
    mean = stats.mean + delta * (n_b / n)
    var = (stats.var * stats.count + var_b * n_b + delta**2 * (stats.count * n_b / n)) / n
    return RunningStats(n, mean, var)


def normalize(stats: RunningStats, x, clip):
    """(x - mean) / std, clipped to [-clip, clip]."""
    return jnp.clip((x - stats.mean) / jnp.sqrt(stats.var + EPS), -clip, clip)


# --------------------------------------------------------------------------------------
# Reward scaling: divide rewards by the running std of the discounted return
# --------------------------------------------------------------------------------------
@pytree.dataclass
class RewardScaler:
    """Per environment, the discounted return so far; over all, its running statistics."""

    discounted_return: jnp.ndarray  # [num_envs]
    stats: RunningStats             # of discounted_return, over every step seen


def init_reward_scaler(num_envs: int) -> RewardScaler:
    return RewardScaler(jnp.zeros(num_envs, jnp.float32), init_stats())


def scale_rewards(scaler: RewardScaler, reward, done, gamma, clip):
    """rewards [num_steps, num_envs] -> (scaler, rewards / std of the discounted return,
    clipped to [-clip, clip]).

    At each step G <- gamma * G + r; every step's G joins the statistics; G restarts at 0
    after a step that ends an episode (`done`: terminated or truncated). The rewards are
    divided by the standard deviation after merging this rollout's returns.
    """
    def accumulate(g, step):
        r, d = step
        g = gamma * g + r
        return jnp.where(d, 0.0, g), g

    discounted, returns = jax.lax.scan(accumulate, scaler.discounted_return, (reward, done))
    stats = merge(scaler.stats, returns)
    scaled = jnp.clip(reward / jnp.sqrt(stats.var + EPS), -clip, clip)
    return RewardScaler(discounted, stats), scaled
