"""A policy's return on fresh episodes, collected by the training rollout itself."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from purejaxppo.rollout import rollout


def evaluate(env, agent, params, agent_state, key, num_episodes: int, deterministic: bool):
    """Returns [num_episodes]: the return of the first episode of each of num_episodes
    fresh environments, acting by the mode of the policy (deterministic: argmax / mean
    action) or by sampling it. Runs env.max_episode_steps steps, so every episode ends
    (by termination or its time limit). Only the first episode counts, so each env gets
    one fresh reset for the whole rollout: memory does not grow with max_episode_steps."""
    reset_key, run_key = jax.random.split(key)
    obs, state = jax.vmap(env.reset)(jax.random.split(reset_key, num_episodes))
    policy = functools.partial(agent.act, params, agent_state, deterministic=deterministic)
    fresh = agent.initial_carry(num_episodes)  # a recurrent policy starts each episode with a fresh memory
    _, _, _, traj = rollout(env, policy, state, obs, run_key, env.max_episode_steps, resets="per_rollout",
                            carry=fresh, initial_carry=fresh)
    first_end = jnp.argmax(traj.episode_done, axis=0)
    returns = traj.episode_return[first_end, jnp.arange(num_episodes)]
    return jnp.where(jnp.any(traj.episode_done, axis=0), returns, jnp.nan)
