"""MuJoCo Playground (`env: playground/<Task>`; the optional extra `[playground]`) behind the
purejaxppo environment protocol.

Tasks: every name in Playground's registry. Its 25 dm_control-suite tasks (CartpoleBalance,
CheetahRun, ...) ship their models in the package; its locomotion and manipulation tasks
(Go1JoystickFlatTerrain, ...) load robots from MuJoCo Menagerie, which Playground clones
from GitHub at first use: where it is not there, building the task is one ConfigError naming
the folder and how to fill it (nothing is cloned from here).

Episode handling is ours, as for Brax: the task's own `done` is `terminated` (no bootstrap;
the suite's tasks end only on NaN physics), the time limit `episode_length` gives
`truncated` (bootstrapped from the final observation) after ceil(episode_length /
action_repeat) agent steps, and each action is applied `action_repeat` times, rewards summed.
Physics that went NaN end the episode as a termination flagged `physics_nan` in the step's
info, with the observation's NaNs zeroed (a NaN input would poison the whole batch's update).

Settings (in `env_params`, checked against the task's own Playground config and typed by
its defaults): any of that config's keys (`episode_length`, `action_repeat`, `ctrl_dt`,
`sim_dt`, `impl`, the task's reward settings, ...), and `obs_key`, the entry of a task
whose observations are a dict (default `state`, Playground's own choice for its policies).
`impl` (MJX's implementation) is `jax` on every backend, not Playground's default `warp`:
warp's data holds one contact pool for all envs (its leading axis `naconmax`), which a per-env
vmap cannot split (MJX refuses it for CheetahRun), and on a CPU warp steps 27-165x slower where
it runs at all (benchmarks/results/2026-12-04-playground-cpu.md). `impl: warp` is refused.

Resets run MJX's `forward`, as Brax's do: one fresh reset per env slot per rollout
(`reset_strategy = "per_rollout"`, as `brax`).
"""

from __future__ import annotations

import contextlib
import difflib
import io
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo import pytree
from purejaxppo.envs.base import ActionSpace, param_value, repeat_action, unknown_param
from purejaxppo.envs.brax import quiet_mujoco
from purejaxppo.errors import ConfigError

OWN_SETTINGS = {"obs_key": "state"}  # ours, not the task's config's
IMPL = "jax"  # MJX's implementation; warp is refused (see `_overrides`)
MENAGERIE = "https://github.com/google-deepmind/mujoco_menagerie"


def _playground():
    """mujoco_playground, imported quietly (mujoco and warp print while they import)."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import mujoco_playground
    return mujoco_playground


def env_names() -> list[str]:
    return sorted(_playground().registry.ALL_ENVS)


def _needs_menagerie(name: str) -> bool:
    playground = _playground()
    return name in playground.locomotion.ALL_ENVS or name in playground.manipulation.ALL_ENVS


def _check_assets(name: str) -> None:
    """A task whose robot comes from MuJoCo Menagerie: that it is there (Playground would
    clone it from GitHub, or fail offline with a traceback)."""
    from mujoco_playground._src import mjx_env

    folder = mjx_env.MENAGERIE_PATH
    if _needs_menagerie(name) and not folder.exists():
        raise ConfigError("env", f"playground/{name}", f"needs MuJoCo Menagerie's robot models, not found at "
                          f"{folder}: where the network allows, git clone {MENAGERIE} {folder} && git -C {folder} "
                          f"checkout {mjx_env.MENAGERIE_COMMIT_SHA} (docs/environments.md, MuJoCo Playground)")


def _overrides(name: str, params: dict, defaults) -> dict:
    """`params` (without ours) as overrides of the task's Playground config (`defaults`), each
    checked against its default -> {key: value}; `impl` is IMPL."""
    from ml_collections import config_dict

    settable = sorted(key for key, value in defaults.items() if not isinstance(value, config_dict.ConfigDict))
    overrides = {"impl": IMPL} if "impl" in defaults else {}
    for key, value in params.items():
        if key not in settable:
            raise unknown_param(f"playground/{name}", key, value, sorted(settable + list(OWN_SETTINGS)))
        if key == "impl" and value == "warp":
            raise ConfigError("env_params.impl", value, "is not supported: MJX's warp data holds one contact pool "
                              "for all envs, which the per-env vmap of purejaxppo's rollout cannot split (and on a "
                              "CPU warp steps 27-165x slower than jax); use jax")
        if key == "impl" and value != IMPL:
            raise ConfigError("env_params.impl", value, f"must be {IMPL} (MJX's implementation)")
        overrides[key] = value if key == "impl" else param_value(f"playground/{name}", key, defaults[key], value)
    if overrides.get("action_repeat", 1) < 1:
        raise ConfigError("env_params.action_repeat", overrides["action_repeat"], "must be at least 1")
    return overrides


@pytree.dataclass
class PlaygroundState:
    env_state: object       # mujoco_playground.State
    steps: jnp.ndarray      # agent steps taken in this episode


class PlaygroundEnv:
    """A Playground task: float32 observations (`obs_key`'s entry of a dict), bool done
    flags, our own time limit, NaN physics as a flagged termination."""

    reset_strategy = "per_rollout"

    def __init__(self, name: str, env_params: dict | None = None):
        names = env_names()
        if name not in names:
            close = difflib.get_close_matches(name, names, n=3, cutoff=0.4)
            hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(names)}"
            raise ConfigError("env", f"playground/{name}", f"unknown Playground task; {hint}")
        params = dict(env_params or {})
        own = {key: params.pop(key, default) for key, default in OWN_SETTINGS.items()}
        defaults = _playground().registry.get_default_config(name)
        overrides = _overrides(name, params, defaults)
        _check_assets(name)
        with quiet_mujoco(), contextlib.redirect_stdout(io.StringIO()):
            self._env = _playground().registry.load(name, config_overrides=overrides)
        self.name = name
        self.impl = overrides.get("impl")
        self.action_repeat = int(overrides.get("action_repeat", defaults.get("action_repeat", 1)))
        length = int(overrides.get("episode_length", defaults.get("episode_length", 1000)))
        self.max_episode_steps = math.ceil(length / self.action_repeat)
        obs = jax.eval_shape(self._env.reset, jax.random.PRNGKey(0)).obs
        self.obs_key = _obs_key(name, obs, own["obs_key"], given="obs_key" in (env_params or {}))
        self.obs_shape = tuple(int(n) for n in (obs[self.obs_key] if self.obs_key is not None else obs).shape)
        size = int(self._env.action_size)
        low, high = -np.ones(size, np.float32), np.ones(size, np.float32)
        model = self._env.mj_model
        if model.nu == size:  # limited actuators: their control range
            limited = model.actuator_ctrllimited.astype(bool)
            low = np.where(limited, model.actuator_ctrlrange[:, 0], -np.inf).astype(np.float32)
            high = np.where(limited, model.actuator_ctrlrange[:, 1], np.inf).astype(np.float32)
        self.action_space = ActionSpace("continuous", shape=(size,), low=jnp.asarray(low), high=jnp.asarray(high))

    @property
    def playground_env(self):
        """The Playground environment itself (for rendering)."""
        return self._env

    def _obs(self, env_state):
        obs = env_state.obs[self.obs_key] if self.obs_key is not None else env_state.obs
        return jnp.nan_to_num(jnp.asarray(obs, jnp.float32), nan=0.0, posinf=0.0, neginf=0.0)

    def reset(self, key):
        state = self._env.reset(key)
        return self._obs(state), PlaygroundState(state, jnp.int32(0))

    def step(self, key, state, action):
        """`action_repeat` control steps of one action (the key is unused: the physics is
        deterministic); the state stops changing once the episode terminates."""
        env_state, reward, terminated = repeat_action(lambda s: self._env.step(s, action), state.env_state,
                                                      self.action_repeat, ended=_nan)
        steps = state.steps + 1
        truncated = steps >= self.max_episode_steps
        info = {"physics_nan": _nan(env_state), **{k: jnp.asarray(v, jnp.float32)
                                                   for k, v in env_state.metrics.items() if jnp.ndim(v) == 0}}
        reward = jnp.nan_to_num(jnp.asarray(reward, jnp.float32), nan=0.0, posinf=0.0, neginf=0.0)
        return self._obs(env_state), PlaygroundState(env_state, steps), reward, terminated, truncated, info


def _obs_key(name: str, obs, key: str, given: bool) -> str | None:
    """The entry of a task's observations (`obs`, their shapes) that the policy sees where they
    are a dict; None where they are one array (an `obs_key` given for those is refused)."""
    if not isinstance(obs, dict):
        if given:
            raise ConfigError("env_params.obs_key", key, f"playground/{name}'s observations are one array, not a "
                              f"dict: obs_key does not apply")
        return None
    if key not in obs:
        raise ConfigError("env_params.obs_key", key, f"playground/{name}'s observations are a dict of "
                          f"{', '.join(sorted(obs))}: choose one of them")
    return key


def _nan(env_state) -> jnp.ndarray:
    """Whether the physics went NaN (positions or velocities)."""
    data = env_state.data
    return jnp.isnan(data.qpos).any() | jnp.isnan(data.qvel).any()
