"""gymnax (>= 1.0, six-value step) behind the purejaxppo environment protocol.

A gymnax `Environment` of your own (returned by a factory: see `purejaxppo.envs`) is adapted
as the built-in ones are, and keeps the protocol's optional members (`base.OPTIONAL`) it
gives:
  - `action_mask`: a method of the gymnax state, written as gymnax's own methods are,
    `action_mask(self, state, params)` (called with the adapter's parameters), or
    `action_mask(self, state)`; it returns bool[num_actions], the actions allowed in that
    state. The adapter gives it as the protocol's `action_mask(state)`.
  - `reset_strategy`: "per_step" or "per_rollout", as it is.
Action spaces: gymnax's `Discrete` and `Box`; any other kind is refused.
"""

from __future__ import annotations

import difflib
import inspect
import math

import jax.numpy as jnp

from purejaxppo.envs.base import OF_STATE, OPTIONAL, ActionSpace, as_obs, with_params
from purejaxppo.errors import ConfigError

# Registered in gymnax but left out on purpose, with the reason.
EXCLUDED = {"MNISTBandit-bsuite": "downloads a data set (MNIST) when built, so it is left out on purpose"}


def env_names() -> list[str]:
    import gymnax

    return [n for n in gymnax.registered_envs if n not in EXCLUDED]


def check_name(name: str, own: list[str] | tuple[str, ...] = ()) -> None:
    """`name` is a gymnax environment offered here; else ConfigError with the closest names of
    gymnax's and of `own` (the user's registered names, which a bare name may also be)."""
    if name in EXCLUDED:
        raise ConfigError("env", name, f"{EXCLUDED[name]}; every other gymnax environment is offered")
    if name not in env_names():
        known = env_names() + list(own)
        close = difflib.get_close_matches(name, known, n=4, cutoff=0.4)
        hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(known)}"
        kind = "environment (neither gymnax's nor a registered one)" if own else "gymnax environment"
        raise ConfigError("env", name, f"unknown {kind}; {hint} (other families: brax/, craftax/, xminigrid/, "
                          f"jumanji/)")


def _make(name: str):
    import gymnax

    check_name(name)
    return gymnax.make(name)


def _takes_params(function) -> bool:
    """Whether a gymnax environment's `function` of the state takes its parameters too
    (can be called as function(state, params))."""
    try:
        inspect.signature(function).bind(None, None)
    except (TypeError, ValueError):
        return False
    return True


class GymnaxEnv:
    """A gymnax environment with float32 observations (of its own shape) and bool done flags.

    `step` is the raw transition: it does not reset (gymnax's own `step` computes a
    reset on every step and selects it on done). `AutoReset` starts new episodes; the
    training rollout computes every reset it may need up front, batched (see
    `rollout.rollout` and `reset_strategy`).
    """

    reset_strategy = "per_step"  # resets are cheap: a fresh one is drawn for every (step, env); a user's
                                 # gymnax environment may give its own

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
        elif isinstance(space, spaces.Box):
            shape = tuple(space.shape)
            self.action_space = ActionSpace(
                "continuous", shape=shape,
                low=jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), shape),
                high=jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), shape))
        else:
            raise ConfigError("env", name, f"its action space is a gymnax {type(space).__name__}: only Discrete "
                                           f"and Box action spaces are adapted")
        for member in OPTIONAL:  # a user's gymnax environment's own (module docstring)
            if hasattr(self._env, member):
                given = getattr(self._env, member)
                setattr(self, member, self._of_state(given) if member in OF_STATE else given)

    def _of_state(self, function):
        """A gymnax function of the state, f(state, params) or f(state), as f(state)."""
        if _takes_params(function):
            return lambda state: function(state, self._params)
        return function

    def reset(self, key):
        obs, state = self._env.reset(key, self._params)
        return as_obs(obs, self.obs_shape), state

    def step(self, key, state, action):
        """One transition, without gymnax's built-in auto-reset (see `AutoReset`)."""
        obs, state, reward, terminated, _ = self._env.step_env(key, state, action, self._params)
        truncated = self._env.is_truncated(state, self._params)
        return (as_obs(obs, self.obs_shape), state, jnp.asarray(reward, jnp.float32),
                jnp.asarray(terminated, jnp.bool_), jnp.asarray(truncated, jnp.bool_), {})
