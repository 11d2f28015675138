"""What every kind of experiment answers (`Kind`), and the schedule it gives the executor.

A kind is a plug-in (`kinds.KEYED`, keyed by its own key in the sweep section): it checks its
section, gives the points to run, the factors of its number of runs (the memory bound), its
checks of the planned configs, its schedule (chunks, and its step between them), and writes
and prints its results (importing its report then: a sweep section is checked without it).
Planning (`plan`), the memory bound, the executor (`runs`), the run folder and the report name
no kind: they ask the kind. The defaults here are the points of the sweep section's grid and
random search, each over the seeds: what the train command (one point) and a grid or random
sweep run.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Mapping, NamedTuple

import numpy as np

from purejaxppo.experiments.search import draw


class Schedule(NamedTuple):
    """How the executor runs the program: chunks of `chunk_updates` updates (None: one chunk, or
    what the progress reports need), a checkpoint after every `checkpoint_chunks` chunks, and
    `between(sets, states, metrics, updates_done)` after each chunk (None: nothing; see
    `runs.execute`)."""

    chunk_updates: int | None
    checkpoint_chunks: int
    between: Any = None


class Ran(NamedTuple):
    """What a kind's `run` hands back: each run set's results, the timings, the run sets those
    results are of (every run that has results), and what the kind keeps of its own
    (`SweepResult.between`: PBT's population, ...; None)."""

    outputs: dict
    timings: Any
    run_sets: list
    between: Any = None


class Kind:
    """A kind of experiment: the defaults are a grid (and random search) over seeds."""

    key: str | None = None  # its own key in the sweep section (None: it has none)

    def parse(self, section: Any, grid: Mapping, random: Mapping) -> dict:
        """Its section (`sweep: <key>:`) checked -> plain values (it reloads with parse); `grid`
        and `random`, the sweep's, checked already. A bad value is a ConfigError naming it."""
        raise NotImplementedError

    def points(self, spec) -> list[dict]:
        """The swept points, each a dict of overridden keys: grid product x random trials."""
        keys = list(spec.grid)
        grid_points = [dict(zip(keys, combo)) for combo in itertools.product(*(spec.grid[k] for k in keys))]
        trials = [{}]
        if spec.random:
            trials = draw({k: v for k, v in spec.random.items() if k != "trials"}, spec.random["trials"],
                          spec.random_seed)
        return [{**g, **r} for g in grid_points for r in trials]

    def swept(self, spec) -> list[str]:
        """The config keys its points set (before any is drawn)."""
        return [*spec.grid, *(k for k in spec.random if k != "trials")]

    def factors(self, spec) -> dict[str, tuple[int, str]]:
        """The factors of its number of runs, counted without drawing a point: name -> (value,
        where the user sets it), for the memory bound to name the one to lower."""
        return {"grid": (math.prod(len(values) for values in spec.grid.values()), "points of sweep.grid and --grid"),
                "random.trials": (spec.random.get("trials", 1), "sweep.random.trials"),
                "seeds": (spec.seeds, "--seeds, sweep.seeds")}

    def check_plan(self, spec, configs: list) -> None:
        """Its checks of the points' checked configs (a ConfigError), before anything is created."""

    def schedule(self, spec, first_seed: int, checkpoint_every: int | None) -> Schedule:
        """The executor's chunks are the checkpoints'; nothing between them."""
        return Schedule(checkpoint_every, 1)

    def run(self, spec, groups: list[list], execute, *, first_seed: int, checkpoint_every: int | None,
            resumed: dict | None) -> Ran:
        """Execute the planned run sets (`groups`: per static group, its `runs.RunSet`s) -> Ran.
        `execute(groups, **options)` is `runs.execute` with the command's options bound (an
        option given here replaces the bound one); `resumed`: the meta of the checkpoint a
        resume continues from (None: not resuming). The default: once, on its schedule."""
        schedule = self.schedule(spec, first_seed, checkpoint_every)
        between = schedule.between
        outputs, timings = execute(groups, chunk_updates=schedule.chunk_updates,
                                   checkpoint_chunks=schedule.checkpoint_chunks, between=between)
        if between is not None:  # its step compiles at its first call, inside the run's time: count it as a compile
            timings.compiles += 1
            timings.compile_seconds += between.compile_seconds
            timings.run_seconds -= between.compile_seconds
        return Ran(outputs, timings, [s for sets in groups for s in sets], between)

    def describe(self, planned) -> str:
        """What runs, for the first line the command prints."""
        return f"{len(planned.points)} point(s) x {planned.spec.seeds} seed(s)"

    def write_results(self, folder, result, reference: str | None = None) -> tuple[bool, list]:
        """The results into `folder` (`folder.write_results(artefacts)`) -> (whether it is
        finished, what to print: text or rich tables)."""
        raise NotImplementedError


def swept_keys(result) -> list[str]:
    """The keys the points of a sweep set, in the order they first appear."""
    keys: list[str] = []
    for point in result.points:
        keys += [k for k in point if k not in keys]
    return keys


def speed_line(result, steps: int | None = None) -> str:
    """The environment steps per second over all runs (`steps`: those taken; default: every
    point's full budget), and the diverged runs."""
    if steps is None:
        steps = result.spec.seeds * sum(cfg.num_updates * cfg.batch_size for cfg in result.configs)
    return f"{steps / result.run_seconds:,.0f} steps/s over all runs; diverged runs: {int(np.sum(result.diverged))}"
