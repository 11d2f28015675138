"""A population-based-training sweep's report: the schedule a member's weights trained with,
the final population's summary and markdown, the plots (values and fitness over training,
the lineage) and the result files' contents."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

from purejaxppo.experiments import stats
from purejaxppo.experiments.report import csv_text, figure_bytes, format_mean_se, json_text, pyplot, sweep_metrics_csv


def pbt_schedule(lineage: list[dict], run: int) -> list[dict]:
    """The schedule of the weights run `run` ends with: per interval, first to last, the
    lineage row of the member that held them then, followed back through `copied_from`
    (each row's copied_from is the previous row's member)."""
    rows = {(r["interval"], r["seed"], r["member"]): r for r in lineage}
    last = max(r["interval"] for r in lineage)
    row = next(r for r in lineage if r["interval"] == last and r["run"] == run)
    schedule = [row]
    for interval in range(last - 1, -1, -1):
        row = rows[(interval, row["seed"], row["copied_from"])]
        schedule.append(row)
    return schedule[::-1]


def _eval_numbers(values) -> dict[str, float]:
    mean, se = stats.mean_se(values)
    return {"mean": mean, "se": se}


def pbt_summary(result) -> dict[str, Any]:
    """A PBT sweep's final population: per member (one per run: a member of one population),
    its initial and final hyperparameters (the final ones: its last lineage row, what
    `ppo.load(folder, run=k)` gives), how often its weights were replaced, its last
    interval's fitness, its final policy on fresh episodes (greedy `eval_return` and sampled,
    mean ± s.e. over the episodes) and its final rank (1: the best; by the greedy return, then
    the last fitness; diverged runs last; members equal on both share a rank, the next rank
    skipping as many: 1, 1, 1, 4). Over the population: each member's greedy return
    (`per_run`), their mean ± s.e. and median. `best`: the first-ranked member (the lowest run
    among those tied) with its schedule (`pbt_schedule`); `best_tied`: the runs of every
    member ranked 1."""
    lineage, names = result.lineage, list(result.spec.section["hyperparameters"])
    last = max(r["interval"] for r in lineage)
    final = {r["run"]: r for r in lineage if r["interval"] == last}
    members = []
    for k, run in enumerate(result.runs):
        evaluation = result.evaluation[k]
        member = {"run": k, "member": run["point"], "seed": run["seed"], "diverged": bool(result.diverged[k]),
                  "initial": {n: run[n] for n in names}, "final": {n: final[k][n] for n in names},
                  "copies": sum(r["run"] == k and r["copied_from"] != r["member"] for r in lineage),
                  "final_fitness": final[k]["fitness"]}
        for mode, name in (("deterministic", "eval_return"), ("stochastic", "eval_return_stochastic")):
            member[name] = _eval_numbers(evaluation[mode]) if mode in evaluation else None
        members.append(member)

    def merit(m):
        greedy = m["eval_return"]["mean"] if m["eval_return"] else math.nan
        fitness = math.nan if m["final_fitness"] is None else m["final_fitness"]
        return (not m["diverged"], *(v if math.isfinite(v) else -math.inf for v in (greedy, fitness)))

    merits = [merit(m) for m in members]
    for m, mine in zip(members, merits):  # a tie shares its rank: 1 + the members strictly better
        m["rank"] = 1 + sum(other > mine for other in merits)
    kept = [m for m in members if not m["diverged"] and m["eval_return"]]
    greedy = np.array([m["eval_return"]["mean"] for m in kept], np.float64)
    best = min(members, key=lambda m: (m["rank"], m["run"]))
    cfg, spec = result.configs[0], result.spec
    summary: dict[str, Any] = {
        "env": result.base.env, "populations": spec.seeds, "population": spec.section["population"],
        "interval": spec.section["interval"], "intervals": last + 1, "batch_size": cfg.batch_size,
        "explored": names, "exploit_events": sum(r["copied_from"] != r["member"] for r in lineage),
        "diverged": int(np.sum(result.diverged)),
        "eval_return": {**_eval_numbers(greedy), "median": float(np.median(greedy)) if greedy.size else math.nan,
                        "per_run": [float(m["eval_return"]["mean"]) if m["eval_return"] else math.nan
                                    for m in members]},
        "threshold": spec.threshold, "members": members,
        "best": {**best, "schedule": pbt_schedule(lineage, best["run"])},
        "best_tied": [m["run"] for m in members if m["rank"] == 1], "min_gap": spec.section.get("min_gap"),
        "steps_per_second": len(result.runs) * cfg.num_updates * cfg.batch_size / result.run_seconds,
        "run_seconds": result.run_seconds, "compile_seconds": result.compile_seconds,
        "step_seconds": float(sum(result.between.step_seconds))}
    if spec.threshold is not None:
        summary["at_threshold"] = int(np.sum(greedy >= spec.threshold))
    return summary


def pbt_markdown(summary: Mapping[str, Any]) -> str:
    """summary.md of a PBT sweep: the final population, its members by rank, the best
    member's schedule."""
    names, ev = summary["explored"], summary["eval_return"]
    lines = [f"# PBT on {summary['env']}: {summary['population']} members x {summary['populations']} "
             f"population(s), exploit/explore every {summary['interval']} updates ({summary['intervals']} intervals)",
             "", "| final population: greedy return on fresh episodes, over members | value |", "|---|---|",
             f"| median | {ev['median']:.4g} |" if math.isfinite(ev["median"]) else "| median | n/a |",
             f"| mean ± s.e. | {format_mean_se(ev['mean'], ev['se'])} |"]
    if "at_threshold" in summary:
        lines.append(f"| members ≥ {summary['threshold']:g} | {summary['at_threshold']}/{len(summary['members'])} |")
    lines += [f"| exploit events (a member's weights replaced) | {summary['exploit_events']} |",
              f"| diverged members (NaN/Inf; not in the numbers) | {summary['diverged']} |",
              f"| steps per second | {summary['steps_per_second']:,.0f} |",
              f"| compile time | {summary['compile_seconds']:.1f} s |", "",
              "## Members, by final rank", "",
              "| rank | member | seed | " + " | ".join(f"{n} initial | {n} final" for n in names)
              + " | replaced | last fitness | greedy return ± s.e. | sampled return ± s.e. |",
              "|" + "---|" * (7 + 2 * len(names))]

    def shown(ev):
        return format_mean_se(ev["mean"], ev["se"]) if ev else "n/a"

    shared = [m["rank"] for m in summary["members"]]
    for m in sorted(summary["members"], key=lambda m: (m["rank"], m["run"])):
        values = " | ".join(f"{m['initial'][n]:.3g} | {m['final'][n]:.3g}" for n in names)
        fitness = "n/a" if m["final_fitness"] is None else f"{m['final_fitness']:.4g}"
        rank = f"{m['rank']}{' (tied)' if shared.count(m['rank']) > 1 else ''}"
        lines.append(f"| {rank}{' (diverged)' if m['diverged'] else ''} | {m['member']} | {m['seed']} | "
                     f"{values} | {m['copies']} | {fitness} | {shown(m['eval_return'])} | "
                     f"{shown(m['eval_return_stochastic'])} |")
    best, tied = summary["best"], summary.get("best_tied", [summary["best"]["run"]])
    if len(tied) > 1:
        by_run = {m["run"]: m for m in summary["members"]}
        heading = [f"## Best members (tied): {len(tied)} share rank 1: "
                   + ", ".join(f"member {by_run[k]['member']} seed {by_run[k]['seed']}" for k in tied), "",
                   f"Equal greedy return ({shown(best['eval_return'])}) and last fitness: no one of them is the "
                   f"best. The schedule below is the first's (run {best['run']}); final values "
                   + ", ".join(f"{n} = {best['final'][n]:.4g}" for n in names) + "."]
    else:
        heading = [f"## The best member: member {best['member']}, seed {best['seed']} (run {best['run']})", "",
                   f"Greedy return {shown(best['eval_return'])}; final values "
                   + ", ".join(f"{n} = {best['final'][n]:.4g}" for n in names) + "."]
    lines += ["", *heading, "The schedule its weights trained with, followed back through the lineage (held by: "
              "the member whose weights they were in that interval):", "",
              "| interval | updates | held by | copied from | " + " | ".join(names) + " | fitness |",
              "|" + "---|" * (5 + len(names))]
    for r in best["schedule"]:
        fitness = "n/a" if r["fitness"] is None else f"{r['fitness']:.4g}"
        lines.append(f"| {r['interval']} | {r['updates']} | {r['member']} | {r['copied_from']} | "
                     + " | ".join(f"{r[n]:.4g}" for n in names) + f" | {fitness} |")
    gap = summary.get("min_gap") or {}
    note = ("\nrank: by the greedy return on fresh episodes, then the last interval's fitness; members equal on "
            "both share a rank (tied); replaced: the intervals after which the member copied another's weights"
            + (f" (only where the source's fitness was higher by more than {gap['se']:g} s.e. of the difference"
               f" + {gap['absolute']:g})" if gap else "") + "; last fitness: the mean return of the "
            "episodes it finished in the last interval. Each member's values over training, and where every "
            "member's weights came from, are in pbt.csv and the pbt_*.png plots.\n")
    return "\n".join(lines) + "\n" + note


def pbt_plots(result, summary: Mapping[str, Any]) -> list[tuple[str, Callable[[], bytes]]]:
    """(file name, draw): pbt_<key>.png, each explored value over training per member, and
    pbt_fitness.png, each member's fitness per interval, both coloured by final rank;
    pbt_lineage.png, a heatmap of member x interval: the member each one copied from."""
    plt = pyplot()
    from matplotlib import cm, colors

    lineage, members = result.lineage, summary["members"]
    batch, intervals = summary["batch_size"], summary["intervals"]
    ranks = colors.Normalize(1, max(len(members), 2))
    cmap = plt.get_cmap("viridis_r")  # rank 1, the best: yellow

    def by_run(k):
        return [r for r in lineage if r["run"] == k]  # in interval order

    def over_training(name, ylabel, log, title):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for m in sorted(members, key=lambda m: -m["rank"]):  # the best drawn last, on top
            rows = by_run(m["run"])
            color = cmap(ranks(m["rank"]))
            ends = np.array([r["updates"] for r in rows]) * batch
            values = np.array([np.nan if r[name] is None else r[name] for r in rows], np.float64)
            if name == "fitness":
                ax.plot(ends, values, color=color, lw=1.2, marker="o", ms=2.5)
            else:  # the value in force during each interval
                starts = np.concatenate([[0], ends[:-1]])
                ax.step(np.append(starts, ends[-1]), np.append(values, values[-1]), where="post", color=color,
                        lw=1.2)
        if log:
            ax.set_yscale("log")
        fig.colorbar(cm.ScalarMappable(ranks, cmap), ax=ax, label="final rank (1: best; tied members share one)")
        ax.set(xlabel="environment steps", ylabel=ylabel, title=title)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        return figure_bytes(fig, 120)

    def lineage_map():
        runs = len(members)
        grid = np.full((runs, intervals), np.nan)
        for r in lineage:
            if r["copied_from"] != r["member"]:
                grid[r["run"], r["interval"]] = r["copied_from"]
        population = summary["population"]
        fig, ax = plt.subplots(figsize=(min(0.45 * intervals + 3, 16), min(0.3 * runs + 1.8, 14)))
        image = ax.imshow(grid, aspect="auto", cmap=plt.get_cmap("tab20", population), interpolation="nearest",
                          vmin=-0.5, vmax=population - 0.5)
        for (k, i), value in np.ndenumerate(grid):
            if np.isfinite(value):
                ax.text(i, k, f"{int(value)}", ha="center", va="center", fontsize=7)
        ax.set_yticks(range(runs), [f"m{m['member']} s{m['seed']}" for m in members], fontsize=7)
        ax.set_xticks(range(0, intervals, max(1, intervals // 20)))
        ax.set(xlabel="interval", ylabel="member, seed", title="Lineage: the member each copied before the "
               "interval\n(blank: its own weights)")
        fig.colorbar(image, ax=ax, label="copied from member", ticks=range(0, population, max(1, population // 10)))
        fig.tight_layout()
        return figure_bytes(fig, 110)

    dists = result.spec.section["hyperparameters"]
    plots = [(f"pbt_{name}.png", lambda name=name: over_training(
        name, name, "loguniform" in dists[name], f"{summary['env']}: {name} over training, per member"))
        for name in summary["explored"]]
    plots.append(("pbt_fitness.png", lambda: over_training(
        "fitness", "fitness (mean return of the interval's episodes)", False,
        f"{summary['env']}: fitness per interval, per member")))
    plots.append(("pbt_lineage.png", lineage_map))
    return plots


def pbt_artefacts(result, summary: Mapping[str, Any]) -> list[tuple[str, Callable[[], str | bytes]]]:
    """(file name, function making its contents) for a PBT sweep's results (`summary`:
    `pbt_summary`): metrics.csv (a row per run per update, `point` being the member),
    pbt.csv (the lineage: a row per run per interval), summary.json, summary.csv (a row per
    member), the plots (`pbt_plots`) and summary.md."""
    names = summary["explored"]

    def blank(value):  # no value (None, NaN): an empty cell
        return "" if value is None or (isinstance(value, float) and math.isnan(value)) else value

    def lineage_csv():
        columns = list(result.lineage[0])
        return csv_text([columns] + [[blank(row[c]) for c in columns] for row in result.lineage])

    def summary_csv():
        header = ["run", "member", "seed", "rank", "diverged", *(f"initial_{n}" for n in names), *names, "replaced",
                  "last_fitness", "eval_return", "eval_return_se", "eval_return_stochastic",
                  "eval_return_stochastic_se"]
        rows = [[m["run"], m["member"], m["seed"], m["rank"], int(m["diverged"]),
                 *(m["initial"][n] for n in names), *(m["final"][n] for n in names), m["copies"],
                 blank(m["final_fitness"]), *(blank(m[e][part]) if m[e] else "" for e in ("eval_return",
                                              "eval_return_stochastic") for part in ("mean", "se"))]
                for m in summary["members"]]
        return csv_text([header, *rows])

    return [
        ("metrics.csv", lambda: sweep_metrics_csv(result, [])),
        ("pbt.csv", lineage_csv),
        ("summary.json", lambda: json_text(summary, indent=2)),
        ("summary.csv", summary_csv),
        *pbt_plots(result, summary),
        ("summary.md", lambda: pbt_markdown(summary)),
    ]
