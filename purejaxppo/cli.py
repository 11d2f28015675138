"""Command line: `purejaxppo train CONFIG [--seeds N] [--set key=value ...] [--out DIR]`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from purejaxppo.config import ConfigError, load_config, parse_override, text_table
from purejaxppo.errors import UsageError


class _PrintConfigFields(argparse.Action):
    """--help-config: print every config key (from config.FIELDS) and exit, like --help."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="list every config key (type, static/traced, default, rule, meaning) and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(text_table())
        parser.exit()


def _add_run_options(parser: argparse.ArgumentParser, runs: str, folder: str) -> None:
    """Options every command that runs something takes."""
    parser.add_argument("--help-config", action=_PrintConfigFields)
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key (repeatable), e.g. --set lr=3e-4")
    parser.add_argument("--max-parallel", type=int, metavar="N",
                        help=f"at most N {runs} in flight per device (chunks; same numbers)")
    parser.add_argument("--out", help=f"{folder}; must not hold files")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="purejaxppo", description="JAX-compiled PPO.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train one config over N seeds as one compiled program")
    train.add_argument("config", help="YAML config, e.g. configs/cartpole.yaml")
    train.add_argument("--seeds", type=int, default=1, help="number of seeds, vmapped (default 1)")
    _add_run_options(train, "seeds", "run folder (default runs/<env>-<time>)")
    sweep = sub.add_parser("sweep", help="seeds x hyperparameter grid, one compile per static group")
    sweep.add_argument("spec", help="sweep YAML: a config plus a sweep: section, e.g. configs/sweeps/clip_epochs.yaml")
    sweep.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                       help="add or replace a grid axis (repeatable), e.g. --grid clip_eps=0.1,0.2")
    sweep.add_argument("--seeds", type=int, help="seeds per grid point (overrides the file)")
    _add_run_options(sweep, "runs", "sweep folder (default runs/sweep-<env>-<time>)")
    return parser


def _run_folder(out: str | None, stem_name: str) -> Path:
    if out is not None:
        folder = Path(out)
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise ConfigError("--out", out, "exists and is not an empty folder; "
                              "choose another so no earlier results are overwritten")
        return folder
    stem = Path("runs") / f"{stem_name}-{time.strftime('%Y%m%d-%H%M%S')}"
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
    if args.max_parallel is not None and args.max_parallel < 1:
        raise ConfigError("--max-parallel", args.max_parallel, "must be at least 1")
    folder = _run_folder(args.out, cfg.env)  # checked before compiling

    import jax
    import numpy as np
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from purejaxppo import report
    from purejaxppo.parallel import ShardedRuns, is_writer
    from purejaxppo.train import make_train

    console = Console()
    seeds = list(range(args.seed, args.seed + args.seeds))
    console.print(f"[bold]{cfg.env}[/]: {args.seeds} seed(s) x {cfg.num_updates} updates x "
                  f"{cfg.batch_size} steps, one compiled program")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("compiling", total=cfg.num_updates)
        train = make_train(cfg, progress=lambda done, _: bar.update(task, completed=int(done)))
        keys = jax.numpy.stack([jax.random.PRNGKey(s) for s in seeds])
        runs = ShardedRuns(train, keys, chunk=args.max_parallel)  # refuses what would not fit in memory
        compile_seconds = runs.compile_seconds
        bar.update(task, description=f"training on {runs.num_devices} device(s)")
        start = time.perf_counter()
        out = jax.block_until_ready(runs())
        run_seconds = time.perf_counter() - start
    if not is_writer():
        return 0  # several processes: process 0 writes
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


def sweep_command(args) -> int:
    from purejaxppo.sweep import load_sweep, parse_grid_option

    overrides = dict(parse_override(item) for item in args.set)
    grid = dict(parse_grid_option(item) for item in args.grid) or None
    base, spec = load_sweep(args.spec, overrides, grid=grid, seeds=args.seeds)
    folder = _run_folder(args.out, f"sweep-{base.env}")

    import jax
    import numpy as np
    from rich.console import Console

    from purejaxppo import report
    from purejaxppo.parallel import is_writer
    from purejaxppo.sweep import sweep, swept_keys

    console = Console()

    def on_plan(points, groups):  # every run's config is checked by now; nothing compiled yet
        console.print(f"[bold]{base.env}[/]: {len(points)} point(s) x {spec.seeds} seed(s) = "
                      f"{len(points) * spec.seeds} runs, {len(groups)} compile(s), on {len(jax.devices())} device(s)")

    def on_group(g, n_groups, group, runs):
        console.print(f"group {g + 1}/{n_groups}: {runs} runs, compiling and running ...")

    result = sweep(base, spec=spec, first_seed=args.seed, max_parallel=args.max_parallel, on_plan=on_plan,
                   on_group=on_group)
    if not is_writer():
        console.print(f"process {jax.process_index()}: done; process 0 writes the results")
        return 0
    rows = report.sweep_summary(result)
    report.write_sweep_folder(folder, result, rows)
    print(report.sweep_markdown(rows, swept_keys(result), spec.threshold), flush=True)
    steps = sum(result.batch_sizes[k] * len(m["episode_return"]) for k, m in enumerate(result.metrics))
    console.print(f"{result.compiles} compile(s), {result.compile_seconds:.1f} s; runs {result.run_seconds:.1f} s "
                  f"({steps / result.run_seconds:,.0f} steps/s over all runs); "
                  f"diverged runs: {int(np.sum(result.diverged))}")
    console.print(f"sweep folder: {folder}")
    return 0


def main(argv=None) -> int:
    from purejaxppo.parallel import init_distributed_from_env, use_all_cpu_cores

    use_all_cpu_cores()  # seeds spread over the cores; before JAX starts its backend
    args = _parser().parse_args(argv)
    init_distributed_from_env()  # several processes: each computes its shard, process 0 writes
    try:
        return train_command(args) if args.command == "train" else sweep_command(args)
    except UsageError as error:
        print(f"purejaxppo: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
