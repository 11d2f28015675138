"""A successive halving's report: a row per point (the rung it reached, its ranked return
there, mean ± s.e. over seeds), the environment steps it spent beside what the same points at
the full budget would have spent, summary.json / summary.md / summary.csv, and metrics.csv of
the runs that reached the last rung."""

from __future__ import annotations

from typing import Any, Callable

from purejaxppo.experiments import stats
from purejaxppo.experiments.kinds.base import swept_keys
from purejaxppo.experiments.report import RANKED, csv_text, format_mean_se, json_text, show_value, sweep_metrics_csv

# what scripts may use (benchmarks/halving_vs_random.py)
__all__ = ["halving_summary"]


def halving_summary(result) -> dict[str, Any]:
    """What the halving did: its rungs, a row per point (best first), the environment steps spent
    (`env_steps`) and those of every point at the full budget (`env_steps_full_grid`)."""
    finished, swept = result.between, swept_keys(result)
    rungs, seeds = finished.rungs, result.spec.seeds
    ended = [*rungs.ended, {"points": rungs.running(), "values": [finished.last[i] for i in rungs.running()],
                            "kept": []}]
    rows: dict[int, dict] = {}
    spent, before = 0, 0
    for r, (rung, updates) in enumerate(zip(ended, rungs.budgets)):
        spent += sum(result.configs[i].batch_size for i in rung["points"]) * seeds * (updates - before)
        before = updates
        for i, values in zip(rung["points"], rung["values"]):
            mean, se = stats.mean_se([v for v in values if v is not None])
            rows[i] = {"point": i, **{key: result.points[i].get(key) for key in swept}, "rung": r + 1,
                       "updates": updates, "return": mean, "return_se": se,
                       "finite_seeds": sum(v is not None for v in values), "seeds": seeds}
    ordered = sorted(rows.values(), key=lambda row: (-row["rung"], -_or_low(row["return"]), row["point"]))
    for row in ordered:
        row["best"] = row is ordered[0]
    full = sum(cfg.batch_size * cfg.num_updates for cfg in result.configs) * seeds
    return {"ranked_on": result.spec.rank_by, "eta": result.spec.section["eta"], "swept": swept,
            "rungs": [{"rung": r + 1, "updates": updates, "points": len(rung["points"]), "kept": len(rung["kept"])}
                      for r, (rung, updates) in enumerate(zip(ended, rungs.budgets))],
            "best": ordered[0], "env_steps": spent, "env_steps_full_grid": full,
            "env_steps_fraction": spent / full, "points": ordered}


def _or_low(value: float) -> float:
    return value if value == value else -float("inf")  # NaN (no finite seed) ranks last


def halving_markdown(summary: dict) -> str:
    """summary.md: the rungs, the points best first, and the steps spent."""
    swept, rungs = summary["swept"], summary["rungs"]
    short = RANKED[summary["ranked_on"]][1]
    lines = [f"Successive halving, eta {summary['eta']}: " + "; ".join(
        f"rung {r['rung']}: {r['points']} point(s) to {r['updates']} updates" for r in rungs) + ".",
        f"Environment steps: {summary['env_steps']:,} of the {summary['env_steps_full_grid']:,} every point at the "
        f"full budget would take ({summary['env_steps_fraction']:.1%}).", "",
        "| " + " | ".join([*swept, "rung reached", "updates", f"{short} ± s.e."]) + " |",
        "|" + "---|" * (len(swept) + 3)]
    for row in summary["points"]:
        lines.append("| " + " | ".join([*(show_value(row[k]) for k in swept), f"{row['rung']}/{len(rungs)}",
                                        str(row["updates"]), format_mean_se(row["return"], row["return_se"])]) + " |")
    lines += ["", f"Ranked on the {short} ({RANKED[summary['ranked_on']][2]}) at the rung each point reached, "
              "mean ± s.e. over its seeds; a point outside the top 1/eta of a rung stopped there."]
    return "\n".join(lines) + "\n"


def halving_artefacts(result, summary: dict) -> list[tuple[str, Callable[[], str | bytes]]]:
    """(file name, function making its contents): metrics.csv (a row per update of each run that
    reached the last rung), summary.json, summary.csv (a row per point) and summary.md."""
    swept = summary["swept"]

    def summary_csv():
        columns = list(summary["points"][0])
        return csv_text([columns, *([show_value(row[c]) if c in swept else row[c] for c in columns]
                                    for row in summary["points"])])

    finished = sorted(row["point"] for row in summary["points"] if row["rung"] == len(summary["rungs"]))
    return [("metrics.csv", lambda: sweep_metrics_csv(result, swept, finished)), ("summary.json", lambda: json_text(summary, indent=2)),
            ("summary.csv", summary_csv), ("summary.md", lambda: halving_markdown(summary))]
