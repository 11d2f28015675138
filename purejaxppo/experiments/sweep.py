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
      threshold: 475                # optional: count seeds whose ranked return reaches it
      eval_episodes: 64             # final policy on fresh episodes, greedy and sampled (0: off)
      rank_by: eval                 # what the summary ranks on: eval (default), eval_stochastic, train
      diagnosis: {under_used_below: 0.02, over_used_above: 0.2, over_used_by_epoch: 3}
      <kind>: {...}                 # a kind's own section in place of grid/random (experiments.kinds)

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
from typing import Any, Callable, Mapping

import jax
import numpy as np

from purejaxppo.config import HPARAM_FIELDS, HParams, PPOConfig
from purejaxppo.errors import integer
from purejaxppo.experiments.checkpoint import Checkpoints
from purejaxppo.experiments.hosts import Cluster
from purejaxppo.experiments.plan import Group, Plan, plan, run_index
from purejaxppo.experiments.plan import expand  # noqa: F401 (not sweep's: tests still import it here)
from purejaxppo.experiments.runs import RunSet, Timings, execute, finite_runs
from purejaxppo.experiments.spec import SweepSpec, check_seeds, make_spec
from purejaxppo.experiments.spec import load_sweep  # noqa: F401 (not sweep's: tests and a notebook import it here)
from purejaxppo.train import TrainResult

__all__ = ["SweepResult", "run_plan", "sweep"]  # for scripts; plan, make_spec, load_sweep: plan.py's and spec.py's


@dataclasses.dataclass
class SweepResult:
    """Every run of a sweep as it ran: each run set's results stacked over its runs (a leading
    run axis), kept so from the run to the tables. `point(i)` (a point's runs) and `run(k)`
    (one run) are slices of them, and so are `states[k]`, `metrics[k]`, `evaluation[k]`."""

    points: list[dict]                 # swept values of each point
    configs: list[PPOConfig]           # each point's checked config
    runs: list[dict]                   # per run: {"point": i, "seed": s, **swept values}
    run_sets: list[RunSet]             # the runs with results, as they ran: a run set per compiled epoch count
    outputs: dict[str, TrainResult]    # run set name -> its runs' results, stacked (numpy leaves)
    diverged: np.ndarray               # [runs] NaN or Inf in the losses or final parameters
    compiles: int
    compile_seconds: float
    run_seconds: float
    spec: SweepSpec
    base: PPOConfig
    timings: Timings
    between: Any = None  # what its kind keeps of its own (`kinds.Ran.between`: PBT's step as it ended, ...), or None

    @property
    def lineage(self) -> list[dict] | None:
        """The lineage its kind's step kept (one row per run per interval); None if none."""
        return getattr(self.between, "lineage", None)

    def __post_init__(self):
        # run k -> (its run set's name, its place on that set's run axis)
        self._where = {k: (s.name, j) for s in self.run_sets for j, k in enumerate(s.runs)}

    def point_runs(self, point: int) -> range:
        """The indices of point `point`'s runs (one per seed) in `runs`, `diverged`, ..."""
        return range(point * self.spec.seeds, (point + 1) * self.spec.seeds)

    def point(self, point: int) -> TrainResult:
        """Point `point`'s runs, one per seed in seed order, stacked: a slice of the run set that
        ran them (a point's seeds are neighbours on its run axis)."""
        name, j = self._find(self.point_runs(point)[0])
        return jax.tree.map(lambda x: x[j:j + self.spec.seeds], self.outputs[name])

    def run(self, k: int) -> TrainResult:
        """Run k alone (no run axis): what `make_train` of its config returns for its key."""
        if not -len(self.runs) <= k < len(self.runs):
            raise IndexError(f"run {k} of a sweep of {len(self.runs)} runs")
        name, j = self._find(k % len(self.runs))
        return jax.tree.map(lambda x: x[j], self.outputs[name])

    def _find(self, k: int) -> tuple[str, int]:
        if k not in self._where:  # a kind that stops runs early keeps what it needs of them in `between`
            raise LookupError(f"run {k} has no results here: its kind stopped it early (see result.between)")
        return self._where[k]

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


def run_plan(planned: Plan, *, first_seed: int = 0, max_parallel: int | None = None,
             on_group: Callable[[int, int, Group, int], None] | None = None,
             checkpoints: Checkpoints | None = None, checkpoint_every: int | None = None, resume: bool = False,
             meta: dict | None = None, progress=None, restore_from: Checkpoints | None = None,
             cluster: Cluster | None = None) -> SweepResult:
    """Run a planned sweep (`plan`: every config checked, each group's environment built).
    Seed s of every point uses `jax.random.PRNGKey(first_seed + s)`. `max_parallel` bounds
    the runs in flight per device (chunks, same numbers). `on_group(g, groups, group, runs)`
    is called before each group compiles. A group that would not fit in device memory raises
    ResourceError before it runs, naming the `max_parallel` that fits.

    With `checkpoints`, the full state of every run is saved at the end, and after every
    `checkpoint_every` updates (`meta` saved beside it); `resume` continues from the
    newest complete checkpoint. `progress(updates_done, episode_return)` is called on the
    host per run after each chunk of updates (`runs.execute`). `cluster`: the job's processes
    (`hosts.join`; default `hosts.current()`), each computing its devices' runs (`runs.execute`).

    The plan's kind runs them (`Kind.run`): on its schedule (`Kind.schedule`: a kind with a
    step between chunks runs in chunks of its own, and says how `checkpoint_every` counts
    them), or in executions of its own (`Kind.run`'s doc)."""
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
            RunSet(f"group{g}-epochs{epochs}", group.set_bundles[epochs].config,
                   [run_index(i, s, spec.seeds) for i, s in runs], np.stack([seed_keys[s] for _, s in runs]),
                   HParams.stack(group.set_bundles[epochs].config,
                                 **{name: [getattr(configs[i], name) for i, _ in runs] for name in HPARAM_FIELDS}),
                   [configs[i] for i, _ in runs], group.set_bundles[epochs], g)
            for epochs, runs in members.items()])

    def group_starts(g, runs):
        if on_group is not None:
            on_group(g, len(groups), groups[g], runs)

    def run(sets, **options):  # `Kind.run`'s execute: these options, then its own (its meta added to these)
        bound = dict(eval_episodes=spec.eval_episodes, max_parallel=max_parallel, progress=progress,
                     checkpoints=checkpoints, resume=resume, on_group=group_starts, restore_from=restore_from,
                     cluster=cluster)
        return execute(sets, **{**bound, **options, "meta": {**(meta or {}), **options.get("meta", {})}})

    resumed = (restore_from or checkpoints).meta() if resume else None
    ran = planned.kind.run(spec, run_sets, run, first_seed=first_seed, checkpoint_every=checkpoint_every,
                           resumed=resumed)
    outputs, timings = ran.outputs, ran.timings

    runs = [{"point": i, "seed": first_seed + s, **points[i]} for i in range(len(points)) for s in range(spec.seeds)]
    diverged = np.zeros(planned.runs, bool)
    for run_set in ran.run_sets:
        out = outputs[run_set.name]
        finite_params = finite_runs(out.state, len(run_set.runs))  # every process (several: a collective)
        if not all(isinstance(x, np.ndarray) for x in jax.tree.leaves(out.state)):
            # several processes: the final states stay where they lie (in the checkpoint), not in the result
            outputs[run_set.name] = out = dataclasses.replace(out, state=None)
        if out.metrics is None:  # a process that does not write
            continue
        finite_loss = np.all(np.isfinite(out.metrics["total_loss"]), axis=1)
        diverged[run_set.runs] = ~(finite_params & finite_loss)
    return SweepResult(points, configs, runs, ran.run_sets, outputs, diverged, len(groups),
                       timings.compile_seconds, timings.run_seconds, spec, planned.base, timings, ran.between)
