"""Population-based training's door from Python (`ppo.pbt`): a sweep of a `pbt:` section."""

from __future__ import annotations

from typing import Any, Mapping

from purejaxppo.config import ConfigError, PPOConfig
from purejaxppo.errors import NO_VALUE
from purejaxppo.experiments.kinds.pbt import Pbt
from purejaxppo.experiments.spec import SweepSpec, make_spec
from purejaxppo.experiments.sweep import SweepResult, plan, run_plan


def pbt(cfg: PPOConfig, section: Mapping[str, Any] | None = None, seeds: int | None = None, *,
        spec: SweepSpec | None = None, **options) -> SweepResult:
    """Population-based training of `cfg` (kinds/pbt.py): `section` is its sweep-section entry
    (population, interval, hyperparameters, exploit, explore, fitness), `seeds` the independent
    populations; or `spec`, a whole sweep section with it. The options are `run_plan`'s. The
    result's `lineage` is pbt.csv's rows; `run_sets[0].run_configs` each member's final values."""
    key = Pbt.key
    if spec is None:
        spec = make_spec({key: section, "seeds": 1 if seeds is None else seeds})
    elif section is not None or seeds is not None:
        raise TypeError("give either spec or section/seeds")
    if spec.kind != key:
        raise ConfigError(f"sweep.{key}", NO_VALUE, f"is missing: a PBT run needs a {key}: section")
    return run_plan(plan(cfg, spec), **options)
