"""Configuration: one flat `PPOConfig`, split into static structure and traced `HParams`.

Static fields decide array shapes and program structure (changing them recompiles).
`HParams` fields are traced values: a sweep stacks them along a run axis and vmaps,
with no recompile. Every check runs here, before anything is compiled, and raises a
`ConfigError` naming the field, the value and the rule.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from pathlib import Path
from typing import Any, Mapping

import jax.numpy as jnp
import yaml
from flax import struct


class ConfigError(ValueError):
    """A configuration value that breaks a rule; the message names field, value and rule."""

    def __init__(self, field: str, value: Any, rule: str):
        self.field, self.value, self.rule = field, value, rule
        super().__init__(f"{field}={value!r}: {rule}")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    # --- static structure -------------------------------------------------------------
    env: str = "CartPole-v1"
    env_params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    num_envs: int = 4
    num_steps: int = 128
    num_minibatches: int = 4
    max_epochs: int | None = None  # scan length for epochs; None: update_epochs
    total_timesteps: int = 500_000
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    log_std_init: float | None = None  # continuous actions only; None means 0.0
    # --- traced hyperparameters (defaults of HParams) ---------------------------------
    lr: float = 2.5e-4
    anneal_lr: bool = True
    clip_eps: float = 0.2
    vf_clip_eps: float | None = 0.2  # None: the value loss is not clipped
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    gamma: float = 0.99
    gae_lambda: float = 0.95
    max_grad_norm: float = 0.5
    target_kl: float | None = None  # None: no KL early stopping
    update_epochs: int = 4

    @property
    def epochs_scan(self) -> int:
        return self.update_epochs if self.max_epochs is None else self.max_epochs

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.batch_size

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["env_params"] = dict(self.env_params)
        d["hidden_sizes"] = list(self.hidden_sizes)
        return d


HPARAM_FIELDS = (
    "lr", "anneal_lr", "clip_eps", "vf_clip_eps", "ent_coef", "vf_coef", "gamma",
    "gae_lambda", "max_grad_norm", "target_kl", "update_epochs",
)
STATIC_FIELDS = tuple(f.name for f in dataclasses.fields(PPOConfig) if f.name not in HPARAM_FIELDS)
# Fields whose meaning depends on the action space: {field: the kind it needs}.
ACTION_KIND_FIELDS = {"log_std_init": "continuous"}


@struct.dataclass
class HParams:
    """Traced hyperparameters: a pytree of scalars (or of [runs] arrays in a sweep).

    `vf_clip_eps` and `target_kl` use +inf for "off", so every run of a sweep has the
    same program.
    """

    lr: jnp.ndarray
    anneal_lr: jnp.ndarray
    clip_eps: jnp.ndarray
    vf_clip_eps: jnp.ndarray
    ent_coef: jnp.ndarray
    vf_coef: jnp.ndarray
    gamma: jnp.ndarray
    gae_lambda: jnp.ndarray
    max_grad_norm: jnp.ndarray
    target_kl: jnp.ndarray
    update_epochs: jnp.ndarray

    @classmethod
    def from_config(cls, cfg: PPOConfig) -> "HParams":
        def f32(x):
            return jnp.asarray(math.inf if x is None else x, jnp.float32)

        values = {name: f32(getattr(cfg, name)) for name in HPARAM_FIELDS}
        values["anneal_lr"] = jnp.asarray(cfg.anneal_lr, jnp.bool_)
        values["update_epochs"] = jnp.asarray(cfg.update_epochs, jnp.int32)
        return cls(**values)


# --------------------------------------------------------------------------------------
# Building and checking a config
# --------------------------------------------------------------------------------------
_FIELDS = {f.name: f for f in dataclasses.fields(PPOConfig)}
_INT = {"num_envs", "num_steps", "num_minibatches", "max_epochs", "total_timesteps", "update_epochs"}
_FLOAT = {"lr", "clip_eps", "vf_clip_eps", "ent_coef", "vf_coef", "gamma", "gae_lambda",
          "max_grad_norm", "target_kl", "log_std_init"}
_OPTIONAL = {"max_epochs", "vf_clip_eps", "target_kl", "log_std_init"}
ACTIVATIONS = ("tanh", "relu")


def _unknown_key(key: str, where: str) -> ConfigError:
    close = difflib.get_close_matches(key, list(_FIELDS), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known keys: {', '.join(_FIELDS)}"
    return ConfigError(key, None, f"unknown key in {where}{hint}")


def _coerce(name: str, value: Any) -> Any:
    """Check one value's type; returns the value in its canonical Python type."""
    if value is None and name in _OPTIONAL:
        return None
    if name in _INT:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer() and name == "total_timesteps":
                return int(value)  # 5e5 in YAML
            raise ConfigError(name, value, "must be an integer")
        return value
    if name in _FLOAT:
        if isinstance(value, str):  # YAML reads 2.5e-4 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(name, value, "must be a number") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(name, value, "must be a number")
        if not math.isfinite(value):
            raise ConfigError(name, value, "must be finite (use null to switch it off)"
                              if name in _OPTIONAL else "must be finite")
        return float(value)
    if name == "anneal_lr":
        if not isinstance(value, bool):
            raise ConfigError(name, value, "must be true or false")
        return value
    if name in ("env", "activation"):
        if not isinstance(value, str):
            raise ConfigError(name, value, "must be a string")
        return value
    if name == "hidden_sizes":
        if (not isinstance(value, (list, tuple)) or not value
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
            raise ConfigError(name, value, "must be a non-empty list of positive integers")
        return tuple(value)
    if name == "env_params":
        if value is None:
            return {}
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise ConfigError(name, value, "must be a mapping of parameter name to value")
        return dict(value)
    raise AssertionError(name)


def _check_rules(cfg: PPOConfig) -> None:
    for name in ("num_envs", "num_steps", "num_minibatches", "total_timesteps", "update_epochs"):
        if getattr(cfg, name) < 1:
            raise ConfigError(name, getattr(cfg, name), "must be at least 1")
    if cfg.max_epochs is not None and cfg.max_epochs < 1:
        raise ConfigError("max_epochs", cfg.max_epochs, "must be at least 1")
    if cfg.update_epochs > cfg.epochs_scan:
        raise ConfigError("update_epochs", cfg.update_epochs,
                          f"must not exceed max_epochs={cfg.max_epochs}")
    if cfg.batch_size % cfg.num_minibatches:
        raise ConfigError("num_minibatches", cfg.num_minibatches,
                          f"must divide the batch num_envs*num_steps="
                          f"{cfg.num_envs}*{cfg.num_steps}={cfg.batch_size}")
    if cfg.total_timesteps < cfg.batch_size:
        raise ConfigError("total_timesteps", cfg.total_timesteps,
                          f"must be at least one batch (num_envs*num_steps={cfg.batch_size})")
    for name in ("lr", "clip_eps", "max_grad_norm"):
        if getattr(cfg, name) <= 0:
            raise ConfigError(name, getattr(cfg, name), "must be positive")
    for name in ("vf_clip_eps", "target_kl"):
        if getattr(cfg, name) is not None and getattr(cfg, name) <= 0:
            raise ConfigError(name, getattr(cfg, name), "must be positive (or null for off)")
    for name in ("ent_coef", "vf_coef"):
        if getattr(cfg, name) < 0:
            raise ConfigError(name, getattr(cfg, name), "must be non-negative")
    for name in ("gamma", "gae_lambda"):
        if not 0.0 <= getattr(cfg, name) <= 1.0:
            raise ConfigError(name, getattr(cfg, name), "must lie in [0, 1]")
    if cfg.activation not in ACTIVATIONS:
        raise ConfigError("activation", cfg.activation, f"must be one of {', '.join(ACTIVATIONS)}")


def make_config(values: Mapping[str, Any] | None = None, *, where: str = "config") -> PPOConfig:
    """Build and check a `PPOConfig` from a mapping (YAML contents, overrides, ...).

    Checks types, ranges, the environment name, its parameters and the action-space
    specific settings; compiles nothing.
    """
    from purejaxppo.envs import check_env_config  # envs imports config: import here

    values = dict(values or {})
    for key in values:
        if key not in _FIELDS:
            raise _unknown_key(key, where)
    cfg = PPOConfig(**{k: _coerce(k, v) for k, v in values.items()})
    _check_rules(cfg)
    check_env_config(cfg)
    return cfg


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value` from the command line; the value is read as YAML (3, 0.1, true, [64, 64])."""
    if "=" not in text:
        raise ConfigError("--set", text, "must look like key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key, value


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> PPOConfig:
    """Read a YAML config (flat keys of `PPOConfig`), apply overrides, check everything."""
    values: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError("config", str(path), "file not found")
        loaded = yaml.safe_load(path.read_text())
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError("config", str(path), "must be a YAML mapping of key: value")
        for key in loaded:
            if key not in _FIELDS:
                raise _unknown_key(key, str(path))
        values.update(loaded)
    for key in overrides or {}:
        if key not in _FIELDS:
            raise _unknown_key(key, "overrides")
    values.update(overrides or {})
    return make_config(values, where=str(path) if path else "config")
