"""Environments: one protocol (see `base`), the built-in families, your own, wrappers.

`env: gymnax/CartPole-v1` (or the bare gymnax name), `env: brax/ant`, `env: playground/CartpoleBalance`. Each family is an
adapter module that owns its settings (in `env_params`) and their checks, its action
range and its reset strategy; adding a family is one entry in FAMILIES and one module,
nothing in the learner or in purejaxppo.config. Adapters are imported on first use, so a run on
gymnax never imports Brax.

Your own environments, by the name the config gives in `env:`, looked up in this order:
  - `package.module:factory`, imported;
  - a name given to `register(name, factory)`;
  - a name in the entry-point group `purejaxppo.envs` of an installed package.
`factory(**env_params)` returns an environment of the protocol or a gymnax `Environment`
(adapted as the built-in gymnax ones are, its optional members kept); it is checked
(`base.check_protocol`) as it is built, before anything compiles. Whatever the factory does
(raises, calls sys.exit) is one ConfigError naming it. A name of your own never stands for a
built-in one: `register` refuses a name that clashes with a built-in family or gymnax
environment, and an entry point so named is refused (never used in the built-in's place)
when that name is asked for. A misspelt bare name is answered with the closest gymnax and
registered names.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
import sys
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from purejaxppo.envs.base import ActionSpace, Env, check_protocol
from purejaxppo.envs.gymnax import GymnaxEnv, env_names  # imports gymnax itself only when used
from purejaxppo.envs.gymnax import check_name as check_gymnax_name
from purejaxppo.envs.wrappers import AutoReset, EpisodeStats
from purejaxppo.errors import ConfigError
from purejaxppo.extras import install_line
from purejaxppo.imports import call_factory, failure, import_object

# family prefix -> (module, adapter class); a name without a prefix is a gymnax name
FAMILIES = {"gymnax": ("purejaxppo.envs.gymnax", "GymnaxEnv"), "brax": ("purejaxppo.envs.brax", "BraxEnv"),
            "craftax": ("purejaxppo.envs.craftax", "CraftaxEnv"),
            "xminigrid": ("purejaxppo.envs.xminigrid", "XMiniGridEnv"),
            "jumanji": ("purejaxppo.envs.jumanji", "JumanjiEnv"),
            "playground": ("purejaxppo.envs.playground", "PlaygroundEnv")}
DEFAULT_FAMILY = "gymnax"
# families installed as optional extras: family -> (the library's module, the extra that installs it,
# the oldest Python it installs on)
EXTRAS = {"craftax": ("craftax", "craftax", (3, 11)), "xminigrid": ("xminigrid", "xminigrid", (3, 11)),
          "jumanji": ("jumanji", "jumanji", (3, 11)), "playground": ("mujoco_playground", "playground", (3, 12))}


class EnvConfig(Protocol):
    """What building an environment reads from a config (`config.PPOConfig` has it)."""

    env: str
    env_params: Mapping[str, Any]


ENTRY_POINTS = "purejaxppo.envs"  # the entry-point group of installed packages' environments
_REGISTERED: dict[str, Callable[..., Any]] = {}


def _name_rule(name) -> str | None:
    """The rule a name of the user's own environment (given to `register`, or an entry
    point's) breaks, or None: it must not clash with a built-in name or an import path."""
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        return "must be a non-empty string without surrounding spaces"
    if ":" in name:
        return "cannot hold ':' (env: package.module:factory is an import path)"
    family = name.partition("/")[0]
    if family in FAMILIES:
        return f"clashes with the built-in family {family}/"
    if "/" not in name and name in env_names():
        return "clashes with the built-in gymnax environment of that name (a bare name is gymnax's)"
    return None


def register(name: str, factory: Callable[..., Any]) -> None:
    """Offer `factory(**env_params)` as `env: name`. The factory returns an environment of
    the protocol (`purejaxppo.envs.base`) or a gymnax `Environment`. Registering a name
    again replaces its factory (a notebook cell run twice). A name that clashes with a
    built-in family or a gymnax environment, or holds ':' (an import path), is refused."""
    rule = _name_rule(name)
    if rule:
        raise ConfigError("env", name, f"a registered name {rule}; choose another name")
    if not callable(factory):
        raise ConfigError("env", name, f"its factory must be callable: factory(**env_params) -> environment, "
                          f"not {type(factory).__name__}")
    _REGISTERED[name] = factory


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINTS)}


def _entry_point_shown(ep: importlib.metadata.EntryPoint) -> str:
    """"the entry point name = module:factory of package their-envs" (what an error names)."""
    package = getattr(ep.dist, "name", None) or "an unknown package"
    return f"the entry point {ep.name} = {ep.value} (group {ENTRY_POINTS}) of package {package}"


def registered() -> dict[str, Callable[..., Any]]:
    """Your own environments by name: installed packages' entry points (those whose names do
    not clash with a built-in one), then those of `register`."""
    allowed = {name: ep for name, ep in _entry_points().items() if _name_rule(name) is None}
    return {**allowed, **_REGISTERED}


def _factory(env: str) -> tuple[Callable[..., Any], str] | None:
    """The factory of a user's environment `env` (an import path, or a registered or
    entry-point name) and its call as errors name it, or None for a built-in name. An entry
    point named as a built-in is refused, never used in its place."""
    if ":" in env:
        return import_object(env, "env"), f"{env}'s factory(**env_params)"
    if env in _REGISTERED:
        return _REGISTERED[env], f"{env}'s factory(**env_params)"
    ep = _entry_points().get(env)
    if ep is None:
        return None
    rule = _name_rule(env)
    if rule:
        raise ConfigError("env", env, f"{_entry_point_shown(ep)} {rule}: it is refused, not used (uninstall the "
                          f"package, or have it rename the entry point)")
    try:
        return ep.load(), f"{_entry_point_shown(ep)}: its factory(**env_params)"
    except (Exception, SystemExit) as error:
        raise ConfigError("env", env, f"{_entry_point_shown(ep)} cannot be loaded: {failure(error)}") from None


def _users_env(env: str, factory, call: str, env_params: Mapping[str, Any]) -> Env:
    """The environment a user's factory makes (`call` names the call in errors), adapted when
    it is a gymnax Environment, checked against the protocol."""
    made = call_factory(factory, (), env_params, "env", env, "env_params", call)
    if _is_gymnax(made):
        try:
            made = GymnaxEnv(env, {}, environment=made)
        except ConfigError:
            raise
        except (Exception, SystemExit) as error:
            raise ConfigError("env", env, f"the gymnax Environment that {call} returned cannot be adapted: "
                              f"{failure(error)}") from None
    check_protocol(made, env)
    return made


def _is_gymnax(obj) -> bool:
    if importlib.util.find_spec("gymnax") is None:
        return False
    from gymnax.environments.environment import Environment

    return isinstance(obj, Environment)


def split_name(env: str) -> tuple[str, str]:
    """"brax/ant" -> ("brax", "ant"); "CartPole-v1" -> ("gymnax", "CartPole-v1")."""
    family, sep, name = env.partition("/")
    if not sep:
        return DEFAULT_FAMILY, env
    if family not in FAMILIES:
        own = sorted(registered())
        close = difflib.get_close_matches(env, own, n=1, cutoff=0.6)
        close = close or [f"{f}/{name}" for f in difflib.get_close_matches(family, list(FAMILIES), n=1, cutoff=0.6)]
        hint = f"did you mean {close[0]}? " if close else ""
        listed = f"; registered: {', '.join(own)}" if own else ""
        raise ConfigError("env", env, f"unknown environment family {family!r}; {hint}known: "
                          f"{', '.join(f'{f}/' for f in FAMILIES)} (a bare name is a gymnax name){listed}")
    return family, name


def make_raw_env(env: str, env_params: Mapping[str, Any] | None = None) -> Env:
    """The adapter alone (no auto-reset, no episode statistics); raises ConfigError."""
    own = _factory(env)
    if own is not None:
        return _users_env(env, *own, dict(env_params or {}))
    family, name = split_name(env)
    if "/" not in env and env not in env_names():  # a bare name is gymnax's, or a misspelt registered one
        check_gymnax_name(env, sorted(registered()))
    if family in EXTRAS and importlib.util.find_spec(EXTRAS[family][0]) is None:
        module, extra, python = EXTRAS[family]
        newer = (f" (on Python {'.'.join(map(str, python))} or newer; this is {sys.version.split()[0]})"
                 if sys.version_info < python else "")
        raise ConfigError("env", env, f"needs the optional {family} package, not installed here: "
                          f"{install_line(extra)}{newer}")
    module, cls = FAMILIES[family]
    return getattr(importlib.import_module(module), cls)(name, dict(env_params or {}))


def make_env(cfg: EnvConfig) -> AutoReset:
    """The configured environment, auto-resetting, with episode statistics (raises ConfigError)."""
    return AutoReset(EpisodeStats(make_raw_env(cfg.env, cfg.env_params)))


def check_env_config(cfg: EnvConfig, action_kinds: Mapping[str, str], env: Env | None = None) -> Env:
    """The name exists, its parameters exist, and action-space specific settings fit:
    `action_kinds` is {field of cfg: the action kind it needs} (`config.ACTION_KIND_FIELDS`);
    such a field must be null unless the environment has that kind of actions, and
    `action_squash: tanh` needs a finite box (low < high); every name of `info_metrics` is a
    number per step of the environment's info (`info_numbers`). `env`: the environment already
    built from cfg (default: build it). Returns the environment."""
    env = make_env(cfg) if env is None else env
    wanted = getattr(cfg, "info_metrics", ())
    if wanted:
        numbers = info_numbers(env)
        for name in wanted:
            if name not in numbers:
                raise ConfigError("info_metrics", name, f"is not a number in {cfg.env}'s step info; its numbers "
                                  f"per step are {', '.join(sorted(numbers)) or 'none'}")
    space = env.action_space
    for field, kind in action_kinds.items():
        if getattr(cfg, field) is not None and space.kind != kind:
            raise ConfigError(field, getattr(cfg, field),
                              f"only applies to {kind} actions; {cfg.env} has "
                              f"{space.kind} actions")
    if getattr(cfg, "action_squash", None) == "tanh":
        low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
            raise ConfigError("action_squash", "tanh", f"squashes actions into their box, which must be finite with "
                              f"low < high; {cfg.env}'s is low={low.tolist()}, high={high.tolist()} (use clip)")
    return env


def info_numbers(env: Env) -> list[str]:
    """The entries of `env`'s step info that are one number per step (a scalar of a
    numeric or bool dtype), traced (jax.eval_shape: nothing compiles)."""
    import jax
    import jax.numpy as jnp

    space, key = env.action_space, jax.random.PRNGKey(0)
    action = (jax.ShapeDtypeStruct((), jnp.int32) if space.kind == "discrete"
              else jax.ShapeDtypeStruct(tuple(space.shape), jnp.float32))
    _, state = jax.eval_shape(env.reset, key)
    info = jax.eval_shape(env.step, key, state, action)[5]
    return [name for name, x in info.items() if hasattr(x, "shape") and x.shape == ()
            and (jnp.issubdtype(x.dtype, jnp.number) or x.dtype == jnp.bool_)]


__all__ = ["ActionSpace", "AutoReset", "Env", "EnvConfig", "EpisodeStats", "FAMILIES", "GymnaxEnv", "env_names",
           "make_env", "make_raw_env", "register", "registered", "split_name", "check_env_config"]
