"""Command line: `purejaxppo train CONFIG [--seeds N] [--set key=value ...] [--out DIR]`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from purejaxppo.config import ConfigError, load_config, parse_override


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="purejaxppo", description="JAX-compiled PPO.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train one config over N seeds as one compiled program")
    train.add_argument("config", help="YAML config, e.g. configs/cartpole.yaml")
    train.add_argument("--seeds", type=int, default=1, help="number of seeds, vmapped (default 1)")
    train.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config key (repeatable), e.g. --set lr=3e-4")
    train.add_argument("--out", help="run folder (default runs/<env>-<time>); must not hold files")
    return parser


def _run_folder(out: str | None, env: str) -> Path:
    if out is not None:
        folder = Path(out)
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise ConfigError("--out", out, "exists and is not an empty folder; "
                              "choose another so no earlier results are overwritten")
        return folder
    stem = Path("runs") / f"{env}-{time.strftime('%Y%m%d-%H%M%S')}"
    folder, n = stem, 1
    while folder.exists():
        n += 1
        folder = stem.with_name(f"{stem.name}-{n}")
    return folder


def train_command(args) -> int:
    overrides = dict(parse_override(item) for item in args.set)
    cfg = load_config(args.config, overrides)
    if args.seeds < 1:
        raise ConfigError("--seeds", args.seeds, "must be at least 1")
    folder = _run_folder(args.out, cfg.env)

    import jax
    import numpy as np
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from purejaxppo import report
    from purejaxppo.parallel import ShardedRuns
    from purejaxppo.train import make_train

    console = Console()
    seeds = list(range(args.seed, args.seed + args.seeds))
    console.print(f"[bold]{cfg.env}[/]: {args.seeds} seed(s) x {cfg.num_updates} updates x "
                  f"{cfg.batch_size} steps, one compiled program")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("compiling", total=cfg.num_updates)
        train = make_train(cfg, progress=lambda done: bar.update(task, completed=int(done)))
        keys = jax.numpy.stack([jax.random.PRNGKey(s) for s in seeds])
        runs = ShardedRuns(train, keys)
        compile_seconds = runs.compile_seconds
        bar.update(task, description=f"training on {runs.num_devices} device(s)")
        start = time.perf_counter()
        out = jax.block_until_ready(runs())
        run_seconds = time.perf_counter() - start
    metrics = jax.tree.map(np.asarray, out.metrics)
    summary = report.summarize(metrics, steps_per_run=cfg.num_updates * cfg.batch_size,
                               run_seconds=run_seconds, compile_seconds=compile_seconds)
    report.write_run_folder(folder, cfg.to_dict(), metrics, summary, cfg.batch_size, seeds)

    table = Table(title=f"{cfg.env}, mean ± s.e. over {args.seeds} seed(s)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in report.summary_lines(summary):
        table.add_row(name, value)
    console.print(table)
    console.print(f"run folder: {folder}")
    return 0


def main(argv=None) -> int:
    from purejaxppo.parallel import use_all_cpu_cores

    use_all_cpu_cores()  # seeds spread over the cores; before JAX starts its backend
    args = _parser().parse_args(argv)
    try:
        return train_command(args)
    except ConfigError as error:
        print(f"purejaxppo: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
