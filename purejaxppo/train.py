"""The fused PPO learner: three pure pieces, and `make_train` as their composition.

    learner = Learner(cfg)
    state = learner.init(key)                                  # everything a run carries
    state, metrics = learner.run(state, hparams, num_updates)  # num_updates static
    returns = learner.evaluate(state, episodes, deterministic)

Each is jit- and vmap-able. `run(run(s, k), n - k)` equals `run(s, n)` (metrics
concatenated): the random stream and the learning-rate schedule live in the state.

One update, all inside one `lax.scan` over updates:

    1. rollout      num_steps of the current policy in num_envs environments
                    (rewards x reward_scale; with normalize_reward, / running std of the return;
                    a recurrent policy's memory restarts where an episode ended)
    2. GAE          bootstrap a time limit from V(final observation), with the memory that
                    saw it; cut on termination (and on a time limit, with bootstrap_truncation false)
    3. optimise     for epoch in range(max_epochs):            (masked beyond update_epochs
                        shuffle the batch into minibatches      or after a KL early stop)
                        (single steps; a recurrent policy's: whole sequences, replayed
                        from the memory they started with)
                        for each minibatch: clipped PPO loss -> global-norm clip -> Adam
                    stop early once an epoch's mean k3 KL > 1.5 * target_kl
    4. diagnostics  per epoch (KL, clip fraction) and per update (losses, episodes, ...),
                    and what went wrong at run time: steps whose action mask allowed no
                    action, episodes that ran past max_episode_steps (counted, not averaged);
                    the env info's entries named by info_metrics, means over the batch's steps
    5. observe      with normalize_obs, merge the rollout's observations into the running
                    statistics: the rollout and every epoch of an update see the same
                    normalisation, so the first minibatch's ratio is exactly 1
"""

from __future__ import annotations

import functools
import math

import chex
import jax
import jax.numpy as jnp
import optax

from purejaxppo import pytree
from purejaxppo.config import HParams, PPOConfig, check_hparams
from purejaxppo.errors import integer
from purejaxppo.evaluate import evaluate_episodes
from purejaxppo.gae import gae
from purejaxppo.gate import Bundle, bundle_of
from purejaxppo.losses import explained_variance, ppo_loss, ratio_diagnostics
from purejaxppo.normalize import init_reward_scaler, scale_rewards
from purejaxppo.rollout import no_action, past_time_limit, rollout

ADAM_EPS = 1e-5
PER_EPOCH_METRICS = ("kl_k1", "kl_k3", "clip_fraction", "ratio_outside")
PER_UPDATE_MEANS = ("policy_loss", "value_loss", "entropy", "total_loss", "grad_norm")
EPOCH_SUMMARY = PER_EPOCH_METRICS + PER_UPDATE_MEANS + ("ratio_error",)  # an epoch's scalars; NaN when masked
EVAL_MODES = {"deterministic": True, "stochastic": False}  # the final evaluations: name -> deterministic


@pytree.dataclass
class LearnerState:
    """Everything a run carries from one update to the next: save it to resume, load it to act."""

    params: dict
    opt_state: optax.OptState
    agent_state: dict                  # the agent's own state (observation statistics, recurrent carry), or {}
    reward_scaler: object              # with normalize_reward, a normalize.RewardScaler; else {}
    env_state: object
    obs: jnp.ndarray
    key: jnp.ndarray                   # training's random stream
    eval_key: jnp.ndarray              # evaluation's, apart so that evaluating changes no training number
    updates_done: jnp.ndarray          # the learning-rate schedule reads it
    last_episode_return: jnp.ndarray   # last finished episode's return (NaN before any)
    last_episode_length: jnp.ndarray



@pytree.dataclass
class TrainResult:
    state: LearnerState
    metrics: dict  # name -> [num_updates, ...]; see docs/metrics.md
    evaluation: dict  # final policy on fresh episodes: {"deterministic", "stochastic"} -> returns [episodes]
                      # (NaN: did not end), and "<mode>_<field>" -> [episodes] for each of EVAL_FIELDS


# what an evaluation records of each episode besides its return (`evaluate.evaluate_episodes`'s fields)
EVAL_FIELDS = ("length", "time_limit", "no_action_steps")


def evaluation_record(mode: str, episodes: dict) -> dict:
    """`Learner.evaluate_episodes`'s output for evaluation mode `mode` as `TrainResult.evaluation`
    holds it: its returns under `mode`, each other field under "<mode>_<field>"."""
    return {mode: episodes["return"], **{f"{mode}_{field}": episodes[field] for field in EVAL_FIELDS}}


def make_optimizer(max_grad_norm, learning_rate) -> optax.GradientTransformation:
    """Clip gradients by global norm, Adam (eps 1e-5), a step of `learning_rate`.

    Both values may be traced (a sweep's hyperparameters, an annealed rate): the
    optimiser's state holds neither, so one built with any values initialises it.
    """
    return optax.chain(optax.clip_by_global_norm(max_grad_norm),
                       optax.scale_by_adam(eps=ADAM_EPS),
                       optax.scale_by_learning_rate(learning_rate))


def no_epoch_masked(hp: HParams, epochs_scan: int) -> bool:
    """True when the hyperparameters are known while tracing (the config's, not traced
    ones of a sweep), every scanned epoch is an update epoch and KL early stopping is off:
    then no epoch can be masked."""
    if any(isinstance(x, jax.core.Tracer) for x in (hp.update_epochs, hp.target_kl)):
        return False
    return int(hp.update_epochs) == epochs_scan and math.isinf(float(hp.target_kl))


def learning_rate(hp: HParams, updates_done, num_updates: int):
    """The rate of update `updates_done` (0-based): hp.lr, or with anneal_lr decayed
    linearly over the run, hp.lr * (1 - updates_done / num_updates); the decay reaches 0
    at the end of the last update (which runs at hp.lr / num_updates) and stays there
    (a run continued past its end does not learn). With a warm-up (lr_warmup_updates W > 0)
    updates 0 .. W-1 run instead at lr_warmup_start + (lr - lr_warmup_start) * u / W."""
    frac_left = jnp.maximum(1.0 - updates_done.astype(jnp.float32) / num_updates, 0.0)
    rate = hp.lr * jnp.where(hp.anneal_lr, frac_left, 1.0)
    warm = jnp.maximum(hp.lr_warmup_updates, 1).astype(jnp.float32)
    warming = hp.lr_warmup_start + (hp.lr - hp.lr_warmup_start) * (updates_done.astype(jnp.float32) / warm)
    return jnp.where(updates_done < hp.lr_warmup_updates, warming, rate)


class Learner:
    """PPO on one checked config: `init`, `run`, `evaluate` (see the module doc).

    `cfg`: a `gate.Bundle` (the config checked, its environment and agent built: taken as it
    is), or a config, which passes the gate here: a hand-built `PPOConfig` that breaks a rule
    raises ConfigError naming the field, before anything is traced; "update_epochs <=
    max_epochs" is checked in `run`, against the HParams it runs with.
    `network`: your own flax.linen actor-critic (see `networks` for its contract), in place
    of the config's (`network: package.module:factory`, or the built-in of `policy`); its
    output shapes are checked by `jax.eval_shape`, before anything is compiled.
    `env`: the environment already built for cfg (its env and env_params); default: built here.
    """

    def __init__(self, cfg: PPOConfig | Bundle, network=None, env=None):
        bundle = bundle_of(cfg, env=env, network=network, update_epochs=False)
        self.cfg, self.env, self.agent = bundle.config, bundle.env, bundle.agent

    def init(self, key) -> LearnerState:
        agent_key, env_key, run_key = jax.random.split(key, 3)
        obs, env_state = jax.vmap(self.env.reset)(jax.random.split(env_key, self.cfg.num_envs))
        params, agent_state = self.agent.init(agent_key, obs[0], self.cfg.num_envs)
        opt_state = make_optimizer(1.0, 1.0).init(params)
        reward_scaler = init_reward_scaler(self.cfg.num_envs) if self.cfg.normalize_reward else {}
        nan = jnp.float32(jnp.nan)
        return LearnerState(params, opt_state, agent_state, reward_scaler, env_state, obs, run_key,
                            eval_key=jax.random.fold_in(key, 1), updates_done=jnp.int32(0),
                            last_episode_return=nan, last_episode_length=nan)

    def run(self, state: LearnerState, hparams: HParams | None = None, num_updates: int | None = None):
        """`num_updates` PPO updates from `state` -> (state, metrics [num_updates, ...]).
        `num_updates` is static (default: a whole run, cfg.num_updates); `hparams`
        defaults to the config's. `hparams` are one run's (every field a scalar: vmap over
        a run axis) and of their fields' kinds, else ConfigError naming the field; their
        values are checked only where concrete (see `HParams.stack` for a checked sweep)."""
        hp = check_hparams(HParams.from_config(self.cfg) if hparams is None else hparams, self.cfg)
        num_updates = self.cfg.num_updates if num_updates is None else num_updates
        num_updates = integer("num_updates", num_updates, 0, " (it is static)")
        return jax.lax.scan(lambda s, _: self.ppo_update(s, hp), state, None, length=num_updates)

    def evaluate(self, state: LearnerState, num_episodes: int, deterministic: bool = True, key=None):
        """The policy's return on `num_episodes` fresh episodes [num_episodes]; `key`
        defaults to one drawn from the state's evaluation stream (one per mode).
        `deterministic` may be traced: one program then evaluates both ways. NaN: an episode
        that did not end within max_episode_steps."""
        return self.evaluate_episodes(state, num_episodes, deterministic, key)["return"]

    def evaluate_episodes(self, state: LearnerState, num_episodes: int, deterministic: bool = True, key=None):
        """`evaluate`'s episodes with what else was seen in them: {"return", "no_action_steps",
        "length", "time_limit"}, each [num_episodes] (see `evaluate.evaluate_episodes`)."""
        if key is None:
            key = jax.random.fold_in(state.eval_key, deterministic)
        return evaluate_episodes(self.env, self.agent, state.params, state.agent_state, key, num_episodes,
                                 deterministic)

    # ----------------------------------------------------------------------------------
    def ppo_update(self, state: LearnerState, hp: HParams):
        """One PPO update: rollout, GAE, epochs of minibatch steps, diagnostics."""
        cfg, agent = self.cfg, self.agent
        key, rollout_key, epochs_key = jax.random.split(state.key, 3)

        # 1. rollout
        policy = functools.partial(agent.act, state.params, state.agent_state)
        start_carry = agent.carry(state.agent_state)
        env_state, obs, carry, traj = rollout(self.env, policy, state.env_state, state.obs, rollout_key,
                                              cfg.num_steps, resets=self.env.reset_strategy, carry=start_carry,
                                              initial_carry=agent.initial_carry(cfg.num_envs),
                                              info_keys=cfg.info_metrics)
        chex.assert_shape(traj.reward, (cfg.num_steps, cfg.num_envs))
        reward, reward_scaler = traj.reward * cfg.reward_scale, state.reward_scaler
        if cfg.normalize_reward:
            reward_scaler, reward = scale_rewards(reward_scaler, reward, traj.episode_done, hp.gamma,
                                                  cfg.reward_clip)

        # 2. GAE, bootstrapping from the value of each step's final observation
        _, next_values, _ = agent.step(state.params, state.agent_state, traj.hidden, traj.final_obs)
        ends = traj.terminated if cfg.bootstrap_truncation else traj.terminated | traj.truncated
        advantages, targets = gae(reward, traj.value, next_values, ends, traj.truncated, hp.gamma, hp.gae_lambda)
        steps = {"obs": traj.obs, "done": traj.episode_done, "action": traj.action, "old_log_prob": traj.log_prob,
                 "old_value": traj.value, "advantage": advantages, "target": targets, "mask": traj.action_mask}
        if agent.recurrent:  # the batch's leading axis is what minibatches split: whole sequences [envs, steps]
            batch = {**jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), steps), "carry": start_carry}
        else:  # single steps [num_envs * num_steps]
            batch = {**jax.tree.map(lambda x: x.reshape(cfg.batch_size, *x.shape[2:]), steps), "carry": ()}

        # 3. optimise: max_epochs epochs, those past update_epochs or a KL stop masked
        lr = learning_rate(hp, state.updates_done, cfg.num_updates)
        epoch = functools.partial(self._epoch, batch=batch, agent_state=state.agent_state, hp=hp, lr=lr)

        every_epoch_runs = no_epoch_masked(hp, cfg.epochs_scan)

        def masked_epoch(carry, epoch_index):
            params, opt_state, stopped = carry
            active = (epoch_index < hp.update_epochs) & ~stopped
            run_epoch = functools.partial(epoch, key=jax.random.fold_in(epochs_key, epoch_index))
            if every_epoch_runs:  # known while tracing: no mask to apply (under vmap a cond costs a select)
                params, opt_state, summary = run_epoch(params, opt_state)
            else:
                skipped = {name: jnp.float32(jnp.nan) for name in EPOCH_SUMMARY}
                params, opt_state, summary = jax.lax.cond(
                    active, run_epoch, lambda p, o: (p, o, skipped), params, opt_state)
            stopped = stopped | (active & (summary["kl_k3"] > 1.5 * hp.target_kl))
            return (params, opt_state, stopped), {**summary, "active": active}

        (params, opt_state, _), per_epoch = jax.lax.scan(
            masked_epoch, (state.params, state.opt_state, jnp.bool_(False)), jnp.arange(cfg.epochs_scan))

        # 4. diagnostics
        finished = traj.episode_done
        episodes = jnp.sum(finished)
        any_finished = episodes > 0
        mean_return = jnp.sum(traj.episode_return * finished) / jnp.maximum(episodes, 1)
        mean_length = jnp.sum(traj.episode_length * finished) / jnp.maximum(episodes, 1)
        last_return = jnp.where(any_finished, mean_return, state.last_episode_return)
        last_length = jnp.where(any_finished, mean_length, state.last_episode_length)

        metrics = {name: per_epoch[name] for name in PER_EPOCH_METRICS}
        metrics.update({name: jnp.nanmean(per_epoch[name]) for name in PER_UPDATE_MEANS})
        metrics.update(
            episode_return=last_return, episode_length=last_length,
            episodes_finished=episodes.astype(jnp.int32),
            explained_variance=explained_variance(batch["old_value"], batch["target"]),
            epochs_run=jnp.sum(per_epoch["active"]).astype(jnp.int32),
            first_minibatch_ratio_error=per_epoch["ratio_error"][0],
            clip_cases=self._clip_cases(params, state.agent_state, batch, hp.clip_eps),
            learning_rate=lr,
            no_action_steps=jnp.sum(no_action(traj, agent.masked)).astype(jnp.int32),
            overlong_episodes=jnp.sum(past_time_limit(traj, self.env.max_episode_steps)).astype(jnp.int32))
        metrics.update({f"info_{name}": jnp.mean(value) for name, value in traj.info.items()})  # info_metrics

        updates_done = state.updates_done + 1

        # 5. observe
        agent_state = agent.with_carry(agent.observe(state.agent_state, traj.obs), carry)

        state = state.replace(params=params, opt_state=opt_state, agent_state=agent_state,
                              reward_scaler=reward_scaler, env_state=env_state, obs=obs, key=key,
                              updates_done=updates_done, last_episode_return=last_return,
                              last_episode_length=last_length)
        return state, metrics

    def _epoch(self, params, opt_state, key, batch, agent_state, hp, lr):
        """One pass over the whole batch in freshly shuffled minibatches (of single steps,
        or of whole sequences)."""
        num_minibatches = self.cfg.num_minibatches
        order = jax.random.permutation(key, self.cfg.num_envs if self.agent.recurrent else self.cfg.batch_size)
        minibatches = jax.tree.map(lambda x: x[order].reshape(num_minibatches, -1, *x.shape[1:]), batch)

        def sgd_step(carry, minibatch):
            params, opt_state = carry

            def loss(p):
                dist, value = self.agent.unroll(p, agent_state, minibatch["carry"], minibatch["obs"],
                                                minibatch["done"], _mask(minibatch))
                return ppo_loss(dist.log_prob(minibatch["action"]), dist.entropy(), value, minibatch, hp)

            (_, terms), grads = jax.value_and_grad(loss, has_aux=True)(params)
            steps, opt_state = make_optimizer(hp.max_grad_norm, lr).update(grads, opt_state, params)
            params = optax.apply_updates(params, steps)
            return (params, opt_state), {**terms, "grad_norm": optax.global_norm(grads)}

        (params, opt_state), terms = jax.lax.scan(sgd_step, (params, opt_state), minibatches)
        # the epoch's summary, once, from what its steps computed: per sample, each minibatch's
        # log-probabilities just before its step, and its clip marks; per step, the losses
        old_log_prob = minibatches["old_log_prob"]
        summary = ratio_diagnostics(terms["log_prob"], old_log_prob, terms["clipped"], hp.clip_eps)
        summary.update({name: jnp.mean(terms[name]) for name in PER_UPDATE_MEANS})
        summary["ratio_error"] = jnp.max(jnp.abs(jnp.exp(terms["log_prob"][0] - old_log_prob[0]) - 1.0))
        return params, opt_state, summary

    def _clip_cases(self, params, agent_state, batch, clip_eps):
        """[2, 3] counts of the updated policy's ratios on the batch: (advantage >= 0, < 0)
        x (inside the band, above it, below it)."""
        dist, _ = self.agent.unroll(params, agent_state, batch["carry"], batch["obs"], batch["done"], _mask(batch))
        ratio = jnp.ravel(jnp.exp(dist.log_prob(batch["action"]) - batch["old_log_prob"]))
        regions = jnp.stack([jnp.abs(ratio - 1.0) <= clip_eps, ratio > 1.0 + clip_eps, ratio < 1.0 - clip_eps])
        positive = jnp.ravel(batch["advantage"]) >= 0
        return jnp.stack([jnp.sum(regions & positive, axis=1),
                          jnp.sum(regions & ~positive, axis=1)]).astype(jnp.int32)


def _mask(batch):
    """The batch's action masks (None: the environment has none)."""
    return None if isinstance(batch["mask"], tuple) else batch["mask"]


def make_train(cfg: PPOConfig | Bundle, eval_episodes: int = 0, network=None):
    """The pure `train(key, hparams=None) -> TrainResult` of a checked config:
    init, run every update, and (`eval_episodes` > 0) evaluate the final policy on that
    many fresh episodes, acting deterministically and stochastically, in one program.
    `cfg` and `network`: see `Learner` (a config passes the gate: a hand-built `PPOConfig`
    that breaks a rule raises ConfigError naming the field); `hparams` as `Learner.run`
    checks them. For several runs, vmap: `jax.vmap(train)(keys, hparams)` with
    `hparams = HParams.stack(cfg, runs=len(keys), lr=[...])`, whose values are checked;
    a traced value is not."""
    eval_episodes = integer("eval_episodes", eval_episodes, 0)
    learner = Learner(bundle_of(cfg, network=network))
    cfg = learner.cfg

    def train(key, hparams: HParams | None = None) -> TrainResult:
        state, metrics = learner.run(learner.init(key), hparams, cfg.num_updates)
        evaluation = {}
        if eval_episodes:
            for name, deterministic in EVAL_MODES.items():
                evaluation.update(evaluation_record(name, learner.evaluate_episodes(state, eval_episodes,
                                                                                    deterministic)))
        return TrainResult(state, metrics, evaluation)

    return train
