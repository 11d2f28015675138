"""Faults while a run runs, injected: stop signals at every phase, writes that fail (a full
disk, a read-only folder), two writers for one folder, a config file that disagrees with
its checkpoint. Each is one line, keeps what was computed, and the folder resumes after."""

import dataclasses
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import yaml

from conftest import CARTPOLE_RUN
from purejaxppo.experiments import checkpoint, cli, folder as folder_module, live, report, request
from purejaxppo.experiments.cli import main
from purejaxppo.experiments.experiment import Experiment
from purejaxppo.experiments.faults import STOP_SIGNALS, Stopped, deferred, stop_signals

# 2 seeds x 4 updates, a checkpoint after each
RUN = ["train", *CARTPOLE_RUN, "--checkpoint-every", "1"]
RESULTS = ("metrics.csv", "summary.json", "learning_curve.png", "summary.md")


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The run never disturbed."""
    out = tmp_path_factory.mktemp("whole") / "run"
    assert main([*RUN, "--out", str(out)]) == 0
    return out


def _checkpoints(out):
    return sorted(int(p.name) for p in (out / "checkpoints").iterdir() if p.name.isdigit())


def _unfinished_copy(whole, tmp_path):
    """The whole run's folder without summary.md: resumable (it writes summary.md, training nothing)."""
    out = tmp_path / "run"
    shutil.copytree(whole, out)
    (out / "summary.md").unlink()
    return out


# --------------------------------------------------------------------------------------
# stop signals
# --------------------------------------------------------------------------------------
def test_a_stop_signal_is_raised_at_once_and_after_a_deferred_section():
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    with stop_signals(STOP_SIGNALS):
        with stop_signals():  # nested (runs.execute inside the command): the outer one's signals stay
            with pytest.raises(Stopped) as stopped:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
    assert stopped.value.exit_code == 143 and isinstance(stopped.value, KeyboardInterrupt)
    saved = []
    with stop_signals(STOP_SIGNALS), pytest.raises(Stopped) as stopped:
        with deferred():  # a checkpoint's save: never cut
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.01)
            saved.append("whole")
    assert saved == ["whole"] and stopped.value.exit_code == 129
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before


def test_a_stop_signal_lands_while_an_interruptible_call_blocks_and_its_result_or_error_comes_back():
    """`interruptible` runs a blocking call (jax.distributed.initialize waiting for processes
    that never come) in a thread of its own: a stop signal lands at once in the main thread."""
    from purejaxppo.experiments.faults import interruptible

    assert interruptible(sum, [1, 2]) == 3
    with pytest.raises(ZeroDivisionError):
        interruptible(lambda: 1 / 0)
    import threading

    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()  # Ctrl-C while the call blocks
    started = time.monotonic()
    with stop_signals(STOP_SIGNALS), pytest.raises(Stopped) as stopped:
        interruptible(time.sleep, 30)
    assert stopped.value.exit_code == 130 and time.monotonic() - started < 2


def test_sigterm_during_a_checkpoint_save_waits_for_it_then_names_it_and_resume_ends_as_the_run_never_stopped(
        whole, tmp_path, capsys, monkeypatch, exits):
    out = tmp_path / "run"
    save = checkpoint.Checkpoints.save

    def save_then_stop(self, step, *args):
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # as a job scheduler would, while the save runs
        save(self, step, *args)

    monkeypatch.setattr(checkpoint.Checkpoints, "save", save_then_stop)
    with pytest.raises(SystemExit) as exited:
        main([*RUN, "--out", str(out)])
    assert exited.value.code == 143
    assert capsys.readouterr().err.strip().splitlines() == [
        f"purejaxppo: stopped by SIGTERM: the newest complete checkpoint is at update 2; resume with: "
        f"purejaxppo train --resume {out}"]
    assert _checkpoints(out) == [1, 2] and not (out / ".lock").exists() and not (out / "metrics.csv").exists()

    monkeypatch.setattr(checkpoint.Checkpoints, "save", save)
    assert main(["train", "--resume", str(out)]) == 0
    assert _checkpoints(out) == [1, 2, 3, 4]
    assert (out / "metrics.csv").read_text() == (whole / "metrics.csv").read_text()


def test_ctrl_c_during_the_final_writes_is_one_line_and_resume_writes_only_the_missing_results(
        tmp_path, capsys, monkeypatch, exits):
    out = tmp_path / "run"
    plot = report.run.plot_learning_curve  # the name run_artefacts calls

    def stop_while_plotting(*args):
        os.kill(os.getpid(), signal.SIGINT)
        return plot(*args)

    monkeypatch.setattr(report.run, "plot_learning_curve", stop_while_plotting)
    with pytest.raises(SystemExit) as exited:
        main([*RUN, "--out", str(out)])
    assert exited.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"purejaxppo: stopped by SIGINT: the newest complete checkpoint is at update 4; resume with: "
                   f"purejaxppo train --resume {out}"]
    assert [name for name in RESULTS if (out / name).exists()] == ["metrics.csv", "summary.json"]

    monkeypatch.setattr(report.run, "plot_learning_curve", plot)
    monkeypatch.setattr(checkpoint.Checkpoints, "save", lambda *a: pytest.fail("trained again"))
    kept = {name: (out / name).stat().st_mtime_ns for name in ("metrics.csv", "summary.json", "progress.jsonl")}
    assert main(["train", "--resume", str(out)]) == 0
    assert all((out / name).exists() for name in RESULTS)
    assert {name: (out / name).stat().st_mtime_ns for name in kept} == kept  # not written again, no progress
    assert main(["train", "--resume", str(out)]) == 2 and "is a finished run" in capsys.readouterr().err


@pytest.mark.parametrize("phase", ["start-up", "eval"])
def test_a_stop_during_start_up_or_eval_is_one_line(phase, whole, capsys, monkeypatch, exits):
    def stopping(original, sig):
        def stop(*args, **kwargs):
            os.kill(os.getpid(), sig)
            return original(*args, **kwargs)
        return stop

    if phase == "start-up":
        monkeypatch.setattr(request, "check_counts", stopping(request.check_counts, signal.SIGTERM))
        command, code, line = RUN, 143, "stopped by SIGTERM: before the run started: nothing was written"
    else:
        monkeypatch.setattr(folder_module.SavedRun, "restore", stopping(folder_module.SavedRun.restore, signal.SIGINT))
        command, code, line = (["eval", str(whole), "--episodes", "2"], 130,
                               f"stopped by SIGINT: the evaluation did not finish ({whole} is unchanged)")
    with pytest.raises(SystemExit) as exited:
        main(command)
    assert exited.value.code == code and capsys.readouterr().err.strip().splitlines() == [f"purejaxppo: {line}"]


@pytest.mark.slow
def test_sigterm_and_sighup_stop_a_real_process_and_it_resumes(tmp_path):
    out = tmp_path / "run"
    python = [sys.executable, "-m", "purejaxppo"]
    resume = [*python, "train", "--resume", str(out)]
    for sig, code, command in ((signal.SIGTERM, 143, [*python, *RUN, "--set", "num_envs=2", "--set",
                                                      "total_timesteps=1280", "--out", str(out)]),  # 40 updates
                               (signal.SIGHUP, 129, resume)):
        before = _checkpoints(out) if out.exists() else []
        log = tmp_path / f"{sig.name}.log"
        with open(log, "w") as output:
            proc = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
            while not (out / "checkpoints").is_dir() or _checkpoints(out) == before:
                assert proc.poll() is None, log.read_text()[-3000:]
                time.sleep(0.05)
            proc.send_signal(sig)
            assert proc.wait(timeout=120) == code, log.read_text()[-3000:]
        text = log.read_text()
        assert "Traceback" not in text and not (out / ".lock").exists()
        assert text.strip().splitlines()[-1] == (
            f"purejaxppo: stopped by {sig.name}: the newest complete checkpoint is at update {_checkpoints(out)[-1]}; "
            f"resume with: purejaxppo train --resume {out}")
    assert subprocess.run(resume, capture_output=True).returncode == 0
    assert (out / "summary.md").exists()


# --------------------------------------------------------------------------------------
# writes that fail
# --------------------------------------------------------------------------------------
def test_a_checkpoint_that_cannot_be_saved_is_one_line_the_run_goes_on_and_resume_saves_it(
        whole, tmp_path, capsys, monkeypatch):
    import orbax.checkpoint as ocp

    out = tmp_path / "run"
    save = ocp.CheckpointManager.save

    def disk_full_at_the_end(manager, step, *args, **kwargs):
        if step == 4:  # as tensorstore says it, its partial folder left behind
            (out / "checkpoints" / "4.orbax-checkpoint-tmp").mkdir()
            raise ValueError("RESOURCE_EXHAUSTED: Error writing \"a.x/0.0\" in OCDBT database: Failed to write "
                             "1222832 bytes to file 12: No space left on device [os_error_code='28']")
        return save(manager, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", disk_full_at_the_end)
    assert main([*RUN, "--out", str(out)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "purejaxppo: error: could not write checkpoints/ (No space left on device); the checkpoint at update 4 is "
        "not saved and the run goes on; the newest complete one is at update 3",
        f"purejaxppo: {out} is not finished (summary.md, its mark, waits for what could not be written); the newest "
        f"complete checkpoint is at update 3; once the fault is fixed, write what is missing with: "
        f"purejaxppo train --resume {out}"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["1", "2", "3"]  # the partial one removed
    assert [name for name in RESULTS if (out / name).exists()] == ["metrics.csv", "summary.json", "learning_curve.png"]
    assert (out / "metrics.csv").read_text() == (whole / "metrics.csv").read_text()  # computed, kept

    monkeypatch.setattr(ocp.CheckpointManager, "save", save)
    assert main(["train", "--resume", str(out)]) == 0
    assert _checkpoints(out) == [1, 2, 3, 4] and (out / "summary.md").exists()
    assert (out / "metrics.csv").read_text() == (whole / "metrics.csv").read_text()


def test_live_logging_that_cannot_be_written_is_one_line_each_and_never_stops_the_run(tmp_path, capsys, monkeypatch):
    from tensorboardX import record_writer

    class FullDisk:
        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def flush(self):
            pass

        def close(self):
            pass

    def read_only(self, data):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(live, "open", lambda *args, **kwargs: FullDisk(), raising=False)
    monkeypatch.setattr(record_writer.RecordWriter, "write", read_only)
    out = tmp_path / "run"
    assert main([*RUN, "--out", str(out), "--tensorboard"]) == 1  # something asked for was not written
    assert capsys.readouterr().err.strip().splitlines() == [
        "purejaxppo: error: could not write tensorboard/ (Read-only file system); live logging to it stops; training "
        "goes on",
        "purejaxppo: error: could not write progress.jsonl (No space left on device); live logging to it stops; "
        "training goes on"]
    assert _checkpoints(out) == [1, 2, 3, 4] and all((out / name).exists() for name in RESULTS)


# --------------------------------------------------------------------------------------
# one writer per folder
# --------------------------------------------------------------------------------------
def test_a_folder_being_written_is_refused_and_a_gone_writers_lock_is_taken_over(whole, tmp_path, capsys,
                                                                                 monkeypatch):
    out = _unfinished_copy(whole, tmp_path)
    run = cli.run_plan
    monkeypatch.setattr(cli, "run_plan", lambda *a, **k: pytest.fail("compiled before refusing"))
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / ".lock").write_text(json.dumps({"pid": writer.pid, "host": socket.gethostname()}))
        assert main(["train", "--resume", str(out)]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"purejaxppo: error: --resume='{out}': is being written by process {writer.pid} (its .lock); one process "
            f"at a time writes a folder: wait for it to end"]
        (out / ".lock").write_text(json.dumps({"pid": writer.pid, "host": "elsewhere"}))
        assert main(["train", "--resume", str(out)]) == 2
        assert f"process {writer.pid} on host elsewhere" in capsys.readouterr().err
        (out / ".lock").write_text(json.dumps({"pid": writer.pid, "host": socket.gethostname()}))
    finally:
        writer.kill()
        writer.wait()

    def holding_the_lock(*args, **kwargs):
        assert json.loads((out / ".lock").read_text()) == {"pid": os.getpid(), "host": socket.gethostname()}
        return run(*args, **kwargs)

    monkeypatch.setattr(cli, "run_plan", holding_the_lock)
    assert main(["train", "--resume", str(out)]) == 0  # its writer is gone: taken over
    assert capsys.readouterr().err.strip().splitlines() == [
        f"purejaxppo: {out} was locked by process {writer.pid}, which is gone: taking it over"]
    assert (out / "summary.md").exists() and not (out / ".lock").exists()


# --------------------------------------------------------------------------------------
# a resumed folder agrees with itself
# --------------------------------------------------------------------------------------
def test_a_config_file_that_disagrees_with_its_checkpoint_is_refused_before_compiling(whole, tmp_path, capsys,
                                                                                   monkeypatch):
    import purejaxppo as ppo

    out = _unfinished_copy(whole, tmp_path)
    original = (out / "config.yaml").read_text()
    run = cli.run_plan
    monkeypatch.setattr(cli, "run_plan", lambda *a, **k: pytest.fail("compiled before refusing"))
    (out / "config.yaml").write_text(original.replace("lr: 0.00025", "lr: 0.001"))  # edited
    assert main(["train", "--resume", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"purejaxppo: error: --resume='{out}': config.yaml disagrees with the checkpoint it would resume from: lr is "
        "0.001 in config.yaml but 0.00025 in the checkpoint; restore config.yaml to the checkpoint's values (an "
        "edited file, or checkpoints from another run?)"]
    pendulum = ppo.load_config(ppo.configs.find("pendulum")).to_dict()  # checkpoints copied under another run's file
    (out / "config.yaml").write_text(yaml.safe_dump(pendulum, sort_keys=False))
    assert main(["train", "--resume", str(out)]) == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "env is 'Pendulum-v1' in config.yaml but 'CartPole-v1' in" in error
    (out / "config.yaml").unlink()  # missing: written again from the checkpoint
    monkeypatch.setattr(cli, "run_plan", run)
    assert main(["train", "--resume", str(out)]) == 0
    assert (out / "config.yaml").read_text() == original


def test_a_sweep_yaml_is_compared_with_its_checkpoint_section_and_all(tmp_path):
    import purejaxppo as ppo
    from purejaxppo.config import ConfigError
    from purejaxppo.experiments.sweep import make_spec

    cfg = ppo.make_config({"num_steps": 16})
    spec = make_spec(grid={"clip_eps": [0.1, 0.2]}, seeds=2)
    saved = Experiment("sweep", cfg, spec)
    run_folder = folder_module.RunFolder(tmp_path, "sweep")
    run_folder.write_config(saved)
    run_folder.check_resume(saved, saved)  # as written: agrees
    other = dataclasses.replace(saved, spec=make_spec(grid={"clip_eps": [0.1, 0.3]}, seeds=2))
    with pytest.raises(ConfigError, match=r"sweep.grid is \{'clip_eps': \[0.1, 0.2\]\} in sweep.yaml but "
                                          r"\{'clip_eps': \[0.1, 0.3\]\} in the checkpoint; restore sweep.yaml"):
        run_folder.check_resume(other, other)


def test_a_sweep_from_before_a_spec_key_existed_resumes_with_its_default(tmp_path):
    """A checkpoint and a sweep.yaml written before rank_by existed lack it: the run had the
    default, so asking for the default resumes and asking for another value is refused."""
    import purejaxppo as ppo
    from purejaxppo.config import ConfigError
    from purejaxppo.experiments.sweep import make_spec

    cfg = ppo.make_config({"num_steps": 16})
    spec = make_spec(grid={"clip_eps": [0.1, 0.2]}, seeds=2)
    old_spec = {k: v for k, v in spec.to_dict().items() if k != "rank_by"}
    stored = {"command": "sweep", "config": cfg.to_dict(), "spec": old_spec, "first_seed": 0,
              "checkpoint_every": None, "max_parallel": None, "keep": None}  # as 0.4.0 stored it
    saved = Experiment.from_meta(stored)
    assert saved.spec.rank_by == "eval"  # the default, which the run had
    run_folder = folder_module.RunFolder(tmp_path, "sweep")
    run_folder.write_config(Experiment("sweep", cfg, spec))
    written = yaml.safe_load((tmp_path / "sweep.yaml").read_text())
    del written["sweep"]["rank_by"]
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(written, sort_keys=False))
    run_folder.check_resume(saved, Experiment("sweep", cfg, spec))
    asked = Experiment("sweep", cfg, dataclasses.replace(spec, rank_by="train"))
    with pytest.raises(ConfigError, match="sweep.rank_by 'eval' -> 'train'"):
        run_folder.check_resume(saved, asked)
