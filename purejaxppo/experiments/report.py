"""Tables, summaries, CSV files and plots of several seeds' metrics (host side, numpy).

The numbers come from purejaxppo.experiments.stats and the clip-fraction reading from
purejaxppo.experiments.diagnosis; this module only picks metrics out of results, formats and writes.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import yaml

from purejaxppo.experiments import stats
from purejaxppo.experiments.diagnosis import DIAGNOSIS_DEFAULTS, diagnose  # noqa: F401  (re-exported)
from purejaxppo.experiments.stats import (interquartile_mean, last_epoch_values, mean_se,  # noqa: F401  (re-exported)
                              probability_of_improvement)
from purejaxppo.experiments.sweep import swept_keys

CLIP_CASE_NAMES = [f"clip_cases_{sign}_{region}" for sign in ("adv_pos", "adv_neg")
                   for region in ("inside", "above", "below")]


def format_mean_se(mean: float, se: float, digits: int = 3) -> str:
    if math.isnan(mean):
        return "n/a"
    text = f"{mean:.{digits}g}"
    return text if math.isnan(se) else f"{text} ± {se:.2g}"


def summarize(metrics: Mapping[str, np.ndarray], *, steps_per_run: int, run_seconds: float,
              compile_seconds: float, evaluation: Mapping[str, np.ndarray] | None = None,
              diverged=None) -> dict[str, Any]:
    """Per-seed final numbers, then mean and standard error over seeds.

    `metrics` has a leading seed axis: [seeds, num_updates, ...]; `evaluation` (the final
    policy on fresh episodes): {"deterministic", "stochastic"} -> [seeds, episodes];
    `diverged`: [seeds] bool (NaN/Inf in losses or parameters): as in a sweep's table,
    diverged seeds are counted and left out of the means. `diagnosis` reads the per-epoch
    clip fraction by the sweep's rules.
    """
    per_seed = dict(stats.per_run(metrics))
    with stats.quiet_nan_warnings():
        for mode, name in (("deterministic", "eval_return"), ("stochastic", "eval_return_stochastic")):
            if evaluation and mode in evaluation:
                per_seed[name] = np.nanmean(np.asarray(evaluation[mode], np.float64), axis=1)
    seeds = per_seed["final_return"].shape[0]
    ok = np.ones(seeds, bool) if diverged is None else ~np.asarray(diverged, bool)
    summary: dict[str, Any] = {"seeds": seeds, "diverged": int(seeds - ok.sum()),
                               "diagnosis": diagnose(stats.mean_by_epoch(np.asarray(metrics["clip_fraction"])[ok]))}
    for name in ("final_return", "eval_return", "eval_return_stochastic", "mean_kl_k3", "last_epoch_clip_fraction",
                 "explained_variance", "epochs_run"):
        if name not in per_seed:
            continue
        values = per_seed[name]
        mean, se = mean_se(values[ok])
        summary[name] = {"mean": mean, "se": se, "per_seed": [float(v) for v in values]}
    summary["steps_per_second"] = seeds * steps_per_run / run_seconds
    summary["run_seconds"] = run_seconds
    summary["compile_seconds"] = compile_seconds
    return summary


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
    rows.append(("steps per second", f"{summary['steps_per_second']:,.0f}"))
    rows.append(("compile time", f"{summary['compile_seconds']:.1f} s"))
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


def _band(ax, steps, curves, label, **style):
    """Mean over seeds (rows of `curves`) with a ± 1 standard-error band (2+ seeds)."""
    mean, se = stats.mean_se_by_step(curves)
    (line,) = ax.plot(steps, mean, label=label, **style)
    if se is not None:
        ax.fill_between(steps, mean - se, mean + se, alpha=0.2, color=line.get_color())


def _save(fig, ax, path: Path, legend_size=None, **labels) -> Path:
    import matplotlib.pyplot as plt

    ax.set(**labels)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size, ncol=2 if legend_size else 1)
    fig.tight_layout()
    fig.savefig(_new(path), dpi=120)
    plt.close(fig)
    return path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_learning_curve(path: Path, metrics: Mapping[str, np.ndarray], batch_size: int, title: str):
    returns = np.asarray(metrics["episode_return"])  # [seeds, updates]
    steps = np.arange(1, returns.shape[1] + 1) * batch_size
    fig, ax = _pyplot().subplots(figsize=(7, 4))
    _band(ax, steps, returns, f"mean of {returns.shape[0]} seed(s) ± 1 s.e.")
    _save(fig, ax, path, xlabel="environment steps", ylabel="episode return", title=title)


def _new(path: Path) -> Path:
    """A run folder's files are never replaced: refuse a path that exists."""
    if path.exists():
        raise FileExistsError(f"{path} exists already; refusing to overwrite it")
    return path


def write_new(path: Path, text: str) -> None:
    """Write a file that must not exist yet (FileExistsError otherwise)."""
    with open(path, "x") as f:
        f.write(text)


def config_yaml(config: Mapping[str, Any], spec=None) -> str:
    """A run's resolved config (config.yaml), or a sweep's base config and spec (sweep.yaml)."""
    values = dict(config)
    if spec is not None:
        values["sweep"] = spec_dict(spec)
    return yaml.safe_dump(values, sort_keys=False)


def spec_dict(spec) -> dict[str, Any]:
    """A SweepSpec as plain YAML/JSON values (it reloads with sweep.make_spec)."""
    return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in dataclasses.asdict(spec).items()}


def write_run_folder(folder: Path, config: Mapping[str, Any], metrics: Mapping[str, np.ndarray],
                     summary: Mapping[str, Any], batch_size: int, seeds: list[int]) -> None:
    """metrics.csv, summary.json, summary.md, learning_curve.png (config.yaml is written
    when the run starts)."""
    folder.mkdir(parents=True, exist_ok=True)
    header, rows = metric_rows(metrics, batch_size, [{"seed": s} for s in seeds])
    with open(folder / "metrics.csv", "x", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    write_new(folder / "summary.json", json.dumps({**summary, "seed_values": seeds}, indent=2))
    write_new(folder / "summary.md", summary_markdown(summary))
    plot_learning_curve(folder / "learning_curve.png", metrics, batch_size, str(config.get("env", "")))


# --------------------------------------------------------------------------------------
# Sweeps
# --------------------------------------------------------------------------------------
def sweep_summary(result) -> list[dict[str, Any]]:
    """One row per grid point: mean ± s.e. over the seeds that did not diverge, and more."""
    rows = []
    finals: list[np.ndarray] = []
    for i, point in enumerate(result.points):
        members = list(result.point_runs(i))
        ok = [k for k in members if not result.diverged[k]]
        if ok:
            per_seed = stats.per_run({name: np.stack([result.metrics[k][name] for k in ok])
                                      for name in ("episode_return", "kl_k3", "clip_fraction", "epochs_run",
                                                   "explained_variance")})
            clip_by_epoch = stats.mean_by_epoch(np.stack([result.metrics[k]["clip_fraction"] for k in ok]))
        else:
            per_seed = {name: np.array([]) for name in ("final_return", "mean_kl_k3", "max_update_kl",
                                                        "last_epoch_clip_fraction")}
            clip_by_epoch = np.array([])
        final = np.asarray(per_seed["final_return"], np.float64)
        evals = {mode: [np.nanmean(result.evaluation[k][mode]) for k in ok if mode in result.evaluation[k]]
                 for mode in ("deterministic", "stochastic")}
        row = {**point, "seeds": len(members), "diverged": len(members) - len(ok)}
        for name, values in (("train_return", final), ("eval_return", evals["deterministic"]),
                             ("eval_return_stochastic", evals["stochastic"]), ("mean_kl", per_seed["mean_kl_k3"]),
                             ("clip_fraction_last_epoch", per_seed["last_epoch_clip_fraction"])):
            row[name], row[name + "_se"] = mean_se(values)
        row["max_kl_worst_seed"] = float(max(stats.finite(per_seed["max_update_kl"]), default=math.nan))
        row["iqm_return"], row["iqm_ci_low"], row["iqm_ci_high"] = interquartile_mean(final)
        row["clip_fraction_by_epoch"] = [float(v) for v in clip_by_epoch]
        row["diagnosis"] = diagnose(clip_by_epoch, result.spec.diagnosis)
        if result.spec.threshold is not None:
            row["seeds_at_threshold"] = int(np.sum(final >= result.spec.threshold))
        rows.append(row)
        finals.append(final)
    best, indistinguishable = stats.best_and_indistinguishable(
        [row["train_return"] for row in rows], [row["train_return_se"] for row in rows])
    if best is not None:
        for i, (row, final) in enumerate(zip(rows, finals)):
            row["best"] = i == best
            row["indistinguishable_from_best"] = indistinguishable[i]
            row["p_beats_best"] = probability_of_improvement(final, finals[best])
    return rows


def sweep_markdown(rows: list[dict], swept: list[str], threshold=None) -> str:
    head = [*swept, "seeds (diverged)", "train return ± s.e.", "IQM [95% CI]", "eval return ± s.e.",
            "mean KL ± s.e.",
            "max KL (worst seed)", "clip fraction, last epoch", "P(beats best)", "≈ best"]
    if threshold is not None:
        head.append(f"seeds ≥ {threshold:g}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [f"{row[k]:g}" if isinstance(row[k], float) else str(row[k]) for k in swept]
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
    for row in rows:
        name = ", ".join(f"{k}={row[k]}" for k in swept) or "base"
        diagnoses.append(f"- {name}: {row['diagnosis']}")
    return "\n".join(lines) + "\n" + note + "\n".join(diagnoses) + "\n"


def write_sweep_folder(folder: Path, result, rows: list[dict]) -> None:
    """metrics.csv (a row per run per update), summary.md / summary.csv (a row per point)
    (sweep.yaml, the base config and spec, is written when the sweep starts)."""
    folder.mkdir(parents=True, exist_ok=True)
    swept = swept_keys(result)
    # static groups may scan different numbers of epochs: pad per-epoch columns with NaN
    max_epochs = max(m["clip_fraction"].shape[-1] for m in result.metrics)

    def padded(name, value):
        if value.ndim != 2 or name == "clip_cases":
            return value
        return np.pad(value, ((0, 0), (0, max_epochs - value.shape[1])), constant_values=np.nan)

    with open(folder / "metrics.csv", "x", newline="") as f:
        writer = csv.writer(f)
        for k, run in enumerate(result.runs):
            label = {"point": run["point"], **{key: run.get(key, "") for key in swept},
                     "seed": run["seed"], "diverged": int(result.diverged[k])}
            header, rows_k = metric_rows({n: padded(n, v)[None] for n, v in result.metrics[k].items()},
                                         result.batch_sizes[k], [label])
            if k == 0:
                writer.writerow(header)
            writer.writerows(rows_k)
    write_new(folder / "summary.md", sweep_markdown(rows, swept, result.spec.threshold))
    plot_sweep(folder, result, rows, swept)
    columns = list(rows[0])
    with open(folder / "summary.csv", "x", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([";".join(f"{v:.4g}" for v in row[c]) if isinstance(row.get(c), list)
                             else row.get(c, "") for c in columns])


def plot_sweep(folder: Path, result, rows: list[dict], swept: list[str]) -> list[Path]:
    """learning_curves.png, clip_fraction_by_epoch.png and, over the first two swept keys,
    heatmap_return.png and heatmap_kl.png."""
    plt = _pyplot()

    def label(point):
        return ", ".join(f"{k}={point[k]:g}" if isinstance(point[k], float) else f"{k}={point[k]}"
                         for k in swept) or "base"

    written = []
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, point in enumerate(result.points):
        ok = [k for k in result.point_runs(i) if not result.diverged[k]]
        if ok:
            curves = np.stack([result.metrics[k]["episode_return"] for k in ok])
            _band(ax, np.arange(1, curves.shape[1] + 1) * result.batch_sizes[ok[0]], curves, label(point), lw=1.2)
    written.append(_save(fig, ax, folder / "learning_curves.png", 7, xlabel="environment steps",
                         ylabel="episode return (mean ± s.e. over seeds)",
                         title=f"{result.base.env}: learning curves"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for row, point in zip(rows, result.points):
        c = np.asarray(row["clip_fraction_by_epoch"], np.float64)
        ax.plot(np.arange(1, c.size + 1), c, marker="o", ms=3, label=label(point))
    written.append(_save(fig, ax, folder / "clip_fraction_by_epoch.png", 7, xlabel="epoch within an update",
                         ylabel="clip fraction (mean over updates and seeds)",
                         title="How much each epoch is clipped"))

    if len(swept) >= 2:
        a, b = swept[0], swept[1]
        xs = sorted({p[a] for p in result.points}, key=str if not all(
            isinstance(p[a], (int, float)) for p in result.points) else None)
        ys = sorted({p[b] for p in result.points}, key=str if not all(
            isinstance(p[b], (int, float)) for p in result.points) else None)
        for key, name, title in (("train_return", "heatmap_return.png", "final train return"),
                                 ("mean_kl", "heatmap_kl.png", "mean KL (k3)")):
            grid = np.full((len(ys), len(xs)), np.nan)
            for row, point in zip(rows, result.points):
                # with more than two swept keys, average over the others
                y, x = ys.index(point[b]), xs.index(point[a])
                grid[y, x] = row[key] if np.isnan(grid[y, x]) else np.nanmean([grid[y, x], row[key]])
            fig, ax = plt.subplots(figsize=(1.3 * len(xs) + 2.5, 0.9 * len(ys) + 2))
            image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
            ax.set_xticks(range(len(xs)), [str(x) for x in xs])
            ax.set_yticks(range(len(ys)), [str(y) for y in ys])
            ax.set(xlabel=a, ylabel=b, title=title)
            for (y, x), value in np.ndenumerate(grid):
                ax.text(x, y, f"{value:.3g}", ha="center", va="center", color="w", fontsize=8)
            fig.colorbar(image, ax=ax)
            fig.tight_layout()
            written.append(folder / name)
            fig.savefig(_new(written[-1]), dpi=110)
            plt.close(fig)
    return written
