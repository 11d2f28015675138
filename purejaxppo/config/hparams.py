"""`HParams`: the traced fields of a config, as a pytree of scalars (or of [runs] arrays in
a sweep), and their checks."""

from __future__ import annotations

import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo import pytree
from purejaxppo.config.checks import _check_hparam, _coerce, _fits_32_bits, _plain, _unknown_key, check_config
from purejaxppo.config.fields import _HPARAM_DTYPES, FIELDS, HPARAM_FIELDS, PPOConfig
from purejaxppo.errors import NO_VALUE, ConfigError, integer


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
        """The config's values, as numpy scalars: known while tracing (inside `jax.jit` a
        jnp array would be a tracer), so the learner leaves out what they switch off."""
        def value(name):
            x = getattr(cfg, name)
            return np.asarray(math.inf if x is None else x, _HPARAM_DTYPES[FIELDS[name].type])

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
            _fits_32_bits(f, value, value)
            _check_hparam(f, value, cfg)
    return hparams
