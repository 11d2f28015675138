"""Craftax (`env: craftax/<name>`) behind the purejaxppo environment protocol.

Offered: the symbolic environments `Craftax-Classic-Symbolic-v1` (1345 observations, 17
actions, time limit 10000) and `Craftax-Symbolic-v1` (8268 observations, 43 actions, time
limit 100000), and the pixel ones `Craftax-Classic-Pixels-v1` and `Craftax-Pixels-v1`
(images [height, width, 3] in [0, 1], for `torso: cnn`). Craftax's `...-AutoReset-v1`
names are refused: episodes are reset here.

Episode handling is ours, not Craftax's: the adapter calls Craftax's `step_env` (no
auto-reset; `AutoReset` starts new episodes). Craftax's own `done` (`is_terminal`, i.e.
`is_game_over`) is one flag for every ending: `timestep >= max_timesteps` OR death
(health <= 0, and in Classic standing in lava) OR, in full Craftax, defeating the final
boss. The adapter splits it exactly:
  truncated  = timestep >= max_timesteps (the time limit: bootstrapped), where
               `timestep` is Craftax's own counter, 1 after the first step;
  terminated = `is_terminal` evaluated with the time limit lifted (max_timesteps = 2**31 - 1),
               i.e. the episode ended for a reason other than the time limit (no bootstrap).
Both are true when the agent dies on the last allowed step; terminated | truncated is
always Craftax's `done`.

Settings (in `env_params`, checked here against Craftax's defaults): the fields of the
environment's `EnvParams`, e.g. `max_timesteps` (the time limit, at least 1), `day_length`,
`always_diamond`, mob health and spawn chances (Classic), `max_attribute` and `god_mode`
(full Craftax). `fractal_noise_angles` (world-generation noise arrays, a debugging hook)
is not offered. Craftax's static parameters (map size, mob counts) keep their defaults.

Resets: a Craftax reset generates a new world (fractal noise over the whole map; nine
levels in full Craftax), far costlier than a step. On a 2-core CPU, 16 vmapped resets cost
5x as much as 16 vmapped steps in Classic (9.2 ms vs 1.8 ms) and 12x in full Craftax (63 ms
vs 5.5 ms); drawn for every env at every step (gymnax's strategy), they make a rollout of
Classic (16 envs x 32 steps, random actions) 8.3x slower: 634 ms instead of 76 ms. So the
training rollout draws one fresh world per env slot per rollout
(`reset_strategy = "per_rollout"`): an env that ends twice within one rollout restarts from
the same fresh world both times.

Achievements: `achievement_names` and `achievements(state)` (the adapter's raw state: a
bool vector, one entry per achievement unlocked so far in the episode) are there for
reporting; `info` stays {}.
"""

from __future__ import annotations

import difflib
import math

import jax.numpy as jnp

from purejaxppo.envs.base import ActionSpace, as_obs, with_params
from purejaxppo.errors import ConfigError

# name -> (module, class without auto-reset, module of its Achievement enum)
ENVS = {
    "Craftax-Classic-Symbolic-v1": ("craftax.craftax_classic.envs.craftax_symbolic_env",
                                    "CraftaxClassicSymbolicEnvNoAutoReset", "craftax.craftax_classic.constants"),
    "Craftax-Symbolic-v1": ("craftax.craftax.envs.craftax_symbolic_env", "CraftaxSymbolicEnvNoAutoReset",
                            "craftax.craftax.constants"),
    "Craftax-Classic-Pixels-v1": ("craftax.craftax_classic.envs.craftax_pixels_env",
                                  "CraftaxClassicPixelsEnvNoAutoReset", "craftax.craftax_classic.constants"),
    "Craftax-Pixels-v1": ("craftax.craftax.envs.craftax_pixels_env", "CraftaxPixelsEnvNoAutoReset",
                          "craftax.craftax.constants"),
}
# Names Craftax knows that are left out on purpose, with the reason.
EXCLUDED = {
    "Craftax-Classic-Pixels-AutoReset-v1": "episodes are reset here, not by Craftax; use "
                                           "craftax/Craftax-Classic-Pixels-v1",
    "Craftax-Pixels-AutoReset-v1": "episodes are reset here, not by Craftax; use craftax/Craftax-Pixels-v1",
    "Craftax-Classic-Symbolic-AutoReset-v1": "episodes are reset here, not by Craftax; use "
                                             "craftax/Craftax-Classic-Symbolic-v1",
    "Craftax-Symbolic-AutoReset-v1": "episodes are reset here, not by Craftax; use craftax/Craftax-Symbolic-v1",
}
# EnvParams fields not offered, with the reason.
NOT_OFFERED = {"fractal_noise_angles": "world-generation noise arrays (a Craftax debugging hook) are not offered"}
NO_TIME_LIMIT = 2**31 - 1  # `timestep` is an int32 that never reaches it


def env_names() -> list[str]:
    return list(ENVS)


def _make(name: str):
    import importlib

    if name in EXCLUDED:
        raise ConfigError("env", f"craftax/{name}", EXCLUDED[name])
    if name not in ENVS:
        close = difflib.get_close_matches(name, env_names(), n=2, cutoff=0.4)
        hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(env_names())}"
        raise ConfigError("env", f"craftax/{name}", f"unknown Craftax environment; {hint}")
    module, cls, constants = ENVS[name]
    return getattr(importlib.import_module(module), cls)(), importlib.import_module(constants).Achievement


def _with_params(name, default_params, overrides):
    params = with_params(f"craftax/{name}", default_params, overrides, NOT_OFFERED)
    if "max_timesteps" in overrides and params.max_timesteps < 1:
        raise ConfigError("env_params.max_timesteps", overrides["max_timesteps"],
                          "must be at least 1: it is the time limit in steps")
    return params


class CraftaxEnv:
    """A Craftax environment: float32 observations (a vector, or an image), bool done flags, the time
    limit (truncated) told apart from death (terminated); see the module's docstring."""

    reset_strategy = "per_rollout"  # a reset generates a world: 5-12x a step (module docstring)

    def __init__(self, name: str, env_params: dict | None = None):
        self.name = name
        self._env, achievement = _make(name)
        self._params = _with_params(name, self._env.default_params, dict(env_params or {}))
        self._no_time_limit = self._params.replace(max_timesteps=NO_TIME_LIMIT)
        self.max_episode_steps = int(self._params.max_timesteps)
        self.obs_size = int(math.prod(self._env.observation_space(self._params).shape))
        self.obs_shape = tuple(self._env.observation_space(self._params).shape)
        self.action_space = ActionSpace("discrete", num_actions=int(self._env.action_space(self._params).n))
        self.achievement_names = tuple(a.name.lower() for a in sorted(achievement, key=lambda a: a.value))

    @property
    def craftax_env(self):
        """The Craftax environment itself (e.g. for rendering)."""
        return self._env

    @property
    def params(self):
        """Craftax's EnvParams, with the configured overrides."""
        return self._params

    def reset(self, key):
        obs, state = self._env.reset_env(key, self._params)
        return as_obs(obs, self.obs_shape), state

    def step(self, key, state, action):
        """One transition, without auto-reset (see `AutoReset`)."""
        obs, state, reward, _, _ = self._env.step_env(key, state, action, self._params)
        terminated = self._env.is_terminal(state, self._no_time_limit)
        truncated = state.timestep >= self.max_episode_steps
        return (as_obs(obs, self.obs_shape), state, jnp.asarray(reward, jnp.float32),
                jnp.asarray(terminated, jnp.bool_), jnp.asarray(truncated, jnp.bool_), {})

    def achievements(self, state):
        """The achievements unlocked so far in the episode of a raw Craftax state (a bool
        vector in the order of `achievement_names`)."""
        return jnp.asarray(state.achievements, jnp.bool_)
