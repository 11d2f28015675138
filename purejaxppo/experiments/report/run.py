"""One run's report (several seeds of one config): its summary, the summary's table lines,
what went wrong at run time, and its result files' contents (metrics.csv, summary.json,
summary.md, learning_curve.png)."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

from purejaxppo.errors import UsageError
from purejaxppo.experiments import diagnosis, stats
from purejaxppo.experiments.report.plots import curve_with_band, finish_plot, pyplot, smoothing_legend
from purejaxppo.experiments.report.text import csv_text, format_mean_se, json_text, metric_rows


def summarize(metrics: Mapping[str, np.ndarray], *, steps_per_run: int, run_seconds: float,
              compile_seconds: float, evaluation: Mapping[str, np.ndarray] | None = None,
              diverged=None, env: str | None = None, max_episode_steps: int | None = None) -> dict[str, Any]:
    """Per-seed final numbers, then mean and standard error over seeds.

    `metrics` has a leading seed axis: [seeds, num_updates, ...]; `evaluation` (the final
    policy on fresh episodes): {"deterministic", "stochastic"} -> [seeds, episodes], and
    where counted "<mode>_no_action_steps" -> [seeds, episodes];
    `diverged`: [seeds] bool (NaN/Inf in losses or parameters): as in a sweep's table,
    diverged seeds are counted and left out of the means. `diagnosis` reads the per-epoch
    clip fraction by the sweep's rules (the return judged against `env`'s cap: the final
    policy's greedy return where evaluated, else the last update's). `counts` and
    `warnings`: what went wrong at run time
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
    judged = stats.mean_se(per_seed.get("eval_return", per_seed["final_return"])[ok])[0]  # the final policy's
    line = diagnosis.diagnose(clip_by_epoch, max_kl=float(max(max_kl, default=math.nan)), mean_return=judged,
                              cap=diagnosis.ceiling(env))
    summary: dict[str, Any] = {"seeds": seeds, "diverged": int(seeds - ok.sum()), "runaway": int(runaway.sum()),
                               "diagnosis": line}
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


def plot_learning_curve(metrics: Mapping[str, np.ndarray], batch_size: int, title: str) -> bytes:
    """learning_curve.png: the mean return over seeds, raw (faint) and smoothed with a ± 1 s.e.
    band (`curve_with_band`; the window: 5% of the run's steps)."""
    returns = np.asarray(metrics["episode_return"])  # [seeds, updates]
    steps = np.arange(1, returns.shape[1] + 1) * batch_size
    window = stats.smoothing_window(steps[-1])
    fig, ax = pyplot().subplots(figsize=(7, 4))
    curve_with_band(ax, steps, returns, f"mean of {returns.shape[0]} seed(s) ± 1 s.e.", window)
    return finish_plot(fig, ax, legend_title=smoothing_legend(window), xlabel="environment steps",
                       ylabel="episode return", title=title)


def run_artefacts(config, metrics: Mapping[str, np.ndarray], summary: Mapping[str, Any],
                  seeds: list[int]) -> list[tuple[str, Callable[[], str | bytes]]]:
    """(file name, function making its contents) for a run's results: metrics.csv,
    summary.json, summary.md, learning_curve.png (`config`: the run's PPOConfig)."""
    header, rows = metric_rows(metrics, config.batch_size, [{"seed": s} for s in seeds])
    return [
        ("metrics.csv", lambda: csv_text([header, *rows])),
        ("summary.json", lambda: json_text({**summary, "seed_values": seeds}, indent=2)),
        ("summary.md", lambda: summary_markdown(summary)),
        ("learning_curve.png", lambda: plot_learning_curve(metrics, config.batch_size, config.env)),
    ]


def evaluation_summary(runs: list[dict], *, folder: str, episodes: int, deterministic: bool, seed: int,
                       configs: Mapping[int, Mapping], seeds: int | None = None,
                       swept: list[str] | None = None) -> dict:
    """`eval`'s result (its --json object) from `Restored.evaluate`'s runs: a row per run
    (`run_row`: its mean ± s.e. over its episodes, mean length, returns), a row per point of
    the folder (`evaluation_points`: as a sweep's summary, the mean over seeds of each seed's
    mean return ± the s.e. over seeds), and the episodes of every run pooled: min, median, max
    (and `histogram`), those that did not end within max_episode_steps (NaN) counted and left
    out, those that ended by the environment's time limit counted (`at_time_limit`: their
    returns are the limit's, not the policy's). `configs`, `seeds`, `swept`: as
    `evaluation_points` takes them. UsageError where no episode ended."""
    everything = np.concatenate([run["returns"] for run in runs])
    pooled = everything[~np.isnan(everything)]  # NaN: an episode that did not end within max_episode_steps
    if not pooled.size:
        raise UsageError(f"{folder}: none of the {everything.size} episodes ended within the environment's "
                         f"max_episode_steps: its episodes never end, so there is no return to report")
    rows = [run_row(run) for run in runs]
    swept, points = evaluation_points(rows, configs, seeds, swept)
    return {"folder": folder, "step": runs[0]["step"], "episodes_per_run": episodes, "deterministic": deterministic,
            "seed": seed, "swept": swept, "points": points, "min": float(np.min(pooled)),
            "median": float(np.median(pooled)), "max": float(np.max(pooled)),
            "unfinished": int(everything.size - pooled.size),
            "at_time_limit": sum(row["at_time_limit"] for row in rows), "runs": rows}


def evaluation_points(rows: list[dict], configs: Mapping[int, Mapping], seeds: int | None = None,
                      swept: list[str] | None = None) -> tuple[list[str], list[dict]]:
    """The runs' rows (`run_row`) grouped by point -> (the swept keys, a row per point in point
    order). `configs`: run -> its config's values at the checkpoint; `seeds`: the seeds per
    point of the folder's record, whose run k is seed k % seeds of point k // seeds
    (`plan.run_index`), or None (no record): the runs with the same config are one point;
    `swept`: the keys its points set (the record's), or None: the keys whose values differ
    between the runs' configs. A point's row: its runs, its values of the swept keys that its
    runs share (`varies`: those they do not: PBT's members after exploit/explore), and as a
    sweep's summary, the mean over its seeds of each seed's mean return, the standard error
    over seeds (`stats.mean_se`: NaN for one seed) and the number of seeds they count (a run
    none of whose episodes ended has no mean), and the mean over its runs of their mean length."""
    if swept is None:
        swept = [key for key in dict.fromkeys(key for row in rows for key in configs[row["run"]])
                 if len({repr(configs[row["run"]].get(key)) for row in rows}) > 1]
    distinct: list[Mapping] = []  # without a record: the distinct configs, a point each

    def point_of(run: int) -> int:
        if seeds is not None:
            return run // seeds
        if configs[run] not in distinct:
            distinct.append(configs[run])
        return distinct.index(configs[run])

    members: dict[int, list[dict]] = {}
    for row in rows:
        members.setdefault(point_of(row["run"]), []).append(row)
    points = []
    for point, its in sorted(members.items()):
        values = {key: [configs[row["run"]].get(key) for row in its] for key in swept}
        shared = {key: v[0] for key, v in values.items() if all(x == v[0] for x in v)}
        means = [row["mean"] for row in its]
        mean, se = stats.mean_se(means)
        points.append({"point": point, "values": shared, "varies": [key for key in values if key not in shared],
                       "runs": [row["run"] for row in its], "seeds": int(stats.finite(means).size), "mean": mean,
                       "se": se, "mean_length": float(np.mean([row["mean_length"] for row in its]))})
    return swept, points


def evaluation_rows(runs: list[dict], step: int, evaluation: Mapping[str, np.ndarray],
                    mode: str = "deterministic") -> list[dict]:
    """A run's (or sweep's) own final evaluation (`TrainResult.evaluation`, a leading run axis in
    the order of `runs`: each {"run", "seed"}) in `mode` as rows of `evaluation_summary` (what
    `eval --json` gives per run, and a train run's summary.json: the same fields); [] without one."""
    if mode not in evaluation:
        return []
    return [run_row({**run, "step": step, "returns": evaluation[mode][j], "lengths": evaluation[f"{mode}_length"][j],
                     "time_limit": evaluation[f"{mode}_time_limit"][j]}) for j, run in enumerate(runs)]


def run_row(run: dict) -> dict:
    """One run's row of `evaluation_summary`."""
    mean, se = stats.mean_se(run["returns"])
    return {**{k: v for k, v in run.items() if k not in ("returns", "lengths", "time_limit")},
            "mean": mean, "se": se, "mean_length": float(np.mean(run["lengths"])),
            "at_time_limit": int(np.sum(run["time_limit"])), "returns": [float(r) for r in run["returns"]]}


def histogram(evaluation: dict, bins: int = 10, width: int = 40) -> str:
    """The pooled returns of an `evaluation_summary` as a text histogram."""
    values = np.array([r for run in evaluation["runs"] for r in run["returns"]])
    counts, edges = np.histogram(values[~np.isnan(values)], bins=bins)
    top = max(int(counts.max()), 1)
    return "\n".join(f"  {edges[i]:>10.4g} – {edges[i + 1]:<10.4g} {'█' * round(width * c / top):<{width}} {c}"
                     for i, c in enumerate(counts))
