"""Sweeps: seeds × hyperparameter grids (and random search) as one program per static group.

A sweep file is an ordinary config (flat `PPOConfig` keys) plus a `sweep:` section:

    sweep:
      grid: {clip_eps: [0.05, 0.1, 0.2, 0.4], update_epochs: [1, 5, 10]}
      seeds: 5
      random:                       # optional: `trials` random points, each x every grid point
        trials: 4
        lr: {loguniform: [1.0e-4, 1.0e-3]}
        ent_coef: {uniform: [0.0, 0.02]}
        activation: {choice: [tanh, relu]}
      random_seed: 0                # for drawing the random points (default 0)
      threshold: 475                # optional: count seeds whose final return reaches it
      eval_episodes: 64             # final policy on fresh episodes, greedy and sampled (0: off)
      diagnosis: {under_used_below: 0.02, over_used_above: 0.2, over_used_by_epoch: 3}
      pbt: {...}                    # in place of grid/random: population-based training (experiments.pbt)

Every run's config is checked before anything compiles, and the sweep's size against the
memory before any point is drawn (`check_memory`). Runs whose static fields
(network, env, batch shape, ...) agree form a group: one compile per group, its runs
(points × seeds) flattened to one run axis and sharded over every device. Under vmap a
masked epoch would be computed and discarded, so inside a group the runs are split into
run sets by `update_epochs` (unless `max_epochs` is set): each run set scans only its own
epochs, all run sets in the same single compiled program.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import itertools
import math
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

import jax
import numpy as np

from purejaxppo.config import (FIELDS as _FIELDS, HPARAM_FIELDS, STATIC_FIELDS, ConfigError, HParams, PPOConfig,
                               check_env_and_network, check_fields, count, parse_override, read_yaml,
                               suggest)
from purejaxppo.envs import Env, make_env
from purejaxppo.errors import NO_VALUE, ResourceError, integer
from purejaxppo.experiments.checkpoint import Checkpoints
from purejaxppo.experiments.diagnosis import DIAGNOSIS_DEFAULTS
from purejaxppo.experiments.parallel import RunBytes, memory_shortfall, tree_bytes
from purejaxppo.experiments.pbt import Population, check_interval, initial_points, make_pbt
from purejaxppo.experiments.runs import RunSet, Timings, execute, finite_runs
from purejaxppo.experiments.search import check_distribution, draw, is_number
from purejaxppo.train import EVAL_MODES, Learner, TrainResult

SWEEP_KEYS = ("grid", "seeds", "random", "random_seed", "threshold", "eval_episodes", "diagnosis", "pbt")
# what may be swept: any config field but the environment's identity
SWEEPABLE = tuple(name for name in _FIELDS if name != "env")


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    grid: Mapping[str, list]
    seeds: int = 1
    random: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    random_seed: int = 0
    threshold: float | None = None
    eval_episodes: int = 64
    diagnosis: Mapping[str, float] = dataclasses.field(default_factory=dict)
    pbt: Mapping[str, Any] | None = None   # population-based training (experiments.pbt): its checked section

    def to_dict(self) -> dict[str, Any]:
        """As plain YAML/JSON values (it reloads with make_spec)."""
        return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in dataclasses.asdict(self).items()}


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
    """A grid's values, each once: a value given twice would be the same runs again."""
    for i, value in enumerate(values):
        if value in values[:i]:
            raise ConfigError(field, values, f"gives {value!r} twice; give each value once")


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
        raise ConfigError("grid", {}, "is empty: give at least one key with a list of values")
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
        if not is_number(value) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"diagnosis.{key}", value, "must be a non-negative number")
    pbt = None
    if section.get("pbt") is not None:
        pbt = make_pbt(section["pbt"])
        if full_grid or random:
            raise ConfigError("sweep.pbt", NO_VALUE, f"is given with {'grid:' if full_grid else 'random:'}; PBT draws "
                              "its own population (pbt: hyperparameters:): give one of them")
    return SweepSpec(full_grid, n_seeds, random, random_seed, threshold, eval_episodes, diagnosis, pbt)


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


def _draw(spec: SweepSpec) -> list[dict]:
    if not spec.random:
        return [{}]
    return draw({k: v for k, v in spec.random.items() if k != "trials"}, spec.random["trials"], spec.random_seed)


def expand(spec: SweepSpec) -> list[dict]:
    """The swept points: grid product × random trials (each a dict of overridden keys); a
    PBT sweep's: its members' initial hyperparameters."""
    if spec.pbt is not None:
        return initial_points(spec.pbt, spec.random_seed)
    keys = list(spec.grid)
    grid_points = [dict(zip(keys, combo)) for combo in itertools.product(*(spec.grid[k] for k in keys))]
    return [{**g, **r} for g in grid_points for r in _draw(spec)]


@dataclasses.dataclass
class Group:
    """Runs sharing one compiled program. Under vmap a masked epoch is computed and then
    discarded, so its points are split into run sets by the epochs they scan (`epochs_scan`:
    their update_epochs, or max_epochs when the config sets it), each scanning only its
    own, all in the one program."""

    config: PPOConfig                  # the group's static config; max_epochs: its longest run set
    point_indices: list[int]
    run_sets: dict[int, list[int]] = dataclasses.field(default_factory=dict)  # epochs scanned -> points
    set_configs: dict[int, PPOConfig] = dataclasses.field(default_factory=dict)  # epochs -> the set's program's
    env: Env | None = None             # built once for the group, handed to its learners


@dataclasses.dataclass
class Plan:
    """A sweep checked and grouped, nothing compiled: `plan`'s result, run by `run_plan`."""

    base: PPOConfig
    spec: SweepSpec
    points: list[dict]                 # swept values of each point
    configs: list[PPOConfig]           # each point's checked config
    groups: list[Group]

    @property
    def runs(self) -> int:
        return len(self.points) * self.spec.seeds


def plan(base: PPOConfig, spec: SweepSpec) -> Plan:
    """Every point's config, checked, and the static groups: the sweep's gate, before
    anything is created or compiled. The sweep's size is checked against the memory first,
    before any point is drawn (`check_memory`). The fields of every point are checked; then
    each group's environment is built once (a point's env_params is static: one group, one
    environment), and every point's config is checked against it, the network once per
    group (it depends on static fields only). Last, the memory again, each group's runs of
    their own size."""
    envs: dict[tuple, Env] = {}  # a group's static fields -> its environment, built once
    sizes: dict[tuple, RunSize] = {}  # ... and the size of each of its runs

    def env_of(cfg: PPOConfig) -> Env:
        if _static_key(cfg) not in envs:
            envs[_static_key(cfg)] = make_env(cfg)
        return envs[_static_key(cfg)]

    def size_of(cfg: PPOConfig) -> RunSize:
        if _static_key(cfg) not in sizes:
            sizes[_static_key(cfg)] = run_size(cfg, env_of(cfg))
        return sizes[_static_key(cfg)]

    # before any point is drawn: where every swept key is traced (a PBT's always), every run is
    # of the base's size; else (static keys make groups of their own) of what any run holds
    swept = [*spec.grid, *spec.random, *(spec.pbt["hyperparameters"] if spec.pbt is not None else ())]
    traced = all(_FIELDS[key].traced for key in swept if key != "trials")
    check_memory(spec, size_of(base) if traced else RunSize(_KEY_AND_HPARAMS, 0, 0))
    points = expand(spec)
    base_values = base.to_dict()

    def in_point(check, point):
        try:
            return check()
        except ConfigError as error:
            if not point:  # the base alone (a train run): nothing to point at
                raise
            raise ConfigError(error.field, error.value, f"{error.rule} (in sweep point {point})") from None

    configs = [in_point(lambda: check_fields({**base_values, **point}), point) for point in points]
    groups: dict[tuple, Group] = {}
    for i, cfg in enumerate(configs):
        groups.setdefault(_static_key(cfg), Group(cfg, [])).point_indices.append(i)
    for group in groups.values():
        first = group.point_indices[0]
        group.env = in_point(lambda: env_of(group.config), points[first])
        for i in group.point_indices:
            in_point(lambda: check_env_and_network(configs[i], group.env, network=i == first), points[i])
            group.run_sets.setdefault(configs[i].epochs_scan, []).append(i)
        # a run set's program: its first point's config scanning the set's epochs (every point of
        # the set has update_epochs within them), as checked as the points' own
        group.set_configs = {epochs: check_env_and_network(dataclasses.replace(configs[members[0]], max_epochs=epochs),
                                                           group.env, network=False)
                             for epochs, members in group.run_sets.items()}
        group.config = dataclasses.replace(group.config, max_epochs=max(group.run_sets))
    if spec.pbt is not None:  # every member explores traced keys only: one group, one run set
        check_interval(spec.pbt, configs[0].num_updates)
    smallest = RunSize(*map(min, zip(*(size_of(group.config) for group in groups.values()))))
    check_memory(spec, smallest)  # a bound from below for every run, of any group
    return Plan(base, spec, points, configs, list(groups.values()))


def _static_key(cfg: PPOConfig) -> tuple:
    """What the configs of one group share: every static field but max_epochs (its run sets' own)."""
    return tuple((f, repr(getattr(cfg, f))) for f in STATIC_FIELDS if f != "max_epochs")


# --------------------------------------------------------------------------------------
# memory: the sweep's size, before anything is drawn or compiled
# --------------------------------------------------------------------------------------
# what a run holds whatever its config: its key (two uint32) and its hyperparameters (32 bits each)
_KEY_AND_HPARAMS = 8 + 4 * len(HPARAM_FIELDS)
# the options that set a sweep's number of runs, or what each run evaluates: where each is given
_OPTIONS = {"seeds": "--seeds, sweep.seeds", "pbt.population": "sweep.pbt.population",
            "random.trials": "sweep.random.trials", "grid": "points of sweep.grid and --grid",
            "eval_episodes": "--eval-episodes, sweep.eval_episodes"}


class RunSize(NamedTuple):
    """One run's bytes as the memory check counts them (`run_size`)."""

    state: int        # its key, hyperparameters and learner state
    metrics: int      # its metrics of every update
    environment: int  # one environment's state and observation: an evaluation episode's, while it runs

    def need(self, episodes: int) -> RunBytes:
        """With `episodes` evaluation episodes: their returns kept (at least a float32 per mode),
        their environments computed at once."""
        return RunBytes(self.state, self.metrics + episodes * 4 * len(EVAL_MODES), episodes * self.environment)


def run_size(cfg: PPOConfig, env: Env) -> RunSize:
    """A run of `cfg`'s static fields traced by `jax.eval_shape` (nothing compiles): its learner
    state, and one update's metrics times its updates, their epochs counted once (a bound from
    below whatever epochs it runs: every run of a group has the same size)."""
    learner = Learner(dataclasses.replace(cfg, max_epochs=1, update_epochs=1), env=env)
    state = jax.eval_shape(learner.init, jax.ShapeDtypeStruct((2,), np.uint32))
    update = jax.eval_shape(lambda s: learner.run(s, None, 1)[1], state)
    return RunSize(_KEY_AND_HPARAMS + tree_bytes(state), cfg.num_updates * tree_bytes(update),
                   (tree_bytes(state.env_state) + tree_bytes(state.obs)) // cfg.num_envs)


def _sizes(spec: SweepSpec) -> dict[str, int]:
    """The options whose product is the sweep's number of runs, counted without drawing a point."""
    if spec.pbt is not None:
        return {"pbt.population": spec.pbt["population"], "seeds": spec.seeds}
    return {"grid": math.prod(len(values) for values in spec.grid.values()),
            "random.trials": spec.random.get("trials", 1), "seeds": spec.seeds}


def check_memory(spec: SweepSpec, size: RunSize) -> None:
    """Refuse a sweep whose runs, each of `size` at least, cannot fit in memory however they are
    chunked (`parallel.memory_shortfall`): a ResourceError naming the option to lower (of the
    factors of the number of runs, seeds, pbt.population, random.trials and the grid's points,
    and the evaluation's episodes: the one that needs the smallest cut) and the largest value of
    it that could fit; "runs" where one run alone does not fit."""
    sizes = _sizes(spec)
    short = memory_shortfall(size.need(spec.eval_episodes), math.prod(sizes.values()))
    if short is None:
        return
    if memory_shortfall(size.need(0), 1) is not None:
        raise ResourceError("runs", math.prod(sizes.values()), f"{short}; one run alone does not fit: use fewer "
                            f"environments (num_envs), steps (num_steps) or updates, or a smaller network")
    options = {**sizes, "eval_episodes": spec.eval_episodes}

    def fits(name: str, value: int) -> bool:
        changed = {**options, name: value}
        return memory_shortfall(size.need(changed.pop("eval_episodes")), math.prod(changed.values())) is None

    most = {name: _largest(lambda n, name=name: fits(name, n), value)
            for name, value in options.items() if value > (0 if name == "eval_episodes" else 1)}
    name = max(most, key=lambda name: most[name] / options[name])
    raise ResourceError(name, options[name], f"{short}; at most {most[name]} could fit ({_OPTIONS[name]})")


def _largest(fits: Callable[[int], bool], above: int) -> int:
    """The largest n below `above` that `fits` (true up to some n, false beyond it; 0 if none)."""
    low, high = 0, above
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def run_index(point: int, seed: int, seeds: int) -> int:
    """Where run (point, seed) stands in a sweep's list of runs: points in order, seeds within."""
    return point * seeds + seed


@dataclasses.dataclass
class SweepResult:
    """Every run of a sweep as it ran: each run set's results stacked over its runs (a leading
    run axis), kept so from the run to the tables. `point(i)` (a point's runs) and `run(k)`
    (one run) are slices of them, and so are `states[k]`, `metrics[k]`, `evaluation[k]`."""

    points: list[dict]                 # swept values of each point
    configs: list[PPOConfig]           # each point's checked config
    runs: list[dict]                   # per run: {"point": i, "seed": s, **swept values}
    run_sets: list[RunSet]             # the runs as they ran: one run set per compiled epoch count
    outputs: dict[str, TrainResult]    # run set name -> its runs' results, stacked (numpy leaves)
    diverged: np.ndarray               # [runs] NaN or Inf in the losses or final parameters
    compiles: int
    compile_seconds: float
    run_seconds: float
    spec: SweepSpec
    base: PPOConfig
    timings: Timings
    population: Population | None = None  # a PBT sweep's: its lineage and step timings

    @property
    def lineage(self) -> list[dict] | None:
        """A PBT sweep's lineage (pbt.csv): one row per run per interval; None for other sweeps."""
        return None if self.population is None else self.population.lineage

    def __post_init__(self):
        # run k -> (its run set's name, its place on that set's run axis)
        self._where = {k: (s.name, j) for s in self.run_sets for j, k in enumerate(s.runs)}

    def point_runs(self, point: int) -> range:
        """The indices of point `point`'s runs (one per seed) in `runs`, `diverged`, ..."""
        return range(point * self.spec.seeds, (point + 1) * self.spec.seeds)

    def point(self, point: int) -> TrainResult:
        """Point `point`'s runs, one per seed in seed order, stacked: a slice of the run set that
        ran them (a point's seeds are neighbours on its run axis)."""
        name, j = self._where[self.point_runs(point)[0]]
        return jax.tree.map(lambda x: x[j:j + self.spec.seeds], self.outputs[name])

    def run(self, k: int) -> TrainResult:
        """Run k alone (no run axis): what `make_train` of its config returns for its key."""
        if not -len(self.runs) <= k < len(self.runs):
            raise IndexError(f"run {k} of a sweep of {len(self.runs)} runs")
        name, j = self._where[k % len(self.runs)]
        return jax.tree.map(lambda x: x[j], self.outputs[name])

    @property
    def states(self) -> _PerRun:
        """states[k]: run k's final LearnerState."""
        return _PerRun(self, "state")

    @property
    def metrics(self) -> _PerRun:
        """metrics[k]: run k's metrics, name -> [num_updates, ...]."""
        return _PerRun(self, "metrics")

    @property
    def evaluation(self) -> _PerRun:
        """evaluation[k]: run k's final policy on fresh episodes, {"deterministic", "stochastic"} -> [episodes]."""
        return _PerRun(self, "evaluation")


class _PerRun(collections.abc.Sequence):
    """One part of every run (`state`, `metrics` or `evaluation`), read run by run: item k is
    sliced out of the stacked results when asked for."""

    def __init__(self, result: SweepResult, part: str):
        self._result, self._part = result, part

    def __len__(self) -> int:
        return len(self._result.runs)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        return getattr(self._result.run(k), self._part)


def sweep(cfg: PPOConfig, grid: Mapping[str, list] | None = None, seeds: int | None = None, *,
          spec: SweepSpec | None = None, **options) -> SweepResult:
    """Run every point × seed of `cfg` swept over `grid` (or `spec`, a whole `sweep:`
    section): `run_plan(plan(cfg, spec), **options)`, whose doc says what the options do.
    One compile per static group; seed s of every point uses `jax.random.PRNGKey(first_seed
    + s)`, so run k equals `make_train(point config)` with that key."""
    if spec is None:
        spec = make_spec(grid=grid, seeds=seeds)
    elif grid is not None or seeds is not None:
        raise TypeError("give either spec or grid/seeds (make_spec merges a section with them)")
    return run_plan(plan(cfg, spec), **options)


def pbt(cfg: PPOConfig, section: Mapping[str, Any] | None = None, seeds: int | None = None, *,
        spec: SweepSpec | None = None, **options) -> SweepResult:
    """Population-based training of `cfg`: `section` is a `pbt:` section (population,
    interval, hyperparameters, exploit, explore, fitness; experiments.pbt), `seeds` the
    independent populations; or `spec`, a whole `sweep:` section with its `pbt:`. The
    options are `run_plan`'s. The result's `lineage` is pbt.csv's rows; `run_sets[0]
    .run_configs` each member's final hyperparameters."""
    if spec is None:
        spec = make_spec({"pbt": section, "seeds": 1 if seeds is None else seeds})
    elif section is not None or seeds is not None:
        raise TypeError("give either spec or section/seeds")
    if spec.pbt is None:
        raise ConfigError("sweep.pbt", NO_VALUE, "is missing: a PBT run needs a pbt: section")
    return run_plan(plan(cfg, spec), **options)


def run_plan(planned: Plan, *, first_seed: int = 0, max_parallel: int | None = None,
             on_group: Callable[[int, int, Group, int], None] | None = None,
             checkpoints: Checkpoints | None = None, checkpoint_every: int | None = None, resume: bool = False,
             meta: dict | None = None, progress=None, restore_from: Checkpoints | None = None) -> SweepResult:
    """Run a planned sweep (`plan`: every config checked, each group's environment built).
    Seed s of every point uses `jax.random.PRNGKey(first_seed + s)`. `max_parallel` bounds
    the runs in flight per device (chunks, same numbers). `on_group(g, groups, group, runs)`
    is called before each group compiles. A group that would not fit in device memory raises
    ResourceError before it runs, naming the `max_parallel` that fits.

    With `checkpoints`, the full state of every run is saved at the end, and after every
    `checkpoint_every` updates (`meta` saved beside it); `resume` continues from the
    newest complete checkpoint. `progress(updates_done, episode_return)` is called on the
    host per run after each chunk of updates (`runs.execute`).

    A PBT sweep (`spec.pbt`) runs in chunks of its interval, the exploit/explore step between
    them (`pbt.Population`); with `checkpoints`, one is saved after every `checkpoint_every`
    intervals (default: every interval)."""
    spec, points, configs, groups = planned.spec, planned.points, planned.configs, planned.groups
    for name, value in (("max_parallel", max_parallel), ("checkpoint_every", checkpoint_every)):
        if value is not None:
            integer(name, value, 1)
    check_seeds("first_seed", first_seed, spec.seeds)

    seed_keys = [np.asarray(jax.random.PRNGKey(first_seed + s)) for s in range(spec.seeds)]
    run_sets = []
    for g, group in enumerate(groups):
        members = {epochs: [(i, s) for i in points_in for s in range(spec.seeds)]
                   for epochs, points_in in group.run_sets.items()}
        run_sets.append([
            RunSet(f"group{g}-epochs{epochs}", group.set_configs[epochs],
                   [run_index(i, s, spec.seeds) for i, s in runs], np.stack([seed_keys[s] for _, s in runs]),
                   HParams.stack(group.set_configs[epochs],
                                 **{name: [getattr(configs[i], name) for i, _ in runs] for name in HPARAM_FIELDS}),
                   [configs[i] for i, _ in runs], group.env)
            for epochs, runs in members.items()])

    def group_starts(g, runs):
        if on_group is not None:
            on_group(g, len(groups), groups[g], runs)

    population, chunk_updates, checkpoint_chunks = None, checkpoint_every, 1
    if spec.pbt is not None:
        population = Population(spec.pbt, spec.seeds, first_seed, spec.random_seed)
        chunk_updates, checkpoint_chunks = spec.pbt["interval"], checkpoint_every or 1
    outputs, timings = execute(run_sets, eval_episodes=spec.eval_episodes, chunk_updates=chunk_updates,
                               max_parallel=max_parallel, progress=progress, checkpoints=checkpoints, meta=meta,
                               resume=resume, checkpoint_chunks=checkpoint_chunks, on_group=group_starts,
                               between=population, restore_from=restore_from)
    if population is not None:  # the step compiles at its first call, inside the run's time: count it as a compile
        timings.compiles += 1
        timings.compile_seconds += population.compile_seconds
        timings.run_seconds -= population.compile_seconds

    runs = [{"point": i, "seed": first_seed + s, **points[i]} for i in range(len(points)) for s in range(spec.seeds)]
    diverged = np.zeros(planned.runs, bool)
    for run_set in (s for sets in run_sets for s in sets):
        out = outputs[run_set.name]
        finite_params = finite_runs(out.state, len(run_set.runs))  # every process (several: a collective)
        if not all(isinstance(x, np.ndarray) for x in jax.tree.leaves(out.state)):
            # several processes: the final states stay where they lie (in the checkpoint), not in the result
            outputs[run_set.name] = out = dataclasses.replace(out, state=None)
        if finite_params is None or out.metrics is None:  # a process that does not write
            continue
        finite_loss = np.all(np.isfinite(out.metrics["total_loss"]), axis=1)
        diverged[run_set.runs] = ~(finite_params & finite_loss)
    return SweepResult(points, configs, runs, [s for sets in run_sets for s in sets], outputs, diverged, len(groups),
                       timings.compile_seconds, timings.run_seconds, spec, planned.base, timings, population)


def swept_keys(result: SweepResult) -> list[str]:
    keys: list[str] = []
    for point in result.points:
        keys += [k for k in point if k not in keys]
    return keys
