"""Wrappers over the environment protocol."""

from __future__ import annotations

import jax.numpy as jnp
from flax import struct


@struct.dataclass
class EpisodeStatsState:
    env_state: object
    episode_return: jnp.ndarray
    episode_length: jnp.ndarray


class EpisodeStats:
    """Tracks each episode's undiscounted return and length.

    On the step that ends an episode (terminated or truncated) `info` carries
    `episode_done=True` with that episode's `episode_return` and `episode_length`.
    """

    def __init__(self, env):
        self.env = env
        self.obs_size = env.obs_size
        self.action_space = env.action_space

    def reset(self, key):
        obs, state = self.env.reset(key)
        return obs, EpisodeStatsState(state, jnp.float32(0.0), jnp.int32(0))

    def step(self, key, state, action):
        obs, env_state, reward, terminated, truncated, info = self.env.step(key, state.env_state, action)
        done = terminated | truncated
        ret = state.episode_return + reward
        length = state.episode_length + 1
        info = {**info, "episode_done": done, "episode_return": ret, "episode_length": length}
        state = EpisodeStatsState(env_state, jnp.where(done, 0.0, ret), jnp.where(done, 0, length))
        return obs, state, reward, terminated, truncated, info
