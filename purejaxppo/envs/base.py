"""The one environment protocol every adapter (gymnax, brax) implements.

    reset(key) -> (obs, state)
    step(key, state, action) -> (obs, state, reward, terminated, truncated, info)

for a single environment (the learner vmaps it). `obs` is a float32 array of shape
`obs_shape`; `reward` a float32 scalar; `terminated` (a true end: no bootstrap) and
`truncated` (a time limit: bootstrap) are bool scalars and both may be true; `info` a
dict. An adapter's `step` is the raw transition: it does not reset. One wrapper,
`wrappers.AutoReset`, starts new episodes for every adapter and reports the observation
an episode ended on as `info["final_observation"]`. Keys are raw `jax.random.PRNGKey`
arrays. An environment may also give the optional members (`OPTIONAL`): `reset_strategy`
and `action_mask(state) -> bool[num_actions]` (discrete actions: the actions allowed in that
state; the policy then never takes another). An environment gives one by having it; every
adapter and wrapper gives each optional member exactly where what it wraps does.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.errors import ConfigError
from purejaxppo.imports import failure


@dataclasses.dataclass(frozen=True)
class ActionSpace:
    """`kind` is "discrete" (`num_actions` choices) or "continuous" (a box of `shape`)."""

    kind: str
    num_actions: int = 0
    shape: tuple[int, ...] = ()
    low: Any = None
    high: Any = None

    @property
    def size(self) -> int:
        """Network output size: number of logits, or of Gaussian means."""
        if self.kind == "discrete":
            return self.num_actions
        return int(jnp.prod(jnp.asarray(self.shape))) if self.shape else 1


class Env(Protocol):
    obs_shape: tuple[int, ...]
    action_space: ActionSpace
    max_episode_steps: int  # the time limit: every episode ends within it
    reset_strategy: str     # how the training rollout draws resets: "per_step" (the default where an
                            # environment does not say) or "per_rollout" (see rollout)

    def reset(self, key): ...

    def step(self, key, state, action): ...


MEMBERS = ("obs_shape", "action_space", "max_episode_steps", "reset", "step")  # what every environment has
# What an environment may also have. Every adapter and wrapper gives each of these exactly where
# what it wraps gives it (or refuses what it wraps in one line); OF_STATE: those of them that are
# functions of the environment's state (a wrapper calls them with the state it wraps).
OPTIONAL = ("reset_strategy", "action_mask")
OF_STATE = ("action_mask",)
RESET_STRATEGY = "per_step"  # the reset_strategy of an environment that gives none


def check_protocol(env, name: str) -> None:
    """`env` (a user's) follows the protocol: its members are there and of their kinds (an
    action space the learner can act in), `reset` / `step` / `action_mask` give outputs of the
    declared shapes and dtypes, found by `jax.eval_shape`, and the mask allows some action in
    a state `reset` gives (one small compiled call). Whatever the user's code raises on the
    way (sys.exit included) is a ConfigError naming `name` and what is wrong."""
    def refuse(rule):
        raise ConfigError("env", name, rule)

    try:
        _check_members(env, refuse)
    except ConfigError:
        raise
    except (Exception, SystemExit) as error:  # a member that fails as it is read
        refuse(f"failed as its members were read: {failure(error)}")
    try:
        _check_outputs(env, refuse)
    except ConfigError:
        raise
    except (Exception, SystemExit) as error:  # the user's reset, step or mask failed on the protocol's inputs
        refuse(f"failed as reset(key) / step(key, state, action) / action_mask(state) ran: {failure(error)}")


def _check_members(env, refuse) -> None:
    missing = [m for m in MEMBERS if not hasattr(env, m)]
    if missing:
        refuse(f"the environment its factory returned ({type(env).__name__}) lacks {', '.join(missing)} "
               f"(the protocol: {', '.join(MEMBERS)}; optional {', '.join(OPTIONAL)})")
    shape = env.obs_shape
    if (not isinstance(shape, tuple) or not shape
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in shape)):
        refuse(f"obs_shape must be a non-empty tuple of positive ints, not {shape!r}")
    if not isinstance(env.action_space, ActionSpace):
        refuse(f"action_space must be a purejaxppo.envs.ActionSpace, not {type(env.action_space).__name__}")
    _check_action_space(env.action_space, refuse)
    steps = env.max_episode_steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        refuse(f"max_episode_steps must be an int of at least 1, not {steps!r}")
    if getattr(env, "reset_strategy", RESET_STRATEGY) not in ("per_step", "per_rollout"):
        refuse(f"reset_strategy must be per_step or per_rollout, not {env.reset_strategy!r}")
    if hasattr(env, "action_mask"):
        if not callable(env.action_mask):
            refuse(f"action_mask must be a function: action_mask(state) -> bool[num_actions], not "
                   f"{type(env.action_mask).__name__}")
        if env.action_space.kind != "discrete":
            refuse("has action_mask, but its actions are continuous: masks choose among discrete actions")


def _is_count(n) -> bool:
    return isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 1


def _check_action_space(space: ActionSpace, refuse) -> None:
    """A discrete space of at least one action, or a box of a non-empty shape whose bounds
    are numbers, not NaN, with low <= high (an infinite bound leaves that side open)."""
    if space.kind == "discrete":
        if not _is_count(space.num_actions):
            refuse(f"a discrete action space needs num_actions, an int of at least 1; it has {space.num_actions!r}")
        return
    if space.kind != "continuous":
        refuse(f"action_space.kind must be discrete or continuous, not {space.kind!r}")
    shape = space.shape
    if not (isinstance(shape, tuple) and shape and all(_is_count(n) for n in shape)):
        refuse(f"a continuous action space needs shape, a non-empty tuple of positive ints (one number: (1,)); "
               f"it has {shape!r}")
    bounds = {}
    for side in ("low", "high"):
        given = getattr(space, side)
        try:
            if given is None:
                raise TypeError
            bounds[side] = np.broadcast_to(np.asarray(given, np.float64), shape)
        except (TypeError, ValueError):
            refuse(f"action_space.{side} must be numbers of the action's shape {list(shape)} (or one number); "
                   f"it is {given!r}")
        if np.isnan(bounds[side]).any():
            refuse(f"action_space.{side} holds NaN")
    low, high = bounds["low"], bounds["high"]
    if np.isposinf(low).any() or np.isneginf(high).any():
        refuse("action_space.low must be below +inf and action_space.high above -inf")
    if (low > high).any():
        at = tuple(int(i) for i in np.argwhere(low > high)[0])
        refuse(f"action_space.low must not exceed action_space.high; at index {list(at)} low is {low[at]:g} and "
               f"high {high[at]:g}")


def _check_outputs(env, refuse) -> None:
    """reset, step and action_mask traced on the protocol's inputs (jax.eval_shape); the mask
    also run on one state reset gives."""
    import jax

    def described(x):
        return f"{np.dtype(x.dtype).name}{list(x.shape)}" if hasattr(x, "shape") else type(x).__name__

    def expect(what, got, dtype, want_shape):
        if not hasattr(got, "shape") or tuple(got.shape) != tuple(want_shape) or np.dtype(got.dtype) != dtype:
            refuse(f"{what} must be {np.dtype(dtype).name}{list(want_shape)}; it is {described(got)}")

    shape, space = env.obs_shape, env.action_space
    key = jax.random.PRNGKey(0)
    action = (jax.ShapeDtypeStruct((), jnp.int32) if space.kind == "discrete"
              else jax.ShapeDtypeStruct(tuple(space.shape), jnp.float32))
    reset = jax.eval_shape(env.reset, key)
    if not (isinstance(reset, tuple) and len(reset) == 2):
        refuse(f"reset(key) must return (obs, state); it returned {type(reset).__name__}")
    expect("reset's obs", reset[0], np.float32, shape)
    out = jax.eval_shape(env.step, key, reset[1], action)
    if not (isinstance(out, tuple) and len(out) == 6):
        refuse("step(key, state, action) must return (obs, state, reward, terminated, truncated, info)")
    for what, got, dtype, want in (("step's obs", out[0], np.float32, shape), ("step's reward", out[2], np.float32, ()),
                                   ("step's terminated", out[3], np.bool_, ()),
                                   ("step's truncated", out[4], np.bool_, ())):
        expect(what, got, dtype, want)
    if not isinstance(out[5], dict):
        refuse(f"step's info must be a dict; it is {type(out[5]).__name__}")
    if jax.tree.structure(out[1]) != jax.tree.structure(reset[1]):
        refuse("step must return a state of the same structure as reset's")
    if hasattr(env, "action_mask"):
        expect("action_mask(state)", jax.eval_shape(env.action_mask, reset[1]), np.bool_, (space.num_actions,))
        if not np.any(jax.jit(lambda k: env.action_mask(env.reset(k)[1]))(key)):
            refuse("action_mask(state) allows no action in the state reset(PRNGKey(0)) gives: the policy could "
                   "take none")


def unknown_param(name: str, key, value, known: list[str]) -> ConfigError:
    """The refusal of `env_params.<key>`, not a parameter of `name`, with the closest of `known`."""
    close = difflib.get_close_matches(str(key), known, n=2)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return ConfigError(f"env_params.{key}", value, f"{name} has no such parameter; {hint}it has {', '.join(known)}")


def with_params(name: str, default_params, overrides: dict, not_offered: dict | None = None):
    """A library's dataclass of parameters (gymnax's, Craftax's EnvParams) with `overrides`,
    each checked against its default (`param_value`); `not_offered`: fields refused, with why."""
    not_offered = not_offered or {}
    fields = sorted(f.name for f in dataclasses.fields(default_params) if f.name not in not_offered)
    values = {}
    for key, value in overrides.items():
        if key in not_offered:
            raise ConfigError(f"env_params.{key}", value, not_offered[key])
        if key not in fields:
            raise unknown_param(name, key, value, fields)
        values[key] = param_value(name, key, getattr(default_params, key), value)
    return default_params.replace(**values)


def repeat_action(step, state, times: int, ended=None):
    """`times` steps of one action, `step(state) -> next state` (a state with `.reward` and
    `.done`), as the Brax and Playground adapters apply `action_repeat`: the rewards summed, the
    state held once the episode ends (its `done`, or `ended(state)`, e.g. NaN physics)
    -> (state, reward, whether the episode ended)."""
    def ends(s):
        done = jnp.asarray(s.done) > 0
        return done if ended is None else done | ended(s)

    if times == 1:
        nxt = step(state)
        return nxt, nxt.reward, ends(nxt)

    def one(carry, _):
        s, reward, over = carry
        nxt = jax.tree.map(lambda a, b: jnp.where(over, a, b), s, step(s))
        return (nxt, reward + jnp.where(over, 0.0, nxt.reward), over | ends(nxt)), None

    return jax.lax.scan(one, (state, jnp.float32(0.0), jnp.bool_(False)), None, length=times)[0]


def as_obs(obs, shape: tuple[int, ...]):
    """A library's observation as the protocol's float32 array of `shape`."""
    return jnp.reshape(obs, shape).astype(jnp.float32)


# --------------------------------------------------------------------------------------
# Checking an environment parameter against its default (every adapter)
# --------------------------------------------------------------------------------------
def _is_step_count(key: str) -> bool:
    return key in ("max_steps_in_episode", "t_max", "n_frames") or key.endswith(("_length", "_interval"))


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


def param_value(name: str, key: str, default, value):
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
    if isinstance(default, (tuple, list)) and all(isinstance(v, numbers.Real) for v in default):
        as_array = np.asarray(default, np.float32 if np.asarray(default).dtype.kind == "f" else np.int32)
        array = param_value(name, key, as_array, value)  # a tuple of numbers: as an array of its shape
        return tuple(array.tolist())
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
