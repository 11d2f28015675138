"""Generalized advantage estimation that tells a time limit from a termination."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def gae(rewards, values, next_values, terminated, truncated, gamma, gae_lambda):
    """Advantages and value targets over a rollout of shape [T, ...].

    Step t goes from state s_t (value `values[t]`) with reward `rewards[t]` to s'_{t+1},
    whose value is `next_values[t]`: for an episode that ended at t this is the value of
    the *final* observation, not of the next episode's first one.

        delta_t = r_t + gamma * (1 - terminated_t) * V(s'_{t+1}) - V(s_t)
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},   done = terminated or truncated

    A time limit (truncated, not terminated) still bootstraps from V(s'_{t+1}); only a
    true termination cuts the return. The recursion never crosses an episode boundary.
    Returns (advantages, targets = advantages + values).
    """
    not_terminated = 1.0 - terminated.astype(values.dtype)
    not_done = 1.0 - jnp.logical_or(terminated, truncated).astype(values.dtype)
    deltas = rewards + gamma * not_terminated * next_values - values

    def backward(next_advantage, step):
        delta, continues = step
        advantage = delta + gamma * gae_lambda * continues * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(values[0]), (deltas, not_done), reverse=True)
    return advantages, advantages + values
