"""Folders written by purejaxppo 0.4.0 stay readable: an upgrade never turns a user's results
into "damaged metadata".

tests/data/folders_0_4_0 holds four folders that 0.4.0 (main at 0455f07) wrote (its make.sh
says how): a finished train run (`train`), a finished sweep of two run sets (`sweep`), a
finished PBT sweep (`pbt`) and a train run stopped by SIGINT after its checkpoint at update 4
of 64 (`stopped`). Every test works on a copy. Each is evaluated as 0.4.0 evaluated it (its
runs' returns, eval_0_4_0.json), loads and acts; `eval` and `export` exit 0 on each, and
`train --resume` finishes the stopped one.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import purejaxppo as ppo
from purejaxppo.experiments import cli
from purejaxppo.experiments.saved import SavedRun

FOLDERS = Path(__file__).parent / "data" / "folders_0_4_0"
KINDS = ("train", "sweep", "pbt", "stopped")
EVALUATED = json.loads((FOLDERS / "eval_0_4_0.json").read_text())["returns"]


def copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(FOLDERS / name, target)
    return target


@pytest.mark.parametrize("name", KINDS)
def test_a_0_4_0_folder_evaluates_as_it_did_there_and_loads(name, tmp_path):
    folder = copy(name, tmp_path)
    runs = SavedRun(folder).evaluate(episodes=3)
    assert {str(r["run"]): r["returns"].tolist() for r in runs} == EVALUATED[name]
    assert [r["seed"] for r in runs] == [r["run"] % (2 if name != "pbt" else 1) for r in runs]
    last = max(map(int, EVALUATED[name]))
    cfg, state = ppo.load(folder, run=last)
    assert cfg.env == "CartPole-v1" and cfg.hidden_sizes == (8,)
    assert ppo.make_policy(cfg, state)(np.zeros((2, 4), np.float32)).shape == (2,)


@pytest.mark.slow  # trains 60 updates (14 s): the fast suite's guard of old folders is their reading, above
def test_a_0_4_0_run_stopped_by_sigint_resumes_to_the_end(tmp_path, capsys):
    folder = copy("stopped", tmp_path)
    assert cli.main(["train", "--resume", str(folder)]) == 0
    assert "resuming" in capsys.readouterr().out
    assert (folder / "summary.md").exists()
    with open(folder / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 64 and max(int(row["update"]) for row in rows) == 64


@pytest.mark.slow
@pytest.mark.parametrize("name", KINDS)
def test_eval_and_export_of_a_0_4_0_folder_exit_0(name, tmp_path, capsys):
    folder = copy(name, tmp_path)
    assert cli.main(["eval", str(folder), "--episodes", "2", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == len(EVALUATED[name])
    assert cli.main(["export", str(folder), "--out", str(tmp_path / "policy.stablehlo")]) == 0
    assert (tmp_path / "policy.stablehlo").stat().st_size > 0
