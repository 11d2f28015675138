"""Brax environments (`env: brax/<name>`) behind the purejaxppo environment protocol.

Episode handling is ours, not Brax's wrappers': the environment's own `done` is
`terminated` (no bootstrap), the time limit `episode_length` gives `truncated`
(bootstrapped from the final observation), and every reset draws a fresh initial state
from a new key (Brax's AutoResetWrapper restarts each env slot from one cached state).

Settings (in `env_params`, checked here): `backend` (generalized | positional | spring |
mjx), `episode_length` (physics steps, as in Brax: an episode lasts
ceil(episode_length / action_repeat) agent steps), `action_repeat` (each action is
applied that many physics steps; rewards are summed until the episode ends). Any other
key is passed to the Brax environment's constructor (e.g. `ctrl_cost_weight`).

Resets: a Brax reset runs the physics pipeline's initialisation. Drawn for every env at
every step (gymnax's strategy) resets would add 20% to a rollout of inverted_pendulum
(spring, 32 envs x 64 steps) and 5% to one of ant (positional, 64 x 80) on a 2-core CPU;
so the training rollout draws one fresh reset per env slot per rollout
(`reset_strategy = "per_rollout"`: 1.7% and 0.1%; benchmarks/brax_side_by_side.py). An
env that ends twice within one rollout restarts from the same fresh state both times.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import io
import math
import warnings

import jax.numpy as jnp

from purejaxppo import pytree
from purejaxppo.envs.base import ActionSpace, param_value, repeat_action
from purejaxppo.errors import ConfigError, integer

BACKENDS = ("generalized", "positional", "spring", "mjx")
SETTINGS = {"backend": "generalized", "episode_length": 1000, "action_repeat": 1}


def _brax_envs():
    """brax.envs, imported quietly (mujoco prints to stdout when warp is missing; brax warns
    that it is in maintenance)."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import brax.envs
    return brax.envs


@contextlib.contextmanager
def quiet_mujoco():
    """Building a model: MuJoCo's warnings (e.g. half_cheetah.xml's deprecated settotalmass)
    go to Python's warnings, here ignored, instead of a MUJOCO_LOG.TXT in the user's folder."""
    import mujoco

    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(lambda message: warnings.warn(f"MuJoCo: {message}"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        mujoco.set_mju_user_warning(previous)


def env_names() -> list[str]:
    return sorted(_brax_envs()._envs)


def _check_settings(settings):
    backend, length, repeat = settings["backend"], settings["episode_length"], settings["action_repeat"]
    if backend not in BACKENDS:
        raise ConfigError("env_params.backend", backend, f"must be one of {', '.join(BACKENDS)}")
    for key, value in (("episode_length", length), ("action_repeat", repeat)):
        integer(f"env_params.{key}", value, 1)


def _constructor_arguments(cls) -> dict[str, object]:
    """The named arguments of an environment class's constructors (its own and its bases')
    with their defaults (None where there is none)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    arguments = {}
    for klass in reversed(cls.__mro__):  # the class's own defaults win over its bases'
        if "__init__" in vars(klass) and klass is not object:
            for n, p in inspect.signature(klass.__init__).parameters.items():
                if p.kind in kinds and n not in ("self", "sys", "backend"):
                    arguments[n] = None if p.default is inspect.Parameter.empty else p.default
    return arguments


@pytree.dataclass
class BraxState:
    env_state: object       # brax.envs.State
    steps: jnp.ndarray      # agent steps taken in this episode


class BraxEnv:
    """A Brax environment: flat float32 observations, bool done flags, our own time limit."""

    reset_strategy = "per_rollout"

    def __init__(self, name: str, env_params: dict | None = None):
        envs = _brax_envs()
        if name not in envs._envs:
            close = difflib.get_close_matches(name, env_names(), n=3, cutoff=0.4)
            hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(env_names())}"
            raise ConfigError("env", f"brax/{name}", f"unknown Brax environment; {hint}")
        params = dict(env_params or {})
        settings = {key: params.pop(key, default) for key, default in SETTINGS.items()}
        _check_settings(settings)
        accepted = _constructor_arguments(envs._envs[name])
        for key in params:
            if key not in accepted:
                raise ConfigError(f"env_params.{key}", params[key],
                                  f"brax/{name} has no such parameter; it has "
                                  f"{', '.join(list(SETTINGS) + sorted(accepted))}")
            if accepted[key] is not None:  # typed and ranged by its default
                params[key] = param_value(f"brax/{name}", key, accepted[key], params[key])
        with quiet_mujoco():
            self._env = envs.get_environment(name, backend=settings["backend"], **params)
        self.name = name
        self.backend = settings["backend"]
        self.action_repeat = settings["action_repeat"]
        self.max_episode_steps = math.ceil(settings["episode_length"] / self.action_repeat)
        self.obs_size = int(self._env.observation_size)
        self.obs_shape = (self.obs_size,)  # a vector
        size = int(self._env.action_size)
        low, high = -jnp.ones(size, jnp.float32), jnp.ones(size, jnp.float32)
        sys = getattr(self._env, "sys", None)
        if sys is not None and sys.actuator.ctrl_range is not None and len(sys.actuator.ctrl_range) == size:
            low, high = (jnp.asarray(sys.actuator.ctrl_range[:, i], jnp.float32) for i in (0, 1))
        self.action_space = ActionSpace("continuous", shape=(size,), low=low, high=high)

    @property
    def brax_env(self):
        """The Brax environment itself (for rendering)."""
        return self._env

    def reset(self, key):
        state = self._env.reset(key)
        return state.obs.astype(jnp.float32), BraxState(state, jnp.int32(0))

    def step(self, key, state, action):
        """`action_repeat` physics steps of one action (the key is unused: Brax steps are
        deterministic); the state stops changing once the episode terminates."""
        env_state, reward, terminated = repeat_action(lambda s: self._env.step(s, action), state.env_state,
                                                      self.action_repeat)
        steps = state.steps + 1
        truncated = steps >= self.max_episode_steps
        return (env_state.obs.astype(jnp.float32), BraxState(env_state, steps), jnp.asarray(reward, jnp.float32),
                terminated, truncated, {})
