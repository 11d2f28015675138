"""gymnax (>= 1.0, six-value step) behind the purejaxppo environment protocol."""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers

import jax.numpy as jnp
import numpy as np

from purejaxppo.envs.base import ActionSpace
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
        raise ConfigError("env", name, f"unknown gymnax environment; {hint} (other families: gymnax/, brax/)")
    return gymnax.make(name)


def _is_step_count(key: str) -> bool:
    return key in ("max_steps_in_episode", "t_max") or key.endswith(("_length", "_interval"))


def _scalar(value):
    """numpy scalars and 0-d arrays as Python values; YAML's "1e-3" (a string) as a number."""
    if isinstance(value, (np.generic, np.ndarray)) and np.ndim(value) == 0:
        value = value.item()
    elif hasattr(value, "shape") and getattr(value, "shape") == () and hasattr(value, "item"):
        try:
            value = value.item()
        except Exception:  # a traced value: left as it is, refused below
            pass
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _param_value(name: str, key: str, default, value):
    """`value` for parameter `key` checked against the type and range of its default
    (`name`'s own default parameters) -> the value in the default's type."""
    field = f"env_params.{key}"
    shown = f"{name}'s default is {default!r}" if np.ndim(default) == 0 else f"{name}'s default has shape " \
        f"{tuple(np.shape(default))}"
    if isinstance(default, (bool, np.bool_)):
        value = _scalar(value)
        if not isinstance(value, (bool, np.bool_)):
            raise ConfigError(field, value, f"must be true or false ({shown})")
        return bool(value)
    if np.ndim(default) == 0 and isinstance(default, numbers.Real):
        number = _scalar(value)
        if isinstance(number, bool) or not isinstance(number, numbers.Real):
            kind = "an integer" if isinstance(default, numbers.Integral) or _is_step_count(key) else "a number"
            raise ConfigError(field, value, f"must be {kind} ({shown})")
        if not math.isfinite(number):
            raise ConfigError(field, value, f"must be finite ({shown})")
        if isinstance(default, numbers.Integral) or _is_step_count(key):
            if not float(number).is_integer():
                raise ConfigError(field, value, f"must be an integer ({shown})")
            number = int(number)
            if not -2**31 <= number < 2**31:
                raise ConfigError(field, value, f"must fit in 32 bits ({shown})")
            if _is_step_count(key) and number < 1:
                raise ConfigError(field, value, f"must be at least 1: it counts steps ({shown})")
        return type(default)(number) if isinstance(default, (int, float)) else number
    if hasattr(default, "shape"):  # an array parameter: an array of the same shape and kind
        try:
            array = np.asarray(value)
        except Exception:
            array = np.asarray(None)
        kind = np.dtype(default.dtype).kind
        numeric = array.dtype.kind in "biuf" and not (array.dtype.kind == "b" and kind != "b")
        if not numeric or array.shape != tuple(default.shape):
            raise ConfigError(field, value, f"must be an array of shape {tuple(default.shape)} of "
                              f"{'integers' if kind in 'iu' else 'numbers'} ({shown})")
        if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
            raise ConfigError(field, value, f"must be finite ({shown})")
        if kind in "iu" and array.dtype.kind == "f" and not np.all(array == np.round(array)):
            raise ConfigError(field, value, f"must hold integers ({shown})")
        return jnp.asarray(array, default.dtype)
    return value


def _with_params(name, default_params, overrides):
    fields = {f.name for f in dataclasses.fields(default_params)}
    values = {}
    for key in overrides:
        if key not in fields:
            close = difflib.get_close_matches(str(key), sorted(fields), n=2)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise ConfigError(f"env_params.{key}", overrides[key],
                              f"{name} has no such parameter; {hint}it has {', '.join(sorted(fields))}")
        values[key] = _param_value(name, key, getattr(default_params, key), overrides[key])
    return default_params.replace(**values)


class GymnaxEnv:
    """A gymnax environment with flat float32 observations and bool done flags.

    `step` is the raw transition: it does not reset (gymnax's own `step` computes a
    reset on every step and selects it on done). `AutoReset` starts new episodes; the
    training rollout computes every reset it may need up front, batched (see
    `rollout.rollout` and `reset_strategy`).
    """

    reset_strategy = "per_step"  # resets are cheap: a fresh one is drawn for every (step, env)

    def __init__(self, name: str, env_params: dict | None = None):
        from gymnax.environments import spaces

        self.name = name
        self._env, default_params = _make(name)
        self._params = _with_params(name, default_params, dict(env_params or {}))
        self.max_episode_steps = int(self._params.max_steps_in_episode)
        obs_shape = self._env.observation_space(self._params).shape
        self.obs_size = int(math.prod(obs_shape))
        space = self._env.action_space(self._params)
        if isinstance(space, spaces.Discrete):
            self.action_space = ActionSpace("discrete", num_actions=int(space.n))
        else:
            shape = tuple(space.shape)
            self.action_space = ActionSpace(
                "continuous", shape=shape,
                low=jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), shape),
                high=jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), shape))

    def _flat(self, obs):
        return jnp.reshape(obs, (self.obs_size,)).astype(jnp.float32)

    def reset(self, key):
        obs, state = self._env.reset(key, self._params)
        return self._flat(obs), state

    def step(self, key, state, action):
        """One transition, without gymnax's built-in auto-reset (see `AutoReset`)."""
        obs, state, reward, terminated, _ = self._env.step_env(key, state, action, self._params)
        truncated = self._env.is_truncated(state, self._params)
        return (self._flat(obs), state, jnp.asarray(reward, jnp.float32),
                jnp.asarray(terminated, jnp.bool_), jnp.asarray(truncated, jnp.bool_), {})
