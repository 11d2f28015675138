"""XLand-MiniGrid (`env: xminigrid/<name>`) behind the purejaxppo environment protocol.

Offered: the `MiniGrid-*` environments xminigrid registers (Empty, EmptyRandom, DoorKey,
FourRooms, LockedRoom, Memory, Playground, Unlock, UnlockPickUp, BlockedUnlockPickUp...;
`env_names()`), 6 actions (forward, turn right, turn left, pick up, put down, toggle).
The `XLand-MiniGrid-R*` environments are refused: they are meta-RL tasks whose goal and
rules come from a benchmark ruleset (`xminigrid.load_benchmark`, downloaded from the
internet on first use). Built without one they run offline, but with xminigrid's empty
default ruleset, whose goal can never be reached: every episode earns 0.

Episode handling is ours: xminigrid's `Environment.step` does not reset (its auto-reset
is a separate wrapper, not used); `AutoReset` starts new episodes. xminigrid's TimeStep
has one `step_type` (LAST on any ending) and a `discount`; its step computes
  terminated = the goal is reached            -> discount 0
  truncated  = step_num == max_steps          -> discount 1 unless also terminated
(`xminigrid.environment.Environment.step`). The adapter reports exactly those:
  terminated = discount == 0 (the goal: no bootstrap),
  truncated  = step_num >= max_steps (the time limit: bootstrapped);
both are true when the goal is reached on the last allowed step. The reward is
xminigrid's: 1 - 0.9 * step_num / max_steps on reaching the goal, else 0.

Observations: xminigrid's egocentric partial view, uint8 of shape (view_size, view_size, 2)
(tile id, colour id per cell, the agent at the bottom middle facing up), as float32 of
that shape (view_size * view_size * 2 = 98 values for the default view 7):
the ids as numbers, not one-hot. As in xminigrid, what the agent carries is not in the
view (after picking up the key in DoorKey the key is gone from sight).

Settings (in `env_params`, checked here against the environment's own defaults): the
fields of its `EnvParams`: `max_steps` (the time limit, at least 1; default: the
environment's formula, e.g. 4 * height * width for Empty), `view_size` (odd, at least 3),
`height`, `width` (at least 3; the layouts of some environments need more; max_steps
follows the new size unless also given), `render_mode`, and `num_objects` (Playground).

Resets (`reset_strategy`, measured on a 2-core CPU: a jitted vmapped reset of 16 envs
vs a vmapped step of 16, best of 200; a 16 env x 64 step rollout of random actions with
resets drawn per step vs per rollout, best of 20; benchmarks/results/
2026-11-30-xminigrid-jumanji-cpu.md): the Empty-* layouts are fixed (the agent always
starts in the same corner), their reset costs 0.3x a step and drawing one for every env
at every step adds 2-18% to a rollout, so they draw resets per step ("per_step",
gymnax's strategy). Every other environment samples a layout (positions of agent, key,
doors, objects): a reset costs 0.5-1.4x a step and drawn for every env at every step
resets make a rollout 1.2-4x slower (DoorKey-5x5 1.3x, FourRooms 1.8x, Playground 4.0x),
so the training rollout draws one fresh layout per env slot per rollout
("per_rollout", as for Brax): an env that ends twice within one rollout restarts from the
same fresh layout both times.
"""

from __future__ import annotations

import difflib
import math

import jax.numpy as jnp

from purejaxppo.envs.base import ActionSpace, as_obs, param_value, unknown_param
from purejaxppo.errors import ConfigError

XLAND = ("needs a benchmark ruleset (xminigrid.load_benchmark downloads it from the internet) and is not "
         "offered; without one its goal can never be reached. Use a MiniGrid-* environment")
RENDER_MODES = ("rgb_array", "rich_text")


def env_names() -> list[str]:
    import xminigrid

    return [n for n in xminigrid.registered_environments() if n.startswith("MiniGrid-")]


def _spec(name: str):
    """xminigrid's registration of `name` (its class and keyword arguments)."""
    from xminigrid import registration

    if name.startswith("XLand-"):
        raise ConfigError("env", f"xminigrid/{name}", XLAND)
    if name not in env_names():
        close = difflib.get_close_matches(name, env_names(), n=4, cutoff=0.4)
        hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(env_names())}"
        raise ConfigError("env", f"xminigrid/{name}", f"unknown XLand-MiniGrid environment; {hint}")
    return registration._REGISTRY[name]


def _check(name: str, key: str, value, default):
    value = param_value(name, key, default, value)
    field = f"env_params.{key}"
    if key == "render_mode" and value not in RENDER_MODES:
        raise ConfigError(field, value, f"must be one of {', '.join(RENDER_MODES)}")
    if key == "max_steps" and value < 1:
        raise ConfigError(field, value, "must be at least 1: it counts steps")
    if key in ("height", "width", "view_size") and value < 3:
        raise ConfigError(field, value, f"must be at least 3 ({name}'s default is {default})")
    if key == "view_size" and value % 2 == 0:
        raise ConfigError(field, value, f"must be odd: the agent sits in the middle column ({name}'s default "
                                        f"is {default})")
    if key == "num_objects" and value < 1:
        raise ConfigError(field, value, f"must be at least 1 ({name}'s default is {default})")
    return value


def _params(name: str, overrides: dict):
    """The environment and its EnvParams: xminigrid's defaults for `name` with `overrides`
    (checked against them) applied before its defaults are derived (so a new height or width
    gives the matching default max_steps)."""
    from xminigrid.registration import load

    spec = _spec(name)
    env = load(spec.entry_point)()
    defaults = env.default_params(**spec.kwargs)
    fields = sorted(defaults.__dataclass_fields__)
    values = {}
    for key, value in overrides.items():
        if key not in fields:
            raise unknown_param(f"xminigrid/{name}", key, value, fields)
        values[key] = _check(f"xminigrid/{name}", key, value, getattr(defaults, key))
    return env, env.default_params(**{**spec.kwargs, **values})


class XMiniGridEnv:
    """An XLand-MiniGrid MiniGrid environment: float32 views [view, view, 2], bool done flags, no auto-reset."""

    def __init__(self, name: str, env_params: dict | None = None):
        self.name = name
        self.reset_strategy = "per_step" if name.startswith("MiniGrid-Empty-") else "per_rollout"
        self._env, self._params = _params(name, dict(env_params or {}))
        self.max_episode_steps = int(self._params.max_steps)
        self.obs_size = int(math.prod(self._env.observation_shape(self._params)))
        self.obs_shape = tuple(self._env.observation_shape(self._params))
        self.action_space = ActionSpace("discrete", num_actions=int(self._env.num_actions(self._params)))

    @property
    def params(self):
        """xminigrid's EnvParams in use (for rendering: `env.render(params, timestep)`)."""
        return self._params

    def reset(self, key):
        """-> (obs, state): the state is xminigrid's TimeStep."""
        timestep = self._env.reset(self._params, key)
        return as_obs(timestep.observation, self.obs_shape), timestep

    def step(self, key, state, action):
        """One transition (the key is unused: xminigrid draws from its own state key)."""
        timestep = self._env.step(self._params, state, action)
        terminated = timestep.discount == 0
        truncated = timestep.state.step_num >= self._params.max_steps
        return (as_obs(timestep.observation, self.obs_shape), timestep, jnp.asarray(timestep.reward, jnp.float32),
                jnp.asarray(terminated, jnp.bool_), jnp.asarray(truncated, jnp.bool_), {})
