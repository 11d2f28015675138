"""What a train or sweep command line asks for, checked before anything is created: the
config or sweep file (a path, a pipe, or a shipped config by name), its overrides and grid
options, the counts, and for --resume the run the folder was started with -> the
`experiment.Experiment` (built here once), and its plan (`sweep.plan`: every config checked,
each group through the gate once). Also the reference line of a shipped config."""

from __future__ import annotations

import contextlib
import shlex
import tempfile
from pathlib import Path
from typing import NamedTuple

from purejaxppo import configs
from purejaxppo.config import ConfigError, check_fields, config_values, count, find_config, read_yaml
from purejaxppo.config.files import parse_overrides
from purejaxppo.errors import NO_VALUE
from purejaxppo.experiments import kinds
from purejaxppo.experiments.experiment import OPTIONS, Experiment
from purejaxppo.experiments.folder import RunFolder
from purejaxppo.experiments.plan import Plan, plan
from purejaxppo.experiments.spec import check_seeds, load_sweep, make_spec, parse_grid_option

DEFAULT_EVAL_EPISODES = 64

# What each option of train and sweep (argparse's dest: its name in `args`) does beside --resume DIR, whose
# run is rebuilt from DIR's record: the one rule (tests/test_resume_flags.py holds every option to it).
# a setting of the run: given, it must be what the run was started with, or it is refused (compared by
# `Experiment.diff` in `RunFolder.check_resume`)
RESTATED = "restated"
HONOURED = "honoured"  # it takes effect on the resumed run
BESIDE_RESUME = {
    "config": RESTATED, "spec": RESTATED, "set": RESTATED, "grid": RESTATED, "seeds": RESTATED,
    "eval_episodes": RESTATED, "first_seed": RESTATED, "max_parallel": RESTATED, "checkpoint_every": RESTATED,
    "keep": RESTATED,
    "resume": HONOURED, "help": HONOURED, "help_config": HONOURED, "tensorboard": HONOURED, "wandb": HONOURED,
    "no_cluster": HONOURED, "no_cache": HONOURED,
    # refused: (the option, why), one line before anything is read
    "out": ("--out", "a resumed run writes into its own folder, DIR; leave --out out (or start a new run "
                     "without --resume)"),
}


def source(text: str | None, field: str) -> str | None:
    """A config argument (`config.find_config`: a path, or a shipped config by name), or None."""
    return None if text is None else find_config(text, field)


@contextlib.contextmanager
def as_file(source: str | None, field: str):
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


def reference(given: str | None, base) -> str | None:
    """The reference line of the shipped config this train run is: the one named on the command
    line (`given`), or else the one whose fields the run has; with the fields this run changed."""
    for name in [given] if given else configs.references():
        line = configs.reference_line(name)
        if line is None:
            return None
        shipped = check_fields(config_values(str(configs.find(name)), {})).to_dict()
        changed = [key for key, value in base.to_dict().items() if shipped.get(key) != value]
        if given or not changed:
            return line + (f" for {name} as shipped; this run changed {', '.join(changed)}" if changed else "")
    return None


def check_count(option: str, value: int | None, minimum: int = 1) -> None:
    """A count option, where given: `config.count`'s rule (an integer of at least `minimum`, below 2**31)."""
    if value is not None:
        count(option, value, minimum)


def check_counts(args) -> None:
    for option, value in (("--seeds", args.seeds), ("--max-parallel", args.max_parallel),
                          ("--checkpoint-every", args.checkpoint_every), ("--keep", args.keep),
                          ("--eval-episodes", getattr(args, "eval_episodes", None))):
        check_count(option, value, 0 if option == "--eval-episodes" else 1)


def check_beside_resume(args) -> None:
    """An option given beside --resume that the resume cannot honour (`BESIDE_RESUME`): one line."""
    for dest, rule in BESIDE_RESUME.items():
        if isinstance(rule, tuple) and getattr(args, dest, None) not in (None, False, []):
            option, why = rule
            raise ConfigError(option, getattr(args, dest), f"cannot be given beside --resume: {why}")


def run_request(args, saved: Experiment | None = None) -> tuple[Experiment, str | None]:
    """-> (the experiment the command line asks for, a train run's reference line or None); with
    `saved` (a resumed run's), what it does not restate is the saved run's. The base's fields
    are checked here; its environment and every run's config by `sweep.plan`."""
    saved_spec = {}
    if saved is not None:
        saved_spec = {k: v for k, v in saved.spec.to_dict().items() if v or k != "grid"}  # a train run's grid is {}
    overrides = parse_overrides(args.set)  # checked here: an error blames --set, not the file
    train = args.command == "train"  # a config file (train), or a sweep file
    field = "config" if train else "spec"
    given = args.config if train else args.spec
    if given is None and not saved:
        raise ConfigError(field, NO_VALUE,
                          f"give a {'YAML config' if train else 'sweep YAML'} (or --resume DIR)")
    with as_file(source(given, field), field) as path:
        if train:
            if path and "sweep" in read_yaml(path):
                raise ConfigError("config", given, f"is a sweep file (it has a sweep: section): run it with "
                                  f"purejaxppo sweep {shlex.quote(given)}")
            base = (check_fields(config_values(path, overrides), where=path) if path
                    else check_fields({**saved.config.to_dict(), **overrides}))
            eval_episodes = next(v for v in (args.eval_episodes, saved_spec.get("eval_episodes"),
                                             DEFAULT_EVAL_EPISODES) if v is not None)
            spec = make_spec({"seeds": args.seeds or saved_spec.get("seeds", 1), "eval_episodes": eval_episodes})
            line = reference(configs.name_of(path) if path else None, base)
        else:
            options = [parse_grid_option(item) for item in args.grid]
            twice = next((key for i, (key, _) in enumerate(options) if key in dict(options[:i])), None)
            if twice is not None:
                raise ConfigError("--grid", twice, "is given twice; give each key once, with all its values")
            grid, line = dict(options) or None, None
            if path:
                base, spec = load_sweep(path, overrides, grid=grid, seeds=args.seeds)
            else:
                base = check_fields({**saved.config.to_dict(), **overrides})
                spec = make_spec(saved_spec, grid=grid, seeds=args.seeds)
    given = {name: getattr(args, name) for name in OPTIONS}  # each run setting's option (options.py: its dest)
    options = {name: getattr(saved, name) if value is None and saved is not None else value
               for name, value in given.items() if value is not None or saved is not None}
    return Experiment(args.command, base, spec, **options), line


class Request(NamedTuple):
    """What a train or sweep command runs: `experiment` (built once, recorded in its checkpoints),
    `planned` (`plan.Plan`), `resumed` (--resume's folder, or None) and `reference` (a train run
    of a shipped config: the return it should reach, or None)."""

    experiment: Experiment
    planned: Plan
    resumed: RunFolder | None
    reference: str | None


def plan_command(args) -> Request:
    """The run a command line asks for: a new run's, or the run in --resume DIR's (what the
    command line restates must be what it was started with). Every run's config is checked,
    and each group passes the gate, in the plan; nothing is created."""
    check_counts(args)
    folder = None
    if args.resume is None:
        experiment, line = run_request(args)
    else:
        folder, saved = RunFolder.to_resume(args.resume, args.command)
        check_beside_resume(args)
        experiment, line = run_request(args, saved)
        folder.check_resume(saved, experiment)
    check_seeds("--seed", experiment.first_seed, experiment.spec.seeds)  # the seeds a sweep file gives, too
    kind = kinds.of(experiment.spec, experiment.command)  # the one place a run's kind is picked
    return Request(experiment, plan(experiment.config, experiment.spec, kind), folder, line)
