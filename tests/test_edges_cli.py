"""The command line at the edges: a stop or a refusal never leaves a folder that blocks the next
command; summary.md is never written without the final checkpoint; folder names and paths the
checkpoint library can hold; messages that say what to do (a module not found where a run is
evaluated, a network passed as a module, argument type errors, a reader that stops early)."""

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import purejaxppo as ppo
from purejaxppo.config import ConfigError
from purejaxppo.errors import ImportFailed, ResourceError
from purejaxppo.experiments import cli
from purejaxppo.experiments.cli import main

TINY = "num_envs: 4\nnum_steps: 16\nnum_minibatches: 2\ntotal_timesteps: 640\n"
BASE = "env: CartPole-v1\n" + TINY
USER_ENVS = Path(__file__).parent / "user_envs.py"


def _stopping_compile(monkeypatch):
    """A SIGINT as the first program compiles (after the folder is claimed and its config written)."""
    original = cli.run_plan

    def run_plan(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return original(*args, **kwargs)

    monkeypatch.setattr(cli, "run_plan", run_plan)
    return original


# --out given here; the default folder (runs/) and an --out that was there, empty: long checks
@pytest.mark.parametrize("out", ["given", pytest.param("default", marks=pytest.mark.slow),
                                 pytest.param("empty", marks=pytest.mark.slow)])
def test_ctrl_c_while_compiling_leaves_no_folder_and_the_same_command_runs(out, tmp_path, monkeypatch, capsys, exits):
    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text(BASE)
    if out == "empty":
        Path("o").mkdir()
    command = ["train", "c.yaml", "--eval-episodes", "1"] + ([] if out == "default" else ["--out", "o"])
    original = _stopping_compile(monkeypatch)
    with pytest.raises(SystemExit) as exited:
        main(command)
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 130 and len(err) == 1, err
    assert "before the first checkpoint: nothing to resume, and" in err[0] and "was removed" in err[0], err
    if out == "default":
        assert list(Path("runs").iterdir()) == []
    else:  # an --out the command made is gone; one that was there, empty, is empty again
        assert Path("o").exists() == (out == "empty") and (out != "empty" or list(Path("o").iterdir()) == [])
    monkeypatch.setattr(cli, "run_plan", original)
    assert main(command) == 0
    done = Path("o") if out != "default" else next(Path("runs").iterdir())
    assert (done / "summary.md").exists()


def test_a_refusal_after_the_claim_removes_the_folder_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text(BASE)

    def refuse(*args, **kwargs):
        raise ResourceError("runs", 1, "needs 9 GiB, more than the 1 GiB free")

    monkeypatch.setattr(cli, "run_plan", refuse)
    assert main(["train", "c.yaml", "--out", "o"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["purejaxppo: error: runs=1: needs 9 GiB, more than the 1 GiB free; o was removed (it held "
                   "nothing to resume)"], err
    assert not Path("o").exists()


def test_summary_md_is_never_written_when_the_final_checkpoint_is_not_saved(tmp_path, monkeypatch, capsys):
    import orbax.checkpoint as ocp

    def disk_full(manager, step, *args, **kwargs):
        raise ValueError("RESOURCE_EXHAUSTED: Failed to write: No space left on device [os_error_code='28']")

    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text(BASE)
    monkeypatch.setattr(ocp.CheckpointManager, "save", disk_full)  # one chunk: the final checkpoint is the only one
    assert main(["train", "c.yaml", "--out", "o", "--eval-episodes", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert not Path("o/summary.md").exists() and Path("o/metrics.csv").exists()
    assert err[-1] == ("purejaxppo: o is not finished (summary.md, its mark, is not written): no checkpoint could be "
                       "saved, so nothing can resume it; the results written beside it are this run's"), err


@pytest.mark.slow  # trains an environment of its own through the command line: run by .ci/run after the default suite
def test_an_import_path_env_gives_a_folder_name_without_a_colon_and_a_missing_module_says_what_to_do(
        tmp_path, monkeypatch, capsys):
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir(), elsewhere.mkdir()
    shutil.copy(USER_ENVS, home / "mygame.py")
    monkeypatch.setattr(sys, "path", list(sys.path))  # the import below adds the working folder
    monkeypatch.chdir(home)
    Path("c.yaml").write_text("env: mygame:corridor\n" + TINY)
    assert main(["train", "c.yaml", "--eval-episodes", "1"]) == 0
    (run,) = Path("runs").iterdir()
    assert run.name.startswith("mygame-corridor-") and ":" not in run.name
    capsys.readouterr()

    (home / run / "summary.md").unlink()  # unfinished: --resume would go on
    monkeypatch.delitem(sys.modules, "mygame")
    sys.path.remove(str(home))
    monkeypatch.chdir(elsewhere)
    hint = "run from the folder that holds mygame, or add that folder to PYTHONPATH"
    for command in (["eval", str(home / run), "--episodes", "1"], ["train", "--resume", str(home / run)]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and hint in err[0] and "damaged" not in err[0] and "env='mygame:corridor'" in err[0], err
    with pytest.raises(ImportFailed, match="PYTHONPATH"):
        ppo.load(home / run)


def test_make_policy_of_a_state_trained_with_a_network_module_names_network_(tmp_path):
    from user_networks import TwoTowers

    cfg = ppo.make_config({"env": "CartPole-v1", "num_envs": 4, "num_steps": 16, "num_minibatches": 2,
                           "total_timesteps": 640})
    module = TwoTowers(num_outputs=2)
    state = ppo.Learner(cfg, network=module).init(jax.random.PRNGKey(0))
    with pytest.raises(ConfigError, match=r"make_policy\(cfg, state, network=module\)") as info:
        ppo.make_policy(cfg, state)
    assert info.value.field == "network"
    act = ppo.make_policy(cfg, state, network=module)
    assert int(act(np.zeros(4, np.float32))) in (0, 1)


@pytest.mark.parametrize("argv, needle", [
    (["train", "c.yaml", "--seeds", "two"], "argument --seeds: invalid int value: 'two'"),
    (["sweep", "s.yaml", "--checkpoint-every", "1.5"], "argument --checkpoint-every: invalid int value: '1.5'"),
    (["eval", "runs/x", "--episodes", "x"], "argument --episodes: invalid int value: 'x'"),
    (["train", "c.yaml", "--no-such-option"], "unrecognized arguments: --no-such-option"),
    (["tran", "c.yaml"], "invalid choice: 'tran'"),
])
def test_argument_errors_are_one_line_not_a_usage_block(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("purejaxppo: error: ") and needle in err, err
    assert "usage:" not in err


@pytest.mark.parametrize("argv", [["train", "--help-config"], ["train", "--help"], ["configs"]])
def test_a_reader_that_stops_early_ends_the_command_quietly(argv):
    """`purejaxppo train --help-config | head`: the reader is gone before the text is written."""
    read, write = os.pipe()
    os.close(read)  # every write to the pipe now fails (EPIPE)
    proc = subprocess.run([sys.executable, "-m", "purejaxppo", *argv], stdout=write, stderr=subprocess.PIPE,
                          timeout=120)
    os.close(write)
    assert proc.returncode == 0 and proc.stderr.decode() == "", proc.stderr.decode()[-2000:]


def test_a_checkpoint_written_before_a_metric_existed_resumes_with_it_zero(tmp_path, monkeypatch, capsys):
    from purejaxppo.experiments.checkpoint import Checkpoints

    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text(BASE)
    # a checkpoint after every update: the programs of the runs above (one update a chunk), compiled once
    assert main(["train", "c.yaml", "--out", "o", "--checkpoint-every", "1", "--eval-episodes", "1"]) == 0
    for done in ["checkpoints/10", *(p.name for p in Path("o").iterdir() if p.is_file() and p.name != "config.yaml")]:
        shutil.rmtree(Path("o") / done) if (Path("o") / done).is_dir() else (Path("o") / done).unlink()
    restore = Checkpoints.restore

    def as_written_before(self, *args, **kwargs):  # a checkpoint of a library without these counts
        states, metrics, meta = restore(self, *args, **kwargs)
        return states, {name: {k: v for k, v in m.items() if k not in ("no_action_steps", "overlong_episodes")}
                        for name, m in metrics.items()}, meta

    monkeypatch.setattr(Checkpoints, "restore", as_written_before)
    assert main(["train", "--resume", "o"]) == 0, capsys.readouterr().err
    rows = Path("o/metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert len(rows) == 11 and "no_action_steps" in header
    assert {row.split(",")[header.index("no_action_steps")] for row in rows[1:]} == {"0"}
