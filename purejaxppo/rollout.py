"""Acting in vmapped environments: the one rollout used for training (and evaluation)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from purejaxppo import pytree


@pytree.dataclass
class Transition:
    """One step of num_envs environments; a rollout stacks these to [num_steps, num_envs]."""

    obs: jnp.ndarray
    action: jnp.ndarray          # as sampled (unclipped), used for the probability ratio
    log_prob: jnp.ndarray
    value: jnp.ndarray
    reward: jnp.ndarray
    terminated: jnp.ndarray
    truncated: jnp.ndarray
    final_obs: jnp.ndarray       # observation the step led to, before any auto-reset
    episode_done: jnp.ndarray
    episode_return: jnp.ndarray  # return of the episode that ended here (when episode_done)
    episode_length: jnp.ndarray
    hidden: object               # a recurrent policy's carry after seeing obs (before any restart); () without
    action_mask: object          # the actions allowed at obs [..., num_actions] (an env with masks); () without
    info: dict                   # the info entries named by info_metrics, as float32; {} without


def rollout(env, policy, env_state, obs, key, num_steps, resets="per_step", carry=(), initial_carry=(),
            info_keys=()):
    """Run `policy(carry, obs, key) -> (carry, env_action, action, log_prob, value)` for
    num_steps; for an environment with action masks, `policy(carry, obs, key, mask=...)`
    with what `env.action_mask` allows in each env's state.

    `env` is an `AutoReset` environment. A policy with memory passes its `carry` from one
    step to the next; where an episode ended it restarts at `initial_carry` (both () for a
    policy without memory). All random keys are drawn up front, and so are the fresh
    episodes that replace ended ones, by `resets`:
      "per_step"     one per (step, env), in one batched call outside the sequential loop
                     (fast where resets are cheap; memory grows with num_steps x num_envs)
      "per_rollout"  one per env: an env that ends twice within one rollout restarts from
                     the same fresh state both times (for costly resets: Brax)
      "in_loop"      one per (step, env), each step computing its own (same results as
                     "per_step", memory of one step)
    Returns (env_state, obs, carry, Transition[num_steps, num_envs]); its `info` holds the
    step info's entries named in `info_keys`, as float32.

    A state whose mask allows no action at all: the masked policy gives every action the
    same lowest logit, has no preference, and takes action 0, greedy or sampled (the noise of
    sampling vanishes against that logit); no gradient reaches the policy from the step.
    `no_action` finds such steps, for the learner's and evaluation's counts.
    """
    num_envs = obs.shape[0]
    act_key, step_key, reset_key = jax.random.split(key, 3)
    act_keys = jax.random.split(act_key, num_steps)
    step_keys = jax.random.split(step_key, (num_steps, num_envs))
    reset_inputs = None
    if resets == "per_step":
        reset_inputs = jax.vmap(jax.vmap(env.reset))(jax.random.split(reset_key, (num_steps, num_envs)))
    elif resets == "in_loop":
        reset_inputs = jax.random.split(reset_key, (num_steps, num_envs))
    elif resets == "per_rollout":
        fresh = jax.vmap(env.reset)(jax.random.split(reset_key, num_envs))
    else:
        raise ValueError(f"resets: {resets!r}")

    def step(loop, inputs):
        env_state, obs, carry = loop
        act_key, step_keys, reset = inputs
        if resets == "in_loop":
            reset = jax.vmap(env.reset)(reset)
        elif resets == "per_rollout":
            reset = fresh
        mask = jax.vmap(env.action_mask)(env_state) if env.has_action_mask else ()
        masked = {"mask": mask} if env.has_action_mask else {}
        carry, env_action, action, log_prob, value = policy(carry, obs, act_key, **masked)
        next_obs, env_state, reward, terminated, truncated, info = jax.vmap(env.step)(
            step_keys, env_state, env_action, reset)
        transition = Transition(
            obs=obs, action=action, log_prob=log_prob, value=value, reward=reward,
            terminated=terminated, truncated=truncated, final_obs=info["final_observation"],
            episode_done=info["episode_done"], episode_return=info["episode_return"],
            episode_length=info["episode_length"], hidden=carry, action_mask=mask,
            info={name: info[name].astype(jnp.float32) for name in info_keys})
        carry = restart(carry, initial_carry, info["episode_done"])
        return (env_state, next_obs, carry), transition

    (env_state, obs, carry), trajectory = jax.lax.scan(
        step, (env_state, obs, carry), (act_keys, step_keys, reset_inputs))
    return env_state, obs, carry, trajectory


def restart(carry, fresh, done):
    """A policy's memory `carry` (rows [num_envs, ...], or ()) with the rows where `done`
    [num_envs] is true replaced by `fresh`'s."""
    return jax.tree.map(lambda f, c: jnp.where(done.reshape(done.shape + (1,) * (c.ndim - 1)), f, c), fresh, carry)


def no_action(traj: Transition, masked: bool):
    """[num_steps, num_envs] True where the mask the policy acted under allowed no action
    (all False where no mask applies: `masked` false)."""
    if not masked:
        return jnp.zeros(traj.reward.shape, bool)
    return ~jnp.any(traj.action_mask, axis=-1)


def past_time_limit(traj: Transition, max_episode_steps: int):
    """[num_steps, num_envs] True on the step where an episode runs past `max_episode_steps`
    without having ended (its step max_episode_steps + 1): once per such episode."""
    return traj.episode_length == max_episode_steps + 1
