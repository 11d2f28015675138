"""Tables, summaries, CSV files and plots of several seeds' metrics (host side, numpy).

The numbers come from purejaxppo.experiments.stats and the clip-fraction reading from
purejaxppo.experiments.diagnosis; this module only picks metrics out of results and formats
them: pure functions returning text or bytes. purejaxppo.experiments.folder writes them.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Callable, Mapping

import numpy as np
import yaml

from purejaxppo.experiments import diagnosis, stats

CLIP_CASE_NAMES = [f"clip_cases_{sign}_{region}" for sign in ("adv_pos", "adv_neg")
                   for region in ("inside", "above", "below")]


def json_text(value, indent: int | None = None) -> str:
    """Strict JSON (summary.json, `eval --json`): NaN and Inf, which JSON has no words for,
    become null."""
    return json.dumps(_finite(value), indent=indent, allow_nan=False)


def _finite(value):
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def format_mean_se(mean: float, se: float, digits: int = 3) -> str:
    if math.isnan(mean):
        return "n/a"
    text = f"{mean:.{digits}g}"
    return text if math.isnan(se) else f"{text} ± {se:.2g}"


def summarize(metrics: Mapping[str, np.ndarray], *, steps_per_run: int, run_seconds: float,
              compile_seconds: float, evaluation: Mapping[str, np.ndarray] | None = None,
              diverged=None, env: str | None = None, max_episode_steps: int | None = None) -> dict[str, Any]:
    """Per-seed final numbers, then mean and standard error over seeds.

    `metrics` has a leading seed axis: [seeds, num_updates, ...]; `evaluation` (the final
    policy on fresh episodes): {"deterministic", "stochastic"} -> [seeds, episodes], and
    where counted "<mode>_no_action_steps" -> [seeds, episodes];
    `diverged`: [seeds] bool (NaN/Inf in losses or parameters): as in a sweep's table,
    diverged seeds are counted and left out of the means. `diagnosis` reads the per-epoch
    clip fraction by the sweep's rules. `counts` and `warnings`: what went wrong at run time
    (`run_time_counts`, `run_time_warnings`; `env` and `max_episode_steps` name where).
    """
    per_seed = dict(stats.per_run(metrics))
    with stats.quiet_nan_warnings():
        for mode, name in (("deterministic", "eval_return"), ("stochastic", "eval_return_stochastic")):
            if evaluation and mode in evaluation:
                per_seed[name] = np.nanmean(np.asarray(evaluation[mode], np.float64), axis=1)
    seeds = per_seed["final_return"].shape[0]
    ok = np.ones(seeds, bool) if diverged is None else ~np.asarray(diverged, bool)
    max_kl = stats.finite(per_seed["max_update_kl"][ok])
    runaway = per_seed["max_update_kl"][ok] > diagnosis.DIAGNOSIS_DEFAULTS["runaway_kl_above"]
    clip_by_epoch = stats.mean_by_epoch(np.asarray(metrics["clip_fraction"])[ok])
    summary: dict[str, Any] = {"seeds": seeds, "diverged": int(seeds - ok.sum()), "runaway": int(runaway.sum()),
                               "diagnosis": diagnosis.diagnose(clip_by_epoch,
                                                               max_kl=float(max(max_kl, default=math.nan)))}
    for name in ("final_return", "eval_return", "eval_return_stochastic", "mean_kl_k3", "last_epoch_clip_fraction",
                 "explained_variance", "epochs_run"):
        if name not in per_seed:
            continue
        values = per_seed[name]
        mean, se = stats.mean_se(values[ok])
        summary[name] = {"mean": mean, "se": se, "per_seed": [float(v) for v in values]}
    summary["counts"] = run_time_counts(metrics, evaluation or {}, ok)
    summary["warnings"] = run_time_warnings(summary["counts"], env, max_episode_steps)
    summary["steps_per_second"] = seeds * steps_per_run / run_seconds
    summary["run_seconds"] = run_seconds
    summary["compile_seconds"] = compile_seconds
    return summary


EVAL_MODE_NAMES = {"deterministic": "greedy", "stochastic": "sampled"}


def run_time_counts(metrics: Mapping[str, np.ndarray], evaluation: Mapping[str, np.ndarray], ok) -> dict[str, int]:
    """What went wrong at run time, summed over the seeds `ok` ([seeds] bool): steps whose
    action mask allowed no action, in training ("no_action_steps") and in each evaluation
    that counted them ("no_action_steps_<mode>"); training episodes that ran past
    max_episode_steps ("overlong_episodes"); per evaluation mode, its episodes
    ("eval_episodes_<mode>") and those that did not end within max_episode_steps, their
    return NaN ("unfinished_<mode>")."""
    def total(values):
        return int(np.sum(np.asarray(values)[ok]))

    counts = {name: total(metrics[name]) for name in ("no_action_steps", "overlong_episodes") if name in metrics}
    for mode in EVAL_MODE_NAMES:
        if mode in evaluation:
            returns = np.asarray(evaluation[mode])[ok]
            counts[f"eval_episodes_{mode}"] = int(returns.size)
            counts[f"unfinished_{mode}"] = int(np.sum(np.isnan(returns)))
        if f"{mode}_no_action_steps" in evaluation:
            counts[f"no_action_steps_{mode}"] = total(evaluation[f"{mode}_no_action_steps"])
    return counts


def run_time_warnings(counts: Mapping[str, int], env: str | None = None,
                      max_episode_steps: int | None = None) -> list[str]:
    """A sentence for each thing `run_time_counts` found (none when nothing went wrong)."""
    where = f" ({env})" if env else ""
    limit = "max_episode_steps" + (f"={max_episode_steps}" if max_episode_steps is not None else "")
    warnings = []
    no_action = {"training": counts.get("no_action_steps", 0),
                 **{f"{name} evaluation": counts.get(f"no_action_steps_{mode}", 0)
                    for mode, name in EVAL_MODE_NAMES.items()}}
    if any(no_action.values()):
        places = ", ".join(f"{n} in {place}" for place, n in no_action.items() if n)
        warnings.append(f"{sum(no_action.values())} steps had an action mask that allowed no action{where} "
                        f"({places}): the policy took action 0 there (every action masked alike)")
    if counts.get("overlong_episodes", 0):
        warnings.append(f"{counts['overlong_episodes']} training episodes ran past {limit}{where} without "
                        f"ending: the environment does not end its episodes at its own time limit")
    for mode, name in EVAL_MODE_NAMES.items():
        if counts.get(f"unfinished_{mode}", 0):
            warnings.append(f"{counts[f'unfinished_{mode}']} of {counts[f'eval_episodes_{mode}']} {name} "
                            f"evaluation episodes did not end within {limit}{where}: left out of the mean")
    return warnings


SUMMARY_ROWS = [
    ("final_return", "final episode return"),
    ("eval_return", "final policy, greedy, fresh episodes"),
    ("eval_return_stochastic", "final policy, sampled, fresh episodes"),
    ("mean_kl_k3", "mean KL (k3)"),
    ("last_epoch_clip_fraction", "clip fraction, last epoch"),
    ("explained_variance", "explained variance (final)"),
    ("epochs_run", "epochs run per update"),
]


def summary_lines(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = [(label, format_mean_se(summary[key]["mean"], summary[key]["se"])) for key, label in SUMMARY_ROWS
            if key in summary]
    rows.append(("diverged runs (NaN/Inf; not in the means)", str(summary["diverged"])))
    rows.append((f"runaway runs (an update's KL > {diagnosis.DIAGNOSIS_DEFAULTS['runaway_kl_above']:g})",
                 str(summary["runaway"])))
    rows.append(("steps per second", f"{summary['steps_per_second']:,.0f}"))
    rows.append(("compile time", f"{summary['compile_seconds']:.1f} s"))
    rows += [("warning", text) for text in summary.get("warnings", [])]
    return rows


def summary_markdown(summary: Mapping[str, Any]) -> str:
    lines = [f"| metric (mean ± s.e. over {summary['seeds']} seeds) | value |", "|---|---|"]
    lines += [f"| {a} | {b} |" for a, b in summary_lines(summary)]
    return "\n".join(lines) + f"\n\nPer-epoch clip fraction: {summary['diagnosis']}\n"


def metric_rows(metrics: Mapping[str, np.ndarray], batch_size: int, labels: list[dict]):
    """(header, rows): one row per run per update, per-epoch metrics as name_e1..E.

    `metrics` has a leading run axis; `labels[r]` are run r's leading columns (seed, ...).
    """
    m = {k: np.asarray(v) for k, v in metrics.items()}
    num_updates = m["episode_return"].shape[1]
    columns: list[tuple[str, np.ndarray]] = []
    for name in sorted(m):
        value = m[name]
        if name == "clip_cases":
            flat = value.reshape(*value.shape[:2], 6)
            columns += [(case, flat[..., j]) for j, case in enumerate(CLIP_CASE_NAMES)]
        elif value.ndim == 3:
            columns += [(f"{name}_e{e + 1}", value[..., e]) for e in range(value.shape[-1])]
        else:
            columns.append((name, value))
    header = [*labels[0], "update", "env_steps"] + [c for c, _ in columns]
    rows = []
    for r, label in enumerate(labels):
        for u in range(num_updates):
            rows.append([*label.values(), u + 1, (u + 1) * batch_size] + [_cell(v[r, u]) for _, v in columns])
    return header, rows


def _cell(x):
    x = x.item()
    if isinstance(x, float):
        return "" if math.isnan(x) else f"{x:.6g}"
    return x


def curve_with_band(ax, steps, curves, label, window, **style):
    """Learning curves `curves` ([seeds, points]) at `steps`: the raw mean over seeds, faint,
    and over it in full colour their mean smoothed (stats.ema_over_steps, `window` steps)
    with a ± 1 standard-error band of the smoothed values over seeds (2+ seeds)."""
    raw, _ = stats.mean_se_by_step(curves)
    mean, se = stats.mean_se_by_step(stats.ema_over_steps(steps, curves, window))
    (line,) = ax.plot(steps, mean, label=label, **style)
    ax.plot(steps, raw, lw=0.6, alpha=0.3, color=line.get_color())
    if se is not None:
        ax.fill_between(steps, mean - se, mean + se, alpha=0.2, color=line.get_color())


def smoothing_legend(window: float) -> str:
    """The legend title of a smoothed plot: what is faint, what is smoothed, and how."""
    return f"smoothed: EMA over {window:,.0f} env steps\n(faint: the raw mean per update)"


def _finish(fig, ax, legend_size=None, legend_title=None, **labels) -> bytes:
    ax.set(**labels)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size, ncol=2 if legend_size else 1, title=legend_title,
              title_fontsize=legend_size)
    fig.tight_layout()
    return figure_bytes(fig, 120)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_learning_curve(metrics: Mapping[str, np.ndarray], batch_size: int, title: str) -> bytes:
    """learning_curve.png: the mean return over seeds, raw (faint) and smoothed with a ± 1 s.e.
    band (`curve_with_band`; the window: 5% of the run's steps)."""
    returns = np.asarray(metrics["episode_return"])  # [seeds, updates]
    steps = np.arange(1, returns.shape[1] + 1) * batch_size
    window = stats.smoothing_window(steps[-1])
    fig, ax = pyplot().subplots(figsize=(7, 4))
    curve_with_band(ax, steps, returns, f"mean of {returns.shape[0]} seed(s) ± 1 s.e.", window)
    return _finish(fig, ax, legend_title=smoothing_legend(window), xlabel="environment steps",
                   ylabel="episode return", title=title)


def figure_bytes(fig, dpi: int) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    pyplot().close(fig)
    return buffer.getvalue()


def _csv_text(rows) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()


def run_artefacts(config, metrics: Mapping[str, np.ndarray], summary: Mapping[str, Any],
                  seeds: list[int]) -> list[tuple[str, Callable[[], str | bytes]]]:
    """(file name, function making its contents) for a run's results: metrics.csv,
    summary.json, summary.md, learning_curve.png (`config`: the run's PPOConfig)."""
    header, rows = metric_rows(metrics, config.batch_size, [{"seed": s} for s in seeds])
    return [
        ("metrics.csv", lambda: _csv_text([header, *rows])),
        ("summary.json", lambda: json_text({**summary, "seed_values": seeds}, indent=2)),
        ("summary.md", lambda: summary_markdown(summary)),
        ("learning_curve.png", lambda: plot_learning_curve(metrics, config.batch_size, config.env)),
    ]


# --------------------------------------------------------------------------------------
# Sweeps
# --------------------------------------------------------------------------------------
def kept_runs(result, point: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(metrics, evaluation) of point `point`'s runs that did not diverge, stacked: [runs, ...]."""
    ok = ~result.diverged[result.point_runs(point)]
    stacked = result.point(point)
    return ({name: value[ok] for name, value in stacked.metrics.items()},
            {mode: value[ok] for mode, value in stacked.evaluation.items()})


def sweep_summary(result) -> list[dict[str, Any]]:
    """One row per grid point: mean ± s.e. over the seeds that did not diverge, and more."""
    rows = []
    finals: list[np.ndarray] = []
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
        for name, values in (("train_return", final), ("eval_return", evals["deterministic"]),
                             ("eval_return_stochastic", evals["stochastic"]), ("mean_kl", per_seed["mean_kl_k3"]),
                             ("clip_fraction_last_epoch", per_seed["last_epoch_clip_fraction"])):
            row[name], row[name + "_se"] = stats.mean_se(values)
        row["max_kl_worst_seed"] = float(max(stats.finite(per_seed["max_update_kl"]), default=math.nan))
        row["iqm_return"], row["iqm_ci_low"], row["iqm_ci_high"] = stats.interquartile_mean(final)
        row["clip_fraction_by_epoch"] = [float(v) for v in clip_by_epoch]
        row["diagnosis"] = diagnosis.diagnose(clip_by_epoch, result.spec.diagnosis, row["max_kl_worst_seed"])
        if result.spec.threshold is not None:
            row["seeds_at_threshold"] = int(np.sum(final >= result.spec.threshold))
        row.update(run_time_counts(metrics, evaluation, np.ones(ok, bool)))
        rows.append(row)
        finals.append(final)
    best, indistinguishable = stats.best_and_indistinguishable(
        [row["train_return"] for row in rows], [row["train_return_se"] for row in rows])
    if best is not None:
        for i, (row, final) in enumerate(zip(rows, finals)):
            row["best"] = i == best
            row["indistinguishable_from_best"] = indistinguishable[i]
            row["p_beats_best"] = stats.probability_of_improvement(final, finals[best])
    return rows


def sweep_markdown(rows: list[dict], swept: list[str], threshold=None) -> str:
    head = [*swept, "seeds (diverged)", "train return ± s.e.", "IQM [95% CI]", "eval return ± s.e.",
            "mean KL ± s.e.",
            "max KL (worst seed)", "clip fraction, last epoch", "P(beats best)", "≈ best"]
    if threshold is not None:
        head.append(f"seeds ≥ {threshold:g}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [show_value(row[k]) for k in swept]
        cells += [f"{row['seeds']} ({row['diverged']})",
                  format_mean_se(row["train_return"], row["train_return_se"]),
                  f"{row['iqm_return']:.3g} [{row['iqm_ci_low']:.3g}, {row['iqm_ci_high']:.3g}]",
                  format_mean_se(row["eval_return"], row["eval_return_se"]),
                  format_mean_se(row["mean_kl"], row["mean_kl_se"]),
                  f"{row['max_kl_worst_seed']:.3g}",
                  format_mean_se(row["clip_fraction_last_epoch"], row["clip_fraction_last_epoch_se"]),
                  f"{row.get('p_beats_best', math.nan):.2f}",
                  ("best" if row.get("best") else "yes" if row.get("indistinguishable_from_best") else "no")]
        if threshold is not None:
            cells.append(f"{row['seeds_at_threshold']}/{row['seeds'] - row['diverged']}")
        lines.append("| " + " | ".join(cells) + " |")
    note = ("\ntrain return: mean return of the episodes that ended in the last update; IQM: "
            "interquartile mean over seeds with a 95% bootstrap interval; eval return: the final "
            "policy acting greedily on fresh episodes (summary.csv also has the sampled policy's); "
            "P(beats best): probability that a random seed of this point beats one of the best point."
            "\n≈ best: the difference to the best point's mean is within 2 standard errors of the "
            "difference (so five seeds do not separate them). Diverged runs (NaN/Inf in losses or "
            "parameters) are left out of every number and counted in brackets.\n")
    diagnoses = ["", "Per-epoch clip fraction, read by the documented rules (thresholds: sweep.diagnosis):"]
    warnings = []
    for row in rows:
        name = ", ".join(f"{k}={show_value(row[k])}" for k in swept) or "base"
        diagnoses.append(f"- {name}: {row['diagnosis']}")
        warnings += [f"- {name}: {text}" for text in run_time_warnings(row)]
    if warnings:
        diagnoses += ["", "Warnings, over the runs that did not diverge:", *warnings]
    return "\n".join(lines) + "\n" + note + "\n".join(diagnoses) + "\n"


def _sweep_metrics_csv(result, swept: list[str]) -> str:
    """metrics.csv of a sweep: a row per run per update, labelled by point, the swept values,
    seed and divergence."""
    # run sets may scan different numbers of epochs: pad per-epoch columns ([runs, updates, epochs]) with NaN
    max_epochs = max(out.metrics["clip_fraction"].shape[-1] for out in result.outputs.values())

    def padded(name, value):
        if value.ndim != 3 or name == "clip_cases":
            return value
        return np.pad(value, ((0, 0), (0, 0), (0, max_epochs - value.shape[2])), constant_values=np.nan)

    lines = []
    for i in range(len(result.points)):
        labels = [{"point": i, **{key: show_value(result.runs[k].get(key, "")) for key in swept},
                   "seed": result.runs[k]["seed"], "diverged": int(result.diverged[k])}
                  for k in result.point_runs(i)]
        header, rows_i = metric_rows({n: padded(n, v) for n, v in result.point(i).metrics.items()},
                                     result.configs[i].batch_size, labels)
        lines += ([header] if i == 0 else []) + rows_i
    return _csv_text(lines)


def sweep_artefacts(result, rows: list[dict], swept: list[str]) -> list[tuple[str, Callable[[], str | bytes]]]:
    """(file name, function making its contents) for a sweep's results: metrics.csv (a row per
    run per update), summary.md / summary.csv (a row per point, `rows` of `sweep_summary`), the
    plots (`sweep_plots`); `swept`: the swept keys (sweep.swept_keys). A PBT sweep's are
    `pbt_artefacts`."""
    def summary_csv():
        columns = list(rows[0])
        return _csv_text([columns] + [
            [";".join(f"{v:.4g}" for v in row[c]) if c == "clip_fraction_by_epoch"
             else show_value(row[c]) if c in swept else row.get(c, "") for c in columns] for row in rows])

    return [
        ("metrics.csv", lambda: _sweep_metrics_csv(result, swept)),
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


def heatmap_grid(points: list[dict], values: list, a: str, b: str) -> tuple[list[str], list[str], np.ndarray]:
    """(labels of a, labels of b, grid[b, a]): each cell the mean over every run whose point
    has those two values of the swept keys a and b, whatever its other swept values.
    `values[i]` holds point i's per-run numbers (the runs that count); non-finite ones are
    left out, as in the tables. A cell no run reaches is NaN."""
    xs, ys = _axis([p[a] for p in points]), _axis([p[b] for p in points])
    cells: list[list[list]] = [[[] for _ in xs] for _ in ys]
    for point, v in zip(points, values):
        cells[ys.index(show_value(point[b]))][xs.index(show_value(point[a]))] += list(np.ravel(v))
    return xs, ys, np.array([[stats.mean_se(cell)[0] for cell in row] for row in cells], np.float64)


def sweep_plots(result, rows: list[dict], swept: list[str]) -> list[tuple[str, Callable[[], bytes]]]:
    """(file name, draw) for learning_curves.png, clip_fraction_by_epoch.png and, over the
    first two swept keys, heatmap_return.png and heatmap_kl.png."""
    plt = pyplot()

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
        return _finish(fig, ax, 7, legend_title=smoothing_legend(window), xlabel="environment steps",
                       ylabel="episode return (mean ± s.e. over seeds)", title=f"{result.base.env}: learning curves")

    def clip_by_epoch():
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for row, point in zip(rows, result.points):
            c = np.asarray(row["clip_fraction_by_epoch"], np.float64)
            ax.plot(np.arange(1, c.size + 1), c, marker="o", ms=3, label=label(point))
        return _finish(fig, ax, 7, xlabel="epoch within an update",
                       ylabel="clip fraction (mean over updates and seeds)", title="How much each epoch is clipped")

    def heatmap(name, title):
        values = []  # per point, each kept run's number
        for i in range(len(result.points)):
            metrics = kept_runs(result, i)[0]
            values.append(stats.per_run(metrics)[name] if len(metrics["episode_return"]) else [])
        a, b = swept[0], swept[1]
        xs, ys, grid = heatmap_grid(result.points, values, a, b)
        fig, ax = plt.subplots(figsize=(1.3 * len(xs) + 2.5, 0.9 * len(ys) + 2))
        image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
        ax.set_xticks(range(len(xs)), xs)
        ax.set_yticks(range(len(ys)), ys)
        others = swept[2:]
        ax.set(xlabel=a, ylabel=b, title=title + (f" (mean over every run of {', '.join(others)})" if others else ""))
        for (y, x), value in np.ndenumerate(grid):
            ax.text(x, y, f"{value:.3g}", ha="center", va="center", color="w", fontsize=8)
        fig.colorbar(image, ax=ax)
        fig.tight_layout()
        return figure_bytes(fig, 110)

    plots = [("learning_curves.png", learning_curves), ("clip_fraction_by_epoch.png", clip_by_epoch)]
    if len(swept) >= 2:
        plots += [("heatmap_return.png", lambda: heatmap("final_return", "final train return")),
                  ("heatmap_kl.png", lambda: heatmap("mean_kl_k3", "mean KL (k3)"))]
    return plots


# --------------------------------------------------------------------------------------
# Population-based training
# --------------------------------------------------------------------------------------
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
    the last fitness; diverged runs last). Over the population: each member's greedy return
    (`per_run`), their mean ± s.e. and median. `best`: the first-ranked member with its
    schedule (`pbt_schedule`)."""
    lineage, names = result.lineage, list(result.spec.pbt["hyperparameters"])
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

    for rank, m in enumerate(sorted(members, key=merit, reverse=True), start=1):  # stable: ties by run
        m["rank"] = rank
    kept = [m for m in members if not m["diverged"] and m["eval_return"]]
    greedy = np.array([m["eval_return"]["mean"] for m in kept], np.float64)
    best = min(members, key=lambda m: m["rank"])
    cfg, spec = result.configs[0], result.spec
    summary: dict[str, Any] = {
        "env": result.base.env, "populations": spec.seeds, "population": spec.pbt["population"],
        "interval": spec.pbt["interval"], "intervals": last + 1, "batch_size": cfg.batch_size,
        "explored": names, "exploit_events": sum(r["copied_from"] != r["member"] for r in lineage),
        "diverged": int(np.sum(result.diverged)),
        "eval_return": {**_eval_numbers(greedy), "median": float(np.median(greedy)) if greedy.size else math.nan,
                        "per_run": [float(m["eval_return"]["mean"]) if m["eval_return"] else math.nan
                                    for m in members]},
        "threshold": spec.threshold, "members": members,
        "best": {**best, "schedule": pbt_schedule(lineage, best["run"])},
        "steps_per_second": len(result.runs) * cfg.num_updates * cfg.batch_size / result.run_seconds,
        "run_seconds": result.run_seconds, "compile_seconds": result.compile_seconds,
        "step_seconds": float(sum(result.population.step_seconds))}
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

    for m in sorted(summary["members"], key=lambda m: m["rank"]):
        values = " | ".join(f"{m['initial'][n]:.3g} | {m['final'][n]:.3g}" for n in names)
        fitness = "n/a" if m["final_fitness"] is None else f"{m['final_fitness']:.4g}"
        lines.append(f"| {m['rank']}{' (diverged)' if m['diverged'] else ''} | {m['member']} | {m['seed']} | "
                     f"{values} | {m['copies']} | {fitness} | {shown(m['eval_return'])} | "
                     f"{shown(m['eval_return_stochastic'])} |")
    best = summary["best"]
    lines += ["", f"## The best member: member {best['member']}, seed {best['seed']} (run {best['run']})", "",
              f"Greedy return {shown(best['eval_return'])}; final values "
              + ", ".join(f"{n} = {best['final'][n]:.4g}" for n in names) + ". The schedule its weights trained "
              "with, followed back through the lineage (held by: the member whose weights they were in that "
              "interval):", "",
              "| interval | updates | held by | copied from | " + " | ".join(names) + " | fitness |",
              "|" + "---|" * (5 + len(names))]
    for r in best["schedule"]:
        fitness = "n/a" if r["fitness"] is None else f"{r['fitness']:.4g}"
        lines.append(f"| {r['interval']} | {r['updates']} | {r['member']} | {r['copied_from']} | "
                     + " | ".join(f"{r[n]:.4g}" for n in names) + f" | {fitness} |")
    note = ("\nrank: by the greedy return on fresh episodes, then the last interval's fitness; replaced: the "
            "intervals after which the member copied another's weights; last fitness: the mean return of the "
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
        fig.colorbar(cm.ScalarMappable(ranks, cmap), ax=ax, label="final rank (1: best)")
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

    dists = result.spec.pbt["hyperparameters"]
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
        return _csv_text([columns] + [[blank(row[c]) for c in columns] for row in result.lineage])

    def summary_csv():
        header = ["run", "member", "seed", "rank", "diverged", *(f"initial_{n}" for n in names), *names, "replaced",
                  "last_fitness", "eval_return", "eval_return_se", "eval_return_stochastic",
                  "eval_return_stochastic_se"]
        rows = [[m["run"], m["member"], m["seed"], m["rank"], int(m["diverged"]),
                 *(m["initial"][n] for n in names), *(m["final"][n] for n in names), m["copies"],
                 blank(m["final_fitness"]), *(blank(m[e][part]) if m[e] else "" for e in ("eval_return",
                                              "eval_return_stochastic") for part in ("mean", "se"))]
                for m in summary["members"]]
        return _csv_text([header, *rows])

    return [
        ("metrics.csv", lambda: _sweep_metrics_csv(result, [])),
        ("pbt.csv", lineage_csv),
        ("summary.json", lambda: json_text(summary, indent=2)),
        ("summary.csv", summary_csv),
        *pbt_plots(result, summary),
        ("summary.md", lambda: pbt_markdown(summary)),
    ]
