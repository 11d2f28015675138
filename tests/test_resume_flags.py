"""Every option of train and sweep beside --resume DIR is restated (it must be what the run was
started with), honoured, or refused in one line before anything is read or compiled: never
ignored without a word. The rule is one table, `request.BESIDE_RESUME`; these hold it to argparse."""

import shutil
from pathlib import Path

import pytest

from purejaxppo.experiments import options, request
from purejaxppo.experiments.cli import main

FOLDERS = Path(__file__).parent / "data" / "folders_0_4_0"  # stopped: a train run stopped by SIGINT at update 4
REFUSED = sorted(dest for dest, rule in request.BESIDE_RESUME.items() if isinstance(rule, tuple))


def _commands() -> dict:
    parser = options.parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    return {name: commands[name] for name in ("train", "sweep")}


def _copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(FOLDERS / name, tmp_path / name))


def _files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_the_table_classifies_every_option_argparse_knows(command):
    dests = {action.dest for action in _commands()[command]._actions}
    assert dests - set(request.BESIDE_RESUME) == set(), "classify each new option in request.BESIDE_RESUME"
    rules = set(request.BESIDE_RESUME.values()) - {request.RESTATED, request.HONOURED}
    assert all(isinstance(rule, tuple) and len(rule) == 2 for rule in rules)
    # a refused entry names the option as the parser spells it
    for dest in REFUSED:
        option = request.BESIDE_RESUME[dest][0]
        assert any(option in a.option_strings for a in _commands()[command]._actions if a.dest == dest)


def test_the_table_names_no_option_that_train_or_sweep_lacks():
    known = {action.dest for parser in _commands().values() for action in parser._actions}
    assert set(request.BESIDE_RESUME) - known == set()


EXAMPLE = {"out": lambda tmp_path: str(tmp_path / "elsewhere")}  # a value for each refused option


@pytest.mark.parametrize("command, folder", [("train", "stopped"), ("sweep", "sweep")])
@pytest.mark.parametrize("dest", REFUSED)
def test_a_refused_option_beside_resume_is_one_line_and_touches_nothing(tmp_path, capsys, command, folder, dest):
    resumed = _copy(folder, tmp_path)
    before = _files(resumed)
    option, why = request.BESIDE_RESUME[dest]
    value = EXAMPLE[dest](tmp_path)
    assert main([command, "--resume", str(resumed), option, value]) == 2
    error = capsys.readouterr().err.strip()
    assert error.splitlines() == [f"purejaxppo: error: {option}={value!r}: cannot be given beside --resume: {why}"]
    assert _files(resumed) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder]  # --out's folder was not made


@pytest.mark.parametrize("option, value, saved", [("--seeds", "3", "2"), ("--eval-episodes", "8", "4")])
def test_a_train_runs_seeds_and_evaluation_episodes_beside_resume_must_be_the_runs(tmp_path, capsys, option,
                                                                                  value, saved):
    """A train run's seeds and evaluation episodes were not in `Experiment.diff`: a changed --seeds
    went on to compile a run of other seeds against the checkpoint; now it is refused, naming the
    run's value."""
    resumed = _copy("stopped", tmp_path)
    assert main(["train", "--resume", str(resumed), option, value]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("purejaxppo: error: --resume="), error
    assert "a resumed run must be the same run" in error[0]
    assert f"{option.lstrip('-').replace('-', '_')} {saved} -> {value}" in error[0], error


def test_restated_settings_equal_to_the_runs_are_accepted(tmp_path):
    resumed = _copy("stopped", tmp_path)
    args = options.parser().parse_args(["train", "--resume", str(resumed), "--seeds", "2", "--eval-episodes", "4",
                                        "--seed", "0", "--keep", "2", "--checkpoint-every", "4", "--tensorboard"])
    planned = request.plan_command(args)
    assert (planned.experiment.spec.seeds, planned.experiment.spec.eval_episodes) == (2, 4)
    assert (planned.experiment.keep, planned.experiment.checkpoint_every) == (2, 4)
    assert planned.resumed.path == resumed
