"""A grid (and random) sweep: every point over seeds; a row per point, heatmaps."""

from __future__ import annotations

from purejaxppo.experiments.kinds.base import Kind, speed_line, swept_keys


class Grid(Kind):
    """Grid and random points, each over seeds: one run per point and seed."""

    def write_results(self, folder, result, reference: str | None = None) -> tuple[bool, list]:
        from purejaxppo.experiments import report  # when results are written: a spec is checked without it

        rows, swept = report.sweep_summary(result), swept_keys(result)
        finished = folder.write_results(report.sweep_artefacts(result, rows, swept))
        return finished, [report.sweep_markdown(rows, swept, result.spec.threshold), speed_line(result)]
