"""Environments: one protocol (see `base`), adapters, wrappers."""

from __future__ import annotations

from purejaxppo.config import ACTION_KIND_FIELDS, ConfigError, PPOConfig
from purejaxppo.envs.base import ActionSpace, Env
from purejaxppo.envs.gymnax import GymnaxEnv, env_names
from purejaxppo.envs.wrappers import AutoReset, EpisodeStats


def make_env(cfg: PPOConfig) -> AutoReset:
    """The configured environment, auto-resetting, with episode statistics (raises ConfigError)."""
    return AutoReset(EpisodeStats(GymnaxEnv(cfg.env, cfg.env_params)))


def check_env_config(cfg: PPOConfig) -> None:
    """The name exists, its parameters exist, and action-space specific settings fit."""
    env = make_env(cfg)
    for field, kind in ACTION_KIND_FIELDS.items():
        if getattr(cfg, field) is not None and env.action_space.kind != kind:
            raise ConfigError(field, getattr(cfg, field),
                              f"only applies to {kind} actions; {cfg.env} has "
                              f"{env.action_space.kind} actions")


__all__ = ["ActionSpace", "AutoReset", "Env", "EpisodeStats", "GymnaxEnv", "env_names", "make_env",
           "check_env_config"]
