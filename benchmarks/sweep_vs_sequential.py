"""The 60-run clip x epochs study as one program (ppo.sweep) against the same 60 runs one
after another with the single-run function (compiled once: hyperparameters are traced).

    python -m benchmarks.sweep_vs_sequential [--rounds 1] [--total-timesteps 102400]

Both sides train only (evaluation off) on the same devices: the sweep over every CPU core
as the CLI does, the sequential side on one device as a plain `jax.jit(train)` loop would.
Interleaved when --rounds > 1. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import time

from purejaxppo.experiments.parallel import use_all_cpu_cores

use_all_cpu_cores()

import jax  # noqa: E402

import purejaxppo as ppo  # noqa: E402
from purejaxppo.experiments.plan import plan  # noqa: E402
from purejaxppo.experiments.spec import load_sweep  # noqa: E402


def sequential(base, spec):
    planned = plan(base, spec)
    configs = planned.configs
    (group,) = planned.groups
    train = jax.jit(ppo.make_train(group.config))
    keys = [jax.random.PRNGKey(s) for s in range(spec.seeds)]
    start = time.perf_counter()
    compiled = train.lower(keys[0], ppo.HParams.from_config(configs[0])).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    for cfg in configs:
        hp = ppo.HParams.from_config(cfg)
        for key in keys:
            jax.block_until_ready(compiled(key, hp))
    return compile_s, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--total-timesteps", type=int, default=None)
    args = parser.parse_args()
    overrides = {"total_timesteps": args.total_timesteps} if args.total_timesteps else {}
    base, spec = load_sweep("configs/sweeps/clip_epochs.yaml", overrides)
    spec = dataclasses.replace(spec, eval_episodes=0)
    n_runs = plan(base, spec).runs
    steps = n_runs * base.num_updates * base.batch_size
    rows = []
    for r in range(args.rounds):
        result = ppo.sweep(base, spec=spec)
        rows.append(("sweep (one program)", r, result.compiles, result.compile_seconds, result.run_seconds))
        c, t = sequential(base, spec)
        rows.append(("sequential single runs", r, 1, c, t))
    print(f"# clip x epochs study: one program vs {n_runs} sequential runs — {datetime.date.today()}\n")
    print(f"- machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{len(jax.devices())} JAX device(s) ({jax.default_backend()}), jax {jax.__version__}")
    print(f"- {n_runs} runs x {base.num_updates * base.batch_size:,} steps; evaluation off on both sides\n")
    print("| contender | round | compiles | compile (s) | run (s) | steps/s | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for i, (name, r, compiles, c, t) in enumerate(rows):
        speedup = rows[i - i % 2 + 1][4] / t
        print(f"| {name} | {r + 1} | {compiles} | {c:.1f} | {t:.1f} | {steps / t:,.0f} | {speedup:.2f}x |")


if __name__ == "__main__":
    main()
