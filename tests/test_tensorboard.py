"""TensorBoard events of a folder's metrics.csv (experiments/tensorboard.py): `purejaxppo
tensorboard FOLDER` and `--tensorboard`, read back with TensorBoard's own reader."""

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

from conftest import CARTPOLE_RUN
from purejaxppo.experiments import tensorboard
from purejaxppo.experiments.cli import main
from purejaxppo.experiments.faults import Failures

OLD_FOLDERS = Path(__file__).parent / "data" / "folders_0_4_0"


def scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """TensorBoard's reading of the event files in `directory`: tag -> [(step, value)]."""
    events = EventAccumulator(str(directory), size_guidance={SCALARS: 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def assert_events_hold_metrics_csv(folder: Path, into: Path) -> None:
    """`into` holds a TensorBoard run per run of `folder`'s metrics.csv, and nothing else, named
    by its point and seed, its scalars every metric column's non-empty cells at the row's
    env_steps, to float32 rounding (TensorBoard's scalars are float32)."""
    with open(folder / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    header = list(rows[0])
    metrics = header[header.index("env_steps") + 1:]
    expected: dict[str, dict[str, list]] = {}
    for row in rows:
        name = (f"point{row['point']}-" if "point" in row else "") + f"seed{row['seed']}"
        run = expected.setdefault(name, {})
        for metric in metrics:
            if row[metric] != "":
                run.setdefault(metric, []).append((int(row["env_steps"]), float(np.float32(row[metric]))))
    assert sorted(p.name for p in into.iterdir() if p.is_dir()) == sorted(expected)
    for name, run in expected.items():
        assert scalars(into / name) == run, name


@pytest.mark.parametrize("kind", ["train", "sweep", "pbt"])
def test_the_command_writes_every_metric_of_every_run_and_never_writes_over_them(kind, tmp_path, capsys):
    folder = tmp_path / kind
    folder.mkdir()
    shutil.copy(OLD_FOLDERS / kind / "metrics.csv", folder)
    assert main(["tensorboard", str(folder)]) == 0
    assert f"as TensorBoard events in {folder / 'tensorboard'}/" in capsys.readouterr().out
    assert_events_hold_metrics_csv(folder, folder / "tensorboard")
    if kind == "sweep":  # update_epochs 1 and 2: a point of 1 epoch has no clip_fraction_e2 (an empty cell)
        assert "clip_fraction_e2" not in scalars(folder / "tensorboard" / "point0-seed0")
        assert "clip_fraction_e2" in scalars(folder / "tensorboard" / "point1-seed0")
    assert not (folder / ".lock").exists()

    # a second time: refused in one line, every event file as it was
    files = {p: p.stat().st_mtime_ns for p in (folder / "tensorboard").rglob("*")}
    assert main(["tensorboard", str(folder)]) == 2
    first = "point0-seed0" if kind != "train" else "seed0"
    assert capsys.readouterr().err.splitlines() == [
        f"purejaxppo: error: folder='{folder}': {folder / 'tensorboard' / first} exists already: events are never "
        f"written over a run's (--out DIR writes them into another directory)"]
    assert {p: p.stat().st_mtime_ns for p in (folder / "tensorboard").rglob("*")} == files
    # --out: the same events elsewhere
    assert main(["tensorboard", str(folder), "--out", str(tmp_path / "elsewhere")]) == 0
    assert_events_hold_metrics_csv(folder, tmp_path / "elsewhere")


def test_the_command_refuses_a_folder_without_metrics_in_one_line(tmp_path, capsys):
    stopped = OLD_FOLDERS / "stopped"  # a run cut short: checkpoints, no results
    assert main(["tensorboard", str(stopped)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"purejaxppo: error: folder='{stopped}': has no metrics.csv (a run or sweep writes it when it finishes; one "
        f"cut short writes it with --resume): there are no metrics to write events of"]
    assert not (stopped / "tensorboard").exists()
    (tmp_path / "metrics.csv").write_text("seed,update,return\n0,1,2\n")
    assert main(["tensorboard", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"purejaxppo: error: folder='{tmp_path}': its metrics.csv has no env_steps column (its columns: seed, "
        f"update, return)"]
    assert main(["tensorboard", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.splitlines() == [f"purejaxppo: error: folder='{tmp_path / 'nothing'}': is not a folder"]
    shutil.copy(OLD_FOLDERS / "train" / "metrics.csv", tmp_path)
    (tmp_path / "file").write_text("")
    assert main(["tensorboard", str(tmp_path), "--out", str(tmp_path / "file" / "events")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"purejaxppo: error: --out='{tmp_path / 'file' / 'events'}': {tmp_path / 'file' / 'events'} cannot be "
        f"created: Not a directory"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "metrics.csv"]


def test_results_events_keep_the_runs_written_before(tmp_path):
    """--tensorboard's end of a resumed run that wrote some runs' events before: those are kept
    as they are, the others written."""
    shutil.copy(OLD_FOLDERS / "sweep" / "metrics.csv", tmp_path)
    earlier = tmp_path / "tensorboard" / "point0-seed0"
    earlier.mkdir(parents=True)
    (earlier / "events.out.tfevents.earlier").write_bytes(b"kept")
    failures = Failures()
    tensorboard.log_results(tmp_path, failures)
    assert not failures
    assert [p.name for p in earlier.iterdir()] == ["events.out.tfevents.earlier"]
    assert (earlier / "events.out.tfevents.earlier").read_bytes() == b"kept"
    shutil.rmtree(earlier)
    tensorboard.log_results(tmp_path, failures)  # the missing one alone now: then every run is there, once
    assert not failures
    assert_events_hold_metrics_csv(tmp_path, tmp_path / "tensorboard")
    assert all(len(list(p.iterdir())) == 1 for p in (tmp_path / "tensorboard").iterdir())
    assert not [p for p in (tmp_path / "tensorboard").iterdir() if p.name.startswith(".")]  # no partial directory


def test_tensorboard_flag_logs_the_returns_live_then_every_run_as_the_command_does(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*(["train"] + CARTPOLE_RUN), "--out", str(out), "--tensorboard"]) == 0
    capsys.readouterr()
    # live: the returns of each progress.jsonl record, the folder's own TensorBoard run; no steps per second
    records = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    live = scalars(out / "tensorboard")
    assert live == {f"progress/group0/{name}": [(r["env_steps"], float(np.float32(r[name]))) for r in records]
                    for name in ("episode_return", "episode_return_min", "episode_return_max")}
    # at the end: every metric of every seed, a run each
    assert_events_hold_metrics_csv(out, out / "tensorboard")
    assert sorted(p.name for p in (out / "tensorboard").iterdir() if p.is_dir()) == ["seed0", "seed1"]
    # what the command writes of the same folder is the same
    assert main(["tensorboard", str(out)]) == 2  # (there already)
    assert main(["tensorboard", str(out), "--out", str(tmp_path / "converted")]) == 0
    for seed in ("seed0", "seed1"):
        assert scalars(tmp_path / "converted" / seed) == scalars(out / "tensorboard" / seed)
