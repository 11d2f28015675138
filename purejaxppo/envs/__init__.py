"""Environments: one protocol (see `base`), the built-in families, your own, wrappers.

`env: gymnax/CartPole-v1` (or the bare gymnax name), `env: brax/ant`. Each family is an
adapter module that owns its settings (in `env_params`) and their checks, its action
range and its reset strategy; adding a family is one entry in FAMILIES and one module,
nothing in the learner or in purejaxppo.config. Adapters are imported on first use, so a run on
gymnax never imports Brax.

Your own environments, by the name the config gives in `env:`, looked up in this order:
  - `package.module:factory`, imported;
  - a name given to `register(name, factory)`;
  - a name in the entry-point group `purejaxppo.envs` of an installed package.
`factory(**env_params)` returns an environment of the protocol or a gymnax `Environment`
(adapted as the built-in gymnax ones are); it is checked (`base.check_protocol`) as it is
built, before anything compiles.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
from typing import Any, Callable, Mapping, Protocol

from purejaxppo.envs.base import ActionSpace, Env, check_protocol
from purejaxppo.envs.gymnax import GymnaxEnv, env_names  # imports gymnax itself only when used
from purejaxppo.envs.wrappers import AutoReset, EpisodeStats
from purejaxppo.errors import ConfigError
from purejaxppo.imports import import_object

# family prefix -> (module, adapter class); a name without a prefix is a gymnax name
FAMILIES = {"gymnax": ("purejaxppo.envs.gymnax", "GymnaxEnv"), "brax": ("purejaxppo.envs.brax", "BraxEnv"),
            "craftax": ("purejaxppo.envs.craftax", "CraftaxEnv"),
            "xminigrid": ("purejaxppo.envs.xminigrid", "XMiniGridEnv"),
            "jumanji": ("purejaxppo.envs.jumanji", "JumanjiEnv")}
DEFAULT_FAMILY = "gymnax"
# families installed as optional extras: family -> (the library's module, the extra that installs it)
EXTRAS = {"craftax": ("craftax", "craftax"), "xminigrid": ("xminigrid", "xminigrid"),
          "jumanji": ("jumanji", "jumanji")}


class EnvConfig(Protocol):
    """What building an environment reads from a config (`config.PPOConfig` has it)."""

    env: str
    env_params: Mapping[str, Any]


ENTRY_POINTS = "purejaxppo.envs"  # the entry-point group of installed packages' environments
_REGISTERED: dict[str, Callable[..., Any]] = {}


def register(name: str, factory: Callable[..., Any]) -> None:
    """Offer `factory(**env_params)` as `env: name`. The factory returns an environment of
    the protocol (`purejaxppo.envs.base`) or a gymnax `Environment`. Registering a name
    again replaces its factory (a notebook cell run twice). A name that clashes with a
    built-in family or a gymnax environment, or holds ':' (an import path), is refused."""
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise ConfigError("env", name, "a registered name must be a non-empty string without surrounding spaces")
    if ":" in name:
        raise ConfigError("env", name, "a registered name cannot hold ':' (env: package.module:factory is an "
                          "import path)")
    family = name.partition("/")[0]
    if family in FAMILIES:
        raise ConfigError("env", name, f"clashes with the built-in family {family}/; choose another name")
    if "/" not in name and name in env_names():
        raise ConfigError("env", name, "clashes with the built-in gymnax environment of that name (a bare "
                          "name is gymnax's); choose another name")
    if not callable(factory):
        raise ConfigError("env", name, f"its factory must be callable: factory(**env_params) -> environment, "
                          f"not {type(factory).__name__}")
    _REGISTERED[name] = factory


def registered() -> dict[str, Callable[..., Any]]:
    """Your own environments by name: those of `register`, then installed packages' entry points."""
    found = {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINTS)}
    return {**found, **_REGISTERED}


def _factory(env: str):
    """The factory of a user's environment `env` (an import path, or a registered or
    entry-point name), or None for a built-in name."""
    if ":" in env:
        return import_object(env, "env")
    own = registered().get(env)
    if isinstance(own, importlib.metadata.EntryPoint):
        try:
            return own.load()
        except Exception as error:
            raise ConfigError("env", env, f"the entry point {own.value} (group {ENTRY_POINTS}) cannot be "
                              f"loaded: {type(error).__name__}: {error}") from None
    return own


def _users_env(env: str, factory, env_params: Mapping[str, Any]) -> Env:
    try:
        made = factory(**env_params)
    except TypeError as error:
        raise ConfigError("env_params", dict(env_params), f"{env}'s factory(**env_params) failed: {error}") from None
    if _is_gymnax(made):
        made = GymnaxEnv(env, {}, environment=made)
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
        close = difflib.get_close_matches(family, list(FAMILIES), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}/{name}? " if close else ""
        own = f"; registered: {', '.join(sorted(registered()))}" if registered() else ""
        raise ConfigError("env", env, f"unknown environment family {family!r}; {hint}known: "
                          f"{', '.join(f'{f}/' for f in FAMILIES)} (a bare name is a gymnax name){own}")
    return family, name


def make_raw_env(env: str, env_params: Mapping[str, Any] | None = None) -> Env:
    """The adapter alone (no auto-reset, no episode statistics); raises ConfigError."""
    factory = _factory(env)
    if factory is not None:
        return _users_env(env, factory, dict(env_params or {}))
    family, name = split_name(env)
    if family in EXTRAS and importlib.util.find_spec(EXTRAS[family][0]) is None:
        raise ConfigError("env", env, f"needs the optional {family} package, not installed here: "
                          f"pip install 'purejaxppo[{EXTRAS[family][1]}]'")
    module, cls = FAMILIES[family]
    return getattr(importlib.import_module(module), cls)(name, dict(env_params or {}))


def make_env(cfg: EnvConfig) -> AutoReset:
    """The configured environment, auto-resetting, with episode statistics (raises ConfigError)."""
    return AutoReset(EpisodeStats(make_raw_env(cfg.env, cfg.env_params)))


def check_env_config(cfg: EnvConfig, action_kinds: Mapping[str, str], env: Env | None = None) -> Env:
    """The name exists, its parameters exist, and action-space specific settings fit:
    `action_kinds` is {field of cfg: the action kind it needs} (`config.ACTION_KIND_FIELDS`);
    such a field must be null unless the environment has that kind of actions. `env`:
    the environment already built from cfg (default: build it). Returns the environment."""
    env = make_env(cfg) if env is None else env
    for field, kind in action_kinds.items():
        if getattr(cfg, field) is not None and env.action_space.kind != kind:
            raise ConfigError(field, getattr(cfg, field),
                              f"only applies to {kind} actions; {cfg.env} has "
                              f"{env.action_space.kind} actions")
    return env


__all__ = ["ActionSpace", "AutoReset", "Env", "EnvConfig", "EpisodeStats", "FAMILIES", "GymnaxEnv", "env_names",
           "make_env", "make_raw_env", "register", "registered", "split_name", "check_env_config"]
