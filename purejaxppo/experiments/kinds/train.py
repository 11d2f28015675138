"""The train command: one config over seeds (one point); its table and summary.md."""

from __future__ import annotations

from purejaxppo.experiments.kinds.base import Kind


class Train(Kind):
    """One config over seeds."""

    def describe(self, planned) -> str:
        return f"{planned.spec.seeds} seed(s)"

    def write_results(self, folder, result, reference: str | None = None) -> tuple[bool, list]:
        from rich.table import Table

        from purejaxppo.experiments import report  # when results are written: a spec is checked without it

        base = result.base
        seeds = [run["seed"] for run in result.runs]
        runs = result.point(0)  # a train run is one point: its seeds, stacked
        summary = report.summarize(runs.metrics, steps_per_run=base.num_updates * base.batch_size,
                                   run_seconds=result.run_seconds, compile_seconds=result.compile_seconds,
                                   evaluation=runs.evaluation, diverged=result.diverged, env=base.env,
                                   max_episode_steps=result.run_sets[0].bundle.env.max_episode_steps)
        summary["runs"] = report.evaluation_rows([{"run": j, "seed": seed} for j, seed in enumerate(seeds)],
                                                 base.num_updates, runs.evaluation)  # as `eval --json` has them
        finished = folder.write_results(report.run_artefacts(base, runs.metrics, summary, seeds))
        table = Table(title=f"{base.env}, mean ± s.e. over {len(seeds)} seed(s)")
        table.add_column("metric")
        table.add_column("value", justify="right")
        for name, value in report.summary_lines(summary):
            table.add_row(name, value)
        return finished, [table, f"per-epoch clip fraction: {summary['diagnosis']}", *([reference] if reference else [])]
