"""Wrappers over the environment protocol."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from purejaxppo import pytree
from purejaxppo.envs.base import OF_STATE, OPTIONAL, RESET_STRATEGY


class Wrapper:
    """Wraps an environment of the protocol and keeps its description: its members, and each
    optional member (`base.OPTIONAL`) exactly where the wrapped environment gives it (those of
    the state called with the state it wraps)."""

    reset_strategy = RESET_STRATEGY  # where the wrapped environment gives none

    def __init__(self, env):
        self.env = env
        self.obs_shape = tuple(env.obs_shape)
        self.obs_size = math.prod(self.obs_shape)
        self.action_space = env.action_space
        self.max_episode_steps = env.max_episode_steps
        for member in OPTIONAL:
            if hasattr(env, member):
                given = getattr(env, member)
                setattr(self, member, self._of_inner(given) if member in OF_STATE else given)

    @property
    def has_action_mask(self) -> bool:
        """Whether the wrapped environment gives `action_mask(state)`, and so this wrapper."""
        return hasattr(self, "action_mask")

    def _of_inner(self, function):
        """`function` of the wrapped environment's state as a function of this wrapper's."""
        return lambda state: function(self._inner(state))

    def _inner(self, state):
        return state


@pytree.dataclass
class EpisodeStatsState:
    env_state: object
    episode_return: jnp.ndarray
    episode_length: jnp.ndarray


class EpisodeStats(Wrapper):
    """Accumulates each episode's undiscounted return and length.

    On every step `info` carries `episode_done` (terminated or truncated) and the running
    `episode_return` / `episode_length` including this step: on the step that ends an
    episode, that episode's totals. Counters restart when `AutoReset` swaps in a fresh
    state from `reset`.
    """

    def _inner(self, state):
        return state.env_state

    def reset(self, key):
        obs, state = self.env.reset(key)
        return obs, EpisodeStatsState(state, jnp.float32(0.0), jnp.int32(0))

    def step(self, key, state, action):
        obs, env_state, reward, terminated, truncated, info = self.env.step(key, state.env_state, action)
        ret = state.episode_return + reward
        length = state.episode_length + 1
        info = {**info, "episode_done": terminated | truncated, "episode_return": ret, "episode_length": length}
        return obs, EpisodeStatsState(env_state, ret, length), reward, terminated, truncated, info


class AutoReset(Wrapper):
    """Starts a new episode after every terminated or truncated step.

    `step(key, state, action, reset=None)`: when the step ends an episode, the returned
    obs and state are `reset` = (obs, state) from `env.reset` (computed from the key
    when not given), and `info["final_observation"]` holds the observation the episode
    ended on (always the observation the step led to). Passing `reset` lets the rollout
    compute all resets of a rollout in one batched call instead of one per step.
    """

    def reset(self, key):
        return self.env.reset(key)

    def step(self, key, state, action, reset=None):
        if reset is None:
            key, reset_key = jax.random.split(key)
            reset = self.env.reset(reset_key)
        obs, state, reward, terminated, truncated, info = self.env.step(key, state, action)
        done = terminated | truncated
        reset_obs, reset_state = reset
        info = {**info, "final_observation": obs}
        obs = jnp.where(done, reset_obs, obs)
        state = jax.tree.map(lambda r, s: jnp.where(done, r, s), reset_state, state)
        return obs, state, reward, terminated, truncated, info
