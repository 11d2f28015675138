"""Configuration: one flat `PPOConfig`, split into static structure and traced `HParams`.

Every field is declared once, in `FIELDS`: its type, whether it is static or traced, its
default, what null means (if allowed), its rules and a line of help. `PPOConfig`,
`HParams`, `HPARAM_FIELDS`, `STATIC_FIELDS`, the type checks, the per-field rule checks,
`purejaxppo train --help-config` and the README's table are all derived from it.

Static fields decide array shapes and program structure (changing them recompiles).
`HParams` fields are traced values: a sweep stacks them along a run axis and vmaps,
with no recompile. Every check runs here, before anything is compiled, and raises a
`ConfigError` naming the field, the value and the rule.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import types
from pathlib import Path
from typing import Any, Callable, Mapping

import jax.numpy as jnp
import yaml
from flax import struct

from purejaxppo.envs import check_env_config
from purejaxppo.errors import ConfigError

# --------------------------------------------------------------------------------------
# The declaration
# --------------------------------------------------------------------------------------
# type name -> Python type of the checked value
TYPES: Mapping[str, Any] = types.MappingProxyType({
    "int": int, "float": float, "bool": bool, "str": str,
    "list of positive ints": tuple[int, ...],
    "mapping": Mapping[str, Any],  # null reads as {}
})
# dtype of a traced field's value in HParams, by type
_HPARAM_DTYPES = {"bool": jnp.bool_, "int": jnp.int32, "float": jnp.float32}


@dataclasses.dataclass(frozen=True)
class Rule:
    """A condition on one (non-null) value; a value that breaks it is "must be {text}"."""

    text: str
    holds: Callable[[Any], bool]


AT_LEAST_1 = Rule("at least 1", lambda v: v >= 1)
POSITIVE = Rule("positive", lambda v: v > 0)
NON_NEGATIVE = Rule("non-negative", lambda v: v >= 0)
IN_0_1 = Rule("in [0, 1]", lambda v: 0.0 <= v <= 1.0)


def one_of(*choices: str) -> Rule:
    return Rule(f"one of {', '.join(choices)}", lambda v: v in choices)


@dataclasses.dataclass(frozen=True)
class Field:
    """One config key. `null` says what null means; None: null is not allowed."""

    name: str
    type: str  # a key of TYPES
    default: Any
    help: str
    traced: bool = False  # True: a value of HParams (a sweep vmaps over it); False: static structure
    null: str | None = None
    rules: tuple[Rule, ...] = ()
    action_kind: str | None = None  # only meaningful for this action kind (set only then)

    @property
    def annotation(self) -> Any:
        return TYPES[self.type] | None if self.null is not None else TYPES[self.type]


def _table(*fields: Field) -> Mapping[str, Field]:
    """The declaration as a read-only mapping name -> Field, in declaration order."""
    table = {}
    for f in fields:
        if f.name in table or f.type not in TYPES or not f.help:
            raise ValueError(f"bad field declaration: {f}")
        if f.traced and (f.type not in _HPARAM_DTYPES or (f.null is not None and f.type != "float")):
            raise ValueError(f"{f.name}: traced fields are bool, int or float scalars; only a float "
                             f"may be null (traced as +inf, so every run has the same program)")
        table[f.name] = f
    return types.MappingProxyType(table)


ACTIVATIONS = ("tanh", "relu", "swish")

FIELDS: Mapping[str, Field] = _table(
    # --- static structure ---------------------------------------------------------
    Field("env", "str", "CartPole-v1",
          "family/name: gymnax/<any gymnax env> (a bare name is gymnax's; not MNISTBandit, which downloads "
          "data) or brax/<env> (ant, hopper, inverted_pendulum, fast, ...)"),
    Field("env_params", "mapping", {},
          "the environment's parameters, e.g. gymnax {max_steps_in_episode: 200}; Brax {backend: spring, "
          "episode_length: 1000, action_repeat: 1} and its constructor's arguments"),
    Field("num_envs", "int", 4, "environments stepped in parallel; batch = num_envs × num_steps per update",
          rules=(AT_LEAST_1,)),
    Field("num_steps", "int", 128, "steps per environment per update", rules=(AT_LEAST_1,)),
    Field("num_minibatches", "int", 4,
          "must divide the batch; minibatches are reshuffled every epoch and cover the batch",
          rules=(AT_LEAST_1,)),
    Field("max_epochs", "int", None, "length of the epoch scan; lets a sweep vary update_epochs up to it",
          null="update_epochs", rules=(AT_LEAST_1,)),
    Field("total_timesteps", "int", 500_000, "environment steps per run; updates = total_timesteps // batch",
          rules=(AT_LEAST_1,)),
    Field("hidden_sizes", "list of positive ints", (64, 64),
          "hidden layers of the separate actor and critic MLPs (orthogonal init)"),
    Field("activation", "str", "tanh", "the MLPs' activation", rules=(one_of(*ACTIVATIONS),)),
    Field("log_std_init", "float", None, "continuous actions only: initial state-independent log-std",
          null="0.0", action_kind="continuous"),
    Field("normalize_obs", "bool", False,
          "normalise observations by their running mean and variance (kept in the learner state, "
          "merged after each update from its rollout, saved with checkpoints)"),
    Field("obs_clip", "float", 10.0, "normalised observations are clipped to ±obs_clip", rules=(POSITIVE,)),
    Field("reward_scale", "float", 1.0,
          "rewards are multiplied by it before learning, and before normalize_reward (Brax's reward_scaling)",
          rules=(POSITIVE,)),
    Field("normalize_reward", "bool", False,
          "divide rewards by the running standard deviation of the discounted return"),
    Field("reward_clip", "float", 10.0, "normalised rewards are clipped to ±reward_clip", rules=(POSITIVE,)),
    # --- traced hyperparameters ---------------------------------------------------
    Field("lr", "float", 2.5e-4, "Adam learning rate (Adam eps 1e-5)", traced=True, rules=(POSITIVE,)),
    Field("anneal_lr", "bool", True, "decay lr linearly to 0 over the run", traced=True),
    Field("clip_eps", "float", 0.2, "policy clip range", traced=True, rules=(POSITIVE,)),
    Field("vf_clip_eps", "float", 0.2, "value clip range", traced=True,
          null="value loss not clipped", rules=(POSITIVE,)),
    Field("ent_coef", "float", 0.01, "entropy bonus weight", traced=True, rules=(NON_NEGATIVE,)),
    Field("vf_coef", "float", 0.5, "value-loss weight", traced=True, rules=(NON_NEGATIVE,)),
    Field("gamma", "float", 0.99, "discount", traced=True, rules=(IN_0_1,)),
    Field("gae_lambda", "float", 0.95, "GAE λ", traced=True, rules=(IN_0_1,)),
    Field("max_grad_norm", "float", 0.5, "clip gradients by global norm", traced=True, rules=(POSITIVE,)),
    Field("target_kl", "float", None,
          "KL early stopping: once an epoch's mean k3 KL exceeds 1.5 × target_kl, the remaining "
          "epochs of that update are masked; the epoch that crossed the line is kept",
          traced=True, null="no KL early stopping", rules=(POSITIVE,)),
    Field("update_epochs", "int", 4,
          "epochs per update (≤ max_epochs); later epochs are masked: they change nothing",
          traced=True, rules=(AT_LEAST_1,)),
)

HPARAM_FIELDS = tuple(name for name, f in FIELDS.items() if f.traced)
STATIC_FIELDS = tuple(name for name, f in FIELDS.items() if not f.traced)
# Fields whose meaning depends on the action space: {field: the kind it needs}.
ACTION_KIND_FIELDS = types.MappingProxyType({name: f.action_kind for name, f in FIELDS.items() if f.action_kind})


# --------------------------------------------------------------------------------------
# The classes derived from it
# --------------------------------------------------------------------------------------
def _config_fields(cls):
    """One attribute per declared field, annotated with its type and set to its default."""
    cls.__annotations__ = {name: f.annotation for name, f in FIELDS.items()}
    for name, f in FIELDS.items():
        default = (dataclasses.field(default_factory=functools.partial(dict, f.default))
                   if f.type == "mapping" else f.default)
        setattr(cls, name, default)
    return cls


@dataclasses.dataclass(frozen=True)
@_config_fields
class PPOConfig:
    """A checked configuration (build it with `make_config` / `load_config`): the fields of
    `FIELDS`, in order, with their defaults."""

    @property
    def epochs_scan(self) -> int:
        return self.update_epochs if self.max_epochs is None else self.max_epochs

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.batch_size

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["env_params"] = dict(self.env_params)
        d["hidden_sizes"] = list(self.hidden_sizes)
        return d


def _hparam_fields(cls):
    cls.__annotations__ = {name: jnp.ndarray for name in HPARAM_FIELDS}
    return cls


@struct.dataclass
@_hparam_fields
class HParams:
    """Traced hyperparameters (the traced fields of `FIELDS`): a pytree of scalars (or of
    [runs] arrays in a sweep). bool, int32 or float32 by the field's type; a null float is
    +inf ("off"), so every run of a sweep has the same program.
    """

    @classmethod
    def from_config(cls, cfg: PPOConfig) -> "HParams":
        def value(name):
            x = getattr(cfg, name)
            return jnp.asarray(math.inf if x is None else x, _HPARAM_DTYPES[FIELDS[name].type])

        return cls(**{name: value(name) for name in HPARAM_FIELDS})


# --------------------------------------------------------------------------------------
# Reading the table: help and README
# --------------------------------------------------------------------------------------
def _show(value: Any) -> str:
    """A default as it is written in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return f"[{', '.join(map(str, value))}]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    return str(value)


def _rows() -> list[tuple[str, ...]]:
    """(key, type, static/traced, default, rule, meaning) per field."""
    rows = []
    for name, f in FIELDS.items():
        rule = ", ".join(r.text for r in f.rules)
        if f.null is not None:
            rule += f"{'; ' if rule else ''}null: {f.null}"
        rows.append((name, f.type, "traced" if f.traced else "static", _show(f.default), rule, f.help))
    return rows


_HEADER = ("key", "type", "kind", "default", "rule", "meaning")


def markdown_table() -> str:
    """The README's configuration table (README.md holds a copy; a test keeps them equal)."""
    def cells(row, code):
        return [f"`{c}`" if i in code and c else c.replace("|", "\\|") for i, c in enumerate(row)]

    lines = ["| " + " | ".join(_HEADER) + " |", "|" + "---|" * len(_HEADER)]
    lines += ["| " + " | ".join(cells(row, code={0, 3})) + " |" for row in _rows()]
    return "\n".join(lines)


def text_table() -> str:
    """The fields for a terminal (`--help-config`): aligned columns, meaning last."""
    rows = [_HEADER] + _rows()
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in rows)


# --------------------------------------------------------------------------------------
# Building and checking a config
# --------------------------------------------------------------------------------------
def _unknown_key(key: str, where: str) -> ConfigError:
    close = difflib.get_close_matches(key, list(FIELDS), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known keys: {', '.join(FIELDS)}"
    return ConfigError(key, None, f"unknown key in {where}{hint}")


def _error(f: Field, value: Any, rule: str) -> ConfigError:
    return ConfigError(f.name, value, rule if f.null is None else f"{rule} (or null: {f.null})")


def _number(value: Any) -> int | float | None:
    """int or float; also from a string (YAML reads 5e5 and 1e-3, without a dot, as strings)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _coerce(f: Field, value: Any) -> Any:
    """Check one value's type; returns it in its canonical Python type."""
    if value is None and f.null is not None:
        return None
    if f.type == "int":
        number = _number(value)
        if isinstance(number, float) and number.is_integer():  # 1.0e+6, "5e5"
            number = int(number)
        if not isinstance(number, int):
            raise _error(f, value, "must be an integer")
        return number
    if f.type == "float":
        number = _number(value)
        if number is None:
            raise _error(f, value, "must be a number")
        if not math.isfinite(number):
            raise _error(f, value, "must be finite")
        return float(number)
    if f.type == "bool":
        if not isinstance(value, bool):
            raise _error(f, value, "must be true or false")
        return value
    if f.type == "str":
        if not isinstance(value, str):
            raise _error(f, value, "must be a string")
        return value
    if f.type == "list of positive ints":
        if (not isinstance(value, (list, tuple)) or not value
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
            raise _error(f, value, "must be a non-empty list of positive integers")
        return tuple(value)
    if f.type == "mapping":
        if value is None:
            return {}
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise _error(f, value, "must be a mapping of parameter name to value")
        return dict(value)
    raise AssertionError(f.type)


def _check(cfg: PPOConfig) -> None:
    """Every field's own rules, then the rules that tie fields together."""
    for name, f in FIELDS.items():
        value = getattr(cfg, name)
        for rule in f.rules:
            if value is not None and not rule.holds(value):
                raise _error(f, value, f"must be {rule.text}")
    if cfg.update_epochs > cfg.epochs_scan:
        raise ConfigError("update_epochs", cfg.update_epochs, f"must not exceed max_epochs={cfg.max_epochs}")
    if cfg.batch_size % cfg.num_minibatches:
        raise ConfigError("num_minibatches", cfg.num_minibatches,
                          f"must divide the batch num_envs*num_steps="
                          f"{cfg.num_envs}*{cfg.num_steps}={cfg.batch_size}")
    if cfg.total_timesteps < cfg.batch_size:
        raise ConfigError("total_timesteps", cfg.total_timesteps,
                          f"must be at least one batch (num_envs*num_steps={cfg.batch_size})")


def make_config(values: Mapping[str, Any] | None = None, *, where: str = "config") -> PPOConfig:
    """Build and check a `PPOConfig` from a mapping (YAML contents, overrides, ...).

    Checks types, ranges, the environment name, its parameters and the action-space
    specific settings; compiles nothing.
    """
    values = dict(values or {})
    for key in values:
        if key not in FIELDS:
            raise _unknown_key(key, where)
    cfg = PPOConfig(**{k: _coerce(FIELDS[k], v) for k, v in values.items()})
    _check(cfg)
    check_env_config(cfg, ACTION_KIND_FIELDS)
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
            if key not in FIELDS:
                raise _unknown_key(key, str(path))
        values.update(loaded)
    for key in overrides or {}:
        if key not in FIELDS:
            raise _unknown_key(key, "overrides")
    values.update(overrides or {})
    return make_config(values, where=str(path) if path else "config")
