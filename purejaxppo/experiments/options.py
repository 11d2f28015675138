"""Every command's options (argparse, with the command line's manners: a bad argument is one
line), the path options' checks before anything is read or created, and the version line."""

from __future__ import annotations

import argparse
import collections
import sys

import jax

from purejaxppo import __version__
from purejaxppo.config import text_table
from purejaxppo.errors import UsageError
from purejaxppo.extras import install_line
from purejaxppo.experiments import compile_cache
from purejaxppo.experiments.paths import check_path, check_utf8
from purejaxppo.experiments.request import DEFAULT_EVAL_EPISODES


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
    # each run setting's dest is its name in the run record (experiment.OPTIONS), which request.py reads by it
    parser.add_argument("--seed", type=int, dest="first_seed", help="first seed (default 0)")
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
    parser.add_argument("--tensorboard", action="store_true",
                        help="also write TensorBoard events (DIR/tensorboard): the returns while it runs, then every "
                             "run's metrics.csv (as: purejaxppo tensorboard DIR)")
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


def parser() -> argparse.ArgumentParser:
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
    export.add_argument("--format", choices=["stablehlo", "onnx"],
                        help="stablehlo (jax.export; the default, but where --out ends in .onnx) or onnx (needs: "
                             f"{install_line('onnx')})")
    export.add_argument("--outputs", choices=["action", "all"], default="action",
                        help="action (default), or all: also the logits (or mean and log-std) and the value")
    export.add_argument("--out", metavar="FILE", help="the file to write, a new one (default: in the folder, "
                                                      "policy-run<K>-update<N>.<format>; DIR/: that name in DIR); "
                                                      "its metadata beside it, FILE.json")
    _add_cache_option(export)
    events = sub.add_parser("tensorboard", help="write a finished run or sweep folder's metrics.csv as TensorBoard "
                                                "events: a TensorBoard run per run, a tag per metric")
    events.add_argument("folder", help="a run or sweep folder (it holds metrics.csv)")
    events.add_argument("--out", metavar="EVENTS_DIR",
                        help="where to write (default: FOLDER/tensorboard); a run's directory there must not exist yet")
    events.set_defaults(no_cluster=True)  # files alone: no cluster to join
    sub.add_parser("configs", help="list the shipped configs (use them by name: purejaxppo train cartpole)")
    return parser


def check_paths(args) -> None:
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
