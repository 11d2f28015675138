"""The fused PPO learner: `make_train(config)` -> a pure `train(key, hparams=None)`.

One update, all inside one `lax.scan` over updates:

    1. rollout      num_steps of the current policy in num_envs environments
    2. GAE          bootstrap a time limit from V(final observation); cut on termination
    3. optimise     for epoch in range(max_epochs):            (masked beyond update_epochs
                        shuffle the batch into minibatches      or after a KL early stop)
                        for each minibatch: clipped PPO loss -> global-norm clip -> Adam
                    stop early once an epoch's mean k3 KL > 1.5 * target_kl
    4. diagnostics  per epoch (KL, clip fraction) and per update (losses, episodes, ...)
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import optax
from flax import struct

from purejaxppo.config import HParams, PPOConfig
from purejaxppo.envs import make_env
from purejaxppo.evaluate import evaluate
from purejaxppo.gae import gae
from purejaxppo.losses import explained_variance, ppo_loss
from purejaxppo.networks import ActorCritic
from purejaxppo.rollout import act, rollout

ADAM_EPS = 1e-5
PER_EPOCH_METRICS = ("kl_k1", "kl_k3", "clip_fraction", "ratio_outside")
PER_UPDATE_MEANS = ("policy_loss", "value_loss", "entropy", "total_loss", "grad_norm")


@struct.dataclass
class RunnerState:
    """Everything a run carries from one update to the next (save it to resume)."""

    params: dict
    opt_state: optax.OptState
    env_state: object
    obs: jnp.ndarray
    key: jnp.ndarray
    update: jnp.ndarray                # updates done so far
    last_episode_return: jnp.ndarray   # last finished episode's return (NaN before any)
    last_episode_length: jnp.ndarray


@struct.dataclass
class TrainResult:
    runner_state: RunnerState
    metrics: dict  # name -> [num_updates, ...]; see the README's metrics table
    evaluation: dict  # final policy on fresh episodes: {"deterministic", "stochastic"} -> [episodes]


def make_network(cfg: PPOConfig, env) -> ActorCritic:
    space = env.action_space
    log_std_init = 0.0 if cfg.log_std_init is None else cfg.log_std_init
    return ActorCritic(space.kind, space.size, tuple(cfg.hidden_sizes), cfg.activation, log_std_init)


def make_train(cfg: PPOConfig, progress=None, eval_episodes: int = 0):
    """Build the pure train function for a checked config.

    `progress`, if given, is called on the host as progress(updates_done) at most once
    per update (about 100 times per run), also under vmap; it must not touch JAX arrays.
    `eval_episodes` > 0 evaluates the final policy on that many fresh episodes, acting
    deterministically and stochastically, inside the same program (`TrainResult.evaluation`).
    """
    env = make_env(cfg)
    network = make_network(cfg, env)
    optimizer = optax.scale_by_adam(eps=ADAM_EPS)
    num_updates, num_envs, num_steps = cfg.num_updates, cfg.num_envs, cfg.num_steps
    batch_size, num_minibatches, max_epochs = cfg.batch_size, cfg.num_minibatches, cfg.epochs_scan
    policy = functools.partial(act, network, env.action_space)

    def init(key):
        net_key, env_key, run_key = jax.random.split(key, 3)
        obs, env_state = jax.vmap(env.reset)(jax.random.split(env_key, num_envs))
        params = network.init(net_key, obs[0])
        nan = jnp.float32(jnp.nan)
        return RunnerState(params, optimizer.init(params), env_state, obs, run_key,
                           jnp.int32(0), nan, nan)

    def sgd_step(params, opt_state, minibatch, hp, lr):
        def loss(p):
            dist, value = network.apply(p, minibatch["obs"])
            return ppo_loss(dist.log_prob(minibatch["action"]), dist.entropy(), value, minibatch, hp)

        (_, diagnostics), grads = jax.value_and_grad(loss, has_aux=True)(params)
        grad_norm = optax.global_norm(grads)
        scale = jnp.where(grad_norm > hp.max_grad_norm, hp.max_grad_norm / grad_norm, 1.0)
        grads = jax.tree.map(lambda g: g * scale, grads)
        updates, opt_state = optimizer.update(grads, opt_state)
        params = jax.tree.map(lambda p, u: p - lr * u, params, updates)
        return params, opt_state, {**diagnostics, "grad_norm": grad_norm}

    def run_epoch(params, opt_state, batch, key, hp, lr):
        """One pass over the whole batch in freshly shuffled minibatches."""
        order = jax.random.permutation(key, batch_size)
        minibatches = jax.tree.map(
            lambda x: x[order].reshape(num_minibatches, -1, *x.shape[1:]), batch)

        def step(carry, minibatch):
            params, opt_state, diagnostics = sgd_step(*carry, minibatch, hp, lr)
            return (params, opt_state), diagnostics

        (params, opt_state), diagnostics = jax.lax.scan(step, (params, opt_state), minibatches)
        summary = jax.tree.map(jnp.mean, diagnostics)
        summary["ratio_error"] = diagnostics["ratio_error"][0]  # first minibatch of the epoch
        return params, opt_state, summary

    def update(runner: RunnerState, update_index, hp: HParams):
        key, rollout_key, epochs_key = jax.random.split(runner.key, 3)

        # 1. rollout
        env_state, obs, traj = rollout(env, functools.partial(policy, runner.params),
                                       runner.env_state, runner.obs, rollout_key, num_steps)
        chex.assert_shape(traj.reward, (num_steps, num_envs))

        # 2. GAE, bootstrapping from the value of each step's final observation
        _, next_values = network.apply(runner.params, traj.final_obs)
        advantages, targets = gae(traj.reward, traj.value, next_values, traj.terminated,
                                  traj.truncated, hp.gamma, hp.gae_lambda)
        batch = jax.tree.map(lambda x: x.reshape(batch_size, *x.shape[2:]), {
            "obs": traj.obs, "action": traj.action, "old_log_prob": traj.log_prob,
            "old_value": traj.value, "advantage": advantages, "target": targets})

        # 3. optimise: max_epochs epochs, those past update_epochs or a KL stop masked
        frac_left = 1.0 - runner.update.astype(jnp.float32) / num_updates
        lr = hp.lr * jnp.where(hp.anneal_lr, frac_left, 1.0)

        def epoch(carry, epoch_index):
            params, opt_state, stopped = carry
            active = (epoch_index < hp.update_epochs) & ~stopped
            run = functools.partial(run_epoch, batch=batch, key=jax.random.fold_in(epochs_key, epoch_index),
                                    hp=hp, lr=lr)
            skip_summary = jax.tree.map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype),
                                        jax.eval_shape(run, params, opt_state)[2])
            params, opt_state, summary = jax.lax.cond(
                active, run, lambda p, o: (p, o, skip_summary), params, opt_state)
            stopped = stopped | (active & (summary["kl_k3"] > 1.5 * hp.target_kl))
            return (params, opt_state, stopped), {**summary, "active": active}

        (params, opt_state, _), per_epoch = jax.lax.scan(
            epoch, (runner.params, runner.opt_state, jnp.bool_(False)), jnp.arange(max_epochs))

        # 4. diagnostics
        dist, _ = network.apply(params, batch["obs"])
        ratio = jnp.exp(dist.log_prob(batch["action"]) - batch["old_log_prob"])
        clip_eps = hp.clip_eps
        regions = jnp.stack([jnp.abs(ratio - 1.0) <= clip_eps, ratio > 1.0 + clip_eps, ratio < 1.0 - clip_eps])
        positive = batch["advantage"] >= 0
        clip_cases = jnp.stack([jnp.sum(regions & positive, axis=1), jnp.sum(regions & ~positive, axis=1)])

        finished = traj.episode_done
        episodes = jnp.sum(finished)
        any_finished = episodes > 0
        mean_return = jnp.sum(traj.episode_return * finished) / jnp.maximum(episodes, 1)
        mean_length = jnp.sum(traj.episode_length * finished) / jnp.maximum(episodes, 1)
        last_return = jnp.where(any_finished, mean_return, runner.last_episode_return)
        last_length = jnp.where(any_finished, mean_length, runner.last_episode_length)

        metrics = {name: per_epoch[name] for name in PER_EPOCH_METRICS}
        metrics.update({name: jnp.nanmean(per_epoch[name]) for name in PER_UPDATE_MEANS})
        metrics.update(
            episode_return=last_return, episode_length=last_length,
            episodes_finished=episodes.astype(jnp.int32),
            explained_variance=explained_variance(batch["old_value"], batch["target"]),
            epochs_run=jnp.sum(per_epoch["active"]).astype(jnp.int32),
            first_minibatch_ratio_error=per_epoch["ratio_error"][0],
            clip_cases=clip_cases.astype(jnp.int32),
            learning_rate=lr)

        if progress is not None:
            every = max(1, num_updates // 100)
            done = update_index + 1
            jax.lax.cond((done % every == 0) | (done == num_updates),
                         lambda: jax.debug.callback(progress, done), lambda: None)

        runner = RunnerState(params, opt_state, env_state, obs, key, runner.update + 1,
                             last_return, last_length)
        return runner, metrics

    def train(key, hparams: HParams | None = None) -> TrainResult:
        hp = HParams.from_config(cfg) if hparams is None else hparams
        eval_key = jax.random.fold_in(key, 1)  # a stream of its own: training is unchanged
        runner = init(key)
        runner, metrics = jax.lax.scan(functools.partial(update, hp=hp), runner, jnp.arange(num_updates))
        evaluation = {}
        if eval_episodes:
            for name, deterministic in (("deterministic", True), ("stochastic", False)):
                evaluation[name] = evaluate(env, network, runner.params, jax.random.fold_in(eval_key, deterministic),
                                            eval_episodes, deterministic)
        return TrainResult(runner, metrics, evaluation)

    return train
