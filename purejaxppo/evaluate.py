"""A policy's return on fresh episodes, collected by the training rollout itself."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from purejaxppo.rollout import no_action, rollout


def evaluate(env, agent, params, agent_state, key, num_episodes: int, deterministic: bool):
    """Returns [num_episodes]: the return of the first episode of each of num_episodes
    fresh environments (NaN for one that did not end; see `evaluate_episodes`)."""
    return evaluate_episodes(env, agent, params, agent_state, key, num_episodes, deterministic)["return"]


def evaluate_episodes(env, agent, params, agent_state, key, num_episodes: int, deterministic: bool) -> dict:
    """The first episode of each of num_episodes fresh environments, acting by the mode of
    the policy (deterministic: argmax / mean action) or by sampling it:
      "return"           [num_episodes] its return; NaN where it did not end within
                         env.max_episode_steps (an environment that does not end its episodes
                         at its own time limit): no partial return passes for a whole one
      "no_action_steps"  [num_episodes] its steps whose action mask allowed no action
                         (see `rollout`), up to its end (all steps run where it did not end)
      "length"           [num_episodes] its steps (env.max_episode_steps where it did not end)
      "time_limit"       [num_episodes] whether it ended by its time limit (a truncation, not a
                         termination): its return is capped by the limit, not by the policy
    Runs env.max_episode_steps steps. Only the first episode counts, so each env gets one
    fresh reset for the whole rollout: memory does not grow with max_episode_steps."""
    reset_key, run_key = jax.random.split(key)
    obs, state = jax.vmap(env.reset)(jax.random.split(reset_key, num_episodes))
    policy = functools.partial(agent.act, params, agent_state, deterministic=deterministic)
    fresh = agent.initial_carry(num_episodes)  # a recurrent policy starts each episode with a fresh memory
    _, _, _, traj = rollout(env, policy, state, obs, run_key, env.max_episode_steps, resets="per_rollout",
                            carry=fresh, initial_carry=fresh)
    first_end, envs = jnp.argmax(traj.episode_done, axis=0), jnp.arange(num_episodes)
    ended = jnp.any(traj.episode_done, axis=0)
    in_first = jnp.cumsum(traj.episode_done, axis=0) - traj.episode_done == 0  # no episode ended before
    return {"return": jnp.where(ended, traj.episode_return[first_end, envs], jnp.nan),
            "no_action_steps": jnp.sum(no_action(traj, agent.masked) & in_first, axis=0).astype(jnp.int32),
            "length": jnp.sum(in_first, axis=0).astype(jnp.int32),
            "time_limit": ended & traj.truncated[first_end, envs] & ~traj.terminated[first_end, envs]}
