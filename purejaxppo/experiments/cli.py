"""Command line.

    purejaxppo train CONFIG [--seeds N] [--set key=value ...] [--out DIR] [--checkpoint-every K]
    purejaxppo train --resume DIR
    purejaxppo sweep SPEC [--grid key=v1,v2 ...] [--seeds N] [...]     (same run options)
    purejaxppo sweep --resume DIR
    purejaxppo eval DIR [--episodes 100] [--seed S] [--stochastic] [--step N] [--json] [--render F.html]
    purejaxppo export DIR [--run K] [--checkpoint N] [--format stablehlo|onnx] [--outputs action|all] [--out FILE]
    purejaxppo configs                                                  (the shipped configs, usable by name)
    (train, sweep and eval reuse compiled programs from a persistent cache; --no-cache: not)
    purejaxppo --version

`train` is a one-point sweep: both run through `sweep.sweep` (chunks, checkpoints,
evaluation of the final policy, divergence flags) and differ only in the tables they
print and the files they write. Every bad input is one line and exit code 2, before
anything compiles. A stop signal (Ctrl-C's SIGINT, SIGTERM, SIGHUP) at any phase is one
line and exit code 130, 143 or 129, the newest complete checkpoint kept and named with the
command to resume (`faults`). A write that fails (a full disk, a folder made read-only) is
one line naming it, the run goes on and writes what it can, and the command exits 1.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import difflib
import os
import shlex
import sys
import tempfile
import traceback
from pathlib import Path

import jax
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from purejaxppo import __version__, configs
from purejaxppo.experiments import compile_cache, replay, report
from purejaxppo.experiments.faults import (STOP_SIGNALS, LostProcess, Stopped, coordinate, line_on_abort,
                                           lost_process, runtime_output_to, stop_signals)
from purejaxppo.config import (ConfigError, check_fields, config_values, count, parse_override, read_yaml,
                               text_table)
from purejaxppo.errors import NO_VALUE, ResourceError, UsageError
from purejaxppo.experiments.folder import FINISHED, RunFolder, write_new
from purejaxppo.experiments.live import LiveLog, check_wandb
from purejaxppo.experiments.parallel import agree, init_distributed, is_writer, joined_line, use_all_cpu_cores
from purejaxppo.experiments.paths import check_path, check_utf8
from purejaxppo.experiments.stats import mean_se
from purejaxppo.experiments.sweep import (check_seeds, load_sweep, make_spec, parse_grid_option, plan, run_plan,
                                         swept_keys)

DEFAULT_EVAL_EPISODES = 64


def version_line() -> str:
    """`purejaxppo 0.4.0 · jax 0.11.2 · gpu: 1 × NVIDIA H200` (or `cpu: 2 devices`): what a user reports.
    A backend that fails to start is named in the line, never a traceback."""
    try:
        kinds = collections.Counter((d.platform, d.device_kind) for d in jax.devices())
        seen = ", ".join(f"{platform}: {n} device{'s' * (n != 1)}" if platform == "cpu" else f"{platform}: {n} × {kind}"
                         for (platform, kind), n in kinds.items())
    except Exception as error:  # a broken plugin, an unreachable accelerator: say so in the line
        seen = f"no devices ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
    return f"purejaxppo {__version__} · jax {jax.__version__} · {seen}"


class _Parser(argparse.ArgumentParser):
    """argparse with the command line's manners: a bad argument is one line (a UsageError:
    `purejaxppo: error: ...`, exit 2), not a usage block; what it prints (--help, --version,
    --help-config) is flushed before it exits, so a reader that stops early (`| head`) ends it
    quietly (see `main`)."""

    def error(self, message):
        raise UsageError(f"{message} (see: {self.prog} --help)")

    def exit(self, status=0, message=None):
        sys.stdout.flush()
        super().exit(status, message)


def _printer(text, help: str) -> type[argparse.Action]:
    """An option that prints `text()` and exits, as --help does (--version, --help-config): the
    text is made only when the option is given."""

    class Print(argparse.Action):
        def __init__(self, option_strings, dest, **kwargs):
            super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

        def __call__(self, parser, namespace, values, option_string=None):
            print(text())
            parser.exit()

    return Print


def _add_run_options(parser: argparse.ArgumentParser, runs: str, folder: str) -> None:
    """Options every command that runs something takes."""
    parser.add_argument("--help-config", action=_printer(
        text_table, "list every config key (type, static/traced, default, rule, meaning) and exit"))
    parser.add_argument("--seed", type=int, help="first seed (default 0)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key (repeatable), e.g. --set lr=3e-4")
    parser.add_argument("--max-parallel", type=int, metavar="N",
                        help=f"at most N {runs} in flight per device (chunks; same numbers)")
    parser.add_argument("--out", help=f"{folder}; must not hold files")
    parser.add_argument("--checkpoint-every", type=int, metavar="K",
                        help="run in chunks of K updates and checkpoint every run after each "
                             "(default: one chunk; the final state is checkpointed either way)")
    parser.add_argument("--keep", type=int, metavar="M", help="keep the M newest checkpoints (default: all)")
    parser.add_argument("--resume", metavar="DIR",
                        help="continue the run in DIR from its newest complete checkpoint")
    parser.add_argument("--tensorboard", action="store_true", help="also write TensorBoard events (DIR/tensorboard)")
    parser.add_argument("--wandb", metavar="PROJECT", help="also log to Weights & Biases (needs wandb installed)")
    _add_cache_option(parser)


def _add_cache_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-cluster", action="store_true",
                        help="run as one process even where JAX detects a cluster (SLURM, Open MPI, a TPU pod), "
                             "whatever the JAX_* variables say; also $PUREJAXPPO_CLUSTER=off "
                             "(see docs/several-hosts.md)")
    parser.add_argument("--no-cache", action="store_true",
                        help="compile everything afresh (default: reuse compiled programs from the persistent "
                             f"cache in {compile_cache.default_folder()}; $PUREJAXPPO_CACHE_DIR moves it)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="purejaxppo", description="JAX-compiled PPO.")
    parser.add_argument("--version", action=_printer(
        version_line, "print the version, jax's version and the devices JAX sees, and exit"))
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train one config over N seeds as one compiled program")
    train.add_argument("config", nargs="?",
                       help="YAML config: a path, or a shipped config by name (e.g. cartpole; see: purejaxppo configs)")
    train.add_argument("--seeds", type=int, help="number of seeds, vmapped (default 1)")
    train.add_argument("--eval-episodes", type=int, metavar="E",
                       help=f"evaluate the final policy on E fresh episodes (default {DEFAULT_EVAL_EPISODES}; 0: off)")
    _add_run_options(train, "seeds", "run folder (default runs/<env>-<time>)")
    sweep = sub.add_parser("sweep", help="seeds x hyperparameter grid, one compile per static group")
    sweep.add_argument("spec", nargs="?",
                       help="sweep YAML: a config plus a sweep: section; a path or a shipped one by name, "
                            "e.g. sweeps/clip_epochs")
    sweep.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                       help="add or replace a grid axis (repeatable), e.g. --grid clip_eps=0.1,0.2")
    sweep.add_argument("--seeds", type=int, help="seeds per grid point (overrides the file)")
    _add_run_options(sweep, "runs", "sweep folder (default runs/sweep-<env>-<time>)")
    evaluate = sub.add_parser("eval", help="evaluate the policies saved in a run or sweep folder")
    evaluate.add_argument("folder", help="a run or sweep folder (it holds checkpoints/)")
    evaluate.add_argument("--episodes", type=int, default=100, help="fresh episodes per run (default 100)")
    evaluate.add_argument("--seed", type=int, default=0, help="seed of the evaluation episodes (default 0)")
    evaluate.add_argument("--stochastic", action="store_true", help="sample actions (default: the policy's mode)")
    evaluate.add_argument("--step", type=int, help="the checkpoint at this update (default: the newest)")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    evaluate.add_argument("--render", metavar="FILE.html",
                          help="Brax envs: also write an HTML replay of one episode of run 0 (a new file)")
    _add_cache_option(evaluate)
    export = sub.add_parser("export", help="write a run's greedy policy as a StableHLO or ONNX file, verified "
                                           "against make_policy (docs/export.md)")
    export.add_argument("folder", help="a run or sweep folder (it holds checkpoints/)")
    export.add_argument("--run", type=int, default=0, metavar="K", help="which run of the folder (default 0)")
    export.add_argument("--checkpoint", type=int, metavar="N", help="the checkpoint at update N (default: the newest)")
    export.add_argument("--format", choices=["stablehlo", "onnx"], default="stablehlo",
                        help="stablehlo (jax.export; default) or onnx (needs: pip install \"purejaxppo[onnx]\")")
    export.add_argument("--outputs", choices=["action", "all"], default="action",
                        help="action (default), or all: also the logits (or mean and log-std) and the value")
    export.add_argument("--out", metavar="FILE", help="the file to write, a new one (default: in the folder, "
                                                      "policy-run<K>-update<N>.<format>); its metadata beside it, "
                                                      "FILE.json")
    _add_cache_option(export)
    sub.add_parser("configs", help="list the shipped configs (use them by name: purejaxppo train cartpole)")
    return parser


def _check_paths(args) -> None:
    """Every path option, before anything is read or created: a name too long is one line."""
    for dest, option in (("config", "config"), ("spec", "spec"), ("folder", "folder"), ("out", "--out"),
                         ("resume", "--resume"), ("render", "--render")):
        if getattr(args, dest, None) is not None:
            check_path(option, getattr(args, dest))
    for dest, option in (("out", "--out"), ("resume", "--resume"), ("folder", "folder")):  # checkpoints' folders
        if getattr(args, dest, None) is not None:
            check_utf8(option, getattr(args, dest))
    if args.command in ("train", "sweep") and args.out is None and args.resume is None:
        check_utf8("--out", "runs")  # the default folder, under the working folder


def _source(text: str | None, field: str) -> str | None:
    """A config argument: a path that exists (a file, or a pipe: /dev/fd/N, `<(...)`), else a
    shipped config of that name; else a ConfigError naming the nearest shipped one."""
    if text is None or Path(text).exists():
        return text
    shipped = configs.find(text)
    if shipped is not None:
        return str(shipped)
    nearest = difflib.get_close_matches(text.removesuffix(".yaml"), configs.names(), n=1)
    hint = f"; did you mean {nearest[0]}?" if nearest else ""
    raise ConfigError(field, text, f"file not found, nor a shipped config{hint} (purejaxppo configs lists them)")


@contextlib.contextmanager
def _as_file(source: str | None, field: str):
    """`source` as a regular file, which config files are read as: a pipe (/dev/fd/N, process
    substitution `<(...)`) is read once into a temporary copy; errors name the pipe, not the copy."""
    path = Path(source) if source is not None else None
    if path is None or not path.exists() or path.is_file() or path.is_dir():
        yield source
        return
    with tempfile.TemporaryDirectory(prefix="purejaxppo-") as folder:
        copy = Path(folder) / "config.yaml"
        try:
            copy.write_bytes(path.read_bytes())
        except OSError as error:
            raise ConfigError(field, source, f"cannot be read: {error.strerror}") from None
        try:
            yield str(copy)
        except ConfigError as error:
            value = source if error.value == str(copy) else error.value
            raise ConfigError(error.field, value, error.rule.replace(str(copy), source)) from None


def configs_command() -> int:
    """Each shipped config: its name, the return it should reach (configs/references.yaml), its
    time for 4 seeds on 2 CPU cores as measured by the returns case, and its description."""
    names = configs.names()
    width = max(map(len, names))
    refs = configs.references()
    shown = {name: (configs.reference_line(name) or "").removeprefix("reference: ") for name in names}
    ref_width = min(max(map(len, shown.values())), 52)
    print(f"{'config':<{width}}  {'reference (configs/references.yaml)':<{ref_width}}  {'4 seeds, 2 CPU cores':<20}  "
          "description")
    for name in names:
        print(f"{name:<{width}}  {shown[name][:ref_width]:<{ref_width}}  {_expected_time(refs.get(name)):<20}  "
              f"{configs.summary(name)[:70]}")
    print(f"\n(in {configs.FOLDER}; e.g. purejaxppo train cartpole --seeds 8)", flush=True)
    return 0


def _expected_time(ref: dict | None) -> str:
    if ref is None:
        return ""
    if ref["size"] == "gpu":
        return "GPU-sized"
    minutes = ref["cpu_minutes"]
    return "not measured yet" if minutes is None else f"{minutes:.2g} min" if minutes < 10 else f"{minutes:.0f} min"


def _reference(args, base) -> str | None:
    """The reference line of the shipped config this train run is: the one named on the command
    line, or for --resume the one whose fields the run has; with the fields this run changed."""
    given = configs.name_of(_source(args.config, "config")) if args.config else None
    for name in [given] if given else configs.references():
        line = configs.reference_line(name)
        if line is None:
            return None
        shipped = check_fields(config_values(str(configs.find(name)), {})).to_dict()
        changed = [key for key, value in base.to_dict().items() if shipped.get(key) != value]
        if given or not changed:
            return line + (f" for {name} as shipped; this run changed {', '.join(changed)}" if changed else "")
    return None


def _check_count(option: str, value: int | None, minimum: int = 1) -> None:
    """A count option, where given: `config.count`'s rule (an integer of at least `minimum`, below 2**31)."""
    if value is not None:
        count(option, value, minimum)


def _check_counts(args) -> None:
    for option, value in (("--seeds", args.seeds), ("--max-parallel", args.max_parallel),
                          ("--checkpoint-every", args.checkpoint_every), ("--keep", args.keep),
                          ("--eval-episodes", getattr(args, "eval_episodes", None))):
        _check_count(option, value, 0 if option == "--eval-episodes" else 1)
    if args.seed is not None:
        check_seeds("--seed", args.seed, args.seeds or 1)


# --------------------------------------------------------------------------------------
# train and sweep: one path
# --------------------------------------------------------------------------------------
def _run_request(args, saved: dict | None = None):
    """-> (meta, base config, spec): the run the command line asks for, as a checkpoint's
    meta records it; with `saved` (a resumed run's meta), what it does not restate is the
    saved run's. The base's fields are checked here; its environment and every run's
    config by `sweep.plan`."""
    saved = saved or {}
    saved_spec = {k: v for k, v in saved.get("spec", {}).items() if v or k != "grid"}  # a train run's grid is {}
    overrides = dict(parse_override(item) for item in args.set)
    field = "config" if args.command == "train" else "spec"
    given = args.config if args.command == "train" else args.spec
    if given is None and not saved:
        raise ConfigError(field, NO_VALUE,
                          f"give a {'YAML config' if args.command == 'train' else 'sweep YAML'} (or --resume DIR)")
    with _as_file(_source(given, field), field) as source:
        if args.command == "train":
            if source and "sweep" in read_yaml(source):
                raise ConfigError("config", given, f"is a sweep file (it has a sweep: section): run it with "
                                  f"purejaxppo sweep {shlex.quote(given)}")
            base = (check_fields(config_values(source, overrides), where=source) if source
                    else check_fields({**saved["config"], **overrides}))
            eval_episodes = next(v for v in (args.eval_episodes, saved_spec.get("eval_episodes"),
                                             DEFAULT_EVAL_EPISODES) if v is not None)
            spec = make_spec({"seeds": args.seeds or saved_spec.get("seeds", 1), "eval_episodes": eval_episodes})
        else:
            options = [parse_grid_option(item) for item in args.grid]
            twice = next((key for i, (key, _) in enumerate(options) if key in dict(options[:i])), None)
            if twice is not None:
                raise ConfigError("--grid", twice, "is given twice; give each key once, with all its values")
            grid = dict(options) or None
            if source:
                base, spec = load_sweep(source, overrides, grid=grid, seeds=args.seeds)
            else:
                base = check_fields({**saved["config"], **overrides})
                spec = make_spec(saved_spec, grid=grid, seeds=args.seeds)
    options = {"first_seed": args.seed, "checkpoint_every": args.checkpoint_every, "max_parallel": args.max_parallel,
               "keep": args.keep}
    options = {k: saved.get(k, 0 if k == "first_seed" else None) if v is None else v for k, v in options.items()}
    meta = {"command": args.command, "config": base.to_dict(), "spec": spec.to_dict(), **options}
    return meta, base, spec


def _plan_command(args):
    """-> (meta, the planned sweep, the folder to resume or None): a new run's, or the run in
    --resume DIR's (what the command line restates must be what it was started with).
    Every run's config is checked, and each group's environment built, by the plan."""
    _check_counts(args)
    folder = None
    if args.resume is None:
        meta, base, spec = _run_request(args)
    else:
        folder, saved = RunFolder.to_resume(args.resume, args.command)
        meta, base, spec = _run_request(args, saved)
        folder.check_resume(saved, meta)
    check_seeds("--seed", meta["first_seed"], spec.seeds)  # the seeds a sweep file gives, too
    return meta, plan(base, spec), folder


def run_command(args) -> int:
    meta, planned, folder = _plan_command(args)
    resuming = folder is not None
    if args.wandb:
        check_wandb()

    writer = is_writer()  # several processes: each computes its shard, process 0 writes the folder's files
    shared = None  # several processes: the checkpoints, which every process saves its shards into
    if jax.process_count() == 1:
        if resuming:
            folder.lock("--resume")
        else:
            folder = RunFolder.claim(args.out, args.command, planned.base.env)  # and locked
    else:  # (the folder on a filesystem every host shares)
        folder, shared = _shared_folder(args, planned, folder, resuming, meta["keep"])
    discardable = not resuming and jax.process_count() == 1  # a new folder, ended before a checkpoint: removed
    try:
        return _run(args, meta, planned, folder if writer else None, resuming, shared)
    except Stopped as stop:
        stop.outcome = _stopped(args, folder if writer else None, removed=discardable and folder.discard())
        raise
    except UsageError as error:  # a refusal that comes after the claim: the folder must not block the next try
        if not (discardable and folder.discard()):
            raise
        removed = f"; {folder} was removed (it held nothing to resume)"
        if isinstance(error, ConfigError):
            raise type(error)(error.field, error.value, error.rule + removed) from None
        raise UsageError(f"{error}{removed}") from None
    except Exception as error:
        lost = lost_process(error)
        if lost is None:
            raise
        lost.outcome = _lost(args, folder if writer else None, lost)
        raise lost from None
    finally:
        if folder is not None:
            folder.unlock()


def _shared_folder(args, planned, folder, resuming: bool, keep):
    """Several processes: the writer claims (or locks) the folder and makes its checkpoints/;
    every other process learns its path (one broadcast) -> (the folder, or None on a process
    that does not write; the checkpoints, opened by every process together)."""
    from jax.experimental import multihost_utils

    claimed, error = None, None
    if is_writer():
        try:
            if resuming:
                folder.lock("--resume")
                claimed = folder
            else:
                claimed = RunFolder.claim(args.out, args.command, planned.base.env)
            (claimed.path / "checkpoints").mkdir(exist_ok=True)
        except (ConfigError, OSError) as failed:
            if claimed is not None:
                claimed.unlock()
            claimed, error = None, failed
    text = str(claimed.path.absolute()).encode() if claimed is not None else b""
    size = 4096
    if len(text) > size:
        raise ConfigError("--out", str(claimed.path), f"a path of more than {size} bytes")
    buffer = np.frombuffer(text.ljust(size, b"\0"), np.uint8)
    path = bytes(np.asarray(multihost_utils.broadcast_one_to_all(buffer))).rstrip(b"\0").decode()
    if error is not None:
        raise error
    if not path:
        raise ConfigError("--resume" if resuming else "--out", args.resume or args.out or "runs/",
                          "process 0 could not claim the folder (its own line says why)")
    me = jax.process_index()
    log = Path(path) / f"process-{me}.log"
    runtime_output_to(log)  # JAX's fatal error, if it comes, too
    left = (_checkpoints_elsewhere(args, path) if me else f"the newest complete checkpoint, untouched, is in "
            f"{Path(path) / 'checkpoints'}; resume with: {_resume_command(args, path)}")
    line_on_abort(f"purejaxppo: error: {'{who}' if me else 'another process'} was lost (JAX's runtime ended "
                  f"process {me}; its log: {log}): {left}")
    folder = claimed if is_writer() else RunFolder(path, args.command)
    checkpoints = folder.checkpoints(keep=keep, create=False, shared=True)
    return (folder if is_writer() else None), checkpoints


def _resume_command(args, folder) -> str:
    return f"purejaxppo {args.command} --resume {shlex.quote(str(folder))}"


def _stopped(args, folder, removed: bool = False) -> str:
    """What a stop left: the newest complete checkpoint and the command to resume; `removed`:
    the folder, claimed by this command and stopped before its first checkpoint, was removed."""
    if folder is None:
        return f"process {jax.process_index()}: process 0 keeps the checkpoints"
    if removed:
        return (f"before the first checkpoint: nothing to resume, and {folder} was removed; the same command starts "
                f"afresh (--checkpoint-every K saves every K updates)")
    newest = folder.newest_checkpoint()
    if newest is None:
        return "before the first checkpoint: nothing to resume (--checkpoint-every K saves every K updates)"
    return f"the newest complete checkpoint is at update {newest}; resume with: {_resume_command(args, folder)}"


def _checkpoints_elsewhere(args, where) -> str:
    """A process that does not write: where process 0 keeps the checkpoints, and the resume command."""
    return (f"process {jax.process_index()}: the checkpoints are process 0's"
            + (f", in {where}; resume with: {_resume_command(args, where)}" if where else ""))


def _lost(args, folder, lost) -> str:
    """What a lost process left (the detail, with its traceback, in the folder's lost-process.log)."""
    if folder is None:
        return _checkpoints_elsewhere(args, args.resume or args.out)
    log = folder.path / "lost-process.log"
    try:
        log.write_text(f"{lost.who} was lost; this process (0) saw:\n{traceback.format_exc()}")
        details = f" (details: {log})"
    except OSError:
        details = ""
    return _stopped(args, folder).replace("the newest complete checkpoint", "the newest complete checkpoint, "
                                          "untouched,", 1) + details


def _run(args, meta, planned, folder, resuming, shared=None) -> int:
    """Run the plan, and write the results; `folder`: the run folder, locked (None: a process that
    does not write); `shared`: several processes' checkpoints, which each saves its shards into."""
    base, spec, groups = planned.base, planned.spec, planned.groups
    writer = folder is not None
    if writer and not folder.config_file.exists():  # a new folder's, or a resumed one's that was deleted
        folder.write_config(base, spec)
    console = Console()
    checkpoints = shared if shared is not None else folder.checkpoints(keep=meta["keep"])

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as bar:
        task = bar.add_task("compiling", total=None)
        what = f"{spec.seeds} seed(s)"
        if spec.pbt is not None:
            what = f"PBT, {len(planned.points)} members x {what}, exploit/explore every {spec.pbt['interval']} updates"
        elif args.command == "sweep":
            what = f"{len(planned.points)} point(s) x {what}"
        console.print(f"[bold]{base.env}[/]: {what} = {planned.runs} run{'s' if planned.runs != 1 else ''}, "
                      f"{len(groups)} compile(s) of {groups[0].config.num_updates} updates x "
                      f"{groups[0].config.batch_size} steps, on {len(jax.devices())} device(s)"
                      + (f"; resuming {folder or args.resume}" if resuming else ""))

        def show(record):
            text = f"group {record['group'] + 1}/{len(groups)} " if len(groups) > 1 else ""
            if "episode_return" in record:
                text += f"return {record['episode_return']:.4g}"
            if "steps_per_second" in record:
                text += f" · {record['steps_per_second']:,.0f} steps/s"
            bar.update(task, completed=record["update"], description=text or "training")

        live = LiveLog(folder.path if writer else None, on_record=show, tensorboard=args.tensorboard,
                       wandb_project=args.wandb if writer else None, wandb_config=meta,
                       failures=folder.failures if writer else None)

        def on_group(g, n_groups, group, group_runs):
            live.group(g, group_runs, group.config.batch_size)
            bar.update(task, description=f"compiling group {g + 1}/{n_groups}" if n_groups > 1 else "compiling",
                       total=group.config.num_updates, completed=0)

        try:
            result = run_plan(planned, first_seed=meta["first_seed"], max_parallel=meta["max_parallel"],
                              on_group=on_group, checkpoints=checkpoints, checkpoint_every=meta["checkpoint_every"],
                              resume=resuming, meta=meta, progress=live)
        finally:
            live.close()
    if not writer:
        console.print(f"process {jax.process_index()}: done; process 0 writes the results")
        return 0
    timings = result.timings
    console.print(f"compile {timings.compile_seconds:.1f} s ({timings.compiles} programs), run "
                  f"{timings.run_seconds:.1f} s, {timings.checkpoints} checkpoint(s) "
                  f"({timings.checkpoint_bytes / 2**20:.2f} MiB, {timings.checkpoint_seconds:.2f} s in all)")
    if args.command == "train":
        finished = _write_train_results(folder, base, result, console, _reference(args, base),
                                        groups[0].env.max_episode_steps)
    else:
        finished = _write_sweep_results(folder, base, spec, result, console)
    console.print(f"{'run' if args.command == 'train' else 'sweep'} folder: {folder}")
    newest = folder.newest_checkpoint()
    if not finished and newest is not None:  # a complete checkpoint can write the rest
        print(f"purejaxppo: {folder} is not finished ({FINISHED}, its mark, waits for what could not be written); "
              f"the newest complete checkpoint is at update {newest}; once the fault is fixed, write what is missing "
              f"with: {_resume_command(args, folder)}", file=sys.stderr)
    elif not finished:
        print(f"purejaxppo: {folder} is not finished ({FINISHED}, its mark, is not written): no checkpoint could be "
              f"saved, so nothing can resume it; the results written beside it are this run's", file=sys.stderr)
    return 1 if folder.failures else 0


def _write_train_results(folder, base, result, console, reference: str | None, max_episode_steps: int) -> bool:
    seeds = [run["seed"] for run in result.runs]
    runs = result.point(0)  # a train run is one point: its seeds, stacked
    summary = report.summarize(runs.metrics, steps_per_run=base.num_updates * base.batch_size,
                               run_seconds=result.run_seconds, compile_seconds=result.compile_seconds,
                               evaluation=runs.evaluation, diverged=result.diverged, env=base.env,
                               max_episode_steps=max_episode_steps)
    finished = folder.write_run_results(base, runs.metrics, summary, seeds)
    table = Table(title=f"{base.env}, mean ± s.e. over {len(seeds)} seed(s)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in report.summary_lines(summary):
        table.add_row(name, value)
    console.print(table)
    console.print(f"per-epoch clip fraction: {summary['diagnosis']}")
    if reference:
        console.print(reference, highlight=False)
    return finished


def _write_sweep_results(folder, base, spec, result, console) -> bool:
    if spec.pbt is not None:
        summary = report.pbt_summary(result)
        finished = folder.write_pbt_results(result, summary)
        print(report.pbt_markdown(summary), flush=True)
    else:
        rows, swept = report.sweep_summary(result), swept_keys(result)
        finished = folder.write_sweep_results(result, rows, swept)
        print(report.sweep_markdown(rows, swept, spec.threshold), flush=True)
    steps = spec.seeds * sum(cfg.num_updates * cfg.batch_size for cfg in result.configs)
    console.print(f"{steps / result.run_seconds:,.0f} steps/s over all runs; "
                  f"diverged runs: {int(np.sum(result.diverged))}")
    return finished


# --------------------------------------------------------------------------------------
# eval
# --------------------------------------------------------------------------------------
def eval_command(args) -> int:
    _check_count("--episodes", args.episodes)
    check_seeds("--seed", args.seed)
    folder = RunFolder(args.folder)
    if args.render:  # before anything is evaluated: the replay must be possible and its file new
        if Path(args.render).exists():
            raise ConfigError("--render", args.render, "exists: replays never replace a file")
        if not Path(args.render).absolute().parent.is_dir():
            raise ConfigError("--render", args.render, f"is in a folder that does not exist "
                              f"({Path(args.render).parent}); create it first")
        replay.check_renderable(folder.run_config(args.step, run=0), "--render")

    try:
        runs = folder.evaluate(episodes=args.episodes, seed=args.seed, deterministic=not args.stochastic,
                               step=args.step)
    except ResourceError as error:  # the evaluation names its argument; here that is --episodes
        raise ResourceError("--episodes", error.value, error.rule) from None

    everything = np.concatenate([run["returns"] for run in runs])
    pooled = everything[~np.isnan(everything)]  # NaN: an episode that did not end within max_episode_steps
    if not pooled.size:
        raise UsageError(f"{args.folder}: none of the {everything.size} episodes ended within the environment's "
                         f"max_episode_steps: its episodes never end, so there is no return to report")
    mean, se = mean_se(pooled)
    out = {"folder": str(args.folder), "step": runs[0]["step"], "episodes_per_run": args.episodes,
           "deterministic": not args.stochastic, "seed": args.seed, "mean": mean, "se": se,
           "min": float(np.min(pooled)), "median": float(np.median(pooled)), "max": float(np.max(pooled)),
           "unfinished": int(everything.size - pooled.size),
           "runs": [{**{k: v for k, v in run.items() if k != "returns"}, "mean": mean_se(run["returns"])[0],
                     "se": mean_se(run["returns"])[1], "returns": [float(r) for r in run["returns"]]}
                    for run in runs]}
    if args.render:
        out["replay"] = _render(args)
    if args.json:
        print(report.json_text(out))
        return 0
    mode = "greedy" if out["deterministic"] else "sampled"
    print(f"{args.folder} at update {out['step']}: {len(runs)} run(s) x {args.episodes} fresh episodes, "
          f"{mode} actions, seed {args.seed}")
    for run in out["runs"]:
        label = ", ".join(f"{k}={v}" for k, v in run.items() if k not in ("mean", "se", "returns", "step", "run"))
        print(f"  run {run['run']} ({label}): {run['mean']:.4g} ± {run['se']:.2g}")
    print(f"return: {mean:.4g} ± {se:.2g} (s.e.); min {out['min']:.4g}, median {out['median']:.4g}, "
          f"max {out['max']:.4g}")
    if out["unfinished"]:
        print(f"warning: {out['unfinished']} of {everything.size} episodes did not end within the environment's "
              f"max_episode_steps: left out of these numbers")
    print(_histogram(pooled))
    return 0


def _render(args) -> dict:
    """Write the replay of one episode of run 0 (refusing to replace a file)."""
    path = Path(args.render)
    cfg, state = RunFolder(args.folder).load(step=args.step, run=0)
    html, total, steps = replay.render(cfg, state, jax.random.PRNGKey(args.seed), not args.stochastic)
    try:
        write_new(path, html)
    except OSError as error:
        raise ConfigError("--render", args.render, f"cannot be written: {error.strerror}") from None
    if not args.json:
        print(f"replay of run 0 ({steps} steps, return {total:.4g}): {path}")
    return {"path": str(path), "return": total, "steps": steps}


def _histogram(values, bins: int = 10, width: int = 40) -> str:
    counts, edges = np.histogram(values, bins=bins)
    top = max(int(counts.max()), 1)
    return "\n".join(f"  {edges[i]:>10.4g} – {edges[i + 1]:<10.4g} {'█' * round(width * c / top):<{width}} {c}"
                     for i, c in enumerate(counts))


# --------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------
def export_command(args) -> int:
    """Export one run's policy (purejaxppo.export), verified against make_policy: a bad option is
    one line and exit 2; an export that does not act as make_policy does, one line and exit 1."""
    from purejaxppo import export

    options = {"path": "--out", "format": "--format", "outputs": "--outputs"}
    _check_count("--run", args.run, 0), _check_count("--checkpoint", args.checkpoint, 0)
    try:
        if args.format == "onnx":
            export.check_onnx_installed()
        if args.out is not None:
            export.check_target(args.out)
        folder = RunFolder(args.folder)
        checkpoints = folder.checkpoints(create=False)
        steps = checkpoints.steps()
        if args.checkpoint is not None and steps and args.checkpoint not in steps:
            raise ConfigError("--checkpoint", args.checkpoint, f"{folder} has no checkpoint at that update; "
                                                               f"it has {steps}")
        runs = sorted(k for info in checkpoints.meta(args.checkpoint)["sets"].values() for k in info["runs"])
        if args.run not in runs:
            raise ConfigError("--run", args.run, f"{folder} has no run {args.run}; its runs are {runs}")
        cfg, state = folder.load(args.checkpoint, args.run)
        step = args.checkpoint if args.checkpoint is not None else steps[-1]
        out = args.out or str(folder.path / f"policy-run{args.run}-update{step}{export.FORMATS[args.format]}")
        result = export.export_policy(cfg, state, args.format, outputs=args.outputs, path=out,
                                      source={"folder": str(folder), "run": args.run, "update": step})
    except ConfigError as error:
        if error.field in options:  # the library's argument is this command's option
            raise ConfigError(options[error.field], error.value, error.rule) from None
        raise
    except export.ExportError as error:
        print(f"purejaxppo: error: {error}", file=sys.stderr)
        return 1
    print(f"{folder} run {args.run} at update {step} ({cfg.env}): {result.describe()}")
    return 0


def _request_text(args, argv) -> str:
    """What every process of a job must share: the command line, the config or spec file it
    names (as read here: a host may hold another copy) and the versions."""
    parts = [__version__, jax.__version__, *argv]
    given = getattr(args, "config", None) or getattr(args, "spec", None)
    try:
        path = _source(given, "config")
        if path is not None and Path(path).is_file():
            parts.append(Path(path).read_text(errors="replace"))
    except (UsageError, OSError) as error:  # each process says so itself, after this comparison
        parts.append(str(error))
    return "\0".join(parts)


def main(argv=None) -> int:

    use_all_cpu_cores()  # seeds spread over the cores; before JAX starts its backend
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = _parser().parse_args(argv)
    except UsageError as error:
        print(f"purejaxppo: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `purejaxppo train --help-config | head`: the reader has what it wanted
        _quiet_stdout()
        return 0
    try:
        # several processes: each computes its shard, process 0 writes; a stop is agreed on (faults.coordinate)
        joined = init_distributed(detect=not args.no_cluster) if args.command != "configs" else None
        coordinate(joined is not None)
        with stop_signals(STOP_SIGNALS):  # SIGTERM's handler replaces that of JAX's preemption notifier
            if joined is not None:
                print(joined_line(joined), flush=True)
                agree("the command", _request_text(args, argv))
            if not getattr(args, "no_cache", True):
                try:
                    compile_cache.enable()  # before anything compiles
                except OSError as error:
                    print(f"purejaxppo: compiling without the persistent cache: {error}", file=sys.stderr)
            _check_paths(args)
            if args.command == "configs":
                try:
                    return configs_command()
                except BrokenPipeError:  # `purejaxppo configs | head`
                    _quiet_stdout()
                    return 0
            commands = {"eval": eval_command, "export": export_command}
            return commands.get(args.command, run_command)(args)
    except UsageError as error:
        print(f"purejaxppo: error: {error}", file=sys.stderr)
        return 2
    except Stopped as stop:
        outcome = stop.outcome or (f"the evaluation did not finish ({args.folder} is unchanged)"
                                   if args.command == "eval" else "the export did not finish: nothing was written"
                                   if args.command == "export" else "before the run started: nothing was written")
        sent = f" (sent to process {stop.process})" if stop.process is not None else ""
        print(f"purejaxppo: stopped by {stop.name}{sent}: {outcome}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(stop.exit_code)  # at once: a program in flight is dropped, the checkpoints stay as they are
    except LostProcess as lost:
        print(f"purejaxppo: error: {lost.who} was lost ({lost.detail}): {lost.outcome}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)  # at once: JAX's shutdown barrier would wait for the lost process, then abort


def _quiet_stdout() -> None:
    """Standard output whose reader is gone: what is still buffered goes nowhere, so that Python
    does not print "Exception ignored ... BrokenPipeError" as it exits."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
