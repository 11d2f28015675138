"""Turning metrics of several seeds into tables, summaries and plots (host side, numpy)."""

from __future__ import annotations

import contextlib
import csv
import json
import math
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import yaml

CLIP_CASE_NAMES = [f"clip_cases_{sign}_{region}" for sign in ("adv_pos", "adv_neg")
                   for region in ("inside", "above", "below")]


def mean_se(values) -> tuple[float, float]:
    """Mean and standard error (sample std / sqrt(n)) over the finite values; se is NaN for n < 2."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return math.nan, math.nan
    se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan
    return float(x.mean()), se


def format_mean_se(mean: float, se: float, digits: int = 3) -> str:
    if math.isnan(mean):
        return "n/a"
    text = f"{mean:.{digits}g}"
    return text if math.isnan(se) else f"{text} ± {se:.2g}"


def last_epoch_values(per_epoch: np.ndarray, epochs_run: np.ndarray) -> np.ndarray:
    """[..., E] per-epoch metric -> [...] value of the last epoch that ran."""
    index = np.clip(epochs_run.astype(int) - 1, 0, per_epoch.shape[-1] - 1)
    return np.take_along_axis(per_epoch, index[..., None], axis=-1)[..., 0]


def summarize(metrics: Mapping[str, np.ndarray], *, steps_per_run: int, run_seconds: float,
              compile_seconds: float) -> dict[str, Any]:
    """Per-seed final numbers, then mean and standard error over seeds.

    `metrics` has a leading seed axis: [seeds, num_updates, ...].
    """
    m = {k: np.asarray(v) for k, v in metrics.items()}
    seeds = m["episode_return"].shape[0]
    with _quiet_nan_warnings():
        per_seed = {
            "final_return": m["episode_return"][:, -1],
            "mean_kl_k3": np.nanmean(m["kl_k3"], axis=(1, 2)),
            "last_epoch_clip_fraction": np.nanmean(last_epoch_values(m["clip_fraction"], m["epochs_run"]), axis=1),
            "explained_variance": m["explained_variance"][:, -1],
            "epochs_run": m["epochs_run"].mean(axis=1),
        }
    summary: dict[str, Any] = {"seeds": seeds}
    for name, values in per_seed.items():
        mean, se = mean_se(values)
        summary[name] = {"mean": mean, "se": se, "per_seed": [float(v) for v in values]}
    summary["steps_per_second"] = seeds * steps_per_run / run_seconds
    summary["run_seconds"] = run_seconds
    summary["compile_seconds"] = compile_seconds
    return summary


@contextlib.contextmanager
def _quiet_nan_warnings():
    """nanmean of an all-NaN slice (an epoch no seed ran) is NaN: expected, not a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        yield


SUMMARY_ROWS = [
    ("final_return", "final episode return"),
    ("mean_kl_k3", "mean KL (k3)"),
    ("last_epoch_clip_fraction", "clip fraction, last epoch"),
    ("explained_variance", "explained variance (final)"),
    ("epochs_run", "epochs run per update"),
]


def summary_lines(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = [(label, format_mean_se(summary[key]["mean"], summary[key]["se"])) for key, label in SUMMARY_ROWS]
    rows.append(("steps per second", f"{summary['steps_per_second']:,.0f}"))
    rows.append(("compile time", f"{summary['compile_seconds']:.1f} s"))
    return rows


def summary_markdown(summary: Mapping[str, Any]) -> str:
    lines = [f"| metric (mean ± s.e. over {summary['seeds']} seeds) | value |", "|---|---|"]
    lines += [f"| {a} | {b} |" for a, b in summary_lines(summary)]
    return "\n".join(lines) + "\n"


def metric_rows(metrics: Mapping[str, np.ndarray], batch_size: int, seeds: list[int]):
    """Yield (header, rows): one row per seed per update, per-epoch metrics as name_e1..E."""
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
    header = ["seed", "update", "env_steps"] + [c for c, _ in columns]
    rows = []
    for s, seed in enumerate(seeds):
        for u in range(num_updates):
            rows.append([seed, u + 1, (u + 1) * batch_size] + [_cell(v[s, u]) for _, v in columns])
    return header, rows


def _cell(x):
    x = x.item()
    if isinstance(x, float):
        return "" if math.isnan(x) else f"{x:.6g}"
    return x


def plot_learning_curve(path: Path, metrics: Mapping[str, np.ndarray], batch_size: int, title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    returns = np.asarray(metrics["episode_return"], dtype=np.float64)  # [seeds, updates]
    steps = np.arange(1, returns.shape[1] + 1) * batch_size
    with _quiet_nan_warnings():
        mean = np.nanmean(returns, axis=0)
        count = np.sum(np.isfinite(returns), axis=0)
        se = np.nanstd(returns, axis=0, ddof=1) / np.sqrt(np.maximum(count, 1)) if returns.shape[0] > 1 else None
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, mean, label=f"mean of {returns.shape[0]} seed(s)")
    if se is not None:
        ax.fill_between(steps, mean - se, mean + se, alpha=0.3, label="± 1 standard error")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_run_folder(folder: Path, config: Mapping[str, Any], metrics: Mapping[str, np.ndarray],
                     summary: Mapping[str, Any], batch_size: int, seeds: list[int]) -> None:
    """config.yaml, metrics.csv, summary.json, summary.md, learning_curve.png."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(dict(config), sort_keys=False))
    header, rows = metric_rows(metrics, batch_size, seeds)
    with open(folder / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    (folder / "summary.json").write_text(json.dumps({**summary, "seed_values": seeds}, indent=2))
    (folder / "summary.md").write_text(summary_markdown(summary))
    plot_learning_curve(folder / "learning_curve.png", metrics, batch_size, str(config.get("env", "")))
