"""PBT against random search: the same initial population, the same environment steps.

    python -m benchmarks.pbt_vs_random [--config configs/sweeps/pbt_cartpole.yaml] [--repetitions 3]
                                       [--set key=value ...] [--plot FILE.png]

For each repetition r, a sweep file's `pbt:` population is drawn with `random_seed: r` and
run twice: as PBT (`ppo.pbt`) and as the random search of the same points (`random:
{trials: population, ...}` with the same `random_seed`: the same runs without
exploit/explore; every member the file's total_timesteps in both). Each member's final
policy plays the file's `eval_episodes` fresh episodes greedily; per repetition, the best
and the median member's mean return. Prints one JSON line per arm and repetition, then a
Markdown table: over the repetitions, the mean ± s.e. of the best and of the median.
"""

from __future__ import annotations

import argparse
import json
import os
import platform

from purejaxppo.experiments.parallel import use_all_cpu_cores

use_all_cpu_cores()

import jax  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import harness  # noqa: E402
from purejaxppo.config import parse_override  # noqa: E402
from purejaxppo.experiments import report  # noqa: E402
from purejaxppo.experiments.stats import mean_se  # noqa: E402
from purejaxppo.experiments.spec import load_sweep, make_spec  # noqa: E402
from purejaxppo import pbt, sweep  # noqa: E402

ARMS = ("pbt", "random search")


def greedy_returns(result) -> np.ndarray:
    """[runs] each run's final policy, greedy, mean return over its fresh episodes."""
    return np.array([np.mean(result.evaluation[k]["deterministic"]) for k in range(len(result.runs))])


def run_arm(arm: str, base, spec, random_seed: int):
    section = spec.section
    common = {"seeds": spec.seeds, "random_seed": random_seed, "eval_episodes": spec.eval_episodes}
    if arm == "pbt":
        return pbt(base, spec=make_spec({**common, "pbt": section}))
    return sweep(base, spec=make_spec({**common, "random": {"trials": section["population"],
                                                            **section["hyperparameters"]}}))


def table(rows: list[dict], threshold: float | None = None) -> str:
    """Over the repetitions (`rows`: the JSON lines), mean ± s.e. of the best and the median
    member, and with `threshold` the members reaching it."""
    head = ["arm", "best member (mean ± s.e. over repetitions)", "median member", "per repetition: best / median"]
    if threshold is not None:
        head.append(f"members ≥ {threshold:g}, per repetition")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm in ARMS:
        mine = [r for r in rows if r["arm"] == arm]
        best, median = ([r[k] for r in mine] for k in ("best", "median"))
        cells = [arm, *(f"{m:.4g} ± {s:.2g}" for m, s in (mean_se(best), mean_se(median))),
                 ", ".join(f"{b:.4g} / {m:.4g}" for b, m in zip(best, median))]
        if threshold is not None:
            cells.append(", ".join(f"{sum(g >= threshold for g in r['greedy'])}/{len(r['greedy'])}" for r in mine))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for arm, color in zip(ARMS, ("tab:blue", "tab:orange")):
        for i, r in enumerate(r for r in rows if r["arm"] == arm):
            values = np.sort(r["greedy"])[::-1]
            ax.plot(np.arange(1, values.size + 1), values, color=color, marker="o", ms=3, alpha=0.8,
                    label=arm if i == 0 else None)
    ax.set(xlabel="member, by final greedy return", ylabel="greedy return, fresh episodes", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    # a new file: where the name is taken, its next number (never a measurement replaced)
    print(f"wrote {harness.write_kept(path, report.figure_bytes(fig, 120))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/sweeps/pbt_cartpole.yaml")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--plot", help="write the members' final returns, sorted, per arm and repetition")
    args = parser.parse_args()
    base, spec = load_sweep(args.config, dict(parse_override(item) for item in args.set))
    rows = []
    for r in range(args.repetitions):
        for arm in ARMS:
            result = run_arm(arm, base, spec, r)
            greedy = greedy_returns(result)
            row = {"arm": arm, "random_seed": r, "best": float(np.max(greedy)), "median": float(np.median(greedy)),
                   "greedy": [round(float(g), 2) for g in greedy], "run_seconds": round(result.run_seconds, 2),
                   "compile_seconds": round(result.compile_seconds, 2)}
            if result.lineage is not None:
                lineage = result.lineage
                row["exploit_events"] = sum(x["copied_from"] != x["member"] for x in lineage)
                row["max_replaced"] = max(sum(x["run"] == k and x["copied_from"] != x["member"] for x in lineage)
                                          for k in range(len(result.runs)))
                last = [x for x in lineage if x["interval"] == lineage[-1]["interval"]]
                row["final_range"] = {n: [min(x[n] for x in last), max(x[n] for x in last)]
                                      for n in spec.section["hyperparameters"]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{base.env}, {spec.section['population']} members x {spec.seeds} population(s), "
          f"{base.total_timesteps} steps per member, {args.repetitions} repetitions; "
          f"{len(jax.devices())} x {jax.devices()[0].device_kind}, {os.cpu_count()} CPUs "
          f"({platform.processor() or platform.machine()})\n")
    print(table(rows, spec.threshold))
    if args.plot:
        plot(rows, args.plot, f"{base.env}: PBT against random search, {args.repetitions} repetitions")


if __name__ == "__main__":
    main()
