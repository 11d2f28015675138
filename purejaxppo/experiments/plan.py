"""A sweep planned before anything is created or compiled: its kind's points (`kinds`: grid x
random trials, or a kind's own), every point's config checked, the points grouped by
their static fields (one compiled program per group), each group through the gate once (one
environment, one network check), its run sets (the epochs each scans), and the memory bound."""

from __future__ import annotations

import dataclasses

from purejaxppo.config import FIELDS as _FIELDS, STATIC_FIELDS, ConfigError, PPOConfig, check_fields
from purejaxppo.experiments import kinds
from purejaxppo.experiments.memory import KEY_AND_HPARAMS, RunSize, check_memory, run_size
from purejaxppo.experiments.spec import SweepSpec
from purejaxppo.gate import Bundle, gate

# what scripts may use (benchmarks/ keeps to it: tests/test_bench_suite.py)
__all__ = ["Plan", "plan"]


def expand(spec: SweepSpec) -> list[dict]:
    """The swept points of `spec`'s kind (each a dict of overridden keys): `Kind.points`."""
    return kinds.of(spec).points(spec)


@dataclasses.dataclass
class Group:
    """Runs sharing one compiled program. Under vmap a masked epoch is computed and then
    discarded, so its points are split into run sets by the epochs they scan (`epochs_scan`:
    their update_epochs, or max_epochs when the config sets it), each scanning only its
    own, all in the one program."""

    config: PPOConfig                  # the group's static config; max_epochs: its longest run set
    point_indices: list[int]
    run_sets: dict[int, list[int]] = dataclasses.field(default_factory=dict)  # epochs scanned -> points
    # epochs -> the set's program's checked bundle: the group's one environment and network, its config
    set_bundles: dict[int, Bundle] = dataclasses.field(default_factory=dict)

    @property
    def env(self):
        """The group's one environment (every run set's)."""
        return next(iter(self.set_bundles.values())).env


@dataclasses.dataclass
class Plan:
    """A sweep checked and grouped, nothing compiled: `plan`'s result, run by `run_plan`."""

    base: PPOConfig
    spec: SweepSpec
    kind: kinds.Kind                   # what runs (its points, its schedule, its results)
    points: list[dict]                 # swept values of each point
    configs: list[PPOConfig]           # each point's checked config
    groups: list[Group]

    @property
    def runs(self) -> int:
        return len(self.points) * self.spec.seeds


def plan(base: PPOConfig, spec: SweepSpec, kind: kinds.Kind | None = None) -> Plan:
    """`kind`'s points of `spec` (default: `kinds.of(spec)`), every point's config, checked, and
    the static groups: the sweep's gate, before anything is created or compiled. The sweep's
    size is checked against the memory first, before any point is drawn (`check_memory`, over
    the kind's factors of the number of runs). The fields of every point are checked; then
    each group passes the gate once (`gate.gate`: its environment built, its network checked;
    a point's env_params and network are static: one group, one environment, one network).
    Last, the memory again, each group's runs of their own size."""
    bundles: dict[tuple, Bundle] = {}  # a group's static fields -> its bundle, made once
    sizes: dict[tuple, RunSize] = {}  # ... and the size of each of its runs

    def bundle_of(cfg: PPOConfig) -> Bundle:
        if _static_key(cfg) not in bundles:
            bundles[_static_key(cfg)] = gate(cfg, update_epochs=False)
        return bundles[_static_key(cfg)]

    def size_of(cfg: PPOConfig) -> RunSize:
        if _static_key(cfg) not in sizes:
            sizes[_static_key(cfg)] = run_size(bundle_of(cfg))
        return sizes[_static_key(cfg)]

    kind = kinds.of(spec) if kind is None else kind
    factors = kind.factors(spec)
    # before any point is drawn: where every swept key is traced, every run is of the base's size;
    # else (static keys make groups of their own) of what any run holds
    traced = all(_FIELDS[key].traced for key in kind.swept(spec))
    check_memory(factors, spec.eval_episodes, size_of(base) if traced else RunSize(KEY_AND_HPARAMS, 0, 0))
    points = kind.points(spec)
    base_values = base.to_dict()

    def in_point(check, point):
        try:
            return check()
        except ConfigError as error:
            if not point:  # the base alone (a train run): nothing to point at
                raise
            raise ConfigError(error.field, error.value, f"{error.rule} (in sweep point {point})") from None

    configs = [base if not point else in_point(lambda: check_fields({**base_values, **point}), point)
               for point in points]
    groups: dict[tuple, Group] = {}
    for i, cfg in enumerate(configs):
        groups.setdefault(_static_key(cfg), Group(cfg, [])).point_indices.append(i)
    for group in groups.values():
        bundle = in_point(lambda: bundle_of(group.config), points[group.point_indices[0]])
        for i in group.point_indices:
            group.run_sets.setdefault(configs[i].epochs_scan, []).append(i)
        # a run set's program: its first point's config scanning the set's epochs (every point of
        # the set has update_epochs within them)
        group.set_bundles = {epochs: bundle.for_config(dataclasses.replace(configs[members[0]], max_epochs=epochs))
                             for epochs, members in group.run_sets.items()}
        group.config = dataclasses.replace(group.config, max_epochs=max(group.run_sets))
    kind.check_plan(spec, configs)
    smallest = RunSize(*map(min, zip(*(size_of(group.config) for group in groups.values()))))
    check_memory(factors, spec.eval_episodes, smallest)  # a bound from below for every run, of any group
    return Plan(base, spec, kind, points, configs, list(groups.values()))


def _static_key(cfg: PPOConfig) -> tuple:
    """What the configs of one group share: every static field but max_epochs (its run sets' own)."""
    return tuple((f, repr(getattr(cfg, f))) for f in STATIC_FIELDS if f != "max_epochs")


def run_index(point: int, seed: int, seeds: int) -> int:
    """Where run (point, seed) stands in a sweep's list of runs: points in order, seeds within."""
    return point * seeds + seed
