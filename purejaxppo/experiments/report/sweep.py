"""A sweep's report: a row per grid point (mean ± s.e. over the seeds that did not diverge,
IQM, P(improvement), the diagnosis, run-time counts), its markdown table, the CSV files and
the plots (learning curves, clip fraction by epoch, heatmaps over two swept keys)."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np
import yaml

from purejaxppo.experiments import diagnosis, stats
from purejaxppo.experiments.report.plots import (curve_with_band, figure_bytes, finish_plot, pyplot, smoothing_legend,
                                                 text_colour)
from purejaxppo.experiments.report.run import run_time_counts, run_time_warnings
from purejaxppo.experiments.report.text import csv_text, format_mean_se, metric_rows


def kept_runs(result, point: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(metrics, evaluation) of point `point`'s runs that did not diverge, stacked: [runs, ...]."""
    ok = ~result.diverged[result.point_runs(point)]
    stacked = result.point(point)
    return ({name: value[ok] for name, value in stacked.metrics.items()},
            {mode: value[ok] for mode, value in stacked.evaluation.items()})


# rank_by -> (the row's column, its name in the table's headers, what it is in words)
RANKED = {"eval": ("eval_return", "eval return", "the final policy's greedy return on fresh episodes"),
          "eval_stochastic": ("eval_return_stochastic", "sampled eval return",
                              "the final policy's sampled return on fresh episodes"),
          "train": ("train_return", "train return", "the mean return of the episodes that ended in the last update")}


def ranked_on(result, rank_by: str | None = None) -> str:
    """What a sweep's summary ranks on: `rank_by`, else the spec's (sweep: rank_by:, default
    eval); a sweep run without evaluation (eval_episodes: 0) ranks on the train return."""
    rank_by = rank_by or getattr(result.spec, "rank_by", "eval")
    if rank_by not in RANKED:
        raise ValueError(f"rank_by must be one of {', '.join(RANKED)}, got {rank_by!r}")
    return "train" if rank_by != "train" and not result.spec.eval_episodes else rank_by


def sweep_summary(result, rank_by: str | None = None) -> list[dict[str, Any]]:
    """One row per grid point: mean ± s.e. over the seeds that did not diverge, and more.
    The points are ranked on `ranked_on(result, rank_by)` (default: the final policy's greedy
    evaluation return): "best", "≈ best", P(beats best), the IQM and the seeds at threshold are
    of that return, named in each row's `ranked_on`, with its standard deviation over seeds
    (`ranked_sd`) and the number of seeds it has (`ranked_seeds`)."""
    rank_by = ranked_on(result, rank_by)
    cap = diagnosis.ceiling(getattr(result.base, "env", None), result.spec.diagnosis.get("return_cap"))
    rows = []
    ranked: list[np.ndarray] = []
    for i, point in enumerate(result.points):
        metrics, evaluation = kept_runs(result, i)
        ok = len(metrics["episode_return"])
        if ok:
            per_seed = stats.per_run(metrics)
            clip_by_epoch = stats.mean_by_epoch(metrics["clip_fraction"])
        else:
            per_seed = {name: np.array([]) for name in ("final_return", "mean_kl_k3", "max_update_kl",
                                                        "last_epoch_clip_fraction")}
            clip_by_epoch = np.array([])
        final = np.asarray(per_seed["final_return"], np.float64)
        with stats.quiet_nan_warnings():
            evals = {mode: np.nanmean(evaluation[mode], axis=1) if mode in evaluation else []
                     for mode in ("deterministic", "stochastic")}
        seeds = len(result.point_runs(i))
        row = {**point, "seeds": seeds, "diverged": seeds - ok}
        per_seed_returns = {"train_return": final, "eval_return": evals["deterministic"],
                            "eval_return_stochastic": evals["stochastic"]}
        for name, values in (*per_seed_returns.items(), ("mean_kl", per_seed["mean_kl_k3"]),
                             ("clip_fraction_last_epoch", per_seed["last_epoch_clip_fraction"])):
            row[name], row[name + "_se"] = stats.mean_se(values)
        values = stats.finite(per_seed_returns[RANKED[rank_by][0]])
        row["ranked_on"], row["ranked_seeds"] = rank_by, int(values.size)
        row["ranked_sd"] = float(values.std(ddof=1)) if values.size > 1 else math.nan
        row["max_kl_worst_seed"] = float(max(stats.finite(per_seed["max_update_kl"]), default=math.nan))
        row["iqm_return"], row["iqm_ci_low"], row["iqm_ci_high"] = stats.interquartile_mean(values)
        row["clip_fraction_by_epoch"] = [float(v) for v in clip_by_epoch]
        row["diagnosis"] = diagnosis.diagnose(clip_by_epoch, result.spec.diagnosis, row["max_kl_worst_seed"],
                                              mean_return=row[RANKED[rank_by][0]], cap=cap)
        if result.spec.threshold is not None:
            row["seeds_at_threshold"] = int(np.sum(values >= result.spec.threshold))
        row.update(run_time_counts(metrics, evaluation, np.ones(ok, bool)))
        rows.append(row)
        ranked.append(values)
    column = RANKED[rank_by][0]
    best, indistinguishable = stats.best_and_indistinguishable(
        [row[column] for row in rows], [row[column + "_se"] for row in rows])
    if best is not None:
        for i, (row, values) in enumerate(zip(rows, ranked)):
            row["best"] = i == best
            row["indistinguishable_from_best"] = indistinguishable[i]
            row["p_beats_best"] = stats.probability_of_improvement(values, ranked[best])
    return rows


def sweep_markdown(rows: list[dict], swept: list[str], threshold=None) -> str:
    """summary.md of a sweep: the table of `sweep_summary`'s rows, what its columns are (the
    return the ranking uses named in every column derived from it), how far its seeds go (a
    warning below 5 seeds; the seeds that would separate the top two points), the diagnoses
    and run-time warnings."""
    rank_by = rows[0].get("ranked_on", "train") if rows else "train"
    column, short, words = RANKED[rank_by]
    head = [*swept, "seeds (diverged)", "train return ± s.e.", "eval return ± s.e.", f"IQM of {short} [95% CI]",
            "mean KL ± s.e.", "max KL (worst seed)", "clip fraction, last epoch", f"P(beats best), {short}",
            f"≈ best, {short}"]
    if threshold is not None:
        head.append(f"seeds with {short} ≥ {threshold:g}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [show_value(row[k]) for k in swept]
        cells += [f"{row['seeds']} ({row['diverged']})",
                  format_mean_se(row["train_return"], row["train_return_se"]),
                  format_mean_se(row["eval_return"], row["eval_return_se"]),
                  f"{row['iqm_return']:.3g} [{row['iqm_ci_low']:.3g}, {row['iqm_ci_high']:.3g}]",
                  format_mean_se(row["mean_kl"], row["mean_kl_se"]),
                  f"{row['max_kl_worst_seed']:.3g}",
                  format_mean_se(row["clip_fraction_last_epoch"], row["clip_fraction_last_epoch_se"]),
                  f"{row.get('p_beats_best', math.nan):.2f}",
                  ("best" if row.get("best") else "yes" if row.get("indistinguishable_from_best") else "no")]
        if threshold is not None:
            cells.append(f"{row['seeds_at_threshold']}/{row.get('ranked_seeds', row['seeds'] - row['diverged'])}")
        lines.append("| " + " | ".join(cells) + " |")
    unevaluated = not any(math.isfinite(row["eval_return"]) for row in rows)
    how = "no evaluation return to rank on" if rank_by == "train" and unevaluated else f"sweep: rank_by: {rank_by}"
    note = (f"\nRanked on the {short}: {words} ({how}; docs/sweeps.md). \"best\" is the point "
            f"with the highest mean {short}; its IQM, P(beats best), ≈ best"
            f"{' and the seeds at threshold' if threshold is not None else ''} "
            f"are of the {short} too.\ntrain return: mean return of the episodes that ended in the last update; "
            "eval return: the final policy acting greedily on fresh episodes (summary.csv also has the sampled "
            "policy's); IQM: interquartile mean over seeds with a 95% bootstrap interval; P(beats best): "
            "probability that a random seed of this point beats one of the best point.\n≈ best: the difference "
            "to the best point's mean is within 2 standard errors of the difference. Diverged runs (NaN/Inf in "
            "losses or parameters) are left out of every number and counted in brackets.\n"
            + "".join(line + "\n" for line in seed_notes(rows, swept)))
    diagnoses = ["", "Per-epoch clip fraction, read by the documented rules (thresholds: sweep.diagnosis):"]
    warnings = []
    for row in rows:
        name = point_name(row, swept)
        diagnoses.append(f"- {name}: {row['diagnosis']}")
        warnings += [f"- {name}: {text}" for text in run_time_warnings(row)]
    if warnings:
        diagnoses += ["", "Warnings, over the runs that did not diverge:", *warnings]
    return "\n".join(lines) + "\n" + note + "\n".join(diagnoses) + "\n"


def point_name(row: Mapping, swept: list[str]) -> str:
    return ", ".join(f"{k}={show_value(row[k])}" for k in swept) or "base"


FEW_SEEDS = 5  # below this many seeds per point, the summary says its intervals and IQM are weak


def seed_notes(rows: list[dict], swept: list[str]) -> list[str]:
    """What the seeds of a sweep's rows can tell, computed from their numbers: below
    FEW_SEEDS seeds per point, a warning that the standard errors, the IQM's interval and
    P(beats best) are weak; and, for the two points with the highest mean ranked return, how
    many seeds per point would separate them at the observed spread (`stats.seeds_to_separate`)."""
    if not rows:
        return []
    rank_by = rows[0].get("ranked_on", "train")
    column, short, _ = RANKED[rank_by]
    counts = [row.get("ranked_seeds", row["seeds"] - row["diverged"]) for row in rows]
    fewest = min(counts)
    notes = []
    if fewest < FEW_SEEDS:
        iqm = (" With fewer than 4 seeds the IQM trims nothing: it is the plain mean." if fewest < 4 else "")
        notes.append(f"Few seeds: {fewest} seed{'s' if fewest != 1 else ''} per point"
                     f"{' (at least)' if len(set(counts)) > 1 else ''} "
                     f"— the standard errors, the IQMs' bootstrap intervals and P(beats best) rest on {fewest} "
                     f"number{'s' if fewest != 1 else ''} each and are weak; read them as rough.{iqm}")
    top = sorted((i for i, row in enumerate(rows) if math.isfinite(row[column])), key=lambda i: -rows[i][column])[:2]
    if len(top) == 2:
        a, b = rows[top[0]], rows[top[1]]
        names = f"{point_name(a, swept)} ({a[column]:.3g}) and {point_name(b, swept)} ({b[column]:.3g})"
        if fewest < 2:
            notes.append(f"The top two on {short}, {names}: with 1 seed their spread is unknown; run at least 2.")
        else:
            sd_a, sd_b = a.get("ranked_sd", math.nan), b.get("ranked_sd", math.nan)
            n = stats.seeds_to_separate(a[column] - b[column], sd_a, sd_b)
            spread = f"s.d. over seeds {sd_a:.2g} and {sd_b:.2g}"
            notes.append(f"The top two on {short}, {names}, {spread}: "
                         + (f"{n} seeds per point would separate them at this spread (the smallest n with "
                            f"difference > 2·sqrt((sd_a² + sd_b²)/n)); they have {fewest}."
                            if n is not None else "their means are equal: no number of seeds separates them."))
    return notes


def sweep_metrics_csv(result, swept: list[str], points: list[int] | None = None) -> str:
    """metrics.csv of a sweep: a row per run per update, labelled by point, the swept values,
    seed and divergence; of `points` (default: every point)."""
    # run sets may scan different numbers of epochs: pad per-epoch columns ([runs, updates, epochs]) with NaN
    max_epochs = max(out.metrics["clip_fraction"].shape[-1] for out in result.outputs.values())

    def padded(name, value):
        if value.ndim != 3 or name == "clip_cases":
            return value
        return np.pad(value, ((0, 0), (0, 0), (0, max_epochs - value.shape[2])), constant_values=np.nan)

    lines = []
    for i in range(len(result.points)) if points is None else points:
        labels = [{"point": i, **{key: show_value(result.runs[k].get(key, "")) for key in swept},
                   "seed": result.runs[k]["seed"], "diverged": int(result.diverged[k])}
                  for k in result.point_runs(i)]
        header, rows_i = metric_rows({n: padded(n, v) for n, v in result.point(i).metrics.items()},
                                     result.configs[i].batch_size, labels)
        lines += ([header] if not lines else []) + rows_i
    return csv_text(lines)


def sweep_artefacts(result, rows: list[dict], swept: list[str]) -> list[tuple[str, Callable[[], str | bytes]]]:
    """(file name, function making its contents) for a sweep's results: metrics.csv (a row per
    run per update), summary.md / summary.csv (a row per point, `rows` of `sweep_summary`), the
    plots (`sweep_plots`); `swept`: the swept keys (kinds.base.swept_keys)."""
    def summary_csv():
        columns = list(rows[0])
        return csv_text([columns] + [
            [";".join(f"{v:.4g}" for v in row[c]) if c == "clip_fraction_by_epoch"
             else show_value(row[c]) if c in swept else row.get(c, "") for c in columns] for row in rows])

    return [
        ("metrics.csv", lambda: sweep_metrics_csv(result, swept)),
        ("summary.md", lambda: sweep_markdown(rows, swept, result.spec.threshold)),
        ("summary.csv", summary_csv),
        *sweep_plots(result, rows, swept),
    ]


def show_value(value) -> str:
    """A swept value as a label: floats by %g, lists and mappings as YAML writes them inline."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple, Mapping)):
        return yaml.safe_dump(_plain(value), default_flow_style=True, width=1000).strip()
    return str(value)


def _plain(value):
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _axis(values: list) -> list[str]:
    """The distinct labels of a swept key's values: in numeric order when every value is
    a number, else in order of first appearance (lists and mappings have no order)."""
    labels = list(dict.fromkeys(show_value(v) for v in values))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        labels = [show_value(v) for v in sorted(set(values))]
    return labels


def heatmap_cells(points: list[dict], values: list, a: str, b: str
                  ) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """(labels of a, labels of b, mean[b, a], se[b, a]): each cell the mean and standard error
    over every run whose point has those two values of the swept keys a and b, whatever its
    other swept values. `values[i]` holds point i's per-run numbers (the runs that count);
    non-finite ones are left out, as in the tables. A cell no run reaches is NaN (its se
    too, as is the se of a cell of one run)."""
    xs, ys = _axis([p[a] for p in points]), _axis([p[b] for p in points])
    cells: list[list[list]] = [[[] for _ in xs] for _ in ys]
    for point, v in zip(points, values):
        cells[ys.index(show_value(point[b]))][xs.index(show_value(point[a]))] += list(np.ravel(v))
    numbers = np.array([[stats.mean_se(cell) for cell in row] for row in cells], np.float64)
    numbers = numbers.reshape(len(ys), len(xs), 2)
    return xs, ys, numbers[..., 0], numbers[..., 1]


def heatmap_grid(points: list[dict], values: list, a: str, b: str) -> tuple[list[str], list[str], np.ndarray]:
    """(labels of a, labels of b, grid[b, a]): the means of `heatmap_cells`."""
    return heatmap_cells(points, values, a, b)[:3]


def sweep_plots(result, rows: list[dict], swept: list[str]) -> list[tuple[str, Callable[[], bytes]]]:
    """(file name, draw) for learning_curves.png, clip_fraction_by_epoch.png and, over the
    first two swept keys, heatmap_return.png (the return the rows are ranked on, `ranked_on`)
    and heatmap_kl.png, each cell its mean ± s.e. in a colour readable on it (`text_colour`)."""
    plt = pyplot()
    rank_by = rows[0].get("ranked_on", "train") if rows else "train"

    def label(point):
        return ", ".join(f"{k}={show_value(point[k])}" for k in swept) or "base"

    def learning_curves():
        fig, ax = plt.subplots(figsize=(8, 5))
        window = stats.smoothing_window(max(c.num_updates * c.batch_size for c in result.configs))
        for i, point in enumerate(result.points):
            curves = kept_runs(result, i)[0]["episode_return"]
            if len(curves):
                steps = np.arange(1, curves.shape[1] + 1) * result.configs[i].batch_size
                curve_with_band(ax, steps, curves, label(point), window, lw=1.2)
        _, short, words = RANKED[rank_by]
        episodes = f", {result.spec.eval_episodes} per seed" if rank_by != "train" else ""
        return finish_plot(fig, ax, 7, legend_title=smoothing_legend(window), xlabel="environment steps",
                           ylabel="training episode return per update\n(mean ± s.e. over seeds)",
                           title=f"{result.base.env}: learning curves\n(points ranked on the {short}: {words}{episodes})")

    def clip_by_epoch():
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for row, point in zip(rows, result.points):
            c = np.asarray(row["clip_fraction_by_epoch"], np.float64)
            ax.plot(np.arange(1, c.size + 1), c, marker="o", ms=3, label=label(point))
        return finish_plot(fig, ax, 7, xlabel="epoch within an update",
                           ylabel="clip fraction (mean over updates and seeds)",
                           title="How much each epoch is clipped")

    def ranked_values(i):  # point i's kept runs' ranked return, one number each
        metrics, evaluation = kept_runs(result, i)
        if not len(metrics["episode_return"]):
            return []
        if rank_by == "train":
            return stats.per_run(metrics)["final_return"]
        with stats.quiet_nan_warnings():
            return np.nanmean(evaluation["deterministic" if rank_by == "eval" else "stochastic"], axis=1)

    def kl_values(i):
        metrics = kept_runs(result, i)[0]
        return stats.per_run(metrics)["mean_kl_k3"] if len(metrics["episode_return"]) else []

    def heatmap(per_point, title):
        a, b = swept[0], swept[1]
        xs, ys, grid, se = heatmap_cells(result.points, [per_point(i) for i in range(len(result.points))], a, b)
        fig, ax = plt.subplots(figsize=(1.4 * len(xs) + 2.5, 0.9 * len(ys) + 2))
        cmap = plt.get_cmap("viridis").with_extremes(bad="0.85")  # a cell no run reached: light grey
        image = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto", cmap=cmap)
        ax.set_xticks(range(len(xs)), xs)
        ax.set_yticks(range(len(ys)), ys)
        others = swept[2:]
        ax.set(xlabel=a, ylabel=b, title=title + (f"\n(mean over every run of {', '.join(others)})" if others else ""))
        for (y, x), value in np.ndenumerate(grid):
            finite = np.isfinite(value)
            text = (f"{value:.3g}" + (f"\n± {se[y, x]:.2g}" if np.isfinite(se[y, x]) else "")) if finite else "n/a"
            colour = text_colour(image.cmap(image.norm(value))) if finite else "black"
            ax.text(x, y, text, ha="center", va="center", color=colour, fontsize=8)
        fig.colorbar(image, ax=ax)
        fig.tight_layout()
        return figure_bytes(fig, 110)

    plots = [("learning_curves.png", learning_curves), ("clip_fraction_by_epoch.png", clip_by_epoch)]
    if len(swept) >= 2:
        title = f"{RANKED[rank_by][1]} (mean ± s.e. over seeds)"
        plots += [("heatmap_return.png", lambda: heatmap(ranked_values, title)),
                  ("heatmap_kl.png", lambda: heatmap(kl_values, "mean KL (k3) (mean ± s.e. over seeds)"))]
    return plots
