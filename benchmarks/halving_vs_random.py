"""Successive halving against random search at the same environment steps.

    python -m benchmarks.halving_vs_random [--config benchmarks/sweeps/halving_cartpole.yaml]
                                           [--repetitions 8] [--set key=value ...]

The sweep file has a `random:` search space and a `halving:` section. For each repetition r
(`random_seed: r`), its points are drawn and run twice:
  - successive halving of all of them (`ppo.sweep` of the file's spec): the chosen point is the
    best of the last rung;
  - random search of the first M of the same points, every one to the full budget, M the most
    that fit in the environment steps the halving spent (never more steps than it).
Both choose on the same return (the file's `rank_by`, by default the final policy's greedy
return on `eval_episodes` fresh episodes, mean over seeds). That return is the best of many
draws, so it flatters the arm that tried more points; with `--retrain-seeds N` (default 4)
each chosen point is also trained again at the full budget on N fresh seeds (first_seed
1000) and evaluated greedily: what the choice is worth. Prints one JSON line per arm and
repetition, then a Markdown table over the repetitions: the chosen point's return as chosen
and retrained (mean ± s.e.), the repetitions whose choice reaches `threshold`, the steps
spent and points tried.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform

from purejaxppo.experiments.parallel import use_all_cpu_cores

use_all_cpu_cores()

import jax  # noqa: E402
import numpy as np  # noqa: E402

from purejaxppo import sweep  # noqa: E402
from purejaxppo.config import parse_override  # noqa: E402
from purejaxppo.experiments import compile_cache  # noqa: E402
from purejaxppo.experiments.kinds.halving_report import halving_summary  # noqa: E402
from purejaxppo.experiments.spec import load_sweep, make_spec  # noqa: E402
from purejaxppo.experiments.stats import mean_se  # noqa: E402

ARMS = ("successive halving", "random search")
EVAL_MODE = {"eval": "deterministic", "eval_stochastic": "stochastic"}


def point_returns(result, rank_by: str) -> list[float]:
    """Each point's ranked return, the mean over its seeds (a random search: every point ran)."""
    out = []
    for i in range(len(result.points)):
        runs = result.point(i)
        if rank_by == "train":
            per_seed = np.asarray(runs.metrics["episode_return"])[:, -1]
        else:
            per_seed = np.nanmean(np.asarray(runs.evaluation[EVAL_MODE[rank_by]]), axis=1)
        finite = per_seed[np.isfinite(per_seed)]
        out.append(float(np.mean(finite)) if finite.size else -np.inf)
    return out


def run_arm(arm: str, base, section: dict, random_seed: int, halving_steps: int | None) -> dict:
    if arm == ARMS[0]:
        result = sweep(base, spec=make_spec({**section, "random_seed": random_seed}))
        summary = halving_summary(result)
        best = summary["best"]
        return {"chosen": {k: best[k] for k in summary["swept"]}, "chosen_return": best["return"],
                "env_steps": summary["env_steps"], "points": len(result.points), "timings": result}
    per_point = section["seeds"] * base.num_updates * base.batch_size
    trials = halving_steps // per_point
    random = {**section["random"], "trials": trials}
    plain = {k: v for k, v in section.items() if k != "halving"}
    result = sweep(base, spec=make_spec({**plain, "random": random, "random_seed": random_seed}))
    returns = point_returns(result, result.spec.rank_by)
    best = int(np.argmax(returns))
    return {"chosen": result.points[best], "chosen_return": returns[best], "env_steps": trials * per_point,
            "points": trials, "timings": result}


def retrained(base, point: dict, seeds: int, eval_episodes: int) -> float:
    """The chosen point trained again at the full budget on `seeds` fresh seeds: the mean of its
    runs' greedy evaluation returns."""
    result = sweep(dataclasses.replace(base, **point), spec=make_spec({"seeds": seeds, "eval_episodes": eval_episodes}),
                   first_seed=1000)
    return float(np.mean([np.nanmean(result.evaluation[k]["deterministic"]) for k in range(seeds)]))


def table(rows: list[dict], threshold: float | None) -> str:
    retrained = "retrained" in rows[0]
    head = ["arm", "chosen point's return (mean ± s.e. over repetitions)", "per repetition",
            *([f"repetitions whose choice ≥ {threshold:g}"] if threshold is not None else []),
            *(["retrained on fresh seeds (mean ± s.e.)", "retrained, per repetition"] if retrained else []),
            "env steps (mean)", "points tried"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm in ARMS:
        mine = [r for r in rows if r["arm"] == arm]
        values = [r["chosen_return"] for r in mine]
        cells = [arm, "{:.4g} ± {:.2g}".format(*mean_se(values)), ", ".join(f"{v:.4g}" for v in values)]
        if threshold is not None:
            cells.append(f"{sum(v >= threshold for v in values)}/{len(values)}")
        if retrained:
            again = [r["retrained"] for r in mine]
            cells += ["{:.4g} ± {:.2g}".format(*mean_se(again)), ", ".join(f"{v:.4g}" for v in again)]
        cells += [f"{np.mean([r['env_steps'] for r in mine]):,.0f}", str(mine[0]["points"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="benchmarks/sweeps/halving_cartpole.yaml")
    parser.add_argument("--repetitions", type=int, default=8)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--retrain-seeds", type=int, default=4, help="0: do not retrain the chosen points")
    parser.add_argument("--table", metavar="JSONL", help="only the table of the JSON lines a run printed")
    args = parser.parse_args()
    compile_cache.enable()  # each repetition's programs are the first one's: compiled once
    base, spec = load_sweep(args.config, dict(parse_override(item) for item in args.set))
    if args.table:
        with open(args.table) as lines:
            print(table([json.loads(line) for line in lines if line.startswith("{")], spec.threshold))
        return
    if spec.kind != "halving" or not spec.random:
        raise SystemExit(f"{args.config}: needs a random: search space and a halving: section")
    section = {k: v for k, v in spec.to_dict().items() if not (k == "grid" and not v)}  # a random space alone
    rows = []
    for r in range(args.repetitions):
        spent = None
        for arm in ARMS:
            row = {"arm": arm, "random_seed": r, **run_arm(arm, base, section, r, spent)}
            result = row.pop("timings")
            row.update(run_seconds=round(result.run_seconds, 2), compile_seconds=round(result.compile_seconds, 2))
            if args.retrain_seeds:
                row["retrained"] = retrained(base, row["chosen"], args.retrain_seeds, spec.eval_episodes)
            spent = row["env_steps"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{base.env}, {base.total_timesteps} steps per run at the full budget, {spec.seeds} seed(s) per point, "
          f"halving {spec.section}, {args.repetitions} repetitions; {len(jax.devices())} x "
          f"{jax.devices()[0].device_kind}, {os.cpu_count()} CPUs ({platform.processor() or platform.machine()})\n")
    print(table(rows, spec.threshold))


if __name__ == "__main__":
    main()
