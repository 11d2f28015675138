"""gymnax (>= 1.0, six-value step) behind the purejaxppo environment protocol."""

from __future__ import annotations

import difflib
import math

import jax.numpy as jnp

from purejaxppo.envs.base import ActionSpace, as_obs, with_params
from purejaxppo.errors import ConfigError

# Registered in gymnax but left out on purpose, with the reason.
EXCLUDED = {"MNISTBandit-bsuite": "downloads a data set (MNIST) when built, so it is left out on purpose"}


def env_names() -> list[str]:
    import gymnax

    return [n for n in gymnax.registered_envs if n not in EXCLUDED]


def _make(name: str):
    import gymnax

    if name in EXCLUDED:
        raise ConfigError("env", name, f"{EXCLUDED[name]}; every other gymnax environment is offered")
    if name not in env_names():
        close = difflib.get_close_matches(name, env_names(), n=4, cutoff=0.4)
        hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(env_names())}"
        raise ConfigError("env", name, f"unknown gymnax environment; {hint} (other families: brax/, craftax/, "
                          f"xminigrid/, jumanji/)")
    return gymnax.make(name)


class GymnaxEnv:
    """A gymnax environment with float32 observations (of its own shape) and bool done flags.

    `step` is the raw transition: it does not reset (gymnax's own `step` computes a
    reset on every step and selects it on done). `AutoReset` starts new episodes; the
    training rollout computes every reset it may need up front, batched (see
    `rollout.rollout` and `reset_strategy`).
    """

    reset_strategy = "per_step"  # resets are cheap: a fresh one is drawn for every (step, env)

    def __init__(self, name: str, env_params: dict | None = None, environment=None):
        """`environment`: a gymnax Environment of your own (named `name`) instead of gymnax's `name`."""
        from gymnax.environments import spaces

        self.name = name
        self._env, default_params = _make(name) if environment is None else (environment, environment.default_params)
        self._params = with_params(name, default_params, dict(env_params or {}))
        self.max_episode_steps = int(self._params.max_steps_in_episode)
        obs_shape = self._env.observation_space(self._params).shape
        self.obs_size = int(math.prod(obs_shape))
        self.obs_shape = tuple(obs_shape)  # as gymnax gives it
        space = self._env.action_space(self._params)
        if isinstance(space, spaces.Discrete):
            self.action_space = ActionSpace("discrete", num_actions=int(space.n))
        else:
            shape = tuple(space.shape)
            self.action_space = ActionSpace(
                "continuous", shape=shape,
                low=jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), shape),
                high=jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), shape))

    def reset(self, key):
        obs, state = self._env.reset(key, self._params)
        return as_obs(obs, self.obs_shape), state

    def step(self, key, state, action):
        """One transition, without gymnax's built-in auto-reset (see `AutoReset`)."""
        obs, state, reward, terminated, _ = self._env.step_env(key, state, action, self._params)
        truncated = self._env.is_truncated(state, self._params)
        return (as_obs(obs, self.obs_shape), state, jnp.asarray(reward, jnp.float32),
                jnp.asarray(terminated, jnp.bool_), jnp.asarray(truncated, jnp.bool_), {})
