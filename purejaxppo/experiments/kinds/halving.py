"""Successive halving as a kind (`sweep: halving: {eta: 3, rungs: 3}` beside grid: or random:).

Every point x seed starts; after rung r (its budget: the config's updates / eta^(rungs - 1 - r),
the last rung's the config's own) the points are ranked on the sweep's ranked return (mean over
seeds; `rank_by`, the evaluation by default, as every sweep ranks) and only the top 1/eta of them
(at least one, every seed of it) go on, in a program of their own (the run axis compacted: one
compile per rung). A point that goes on continues its own runs: its schedules (the learning rate's
annealing, ...) are its config's, so a run that reaches the last rung ends where the run of its
config in the full grid ends (up to the rounding of a program of fewer runs). What the rungs
decided (`Rungs`) is saved beside every checkpoint, so a resume at any of them continues as the
run never stopped. Its report: `halving_report`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Mapping

import jax
import numpy as np

from purejaxppo.config import ConfigError
from purejaxppo.errors import NO_VALUE, integer
from purejaxppo.experiments.kinds.base import Ran, speed_line
from purejaxppo.experiments.kinds.grid import Grid

DEFAULTS = {"eta": 3, "rungs": 3}


@dataclasses.dataclass
class Rungs:
    """What the rungs decided: per rung ended, the points that ran it, each point's ranked
    value per seed (None: not finite) and the points that went on. Saved beside every
    checkpoint (`meta`), read back on resume (`from_meta`)."""

    budgets: list[int]     # the updates each rung ends at
    points: list[int]      # the points of the first rung (every point)
    ended: list[dict] = dataclasses.field(default_factory=list)  # {"points", "values", "kept"} per rung ended

    @property
    def rung(self) -> int:
        """The rung running now (the number of rungs ended)."""
        return len(self.ended)

    def running(self) -> list[int]:
        """The points of the rung running now."""
        return self.ended[-1]["kept"] if self.ended else self.points

    def end(self, values: dict[int, list], eta: int) -> list[int]:
        """End the running rung with its points' ranked values per seed -> the points that go on:
        the top 1/eta by their mean over finite seeds (at least one; ties in point order)."""
        points = self.running()
        mean = {i: np.mean(finite) if (finite := [v for v in values[i] if v is not None]) else -math.inf
                for i in points}
        kept = sorted(sorted(points, key=lambda i: -mean[i])[:max(1, len(points) // eta)])
        self.ended.append({"points": points, "values": [values[i] for i in points], "kept": kept})
        return kept

    def meta(self) -> dict:
        return {"budgets": self.budgets, "points": self.points, "ended": self.ended}

    @classmethod
    def from_meta(cls, meta: Mapping) -> Rungs:
        return cls(list(meta["budgets"]), list(meta["points"]), [dict(rung) for rung in meta["ended"]])


class Halving(Grid):
    """Grid and random points over seeds, the worse ones stopped at each rung."""

    key = "halving"

    def parse(self, section: Any, grid: Mapping, random: Mapping) -> dict:
        if not isinstance(section, Mapping):
            raise ConfigError("sweep.halving", section, "must be a mapping, e.g. halving: {eta: 3, rungs: 3}")
        for key in section:
            if key not in DEFAULTS:
                raise ConfigError(f"sweep.halving.{key}", section[key], f"unknown; halving's keys are "
                                  f"{', '.join(DEFAULTS)}")
        checked = {key: integer(f"sweep.halving.{key}", section.get(key, default), 2)
                   for key, default in DEFAULTS.items()}
        points = math.prod(len(values) for values in grid.values()) * random.get("trials", 1)
        if points < 2:
            raise ConfigError("sweep.halving", NO_VALUE, f"has {points} point to choose among: give grid: or "
                              "random: points")
        return checked

    def check_plan(self, spec, configs: list) -> None:
        """Points compared at equal budgets: every point runs the same number of updates, and the
        first rung at least one."""
        updates = {cfg.num_updates for cfg in configs}
        if len(updates) > 1:
            raise ConfigError("sweep.halving", NO_VALUE, f"compares points at equal budgets, but the points run "
                              f"{sorted(updates)} updates: sweep what sets the number of updates (total_timesteps, "
                              "num_envs, num_steps) in separate sweeps")
        first = budgets(spec.section, updates.pop())[0]
        if first < 1:
            raise ConfigError("sweep.halving.rungs", spec.section["rungs"], f"gives a first rung of no update "
                              f"({configs[0].num_updates} updates / {spec.section['eta']}^"
                              f"{spec.section['rungs'] - 1}): give fewer rungs or a smaller eta")

    def describe(self, planned) -> str:
        spec = planned.spec
        return (f"successive halving of {len(planned.points)} point(s) x {spec.seeds} seed(s), rungs ending at "
                f"{budgets(spec.section, planned.configs[0].num_updates)} updates, the top 1/{spec.section['eta']} "
                "going on")

    def write_results(self, folder, result, reference: str | None = None) -> tuple[bool, list]:
        from purejaxppo.experiments.kinds import halving_report  # when results are written: a spec is checked without it

        summary = halving_report.halving_summary(result)
        finished = folder.write_results(halving_report.halving_artefacts(result, summary))
        return finished, [halving_report.halving_markdown(summary), speed_line(result, summary["env_steps"])]

    def run(self, spec, groups: list[list], execute, *, first_seed: int, checkpoint_every: int | None,
            resumed: dict | None) -> Ran:
        """Rung by rung: each an execution of the points still running (the first also when
        resuming: the checkpoint's rung, its points read from the checkpoint's `Rungs`)."""
        eta, num_updates = spec.section["eta"], groups[0][0].config.num_updates
        rungs = (Rungs.from_meta(resumed["halving"]) if resumed is not None
                 else Rungs(budgets(spec.section, num_updates), sorted({k // spec.seeds for sets in groups
                                                                          for s in sets for k in s.runs})))
        resuming, start, total = resumed is not None, None, None
        while True:
            last = rungs.rung == len(rungs.budgets) - 1
            sets = _of_points(groups, rungs.running(), spec.seeds, rungs.rung)
            outputs, timings = execute(sets, until=rungs.budgets[rungs.rung], start=start, resume=resuming,
                                       gather=True, chunk_updates=checkpoint_every, meta={"halving": rungs.meta()},
                                       **({} if last or spec.rank_by != "train" else {"eval_episodes": 0}))
            total = timings if total is None else _added(total, timings)
            ran = [s for group in sets for s in group]
            values = _values(spec.rank_by, ran, outputs, spec.seeds)
            if last:
                return Ran(outputs, total, ran, Finished(rungs, values))
            resuming = False
            start = _continuing(ran, outputs, set(rungs.end(values, eta)), spec.seeds, rungs.rung)


@dataclasses.dataclass
class Finished:
    """A halving as it ended (`SweepResult.between`): its rungs, and the last rung's ranked
    values per seed (point -> [per seed])."""

    rungs: Rungs
    last: dict[int, list]


KIND = Halving()


def budgets(section: Mapping, num_updates: int) -> list[int]:
    """The updates each rung ends at: num_updates / eta^(rungs - 1 - r), rounded down."""
    return [num_updates // section["eta"] ** (section["rungs"] - 1 - r) for r in range(section["rungs"])]


def _values(rank_by: str, sets: list, outputs: dict, seeds: int) -> dict[int, list]:
    """Each point's ranked value per seed (None where not finite): the greedy or sampled
    evaluation's mean return, or the return of the last update (rank_by: train)."""
    per_run = {}
    for s in sets:
        out = outputs[s.name]
        if rank_by == "train":
            values = np.asarray(out.metrics["episode_return"])[:, -1]
        else:
            returns = np.asarray(out.evaluation["deterministic" if rank_by == "eval" else "stochastic"])
            with np.errstate(all="ignore"):
                values = np.array([np.nanmean(r) if np.isfinite(r).any() else math.nan for r in returns])
        per_run.update(zip(s.runs, values.tolist()))
    points = sorted({k // seeds for k in per_run})
    return {i: [v if math.isfinite(v) else None for v in (per_run[i * seeds + j] for j in range(seeds))]
            for i in points}


def _of_points(groups: list[list], points: list[int], seeds: int, rung: int) -> list[list]:
    """The planned run sets cut to the runs of `points` (the empty ones left out), named for the rung."""
    keep = {i * seeds + j for i in points for j in range(seeds)}
    out = []
    for sets in groups:
        cut = [_cut(s, [j for j, k in enumerate(s.runs) if k in keep], rung) for s in sets]
        cut = [s for s in cut if s.runs]
        if cut:
            out.append(cut)
    return out


def _cut(s, rows: list[int], rung: int):
    """Run set `s` cut to its `rows`, named for rung `rung` (rung<r>-<the planned set's name>)."""
    return dataclasses.replace(s, name=f"rung{rung}-{re.sub(r'^rung[0-9]+-', '', s.name)}", runs=[s.runs[j] for j in rows], keys=s.keys[rows],
                               hparams=jax.tree.map(lambda x: x[rows], s.hparams),
                               run_configs=[s.run_configs[j] for j in rows])


def _continuing(sets: list, outputs: dict, kept: set[int], seeds: int, rung: int) -> dict:
    """Where the runs of the `kept` points stand, by the name of their set in rung `rung`."""
    start = {}
    for s in sets:
        rows = [j for j, k in enumerate(s.runs) if k // seeds in kept]
        if rows:
            start[_cut(s, rows, rung).name] = jax.tree.map(lambda x: x[rows], outputs[s.name].replace(evaluation={}))
    return start


def _added(a, b):
    """Two executions' timings as one (the checkpoint size: the later one's)."""
    return dataclasses.replace(a, compiles=a.compiles + b.compiles, compile_seconds=a.compile_seconds + b.compile_seconds,
                               run_seconds=a.run_seconds + b.run_seconds,
                               checkpoint_seconds=a.checkpoint_seconds + b.checkpoint_seconds,
                               checkpoints=a.checkpoints + b.checkpoints, checkpoint_bytes=b.checkpoint_bytes)
