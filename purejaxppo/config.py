"""Configuration: one flat `PPOConfig`, split into static structure and traced `HParams`.

Every field is declared once, in `FIELDS`: its type, whether it is static or traced, its
default, what null means (if allowed), its rules and a line of help. `PPOConfig`,
`HParams`, `HPARAM_FIELDS`, `STATIC_FIELDS`, the type checks, the per-field rule checks,
`purejaxppo train --help-config` and the table of docs/configuration.md are all derived from it.

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
import re
import types
from pathlib import Path
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import yaml

from purejaxppo import pytree
from purejaxppo.envs import Env, check_env_config
from purejaxppo.errors import NO_VALUE, ConfigError, integer
from purejaxppo.networks import make_network

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
          "data), brax/<env> (ant, hopper, inverted_pendulum, fast, ...), craftax/, xminigrid/, jumanji/; "
          "or your own: a name given to purejaxppo.envs.register, an installed entry point, or "
          "package.module:factory"),
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
    Field("policy", "str", "mlp",
          "mlp: separate actor and critic MLPs on the observation; gru: obs -> dense(gru_size) -> GRU "
          "(a memory, restarted at each episode's start) -> actor and critic MLPs; minibatches are then "
          "whole sequences (num_minibatches must divide num_envs)", rules=(one_of("mlp", "gru"),)),
    Field("gru_size", "int", 128, "policy gru only: width of the encoder and of the GRU's memory",
          rules=(AT_LEAST_1,)),
    Field("torso", "str", None,
          "the built-in networks' torso, shared by actor and critic: cnn (convolutions, then flattened) for "
          "image observations [height, width(, channels)]", null="the observation, flattened",
          rules=(one_of("cnn"),)),
    Field("cnn_channels", "list of positive ints", (16, 32), "torso cnn: output channels of each convolution"),
    Field("cnn_kernels", "list of positive ints", (3, 3), "torso cnn: kernel size of each convolution (square)"),
    Field("cnn_strides", "list of positive ints", (1, 1), "torso cnn: stride of each convolution (VALID padding)"),
    Field("network", "str", None,
          "your own flax.linen actor-critic, package.module:factory, built as factory(num_outputs, "
          "**network_kwargs); module(obs) -> (logits or means, value), or recurrent (docs: your own network)",
          null="the built-in network of policy"),
    Field("network_kwargs", "mapping", {}, "network only: keyword arguments of its factory"),
    Field("hidden_sizes", "list of positive ints", (64, 64),
          "hidden layers of the separate actor and critic MLPs (orthogonal init)"),
    Field("activation", "str", "tanh", "the MLPs' activation", rules=(one_of(*ACTIVATIONS),)),
    Field("log_std_init", "float", None, "continuous actions only: initial state-independent log-std",
          null="0.0", action_kind="continuous"),
    Field("action_squash", "str", None,
          "continuous actions only: a Gaussian sample becomes the env's action by clip (to the action range, "
          "for the step only) or tanh (squashed into it, with the log-determinant in the log-probability: "
          "Brax's trainer's policy)", null="clip", rules=(one_of("clip", "tanh"),), action_kind="continuous"),
    Field("mask_actions", "bool", True,
          "apply the environment's action mask, where it has one (action_mask(state)): the policy acts, and "
          "the loss's log-probabilities and entropy are computed, over the allowed actions only; false ignores "
          "it, for comparison"),
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
        """The epochs the program scans: max_epochs, or update_epochs when it is null."""
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
        d["network_kwargs"] = dict(self.network_kwargs)
        for name in ("hidden_sizes", "cnn_channels", "cnn_kernels", "cnn_strides"):
            d[name] = list(getattr(self, name))
        return d


def _hparam_fields(cls):
    cls.__annotations__ = {name: jnp.ndarray for name in HPARAM_FIELDS}
    return cls


@pytree.dataclass
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

    @classmethod
    def stack(cls, cfg: PPOConfig, runs: int | None = None, **values: Any) -> "HParams":
        """Checked hyperparameters of several runs of one program (`cfg`'s): each keyword
        names a traced field and gives one value per run (a list; all of one length, the
        run axis, equal to `runs` when given, e.g. `runs=len(keys)`); the other fields
        repeat cfg's value. Every value is checked as `make_config` checks it (its type,
        its rules, null where the field allows it) and `update_epochs` against the epochs
        the program scans (`cfg.epochs_scan`); a bad one raises ConfigError naming the
        field and the run. The leaves are numpy arrays [runs] of each field's dtype:
        vmap over them, e.g. `jax.vmap(make_train(cfg))(keys, HParams.stack(cfg, lr=[...]))`.

        Build swept HParams with it: values given to `Learner.run` / `make_train`'s
        `train` are checked there only where they are concrete; a traced value (under jit
        or vmap) is taken as it is: a negative lr ascends, a NaN gamma makes every number
        NaN, and update_epochs beyond the scanned epochs is silently capped."""
        cfg = check_config(cfg, env=False, update_epochs=False)
        lengths = {}
        for name, given in values.items():
            if name not in FIELDS:
                raise _unknown_key(name, "HParams.stack")
            if not FIELDS[name].traced:
                raise ConfigError(name, NO_VALUE, "is static structure, not a traced hyperparameter: one program "
                                  "cannot vary it (ppo.sweep compiles one program per value)")
            if isinstance(given, (str, Mapping)) or np.ndim(given) != 1 or not len(given):
                raise ConfigError(name, given, "must be a non-empty list of values, one per run")
            lengths[name] = len(given)
        if runs is not None:
            lengths = {"runs": integer("runs", _plain(runs), 1), **lengths}
        if not lengths:
            raise ConfigError("runs", NO_VALUE, "give the number of runs, or one list of values per run")
        (first, n), *others = lengths.items()
        for name, m in others:
            if m != n:
                raise ConfigError(name, NO_VALUE, f"has {m} values but {first} {'is' if first == 'runs' else 'has'} "
                                  f"{n}: the run axis is one length for every swept field")
        columns = {}
        for name in HPARAM_FIELDS:
            f = FIELDS[name]
            column = list(values[name]) if name in values else [getattr(cfg, name)] * n
            for i, value in enumerate(column):
                try:
                    column[i] = _check_hparam(f, _coerce(f, value), cfg)
                except ConfigError as error:
                    raise ConfigError(error.field, error.value, f"{error.rule} (run {i})") from None
            columns[name] = np.asarray([math.inf if v is None else v for v in column], _HPARAM_DTYPES[f.type])
        return cls(**columns)


# --------------------------------------------------------------------------------------
# Reading the table: help and docs/configuration.md
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
    """The configuration table (docs/configuration.md holds a copy; a test keeps them equal)."""
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
# What other PPO code bases (and people) call our keys: matched on meaning, not spelling.
ALIASES: Mapping[str, tuple[str, ...]] = types.MappingProxyType({
    "env": ("env_id", "env_name", "environment", "game"),
    "env_params": ("env_kwargs", "env_config", "env_args", "environment_params"),
    "num_envs": ("n_envs", "num_workers", "n_workers", "envs", "num_parallel_envs", "parallel_envs",
                 "num_environments"),
    "num_steps": ("n_steps", "rollout_length", "unroll_length", "horizon", "num_rollout_steps", "steps_per_env"),
    "num_minibatches": ("n_minibatches", "nminibatches", "num_mini_batch", "num_minibatch", "minibatches",
                        "num_batches", "n_batches"),
    "total_timesteps": ("timesteps", "total_steps", "num_timesteps", "n_timesteps", "total_env_steps"),
    "policy": ("policy_type", "architecture", "arch"),
    "network": ("network_factory", "model", "net", "agent", "create_agent", "network_fn"),
    "network_kwargs": ("network_args", "network_params", "net_kwargs", "model_kwargs", "network_config"),
    "gru_size": ("rnn_size", "gru_hidden_size", "rnn_hidden_size", "memory_size", "recurrent_size", "lstm_size"),
    "hidden_sizes": ("hidden", "hidden_size", "net_arch", "layers", "hidden_layers", "hidden_dims", "layer_sizes"),
    "normalize_obs": ("norm_obs", "normalize_observations", "obs_norm", "normalise_obs"),
    "normalize_reward": ("norm_reward", "normalize_rewards", "reward_norm", "normalise_reward"),
    "reward_scale": ("reward_scaling", "scale_reward", "reward_multiplier"),
    "lr": ("learning_rate", "learningrate", "step_size", "lr_rate"),
    "anneal_lr": ("anneal", "lr_anneal", "anneal_learning_rate", "linear_lr", "lr_schedule", "lr_decay"),
    "clip_eps": ("clip_range", "clip", "clip_param", "clip_ratio", "clip_coef", "clip_epsilon", "ppo_clip",
                 "eps_clip"),
    "vf_clip_eps": ("clip_range_vf", "vf_clip", "value_clip", "clip_vf", "vf_clip_param", "clip_value"),
    "ent_coef": ("ent_coeff", "entropy_coef", "entropy_coeff", "entropy_cost", "entropy_weight", "ent_weight",
                 "entropy_beta"),
    "vf_coef": ("value_coef", "vf_coeff", "value_coeff", "value_loss_coef", "value_loss_coeff", "vf_loss_coeff",
                "value_weight", "vf_weight", "critic_coef"),
    "gamma": ("discount", "discount_factor", "gamma_discount"),
    "gae_lambda": ("lambda", "lam", "lmbda", "gae_lam", "td_lambda", "lambda_"),
    "max_grad_norm": ("max_grad", "grad_clip", "max_norm", "clip_grad_norm", "gradient_clip", "grad_norm_clip",
                      "max_gradient_norm", "clip_grad"),
    "target_kl": ("kl_target", "target_kl_div", "kl_threshold", "desired_kl"),
    "update_epochs": ("n_epochs", "epochs", "num_epochs", "ppo_epochs", "update_epoch", "num_sgd_iter",
                      "num_update_epochs", "opt_epochs"),
})
# Keys that are not config keys but something else, with where they go.
NOT_CONFIG_KEYS: Mapping[str, str] = types.MappingProxyType({
    "seed": "the first seed is a command-line option (--seed S; seeds S, S+1, ... are run)",
    "seeds": "the number of seeds is a command-line option (--seeds N), or seeds: N in a sweep file's "
             "sweep: section",
    **{key: f"{key}: belongs in a sweep file's sweep: section (purejaxppo sweep)"
       for key in ("grid", "random", "random_seed", "threshold", "diagnosis")},
    "eval_episodes": "the number of evaluation episodes is a command-line option (--eval-episodes E), or "
                     "eval_episodes: E in a sweep file's sweep: section",
})


def _normal(key: str) -> str:
    """learningRate, learning-rate, Learning Rate -> learning_rate."""
    key = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key.strip())
    return re.sub(r"[\s\-.]+", "_", key).lower()


_BY_ALIAS = {_normal(alias): name for name, aliases in ALIASES.items() for alias in aliases}


def suggest(key: Any) -> str:
    """"did you mean ...?" for a key that is not a config key: its meaning (ALIASES),
    then close spellings; or what the key is if it is no config key at all."""
    text = str(key)
    if _normal(text) in NOT_CONFIG_KEYS:
        return f"not a config key: {NOT_CONFIG_KEYS[_normal(text)]}"
    names = [_BY_ALIAS[_normal(text)]] if _normal(text) in _BY_ALIAS else []
    if _normal(text) in FIELDS:
        names.append(_normal(text))
    names += [n for n in difflib.get_close_matches(text, list(FIELDS), n=3) if n not in names]
    if names:
        return f"did you mean {', '.join(names)}?"
    return f"known keys: {', '.join(FIELDS)} (purejaxppo train --help-config explains each)"


def _unknown_key(key: Any, where: str) -> ConfigError:
    return ConfigError(str(key), NO_VALUE, f"unknown key in {where}; {suggest(key)}")


def _error(f: Field, value: Any, rule: str) -> ConfigError:
    return ConfigError(f.name, value, rule if f.null is None else f"{rule} (or null: {f.null})")


def _plain(value: Any) -> Any:
    """numpy and JAX scalars (np.int64(8), np.float32(1e-3), a concrete 0-d array) as the
    Python numbers they are; anything else as it is."""
    if (isinstance(value, (np.generic, np.ndarray, jax.Array)) and np.ndim(value) == 0
            and not isinstance(value, jax.core.Tracer)):
        return value.item()
    return value


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
    value = _plain(value)
    if isinstance(value, jax.core.Tracer):
        raise _error(f, value, "must be a concrete value, not a traced one (a config is static; sweep traced "
                               "values through HParams)")
    if value is None and f.null is not None:
        return None
    if f.type == "int":
        number = _number(value)
        if isinstance(number, float) and number.is_integer():  # 1.0e+6, "5e5"
            number = int(number)
        if not isinstance(number, int):
            raise _error(f, value, "must be an integer")
        if f.traced and not -2**31 <= number < 2**31:
            raise _error(f, value, "must fit in 32 bits (below 2**31)")
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
        if isinstance(value, (list, tuple)):
            value = [_plain(v) for v in value]
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


def _check(cfg: PPOConfig, update_epochs: bool = True) -> None:
    """Every field's own rules, then the rules that tie fields together."""
    for name, f in FIELDS.items():
        value = getattr(cfg, name)
        for rule in f.rules:
            if value is not None and not rule.holds(value):
                raise _error(f, value, f"must be {rule.text}")
    if update_epochs and cfg.update_epochs > cfg.epochs_scan:
        raise ConfigError("update_epochs", cfg.update_epochs, f"must not exceed max_epochs={cfg.max_epochs}")
    if cfg.batch_size % cfg.num_minibatches:
        raise ConfigError("num_minibatches", cfg.num_minibatches,
                          f"must divide the batch num_envs*num_steps="
                          f"{cfg.num_envs}*{cfg.num_steps}={cfg.batch_size}")
    if cfg.torso == "cnn" and not len(cfg.cnn_channels) == len(cfg.cnn_kernels) == len(cfg.cnn_strides):
        raise ConfigError("cnn_kernels", list(cfg.cnn_kernels), f"cnn_channels, cnn_kernels and cnn_strides must "
                          f"be lists of one length (one entry per convolution); their lengths are "
                          f"{len(cfg.cnn_channels)}, {len(cfg.cnn_kernels)}, {len(cfg.cnn_strides)}")
    if cfg.network is not None and cfg.torso is not None:
        raise ConfigError("torso", cfg.torso, "only applies to the built-in networks; network is set")
    if cfg.network is None and cfg.network_kwargs:
        raise ConfigError("network_kwargs", dict(cfg.network_kwargs), "only applies with network set (the "
                          "built-in networks take hidden_sizes, activation and gru_size)")
    if cfg.network is not None and cfg.policy != "mlp":
        raise ConfigError("policy", cfg.policy, "only chooses a built-in network; with network set, the module "
                          "is recurrent if it has initial_carry")
    if cfg.policy == "gru" and cfg.num_envs % cfg.num_minibatches:
        raise ConfigError("num_minibatches", cfg.num_minibatches,
                          f"must divide num_envs={cfg.num_envs} with policy gru: its minibatches are whole "
                          f"sequences (environments), not single steps")
    if cfg.total_timesteps < cfg.batch_size:
        raise ConfigError("total_timesteps", cfg.total_timesteps,
                          f"must be at least one batch (num_envs*num_steps={cfg.batch_size})")
    if cfg.num_updates >= 2**31:
        raise ConfigError("total_timesteps", cfg.total_timesteps,
                          f"gives {cfg.num_updates} updates of num_envs*num_steps={cfg.batch_size} steps; "
                          f"at most 2**31-1 (the update counter is 32-bit): raise num_envs or num_steps")


def _check_hparam(f: Field, value: Any, cfg: PPOConfig) -> Any:
    """One traced field's coerced value (of one run) against its rules and `cfg`'s scan."""
    for rule in f.rules:
        if value is not None and not rule.holds(value):
            raise _error(f, value, f"must be {rule.text}")
    if f.name == "update_epochs" and value > cfg.epochs_scan:
        raise ConfigError(f.name, value, f"must not exceed the epochs the program scans, cfg.epochs_scan="
                          f"{cfg.epochs_scan} (max_epochs, or update_epochs when it is null); a larger one would "
                          f"be capped silently")
    return value


def check_config(cfg: PPOConfig, *, env: bool = True, update_epochs: bool = True) -> PPOConfig:
    """The public door for a config built another way (e.g. `PPOConfig(...)` by hand, or
    `dataclasses.replace`): `make_config`'s checks, every field's type and rules, the rules
    that tie fields together, and (`env`) the environment, its parameters and the network.
    A config `make_config` made is trusted: it is returned as it is. Otherwise returns the
    checked config, each value in its canonical type; raises ConfigError naming the field.
    `update_epochs=False` leaves out "update_epochs <= max_epochs": a learner run with
    HParams reads update_epochs from them (`Learner.run` checks it there)."""
    if not isinstance(cfg, PPOConfig):
        raise ConfigError("config", type(cfg).__name__, "must be a PPOConfig (build one with make_config)")
    if is_checked(cfg):
        return cfg
    checked = PPOConfig(**{name: _coerce(f, getattr(cfg, name)) for name, f in FIELDS.items()})
    _check(checked, update_epochs)
    if env and update_epochs:
        return check_env_and_network(checked)
    if env:
        check_env_and_network(checked)  # not marked checked: one rule was left out
    return checked


def check_hparams(hparams: Any, cfg: PPOConfig, shape: tuple[int, ...] = ()) -> Any:
    """`hparams` fit a program of `cfg`: an `HParams` whose every field is an array of
    `shape` (() for one run: inside a vmapped run each run's values are scalars) and of
    its field's kind (bool, integer, number). Values are checked where they are concrete
    (each against its field's rules, update_epochs against cfg.epochs_scan); a traced
    value is not (see `HParams.stack`). Raises ConfigError naming the field; returns
    `hparams`."""
    if not isinstance(hparams, HParams):
        raise ConfigError("hparams", type(hparams).__name__,
                          "must be an HParams (HParams.from_config(cfg), or HParams.stack(cfg, ...) for a sweep)")
    for name in HPARAM_FIELDS:
        f, leaf = FIELDS[name], getattr(hparams, name)
        leaf_shape = tuple(np.shape(leaf))
        if leaf_shape != tuple(shape):
            hint = (": vmap over the run axis, e.g. jax.vmap(train)(keys, hparams), one key per run"
                    if shape == () and len(leaf_shape) == 1 else "")
            raise ConfigError(name, NO_VALUE, f"HParams.{name} has shape {leaf_shape}, not {tuple(shape)}{hint}")
        dtype = np.dtype(leaf.dtype) if hasattr(leaf, "dtype") else np.result_type(leaf)
        ok = {"bool": dtype == np.bool_, "int": np.issubdtype(dtype, np.integer),
              "float": np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer)}[f.type]
        if not ok:
            kind = {"bool": "a bool", "int": "an integer", "float": "a float"}[f.type]
            raise ConfigError(name, NO_VALUE, f"HParams.{name} has dtype {dtype}; it must be {kind} array")
        if isinstance(leaf, jax.core.Tracer) or f.type == "bool":
            continue
        for value in np.ravel(np.asarray(leaf)).tolist():
            if f.null is not None and value == math.inf:
                continue
            if not math.isfinite(value):
                raise _error(f, value, "must be finite")
            _check_hparam(f, value, cfg)
    return hparams


def make_config(values: Mapping[str, Any] | None = None, *, where: str = "config", env: Env | None = None
                ) -> PPOConfig:
    """Build and check a `PPOConfig` from a mapping (YAML contents, overrides, ...): the
    gate every config passes once. `make_train`, `Learner` and `HParams.stack` trust what
    it returns.

    Checks types, ranges, the environment name, its parameters, the action-space specific
    settings and the network; compiles nothing. `env`: the environment already built for
    these values' env and env_params, checked against instead of building one.
    """
    return check_env_and_network(check_fields(values, where=where), env)


def check_fields(values: Mapping[str, Any] | None = None, *, where: str = "config") -> PPOConfig:
    """The first half of `make_config`'s checks: the keys, each value's type and rules, and
    the rules that tie fields together; the environment is not built. The config it
    returns is not yet trusted (`check_env_and_network` completes it)."""
    if values is not None and not isinstance(values, Mapping):
        raise ConfigError(where, type(values).__name__, "must be a mapping of key: value")
    values = dict(values or {})
    for key in values:
        if key not in FIELDS:
            raise _unknown_key(key, where)
    cfg = PPOConfig(**{k: _coerce(FIELDS[k], v) for k, v in values.items()})
    _check(cfg)
    return cfg


def check_env_and_network(cfg: PPOConfig, env: Env | None = None, *, network: bool = True) -> PPOConfig:
    """The second half of `make_config`'s checks, on a config whose fields are checked
    (`check_fields`): the environment and its parameters (`env`: the one built for cfg's env
    and env_params; default: build it), the action-space specific settings, and
    (`network`) a user's network or a CNN torso, imported, built and its output shapes found
    by jax.eval_shape. Returns `cfg`, from now on a trusted config (`is_checked`)."""
    env = check_env_config(cfg, ACTION_KIND_FIELDS, env)
    if network and (cfg.network is not None or cfg.torso is not None):
        make_network(cfg, env)
    object.__setattr__(cfg, _CHECKED, True)  # not a field: a copy made by dataclasses.replace is not trusted
    return cfg


_CHECKED = "_checked"


def is_checked(cfg: PPOConfig) -> bool:
    """Whether `cfg` passed every check of `make_config` (made by it, or by `check_config`)."""
    return getattr(cfg, _CHECKED, False)


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


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing what it would accept silently: a key given twice
    (PyYAML keeps the last) and a key that is not a string (`1: x`, `null: x`, `[a]: x`)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)  # merge keys (<<: *anchor) first, as SafeLoader does
            seen: dict[str, Any] = {}
            for key_node, _ in node.value:
                line, column = key_node.start_mark.line + 1, key_node.start_mark.column + 1
                if not (isinstance(key_node, yaml.ScalarNode) and key_node.tag == "tag:yaml.org,2002:str"):
                    text = key_node.value if isinstance(key_node, yaml.ScalarNode) else f"a {key_node.id}"
                    raise _KeyProblem(str(text), f"line {line}: a key must be a string (quote it if it is "
                                                 f"meant as one)")
                if key_node.value in seen:
                    first_line, first_column = seen[key_node.value]
                    where = (f"line {line}, columns {first_column} and {column}" if first_line == line
                             else f"lines {first_line} and {line}")
                    raise _KeyProblem(key_node.value, f"given twice ({where}); give each key once")
                seen[key_node.value] = line, column
        return super().construct_mapping(node, deep)


class _KeyProblem(Exception):
    def __init__(self, key: str, rule: str):
        super().__init__(key, rule)
        self.key, self.rule = key, rule


def _yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error on one line: where, then what."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    what = " ".join(part for part in (getattr(error, "context", None), getattr(error, "problem", None)) if part)
    what = what or str(error)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return " ".join(f"not valid YAML: {where}{what}".split())


def read_yaml(path: str | Path, field: str = "config") -> dict[str, Any]:
    """A YAML file's top-level mapping (empty file: {}), strictly read (UTF-8, no repeated
    or non-string keys). Every problem is a ConfigError: `field`=path for the file, the
    key's name for a repeated or non-string key."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(field, str(path), "is a folder; give a YAML file")
    if not path.is_file():
        raise ConfigError(field, str(path), "file not found")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(field, str(path), f"is not UTF-8 text (byte {error.object[error.start]:#04x} at "
                                            f"offset {error.start}); a config is a YAML text file") from None
    except OSError as error:
        raise ConfigError(field, str(path), f"cannot be read: {error.strerror}") from None
    try:
        loaded = yaml.load(text, Loader=_StrictLoader)
    except _KeyProblem as problem:
        raise ConfigError(problem.key, NO_VALUE, f"in {path}, {problem.rule}") from None
    except yaml.YAMLError as error:
        raise ConfigError(field, str(path), _yaml_problem(error)) from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(field, str(path), f"must be a YAML mapping of key: value, not a {type(loaded).__name__}")
    return loaded


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> PPOConfig:
    """Read a YAML config (flat keys of `PPOConfig`), apply overrides, check everything."""
    return make_config(config_values(path, overrides), where=str(path) if path else "config")


def config_values(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A YAML config's values with overrides applied, every key known; the values are not
    yet checked (`make_config` checks them)."""
    values: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        loaded = read_yaml(path, "config")
        for key in loaded:
            if key not in FIELDS:
                raise _unknown_key(key, str(path))
        values.update(loaded)
    for key in overrides or {}:
        if key not in FIELDS:
            raise _unknown_key(key, "overrides")
    values.update(overrides or {})
    return values
