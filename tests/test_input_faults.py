"""Damaged checkpoints and eval's inputs: one line, exit 2, before anything is evaluated.

Every case works on a copy of tests/data/run_0_4 (a run folder written by purejaxppo 0.4):
its checkpoint's metadata is damaged one key at a time, or `eval` is given a bad option.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import purejaxppo as ppo
from conftest import CARTPOLE_RUN
from purejaxppo.experiments import cli, parallel, report, saved
from purejaxppo.experiments.checkpoint import CheckpointError
from purejaxppo.experiments.saved import SavedRun
from purejaxppo.experiments.sweep import make_spec

RUN_0_4 = Path(__file__).parent / "data" / "run_0_4"
SET = "group0-epochs4"


@pytest.fixture
def run(tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(RUN_0_4, copy)
    return copy


def damage(run: Path, change) -> None:
    """Rewrite the checkpoint's metadata (orbax keeps it as plain JSON) through `change(meta)`."""
    path = run / "checkpoints" / "4" / "meta" / "metadata"
    meta = json.loads(path.read_text())
    path.write_text(json.dumps(change(meta) or meta))


def one_line(capsys, code: int) -> str:
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("purejaxppo: error: "), err
    return err


def _set(meta, path: str, value):
    *keys, last = path.split(".")
    for key in keys:
        meta = meta[key]
    if value is DELETE:
        del meta[last]
    else:
        meta[last] = value


DELETE = object()
METADATA = [  # (key path, the damaged value, in the line)
    ("sets", DELETE, "it has no sets"),
    ("updates_done", DELETE, "it has no updates_done"),
    ("spec.seeds", 0, "spec="),
    ("spec", "seeds: 2", "spec='seeds: 2' must be a mapping"),
    ("first_seed", "0", "first_seed='0' must be an integer"),
    ("first_seed", 2**32, "first_seed=4294967296"),
    ("keep", 0, "keep=0 must be null or an integer of at least 1"),
    ("command", "eval", "command='eval' must be train or sweep"),
    ("step", 5, "step=5 is not its folder's step 4"),
    ("step", "4", "step='4' must be a non-negative integer"),
    ("updates_done", {"other": 4}, "updates_done names run sets ['other']"),
    (f"sets.{SET}.runs", "01", "sets="),
    (f"sets.{SET}.runs", [0, 0], "sets="),
    (f"sets.{SET}.run_configs", [], "as many run configs as runs"),
    (f"sets.{SET}.config", None, "sets="),
    (f"sets.{SET}.config.lr", -1.0, f"sets.{SET}.config: lr=-1.0: must be positive"),
    (f"sets.{SET}.config.num_envs", 0, "num_envs=0: must be at least 1"),
    ("format", DELETE, "damaged metadata: it has no format"),
    ("versions", DELETE, "it has no versions"),
]


@pytest.mark.parametrize("key, value, needle", METADATA, ids=[f"{k}={'deleted' if v is DELETE else v!r}"
                                                              for k, v, _ in METADATA])
def test_damaged_metadata_is_one_line_naming_the_key(run, capsys, key, value, needle):
    damage(run, lambda meta: _set(meta, key, value))
    with pytest.raises(CheckpointError) as info:  # the Python door: load and evaluate alike
        ppo.load(run, run=1)
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)
    with pytest.raises(CheckpointError, match="damaged metadata|not a purejaxppo"):
        SavedRun(run).evaluate(episodes=2)
    assert needle in one_line(capsys, cli.main(["eval", str(run), "--episodes", "2"]))


def test_a_damaged_run_setting_is_one_line_on_resume_too(run, capsys):
    damage(run, lambda meta: meta.update(max_parallel=0))
    line = one_line(capsys, cli.main(["train", "--resume", str(run)]))
    assert "damaged metadata: max_parallel=0 must be null or an integer of at least 1" in line


def test_a_setting_an_old_folder_lacks_is_read_at_its_default(run, capsys, monkeypatch):
    """A folder written before a setting existed lacks it: its run had the default. Reading it
    (load, eval) and resuming it (where nothing is restated) take the default, never "damaged
    metadata". `Experiment.from_meta` alone fills them in."""
    from purejaxppo.experiments import experiment

    def older(meta):
        for key in experiment.OPTIONS:
            del meta[key]
        del meta["spec"]["eval_episodes"], meta["config"]["gru_size"]

    damage(run, older)
    read = experiment.Experiment.from_meta(json.loads((run / "checkpoints" / "4" / "meta" / "metadata").read_text()))
    assert (read.first_seed, read.checkpoint_every, read.max_parallel, read.keep) == (0, None, None, None)
    assert read.spec.eval_episodes == 64 and read.spec.seeds == 2
    assert [r["seed"] for r in SavedRun(run).evaluate(episodes=2)] == [0, 1]
    ppo.load(run, run=1)
    monkeypatch.setattr(cli, "run_plan", lambda *a, **k: pytest.fail("compiled"))
    (run / "summary.md").unlink(missing_ok=True)
    with pytest.raises(pytest.fail.Exception, match="compiled"):  # the resume is accepted: it goes on to run
        cli.main(["train", "--resume", str(run)])


def test_another_format_is_named_by_the_version_that_wrote_it(run, capsys):
    def newer(meta):
        meta["format"], meta["versions"]["purejaxppo"] = "purejaxppo-checkpoint/2", "0.7.0"

    damage(run, newer)
    line = one_line(capsys, cli.main(["eval", str(run)]))
    assert "format 'purejaxppo-checkpoint/2' written by purejaxppo 0.7.0" in line
    assert f"this purejaxppo ({ppo.__version__}) reads purejaxppo-checkpoint/1" in line


def test_a_damaged_data_file_is_one_line_without_orbax_threads_printing_after_it(run):
    """tensorstore's reads still in flight when one fails finish on orbax's closed event loop and
    print 'Event loop is closed' tracebacks from background threads, at random; three failed loads
    in one process printed dozens of them before the fix."""
    for path in (run / "checkpoints" / "4" / "state").rglob("*"):
        if path.is_file() and path.parent.name == "d":
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    script = ("import time, purejaxppo as ppo\n"
              "from purejaxppo.experiments.checkpoint import CheckpointError\n"
              "for _ in range(3):\n"
              "    try:\n"
              f"        ppo.load({str(run)!r})\n"
              "    except CheckpointError as error:\n"
              "        print(error)\n"
              "time.sleep(0.5)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("unreadable or not matching") == 3, done.stdout
    assert "Event loop is closed" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


# --------------------------------------------------------------------------------------
# eval's inputs: checked before the folder is evaluated
EVAL = [  # (extra arguments, files to make first, in the line)
    (["--episodes", "0"], [], "--episodes=0: must be an integer of at least 1"),
    (["--episodes", str(2**31)], [], "--episodes=2147483648: must be below 2**31"),
    (["--seed", "-1"], [], "--seed=-1: must be an integer in [0, 2**32 - seeds]"),
    (["--seed", str(2**32)], [], "--seed=4294967296"),
    (["--render", "replay.html"], [], "replays are drawn for Brax environments"),
    (["--render", "missing/replay.html"], [], "is in a folder that does not exist (missing)"),
    (["--render", "old.html"], ["old.html"], "exists: replays never replace a file"),
    (["--render", "r" * 300 + ".html"], [], "--render='rrrr"),
]


@pytest.mark.parametrize("extra, files, needle", EVAL, ids=[" ".join(e)[:40] for e, _, _ in EVAL])
def test_eval_refuses_a_bad_option_before_evaluating(run, capsys, monkeypatch, extra, files, needle):
    monkeypatch.chdir(run.parent)
    for name in files:
        Path(name).write_text("kept")
    monkeypatch.setattr(saved.Restored, "evaluate", lambda *a, **k: pytest.fail("evaluated before refusing"))
    assert needle in one_line(capsys, cli.main(["eval", str(run), *extra]))
    assert all(Path(name).read_text() == "kept" for name in files)
    assert not list(run.parent.glob("*.html")) or files


def test_eval_of_a_folder_name_too_long_is_one_line(capsys):
    assert "too long for the file system" in one_line(capsys, cli.main(["eval", "f" * 300]))


def test_episodes_that_do_not_fit_in_memory_name_the_option(run, capsys, monkeypatch):
    monkeypatch.setattr(parallel, "free_memory_bytes", lambda device: 2**20)  # a device with 1 MiB free
    line = one_line(capsys, cli.main(["eval", str(run), "--episodes", "100000", "--no-cache"]))
    assert "--episodes=100000: evaluating 100000 episodes per run does not fit" in line, line
    assert "evaluate fewer episodes (--episodes)" in line, line


def test_eval_json_is_strict_json(run, capsys):
    """One episode per run: its standard error is NaN, which strict JSON writes as null."""
    assert cli.main(["eval", str(run), "--episodes", "1", "--json", "--no-cache"]) == 0

    def refuse(word):
        raise AssertionError(f"{word} is not JSON")

    out = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert out["runs"][0]["se"] is None and isinstance(out["runs"][0]["mean"], float)


def test_summary_json_writes_nan_and_inf_as_null():
    value = {"mean": float("nan"), "se": float("inf"), "per_seed": [1.0, float("-inf"), np.float32("nan")],
             "n": np.int64(3)}
    assert json.loads(report.json_text(value)) == {"mean": None, "se": None, "per_seed": [1.0, None, None], "n": 3}
    artefacts = dict(report.run_artefacts(ppo.make_config({}), {"episode_return": np.zeros((1, 2))},
                                          {"final_return": {"mean": float("nan"), "se": float("nan")}}, [0]))
    assert json.loads(artefacts["summary.json"]())["final_return"] == {"mean": None, "se": None}


# --------------------------------------------------------------------------------------
# config files as pipes; a sweep's random ranges as the config reads numbers
def _pipe(text: str) -> str:
    """/dev/fd/N, as `purejaxppo train <(cat config.yaml)` passes it, holding `text`."""
    read, write = os.pipe()
    os.write(write, text.encode())
    os.close(write)
    return f"/dev/fd/{read}"


def test_a_pipe_is_a_config_file_named_in_errors_as_given(capsys):
    bad = _pipe("env: CartPole-v1\nlr: [1\n")
    assert f"config='{bad}': not valid YAML" in one_line(capsys, cli.main(["train", bad]))


@pytest.mark.slow  # a training program of its own: run by .ci/run after the default suite
def test_a_pipe_is_read_as_the_file_it_stands_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = "env: CartPole-v1\nnum_envs: 4\nnum_steps: 16\nnum_minibatches: 2\ntotal_timesteps: 640\n"
    assert cli.main(["train", _pipe(config), "--eval-episodes", "1", "--out", "run"]) == 0
    assert (tmp_path / "run" / "summary.json").exists()
    written = (tmp_path / "run" / "config.yaml").read_text()
    assert "num_steps: 16\n" in written and "total_timesteps: 640\n" in written  # the pipe's, not the defaults


def test_process_substitution_is_a_config_file(tmp_path):
    (tmp_path / "c.yaml").write_text("env: CartPole-v1\nlr: -1\n")
    done = subprocess.run(["bash", "-c", f"{sys.executable} -m purejaxppo train <(cat c.yaml)"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == (
        "purejaxppo: error: lr=-1.0: must be positive"), done.stderr  # the text was read: its rule is named


def test_numbers_yaml_reads_as_strings_are_numbers_in_random_ranges():
    spec = make_spec({"random": {"trials": 3, "lr": {"loguniform": ["1e-4", "1e-3"]},
                                 "ent_coef": {"uniform": [0, "1e-2"]}}})
    assert spec.random["lr"] == {"loguniform": [1e-4, 1e-3]}
    from purejaxppo.experiments.sweep import expand

    for point in expand(spec):
        assert 1e-4 <= point["lr"] <= 1e-3 and 0 <= point["ent_coef"] <= 1e-2


def test_a_checkpoint_saved_from_python_is_not_resumed_by_the_command_line(run, capsys):
    from purejaxppo.experiments.experiment import FIELDS_0_4

    damage(run, lambda meta: {k: v for k, v in meta.items() if k not in FIELDS_0_4})  # as sweep() saves it
    assert "from Python" in one_line(capsys, cli.main(["train", "--resume", str(run)]))


def test_final_evaluation_that_does_not_fit_in_memory_names_its_option(tmp_path, capsys, monkeypatch):
    """Training fits in 64 MiB; a million evaluation episodes per run do not: the line names
    --eval-episodes, not the runs in flight."""
    from purejaxppo.experiments import parallel

    monkeypatch.setattr(parallel, "free_memory_bytes", lambda device: 64 * 2**20)
    # conftest.CARTPOLE_RUN's training (its programs compiled once a session), a million evaluation episodes
    code = cli.main(["train", *CARTPOLE_RUN, "--eval-episodes", "1000000", "--out", str(tmp_path / "run"),
                     "--no-cache"])
    line = one_line(capsys, code)
    assert "eval_episodes=1000000: the final evaluation" in line and "--eval-episodes" in line, line
