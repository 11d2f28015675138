"""What an experiment runs, what happens between its chunks, and what its results are: one
strategy per kind, for one executor (`sweep.run_plan` -> `runs.execute`) and one run folder.

    Train   one config over seeds (purejaxppo train): the run's table, summary.md
    Grid    grid and random points over seeds (purejaxppo sweep): a row per point, heatmaps
    Pbt     a population, exploited and explored between chunks of its interval (sweep: pbt:)

`strategy_of(spec, command)` picks one; nothing else branches on the kind of experiment.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from purejaxppo.experiments import report
from purejaxppo.experiments.pbt import Population


class Schedule(NamedTuple):
    """How the executor runs the program: chunks of `chunk_updates` updates (None: one chunk, or
    what the progress reports need), a checkpoint after every `checkpoint_chunks` chunks, and
    `between(sets, states, metrics, ...)` after each chunk (None: nothing)."""

    chunk_updates: int | None
    checkpoint_chunks: int
    between: Population | None


class Train:
    """One config over seeds: the executor's chunks are the checkpoints'."""

    def describe(self, planned) -> str:
        """What runs, for the first line the command prints."""
        return f"{planned.spec.seeds} seed(s)"

    def schedule(self, spec, first_seed: int, checkpoint_every: int | None) -> Schedule:
        return Schedule(checkpoint_every, 1, None)

    def write_results(self, folder, result, reference: str | None = None) -> tuple[bool, list]:
        """The results into `folder` -> (whether it is finished, what to print: text or rich tables)."""
        from rich.table import Table

        base = result.base
        seeds = [run["seed"] for run in result.runs]
        runs = result.point(0)  # a train run is one point: its seeds, stacked
        summary = report.summarize(runs.metrics, steps_per_run=base.num_updates * base.batch_size,
                                   run_seconds=result.run_seconds, compile_seconds=result.compile_seconds,
                                   evaluation=runs.evaluation, diverged=result.diverged, env=base.env,
                                   max_episode_steps=result.run_sets[0].bundle.env.max_episode_steps)
        finished = folder.write_run_results(base, runs.metrics, summary, seeds)
        table = Table(title=f"{base.env}, mean ± s.e. over {len(seeds)} seed(s)")
        table.add_column("metric")
        table.add_column("value", justify="right")
        for name, value in report.summary_lines(summary):
            table.add_row(name, value)
        return finished, [table, f"per-epoch clip fraction: {summary['diagnosis']}", *([reference] if reference else [])]


class Grid(Train):
    """Grid and random points, each over seeds: one run per point and seed."""

    def describe(self, planned) -> str:
        return f"{len(planned.points)} point(s) x {planned.spec.seeds} seed(s)"

    def write_results(self, folder, result, reference: str | None = None) -> tuple[bool, list]:
        rows, swept = report.sweep_summary(result), swept_keys(result)
        finished = folder.write_sweep_results(result, rows, swept)
        return finished, [report.sweep_markdown(rows, swept, result.spec.threshold), _speed(result)]


class Pbt(Train):
    """Population-based training: members exploit and explore between chunks of the interval."""

    def describe(self, planned) -> str:
        return (f"PBT, {len(planned.points)} members x {planned.spec.seeds} seed(s), exploit/explore every "
                f"{planned.spec.pbt['interval']} updates")

    def schedule(self, spec, first_seed: int, checkpoint_every: int | None) -> Schedule:
        """Chunks of the interval, a checkpoint after every `checkpoint_every` of them (default: each)."""
        population = Population(spec.pbt, spec.seeds, first_seed, spec.random_seed)
        return Schedule(spec.pbt["interval"], checkpoint_every or 1, population)

    def write_results(self, folder, result, reference: str | None = None) -> tuple[bool, list]:
        summary = report.pbt_summary(result)
        finished = folder.write_pbt_results(result, summary)
        return finished, [report.pbt_markdown(summary), _speed(result)]


def strategy_of(spec, command: str = "sweep") -> Train:
    """The strategy of a sweep `spec` (a PBT section: Pbt), run by `command` ("train": Train)."""
    return Pbt() if spec.pbt is not None else Train() if command == "train" else Grid()


def swept_keys(result) -> list[str]:
    """The keys the points of a sweep set, in the order they first appear."""
    keys: list[str] = []
    for point in result.points:
        keys += [k for k in point if k not in keys]
    return keys


def _speed(result) -> str:
    steps = result.spec.seeds * sum(cfg.num_updates * cfg.batch_size for cfg in result.configs)
    return f"{steps / result.run_seconds:,.0f} steps/s over all runs; diverged runs: {int(np.sum(result.diverged))}"
