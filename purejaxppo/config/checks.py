"""Building and checking a config: `make_config`, `check_config` (the door for one built
another way), the names other code uses for our keys, coercion of each value to
its type, the rules of each field and those that tie fields together."""

from __future__ import annotations

import difflib
import math
import re
import types
from typing import Any, Mapping

import jax
import numpy as np

from purejaxppo.config.fields import ACTION_KIND_FIELDS, FIELDS, Field, PPOConfig
from purejaxppo.envs import Env, check_env_config
from purejaxppo.errors import NO_VALUE, ConfigError, integer
from purejaxppo.networks import make_network

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


# Integer fields that never reach JAX as they are (total_timesteps is divided into updates on the
# host, and the updates are bounded): every other integer is a size or a count JAX holds in 32 bits.
_HOST_INTEGERS = ("total_timesteps",)
# every float field is a float32 in JAX: finite, at most its largest, and (XLA flushes subnormals to
# zero) 0 or at least its smallest normal size
_FLOAT32_MAX, _FLOAT32_TINY = float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny)


def _fits_32_bits(f: Field, number: int | float, value: Any) -> None:
    """`number` (a number read from the user's `value`) is one the 32 bits JAX holds `f` in can
    hold: else a ConfigError naming `value` as the user gave it (1e39, not the inf it would become)."""
    if f.type == "int":
        if f.name not in _HOST_INTEGERS and not -2**31 <= number < 2**31:
            raise _error(f, value, "must fit in 32 bits (below 2**31)")
    elif isinstance(number, float) and not math.isfinite(number):
        raise _error(f, value, "must be finite")
    elif abs(number) > _FLOAT32_MAX:
        raise _error(f, value, f"is too large for float32, which JAX computes in (it would be inf): at most "
                               f"{_FLOAT32_MAX:.4g} in size")
    elif number and abs(number) < _FLOAT32_TINY:
        raise _error(f, value, f"is too small for float32, which JAX computes in (it would be 0): give 0 or a "
                               f"size of at least {_FLOAT32_TINY:.4g}")


def count(field: str, value: Any, at_least: int = 1, why: str = "") -> int:
    """A count of runs, members, episodes, ... (`errors.integer`'s rule and `why`), below 2**31: JAX
    counts it in 32 bits (an index, a shape). Else a ConfigError naming `field`."""
    value = integer(field, value, at_least, why)
    if value >= 2**31:
        raise ConfigError(field, value, "must be below 2**31 (it is counted in 32 bits)")
    return value


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
        _fits_32_bits(f, number, value)
        return number
    if f.type == "float":
        number = _number(value)
        if number is None:
            raise _error(f, value, "must be a number")
        _fits_32_bits(f, number, value)
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
        if max(value) >= 2**31:
            raise _error(f, value, "must hold sizes that fit in 32 bits (below 2**31)")
        return tuple(value)
    if f.type == "list of names":
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
            raise _error(f, value, "must be a list of names (strings), e.g. [distance, success]")
        if len(set(value)) != len(value):
            raise _error(f, value, "names a key twice")
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
    if cfg.batch_size >= 2**31:
        raise ConfigError("num_steps", cfg.num_steps, f"makes a batch of num_envs*num_steps={cfg.num_envs}*"
                          f"{cfg.num_steps}={cfg.batch_size} steps; at most 2**31-1 (an update indexes and counts "
                          f"its steps in 32 bits): lower num_envs or num_steps")
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
    if cfg.network is not None and cfg.init != "orthogonal":
        raise ConfigError("init", cfg.init, "only applies to the built-in networks; network is set (your "
                          "factory initialises its own layers)")
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
    # a setting that another makes void (target_kl with one epoch is not refused: a sweep over
    # update_epochs with a target KL is a natural one, its one-epoch points simply never stop early)
    _check_hparam(FIELDS["lr_warmup_updates"], cfg.lr_warmup_updates, cfg)  # its warm-up within the run


def _check_hparam(f: Field, value: Any, cfg: PPOConfig) -> Any:
    """One traced field's coerced value (of one run) against its rules and `cfg`'s scan."""
    for rule in f.rules:
        if value is not None and not rule.holds(value):
            raise _error(f, value, f"must be {rule.text}")
    if f.name == "update_epochs" and value > cfg.epochs_scan:
        raise ConfigError(f.name, value, f"must not exceed the epochs the program scans, cfg.epochs_scan="
                          f"{cfg.epochs_scan} (max_epochs, or update_epochs when it is null); a larger one would "
                          f"be capped silently")
    if f.name == "lr_warmup_updates" and value >= cfg.num_updates:
        raise ConfigError(f.name, value, f"must be below the run's num_updates={cfg.num_updates} (total_timesteps "
                          f"// (num_envs*num_steps) = {cfg.total_timesteps} // {cfg.batch_size}): a warm-up as "
                          f"long as the run never reaches lr, and anneal_lr never applies; lower "
                          f"lr_warmup_updates, or raise total_timesteps")
    return value


def check_config(cfg: PPOConfig, *, env: bool = True, update_epochs: bool = True) -> PPOConfig:
    """The public door for a config built another way (e.g. `PPOConfig(...)` by hand, or
    `dataclasses.replace`): `make_config`'s checks, every field's type and rules, the rules
    that tie fields together, and (`env`) the environment, its parameters and the network.
    Returns the checked config, each value in its canonical type; raises ConfigError naming
    the field. `env=False` leaves out the environment and the network (`gate.gate` checks them
    as it builds them, once); `update_epochs=False` leaves out "update_epochs <= max_epochs"
    (a learner run with HParams reads update_epochs from them: `Learner.run` checks it there)."""
    if not isinstance(cfg, PPOConfig):
        raise ConfigError("config", type(cfg).__name__, "must be a PPOConfig (build one with make_config)")
    checked = PPOConfig(**{name: _coerce(f, getattr(cfg, name)) for name, f in FIELDS.items()})
    _check(checked, update_epochs)
    return check_env_and_network(checked) if env and update_epochs else checked


def make_config(values: Mapping[str, Any] | None = None, *, where: str = "config", env: Env | None = None
                ) -> PPOConfig:
    """Build and check a `PPOConfig` from a mapping (YAML contents, overrides, ...).
    (`gate.gate` checks the same and hands on the environment and agent it built: what
    `Learner`, `make_train` and `make_policy` take without checking again.)

    Checks types, ranges, the environment name, its parameters, the action-space specific
    settings and the network; compiles nothing. `env`: the environment already built for
    these values' env and env_params, checked against instead of building one.
    """
    return check_env_and_network(check_fields(values, where=where), env)


def check_fields(values: Mapping[str, Any] | None = None, *, where: str = "config") -> PPOConfig:
    """The first half of `make_config`'s checks: the keys, each value's type and rules, and
    the rules that tie fields together; the environment is not built (`check_env_and_network`
    completes the checks)."""
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
    by jax.eval_shape. Returns `cfg`."""
    env = check_env_config(cfg, ACTION_KIND_FIELDS, env)
    if network and (cfg.network is not None or cfg.torso is not None):
        make_network(cfg, env)
    return cfg
