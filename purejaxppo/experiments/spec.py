"""A sweep's specification: the `sweep:` section of a sweep file (grid, seeds, random search,
threshold, evaluation episodes, diagnosis thresholds, and a kind's own section: `kinds.KEYED`),
checked; a sweep file read (`load_sweep`), and the command line's --grid options
(`parse_grid_option`)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Mapping

from purejaxppo.config import (FIELDS as _FIELDS, ConfigError, PPOConfig, check_fields, count, parse_override,
                               read_yaml, suggest)
from purejaxppo.errors import NO_VALUE, integer
from purejaxppo.experiments.diagnosis import DIAGNOSIS_DEFAULTS
from purejaxppo.experiments import kinds
from purejaxppo.experiments.search import check_distribution, is_number

SWEEP_KEYS = ("grid", "seeds", "random", "random_seed", "threshold", "eval_episodes", "diagnosis", *kinds.KEYED,
              "rank_by")
# what a sweep's summary ranks its points on (report.sweep.RANKED): the final policy's return on fresh
# episodes, greedy (the default) or sampled, or the training return of the last update
RANK_BY = ("eval", "eval_stochastic", "train")
# what may be swept: any config field but the environment's identity
SWEEPABLE = tuple(name for name in _FIELDS if name != "env")

# what scripts may use (benchmarks/ keeps to it: tests/test_bench_suite.py)
__all__ = ["SweepSpec", "load_sweep", "make_spec"]


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    grid: Mapping[str, list]
    seeds: int = 1
    random: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    random_seed: int = 0
    threshold: float | None = None
    eval_episodes: int = 64
    diagnosis: Mapping[str, float] = dataclasses.field(default_factory=dict)
    rank_by: str = "eval"                  # what the summary ranks on (RANK_BY)
    kind: str | None = None                # the key of a kind's own section (kinds.KEYED), or None
    section: Mapping[str, Any] | None = None  # ... that section, checked by its kind

    def to_dict(self) -> dict[str, Any]:
        """As plain YAML/JSON values (it reloads with make_spec): every kind's key, None but its own."""
        values = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in dataclasses.asdict(self).items()
                  if k not in ("kind", "section")}
        rank_by = values.pop("rank_by")
        return {**values, **{key: self.section if key == self.kind else None for key in kinds.KEYED},
                "rank_by": rank_by}

    @classmethod
    def with_defaults(cls, saved: Mapping[str, Any]) -> dict[str, Any]:
        """A saved spec (a checkpoint's, a sweep.yaml's section) with every key it lacks at its
        default, as make_spec gives it: a key added since the run started had its default there."""
        defaults = cls(grid={}, rank_by=default_rank_by(saved.get("eval_episodes", cls.eval_episodes))).to_dict()
        return {**defaults, **saved}


def default_rank_by(eval_episodes: int) -> str:
    """What a sweep ranks on unless told: the evaluation, where there is one."""
    return "eval" if eval_episodes else "train"


def _check_key(key: str, where: str) -> None:
    if key not in _FIELDS:
        raise ConfigError(f"{where}.{key}", NO_VALUE, f"not a config key, so it cannot be swept; {suggest(key)}")
    if key not in SWEEPABLE:
        raise ConfigError(f"{where}.{key}", NO_VALUE, "cannot be swept (one sweep is one environment)")


def check_seeds(field: str, first_seed, seeds: int = 1) -> None:
    """The seed-range rule: seeds first_seed, ..., first_seed + seeds - 1 each make a key of 32
    bits, so first_seed is an integer in [0, 2**32 - seeds] (2**32 would silently be seed 0 again)."""
    if isinstance(first_seed, bool) or not isinstance(first_seed, int) or not 0 <= first_seed <= 2**32 - seeds:
        raise ConfigError(field, first_seed, f"must be an integer in [0, 2**32 - seeds] = [0, {2**32 - seeds}]")


def _distinct(field: str, values: list) -> None:
    """A grid's values, each once: a value given twice would be the same runs again. Each is
    looked up among those before it by hash (`_hashable`), so a list of any length answers at once."""
    seen = set()
    for value in values:
        key = _hashable(value)
        if key in seen:
            raise ConfigError(field, values, f"gives {value!r} twice; give each value once")
        seen.add(key)


def _hashable(value: Any) -> Any:
    """A YAML value as a hashable one equal where the value is equal ([64, 64] -> (64, 64))."""
    if isinstance(value, (str, int, float, type(None))):
        return value
    if isinstance(value, Mapping):
        return frozenset((key, _hashable(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(item) for item in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(_hashable(item) for item in value)
    return value


def make_spec(section: Mapping[str, Any] | None = None, *, grid=None, seeds=None) -> SweepSpec:
    """Check a `sweep:` section (and CLI/API additions) and return the spec. A section
    key of the wrong shape is a ConfigError naming `sweep.<key>`; `grid`/`seeds` given
    here are named as such."""
    if section is not None and not isinstance(section, Mapping):
        raise ConfigError("sweep", section, "must be a mapping (grid:, seeds:, ...)")
    section = dict(section or {})
    for key in section:
        if key not in SWEEP_KEYS:
            raise ConfigError(f"sweep.{key}", section[key], f"unknown; sweep keys are {', '.join(SWEEP_KEYS)}")
    for key in ("grid", "random", "diagnosis"):
        if section.get(key) is not None and not isinstance(section[key], Mapping):
            example = {"grid": "grid: {clip_eps: [0.1, 0.2]}", "random": "random: {trials: 4, lr: {loguniform: "
                       "[1.0e-4, 1.0e-3]}}", "diagnosis": "diagnosis: {under_used_below: 0.02}"}[key]
            raise ConfigError(f"sweep.{key}", section[key], f"must be a mapping, e.g. {example}")
    if grid is not None and not isinstance(grid, Mapping):
        raise ConfigError("grid", grid, "must be a mapping of key to a list of values")
    if section.get("threshold") is not None and not is_number(section["threshold"]):
        raise ConfigError("sweep.threshold", section["threshold"], "must be a number")
    full_grid = dict(section.get("grid") or {})
    full_grid.update(grid or {})
    for key, values in full_grid.items():
        _check_key(key, "grid")
        if not isinstance(values, (list, tuple)) or not values:
            raise ConfigError(f"grid.{key}", values, "must be a non-empty list of values")
        _distinct(f"grid.{key}", list(values))
    n_seeds = count("seeds" if seeds is not None else "sweep.seeds",
                    section.get("seeds", 1) if seeds is None else seeds, 1)
    random = dict(section.get("random") or {})
    trials = random.pop("trials", None)
    if random or trials is not None:
        if trials is None:
            raise ConfigError("random.trials", NO_VALUE, "is missing: give the number of random points "
                              "(an integer of at least 1)")
        trials = count("random.trials", trials, 1)
        if not random:
            raise ConfigError("random", NO_VALUE, "names no key to draw")
        for key, dist in random.items():
            _check_key(key, "random")
            if key in full_grid:
                raise ConfigError(f"random.{key}", dist, "is also in the grid; sweep it one way")
            random[key] = check_distribution(f"random.{key}", dist)
        random["trials"] = trials
    # seeds alone are a valid (one-point) sweep; an explicitly empty grid is not
    if not full_grid and (("grid" in section and not section["grid"]) or (grid is not None and not grid)):
        raise ConfigError("grid", {}, "is empty: give at least one key with a list of values, or leave grid: out "
                          "(a sweep of seeds alone, or of random: points alone)")
    threshold = section.get("threshold")
    if threshold is not None and not math.isfinite(threshold):
        raise ConfigError("sweep.threshold", threshold, "must be finite")
    random_seed = integer("sweep.random_seed", section.get("random_seed", 0), 0)
    if random_seed >= 2**32:
        raise ConfigError("sweep.random_seed", random_seed, "must be below 2**32 (it makes a key of 32 bits)")
    eval_episodes = count("sweep.eval_episodes", section.get("eval_episodes", 64), 0)
    diagnosis = dict(section.get("diagnosis") or {})
    for key, value in diagnosis.items():
        if key not in DIAGNOSIS_DEFAULTS:
            raise ConfigError(f"diagnosis.{key}", value, f"unknown; known: {', '.join(DIAGNOSIS_DEFAULTS)}")
        if key == "return_cap":  # a return: any finite number
            if not is_number(value) or not math.isfinite(value):
                raise ConfigError("diagnosis.return_cap", value, "must be a finite number (the highest return "
                                  "the environment allows)")
        elif not is_number(value) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"diagnosis.{key}", value, "must be a non-negative number")
    rank_by = section.get("rank_by", default_rank_by(eval_episodes))
    if rank_by not in RANK_BY:
        raise ConfigError("sweep.rank_by", rank_by, f"must be one of {', '.join(RANK_BY)} (eval: the final policy's "
                          "greedy return on fresh episodes; train: the return of the last update)")
    if rank_by != "train" and eval_episodes == 0:
        raise ConfigError("sweep.rank_by", rank_by, "ranks on the final policy's evaluation, but eval_episodes is 0: "
                          "give eval_episodes of at least 1, or rank_by: train")
    given = [key for key in kinds.KEYED if section.get(key) is not None]
    if len(given) > 1:
        raise ConfigError(f"sweep.{given[1]}", NO_VALUE, f"is given with {given[0]}:; give one of them")
    kind = given[0] if given else None
    checked = kinds.KEYED[kind].parse(section[kind], full_grid, random) if kind else None
    return SweepSpec(full_grid, n_seeds, random, random_seed, threshold, eval_episodes, diagnosis, rank_by, kind,
                     checked)


def load_sweep(path: str | Path, overrides: Mapping[str, Any] | None = None, *, grid=None,
               seeds=None) -> tuple[PPOConfig, SweepSpec]:
    """A sweep file -> (base config, spec); `grid` adds or replaces axes, `seeds` replaces
    the file's. The base's fields are checked here (`config.check_fields`); its environment
    and every point's config by `plan` (which `sweep` calls), before anything is created
    or compiled."""
    path = Path(path)
    loaded = read_yaml(path, "sweep file")
    section = loaded.pop("sweep", None)
    if section is None:
        raise ConfigError("sweep", NO_VALUE, f"{path} has no sweep: section")
    values = {**loaded, **(overrides or {})}
    if not isinstance(section, Mapping):
        raise ConfigError("sweep", section, "must be a mapping (grid:, seeds:, ...)")
    return check_fields(values, where=str(path)), make_spec(section, grid=grid, seeds=seeds)


def parse_grid_option(text: str) -> tuple[str, list]:
    """`key=v1,v2,...` from the command line; each value read as YAML."""
    if "=" not in text:
        raise ConfigError("--grid", text, "must look like key=v1,v2,...")
    key, raw = parse_override(text)
    if not key:
        raise ConfigError("--grid", text, "names no key: it must look like key=v1,v2,...")
    if raw is None:
        raise ConfigError("--grid", text, "gives no values: it must look like key=v1,v2,...")
    if isinstance(raw, str):
        values = [parse_override(f"{key}={item}")[1] for item in raw.split(",")]
    elif isinstance(raw, list):
        values = raw
    else:
        values = [raw]
    return key, values
