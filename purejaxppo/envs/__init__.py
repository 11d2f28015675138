"""Environments: one protocol (see `base`), adapters, wrappers."""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from purejaxppo.envs.base import ActionSpace, Env
from purejaxppo.envs.gymnax import GymnaxEnv, env_names
from purejaxppo.envs.wrappers import AutoReset, EpisodeStats
from purejaxppo.errors import ConfigError  # envs does not import config: config imports envs


class EnvConfig(Protocol):
    """What building an environment reads from a config (`config.PPOConfig` has it)."""

    env: str
    env_params: Mapping[str, Any]


def make_env(cfg: EnvConfig) -> AutoReset:
    """The configured environment, auto-resetting, with episode statistics (raises ConfigError)."""
    return AutoReset(EpisodeStats(GymnaxEnv(cfg.env, cfg.env_params)))


def check_env_config(cfg: EnvConfig, action_kinds: Mapping[str, str]) -> None:
    """The name exists, its parameters exist, and action-space specific settings fit:
    `action_kinds` is {field of cfg: the action kind it needs} (`config.ACTION_KIND_FIELDS`);
    such a field must be null unless the environment has that kind of actions."""
    env = make_env(cfg)
    for field, kind in action_kinds.items():
        if getattr(cfg, field) is not None and env.action_space.kind != kind:
            raise ConfigError(field, getattr(cfg, field),
                              f"only applies to {kind} actions; {cfg.env} has "
                              f"{env.action_space.kind} actions")


__all__ = ["ActionSpace", "AutoReset", "Env", "EnvConfig", "EpisodeStats", "GymnaxEnv", "env_names", "make_env",
           "check_env_config"]
