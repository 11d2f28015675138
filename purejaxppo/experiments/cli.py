"""Command line.

    purejaxppo train CONFIG [--seeds N] [--set key=value ...] [--out DIR] [--checkpoint-every K]
    purejaxppo train --resume DIR
    purejaxppo sweep SPEC [--grid key=v1,v2 ...] [--seeds N] [...]     (same run options)
    purejaxppo sweep --resume DIR
    purejaxppo eval DIR [--episodes 100] [--seed S] [--stochastic] [--step N] [--json] [--render F.html]
    purejaxppo export DIR [--run K] [--checkpoint N] [--format stablehlo|onnx] [--outputs action|all] [--out FILE]
    purejaxppo tensorboard DIR [--out EVENTS_DIR]                       (metrics.csv as TensorBoard events)
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

import os
import sys
from pathlib import Path

import jax
from rich.console import Console

from purejaxppo import configs
from purejaxppo.config import ConfigError
from purejaxppo.errors import ResourceError, UsageError
from purejaxppo.experiments import compile_cache, hosts, kinds, options, outcome, replay, report, request, tensorboard
from purejaxppo.experiments.faults import STOP_SIGNALS, Failures, Stopped, stop_signals
from purejaxppo.experiments.folder import RunFolder
from purejaxppo.experiments.hosts import LostProcess
from purejaxppo.experiments.live import ProgressBar, check_wandb
from purejaxppo.experiments.parallel import use_all_cpu_cores
from purejaxppo.experiments.saved import SavedRun
from purejaxppo.experiments.spec import check_seeds
from purejaxppo.experiments.sweep import run_plan


def configs_command() -> int:
    print(configs.listing(), flush=True)
    return 0


# --------------------------------------------------------------------------------------
# train and sweep: one path
# --------------------------------------------------------------------------------------
def run_command(args, cluster) -> int:
    """train and sweep: the plan (everything checked, nothing created), then the run in its
    folder (`RunFolder.running`, over the job's processes: `cluster`), its results written and
    printed as its kind says."""
    experiment, planned, resumed, reference = request.plan_command(args)
    if args.wandb:
        check_wandb()
    console = Console()
    with RunFolder.running(experiment, out=args.out, resume=resumed, lines=outcome, cluster=cluster) as folder:
        with ProgressBar(console, planned, planned.kind.describe(planned), resuming=resumed and folder) as bar:
            live = folder.live_log(bar.record, args.tensorboard, args.wandb, experiment)
            result = _execute(planned, experiment, folder, bar, live, resume=resumed is not None)
        if not folder.writer:
            console.print(f"process {cluster.index}: done; process 0 writes the results")
            return 0
        timings = result.timings
        console.print(f"compile {timings.compile_seconds:.1f} s ({timings.compiles} programs), run "
                      f"{timings.run_seconds:.1f} s, {timings.checkpoints} checkpoint(s) "
                      f"({timings.checkpoint_bytes / 2**20:.2f} MiB, {timings.checkpoint_seconds:.2f} s in all)")
        finished, shown = planned.kind.write_results(folder, result, reference)
        if args.tensorboard:  # every run's metrics per update, as `purejaxppo tensorboard` writes them
            tensorboard.log_results(folder.path, folder.failures)
        for item in shown:
            print(item, flush=True) if isinstance(item, str) else console.print(item)
        console.print(f"{'run' if args.command == 'train' else 'sweep'} folder: {folder}")
        unfinished = outcome.unfinished(folder, finished)
        if unfinished:
            print(unfinished, file=sys.stderr)
    return 1 if folder.failures else 0


def _execute(planned, experiment, folder, bar, live, resume: bool):
    """Run the plan, its progress shown (`bar`) and logged (`live`) -> the SweepResult."""
    def on_group(g, n_groups, group, group_runs):
        live.group(g, group_runs, group.config.batch_size)
        bar.group(g, n_groups, group)

    try:
        return run_plan(planned, first_seed=experiment.first_seed, max_parallel=experiment.max_parallel,
                        on_group=on_group, checkpoints=folder.run_checkpoints,
                        checkpoint_every=experiment.checkpoint_every, resume=resume, meta=experiment.meta_entry(),
                        progress=live, cluster=folder.cluster)
    finally:
        live.close()


# --------------------------------------------------------------------------------------
# eval
# --------------------------------------------------------------------------------------
def eval_command(args) -> int:
    request.check_count("--episodes", args.episodes)
    check_seeds("--seed", args.seed)
    if args.render:  # before anything is read: the replay's file must be new
        replay.check_target(args.render, "--render")
    restored = SavedRun(args.folder).restore(args.step)  # read once: each environment built once
    if args.render:  # before anything is evaluated: the replay must be possible
        bundle, state = restored.run(0)
        replay.check_renderable(bundle.config, "--render", env=bundle.env)
    try:
        runs = restored.evaluate(episodes=args.episodes, seed=args.seed, deterministic=not args.stochastic)
    except ResourceError as error:  # the evaluation names its argument; here that is --episodes
        raise ResourceError("--episodes", error.value, error.rule) from None

    record = restored.experiment  # its points' seeds and swept keys (None: saved through the Python API)
    seeds, swept = (None, None) if record is None else (record.spec.seeds, kinds.of(record.spec).swept(record.spec))
    configs = {k: config for info in restored.meta["sets"].values()  # each run's, at this checkpoint
               for k, config in zip(info["runs"], info["run_configs"])}
    out = report.evaluation_summary(runs, folder=str(args.folder), episodes=args.episodes,
                                    deterministic=not args.stochastic, seed=args.seed, configs=configs, seeds=seeds,
                                    swept=swept)
    if args.render:
        out["replay"] = replay.write(args.render, bundle, state, jax.random.PRNGKey(args.seed), not args.stochastic,
                                     "--render")
        if not args.json:
            print(f"replay of run 0 ({out['replay']['steps']} steps, return {out['replay']['return']:.4g}): "
                  f"{args.render}")
    if args.json:
        print(report.json_text(out))
        return 0
    mode = "greedy" if out["deterministic"] else "sampled"
    points = out["points"]
    print(f"{args.folder} at update {out['step']}: {len(runs)} run(s) in {len(points)} point(s) x {args.episodes} "
          f"fresh episodes, {mode} actions, seed {args.seed}")

    def number(point):  # the mean over its seeds ± the s.e. over them, as a sweep's summary
        if point["seeds"] < 2:
            return f"{point['mean']:.4g} (n=1: no s.e.)" if point["seeds"] else "none of its episodes ended"
        return f"{point['mean']:.4g} ± {point['se']:.2g} (s.e. over {point['seeds']} seeds)"

    what = "the mean over seeds of each seed's mean over its episodes"
    if len(points) == 1 and not out["swept"]:  # a train run: its seeds
        print(f"return, {what}: {number(points[0])}, mean length {points[0]['mean_length']:.4g} steps")
    else:
        print(f"return per point, in point order ({what}; each run's: --json):")
        for point in points:
            values = [f"{k}={report.show_value(v)}" for k, v in point["values"].items()]
            values += [f"{k} differs between its seeds" for k in point["varies"]]
            runs_of = f"run{'s' if len(point['runs']) > 1 else ''} {', '.join(map(str, point['runs']))}"
            print(f"  point {point['point']} ({'; '.join(filter(None, [', '.join(values), runs_of]))}): "
                  f"{number(point)}, mean length {point['mean_length']:.4g} steps")
    print(f"every run's episodes: min {out['min']:.4g}, median {out['median']:.4g}, max {out['max']:.4g}")
    if out["unfinished"]:
        print(f"warning: {out['unfinished']} of {len(runs) * args.episodes} episodes did not end within the "
              f"environment's max_episode_steps: left out of these numbers")
    if out["at_time_limit"]:
        print(f"note: {out['at_time_limit']} of {len(runs) * args.episodes} episodes ended by the environment's time "
              f"limit: their returns are capped by it, not by the policy")
    print(report.histogram(out))
    return 0


# --------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------
def export_command(args) -> int:
    """Export one run's policy (purejaxppo.export), verified against make_policy: a bad option is
    one line and exit 2; an export that does not act as make_policy does, one line and exit 1."""
    from purejaxppo import export

    options = {"path": "--out", "format": "--format", "outputs": "--outputs"}
    request.check_count("--run", args.run, 0), request.check_count("--checkpoint", args.checkpoint, 0)
    into = args.out is not None and (args.out.endswith(os.sep) or Path(args.out).is_dir())  # --out DIR/: in it
    given = None if into else args.out
    format = args.format or export.format_of(given)  # --out policy.onnx: ONNX
    try:
        if given is not None:
            export.check_target(given, format)
        if format == "onnx":
            export.check_onnx_installed()
        folder = SavedRun(args.folder)
        checkpoints = folder.checkpoints(create=False)
        steps = checkpoints.steps()
        if args.checkpoint is not None and steps and args.checkpoint not in steps:
            raise ConfigError("--checkpoint", args.checkpoint, f"{folder} has no checkpoint at that update; "
                                                               f"it has {steps}")
        runs = sorted(k for info in checkpoints.meta(args.checkpoint)["sets"].values() for k in info["runs"])
        if args.run not in runs:
            raise ConfigError("--run", args.run, f"{folder} has no run {args.run}; its runs are {runs}")
        step = args.checkpoint if args.checkpoint is not None else steps[-1]
        out = given or str(Path(args.out if into else folder.path) / f"policy-run{args.run}-update{step}"
                                                                       f"{export.FORMATS[format]}")
        if into:
            export.check_target(out, format)
        writes_folder = folder.path.resolve() in Path(out).resolve().parents
        writer = RunFolder(args.folder)
        if writes_folder:  # a writer of the folder, as a run is: one at a time (a run's lock refuses it)
            writer.lock("folder")
        try:
            with compile_cache.quiet_cache_loads():  # as train and eval: no false alarms of a cached load
                bundle, state = folder.load_bundle(args.checkpoint, args.run)
                result = export.export_policy(bundle, state, format, outputs=args.outputs, path=out,
                                              source={"folder": str(folder), "run": args.run, "update": step})
        finally:
            writer.unlock()
    except ConfigError as error:
        if error.field in options:  # the library's argument is this command's option
            raise ConfigError(options[error.field], error.value, error.rule) from None
        raise
    except export.ExportError as error:
        print(f"purejaxppo: error: {error}", file=sys.stderr)
        return 1
    print(f"{folder} run {args.run} at update {step} ({bundle.config.env}): {result.describe()}")
    return 0


# --------------------------------------------------------------------------------------
# tensorboard
# --------------------------------------------------------------------------------------
def tensorboard_command(args) -> int:
    """`purejaxppo tensorboard FOLDER [--out DIR]`: the events of FOLDER's metrics.csv into DIR
    (default FOLDER/tensorboard), each run into a directory that must not exist yet (a
    refusal names the first that does, before anything is written); a write that fails is one
    line and exit 1."""
    option, into = (("--out", Path(args.out)) if args.out is not None
                    else ("folder", Path(args.folder) / tensorboard.EVENTS))
    runs = tensorboard.read_runs(args.folder, "folder")
    taken = [name for name in runs if (into / name).exists()]
    if taken:
        raise ConfigError(option, str(args.out or args.folder), f"{into / taken[0]} exists already: events are never "
                          f"written over a run's (--out DIR writes them into another directory)")
    writer = RunFolder(args.folder)
    if Path(args.folder).resolve() in into.resolve().parents:  # a writer of the folder, as a run is: one at a time
        writer.lock("folder")
    try:
        try:
            into.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError(option, str(args.out or args.folder), f"{into} cannot be created: "
                              f"{error.strerror or error}") from None
        tensorboard.write_runs(runs, into)
    except Stopped as stop:
        stop.outcome = f"not every run's events were written; {into} holds those of the runs that were, whole"
        raise
    except OSError as error:
        Failures().report(str(into), error, "the runs' directories there are whole; those missing were not written")
        return 1
    finally:
        writer.unlock()
    updates = max(len(points) for points in runs.values())
    tags = len({tag for points in runs.values() for _, scalars in points for tag in scalars})
    print(f"{args.folder}: {len(runs)} run(s) x {updates} updates, {tags} metrics, as TensorBoard events in "
          f"{into}/ (step: environment steps); view them with: tensorboard --logdir {into}")
    return 0


def main(argv=None) -> int:

    use_all_cpu_cores()  # seeds spread over the cores; before JAX starts its backend
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = options.parser().parse_args(argv)
    except UsageError as error:
        print(f"purejaxppo: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `purejaxppo train --help-config | head`: the reader has what it wanted
        _quiet_stdout()
        return 0
    cluster = None
    try:
        # several processes: each computes its shard, process 0 writes; a stop is agreed on (hosts.join)
        cluster = hosts.join(detect=not args.no_cluster) if args.command != "configs" else None
        with stop_signals(STOP_SIGNALS):  # SIGTERM's handler replaces that of JAX's preemption notifier
            if cluster is not None:  # the same command, and the config or spec file it names, on every process
                cluster.agree_on_command(argv, lambda: request.source(getattr(args, "config", None)
                                                                      or getattr(args, "spec", None), "config"))
            if not getattr(args, "no_cache", True):
                try:
                    compile_cache.enable()  # before anything compiles
                except OSError as error:
                    print(f"purejaxppo: compiling without the persistent cache: {error}", file=sys.stderr)
            options.check_paths(args)
            if args.command == "configs":
                try:
                    return configs_command()
                except BrokenPipeError:  # `purejaxppo configs | head`
                    _quiet_stdout()
                    return 0
            commands = {"eval": eval_command, "export": export_command, "tensorboard": tensorboard_command}
            return commands[args.command](args) if args.command in commands else run_command(args, cluster)
    except UsageError as error:
        print(f"purejaxppo: error: {error}", file=sys.stderr)
        return 2
    except Stopped as stop:
        left = stop.outcome or (f"the evaluation did not finish ({args.folder} is unchanged)"
                                if args.command == "eval" else "the export did not finish: nothing was written"
                                if args.command == "export" else "before the run started: nothing was written")
        sent = f" (sent to process {stop.process})" if stop.process is not None else ""
        print(f"purejaxppo: stopped by {stop.name}{sent}: {left}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        if cluster is not None:
            cluster.leave()
        os._exit(stop.exit_code)  # at once: a program in flight is dropped, the checkpoints stay as they are
    except LostProcess as lost:
        print(f"purejaxppo: error: {lost.who} was lost ({lost.detail}): {lost.outcome}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        if cluster is not None:
            cluster.leave(lost)
        os._exit(1)  # at once: JAX's shutdown barrier would wait for the lost process, then abort


def _quiet_stdout() -> None:
    """Standard output whose reader is gone: what is still buffered goes nowhere, so that Python
    does not print "Exception ignored ... BrokenPipeError" as it exits."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
