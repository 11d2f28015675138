"""Environments: one protocol (see `base`), a registry of families by prefix, wrappers.

`env: gymnax/CartPole-v1` (or the bare gymnax name), `env: brax/ant`. Each family is an
adapter module that owns its settings (in `env_params`) and their checks, its action
range and its reset strategy; adding a family is one entry in FAMILIES and one module,
nothing in the learner or in config.py. Adapters are imported on first use, so a run on
gymnax never imports Brax.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from typing import Any, Mapping, Protocol

from purejaxppo.envs.base import ActionSpace, Env
from purejaxppo.envs.gymnax import GymnaxEnv, env_names  # imports gymnax itself only when used
from purejaxppo.envs.wrappers import AutoReset, EpisodeStats
from purejaxppo.errors import ConfigError

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


def split_name(env: str) -> tuple[str, str]:
    """"brax/ant" -> ("brax", "ant"); "CartPole-v1" -> ("gymnax", "CartPole-v1")."""
    family, sep, name = env.partition("/")
    if not sep:
        return DEFAULT_FAMILY, env
    if family not in FAMILIES:
        close = difflib.get_close_matches(family, list(FAMILIES), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}/{name}? " if close else ""
        raise ConfigError("env", env, f"unknown environment family {family!r}; {hint}known: "
                          f"{', '.join(f'{f}/' for f in FAMILIES)} (a bare name is a gymnax name)")
    return family, name


def make_raw_env(env: str, env_params: Mapping[str, Any] | None = None) -> Env:
    """The adapter alone (no auto-reset, no episode statistics); raises ConfigError."""
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
           "make_env", "make_raw_env", "split_name", "check_env_config"]
