"""What live logging costs: the same training with the progress bar and progress.jsonl (and
TensorBoard) fed from the host between chunks, as the CLI does, against the same training
in one chunk with neither.

    python -m benchmarks.logging_overhead [--seeds 8] [--total-timesteps 500000] [--rounds 5]

Each is a `ppo.sweep` of the seeds (over every CPU core, as the CLI runs them), timed by
its run seconds (compile excluded), interleaved (A B C A B C ...) for --rounds rounds; the table gives the median and range of
each and the median of the per-round ratios (logged / plain; 1.03 = 3% slower), with the
1-minute load average before each cell (cells started with load above the core count are
marked).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import tempfile
from pathlib import Path

from purejaxppo.experiments.parallel import use_all_cpu_cores

use_all_cpu_cores()

import jax  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn  # noqa: E402

import purejaxppo as ppo  # noqa: E402
from purejaxppo.experiments.live import LiveLog  # noqa: E402
from purejaxppo.experiments.spec import make_spec  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/cartpole.yaml")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--total-timesteps", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cfg = ppo.load_config(args.config, {"total_timesteps": args.total_timesteps})
    spec = make_spec({"seeds": args.seeds, "eval_episodes": 0})
    folder = Path(tempfile.mkdtemp(prefix="logging-overhead-"))
    (folder / "jsonl").mkdir()
    (folder / "tensorboard").mkdir()
    console = Console(file=open(os.devnull, "w"), force_terminal=True)  # rendered, not shown
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console) as bar:
        task = bar.add_task("training", total=cfg.num_updates)

        def show(record):
            bar.update(task, completed=record["update"], description=f"return {record.get('episode_return', 0):.4g}")

        logs = {"bar + progress.jsonl": LiveLog(folder / "jsonl", on_record=show),
                "+ TensorBoard": LiveLog(folder / "tensorboard", on_record=show, tensorboard=True)}
        for live in logs.values():
            live.group(0, args.seeds, cfg.batch_size)
        progress = {**logs, "plain": None}
        times = {name: [] for name in progress}
        compile_seconds = {}
        loads = []
        for _ in range(args.rounds):
            for name, live in progress.items():
                loads.append(os.getloadavg()[0])
                result = ppo.sweep(cfg, spec=spec, progress=live)
                times[name].append(result.run_seconds)
                compile_seconds[name] = result.compile_seconds
        for live in logs.values():
            live.close()
    ratios = {name: [a / b for a, b in zip(times[name], times["plain"])] for name in logs}
    lines = (folder / "jsonl" / "progress.jsonl").read_text().splitlines()
    cores = os.cpu_count() or 1
    busy = sum(load > cores for load in loads)
    now = datetime.date.today().isoformat()
    print(f"# Logging overhead ({now}, {platform.processor() or platform.machine()}, {cores} cores, "
          f"jax {jax.__version__}, {len(jax.devices())} devices)\n")
    print(f"`python -m benchmarks.logging_overhead --seeds {args.seeds} --total-timesteps {args.total_timesteps} "
          f"--rounds {args.rounds}`: {args.config}, {args.seeds} seeds x {cfg.num_updates} updates x "
          f"{cfg.batch_size} steps, from the host between chunks: the progress bar and progress.jsonl "
          f"(what the CLI does by default; {len(lines)} records written), the same + TensorBoard "
          f"(--tensorboard), plain = one chunk, no logging. Compile: " + ", ".join(
              f"{name} {seconds:.1f} s" for name, seconds in compile_seconds.items()) + ".\n")
    print("| | median s | range s | steps/s (median) |\n|---|---|---|---|")
    steps = args.seeds * cfg.num_updates * cfg.batch_size
    for name in progress:
        t = times[name]
        print(f"| {name} | {statistics.median(t):.2f} | {min(t):.2f}–{max(t):.2f} | "
              f"{steps / statistics.median(t):,.0f} |")
    for name, r in ratios.items():
        print(f"\n{name} / plain, median of the per-round ratios: **{statistics.median(r):.3f}** "
              f"(rounds: {', '.join(f'{x:.3f}' for x in r)})")
    print(f"\nload average before each cell: {', '.join(f'{x:.1f}' for x in loads)}"
          f"{f' ({busy} cells started above {cores})' if busy else ''}.")

if __name__ == "__main__":
    main()
