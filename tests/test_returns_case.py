"""The returns case's runner (benchmarks/returns.py) without its hours of training: which configs
it runs, how it resumes, and the table and figure it makes from a small real run folder."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import returns
from conftest import CARTPOLE_RUN
from purejaxppo import configs
from purejaxppo.experiments import stats
from purejaxppo.experiments.cli import main as cli

REPO = Path(__file__).resolve().parent.parent


def test_the_case_is_recognised_and_runs_alone():
    assert returns.asked(["--cases", "returns"]) and returns.asked(["--cases=peers,returns", "--quick"])
    assert not returns.asked(["--cases", "peers"]) and not returns.asked(["returns"])
    out = subprocess.run([sys.executable, "-m", "benchmarks", "--cases", "peers,returns", "--table"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "python -m benchmarks: error: the returns case runs alone (--cases returns): it takes hours, the others seconds"]


def test_which_configs():
    refs = configs.references()
    cpu = returns.chosen(refs, gpu=False, subset=None)
    assert "cartpole" in cpu and "minatar_space_invaders" in cpu and "brax/ant" not in cpu
    assert returns.chosen(refs, gpu=True, subset=None) == list(refs)
    assert returns.chosen(refs, False, "brax/ant").endswith("is GPU-sized (references.yaml: size: gpu): add --gpu")
    assert returns.chosen(refs, False, "cartpole, nothing").startswith("--configs: nothing has no reference")


@pytest.mark.parametrize("mean, se, reference, verdict", [
    # met: the mean reaches the reference, whatever the spread
    (500.0, 0.0, 500, "met"), (131.0, 50.0, 131, "met"), (139.0, 3.0, 131, "met"), (-81.2, 1.0, -82, "met"),
    (-164.0, math.nan, -200.6, "met"), (0.95499998, 0.0, 0.955, "met"),  # float32's 0.955
    # within noise: below it, by at most 2 s.e. (the boundary included)
    (13.9, 1.5, 15, "within noise"),  # Asterix: 15 <= 13.9 + 2 x 1.5, but 13.9 < 15
    (120.0, 6.0, 131, "within noise"), (120.0, 5.5, 131, "within noise"),  # 131 = 120 + 2 x 5.5 exactly
    (130.999, 0.0, 131, "short"), (-200.0, 50.0, -118, "within noise"),
    # short: below it by more than 2 s.e.
    (120.0, 5.0, 131, "short"), (120.0, 5.49, 131, "short"), (-164.0, 8.7, -130, "short"),
    (-194.0, 5.6, -118, "short"), (0.9549, 0.0, 0.955, "short"), (10.0, math.nan, 11, "short"),
    # no reference, or no mean
    (1.0, 0.1, None, "—"), (math.nan, 1.0, 5, "—")])
def test_the_three_verdicts_and_their_boundaries(mean, se, reference, verdict):
    assert returns.verdict(mean, se, reference) == verdict


def test_a_stopped_run_is_resumed_and_an_empty_one_restarted(tmp_path, monkeypatch):
    commands = []

    def fake_run(command, cwd):
        commands.append(command)
        folder = Path(command[command.index("--resume" if "--resume" in command else "--out") + 1])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "summary.json").write_text("{}")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(returns.subprocess, "run", fake_run)
    runs = tmp_path / "runs"
    (runs / "cartpole" / "checkpoints" / "490").mkdir(parents=True)  # stopped after a checkpoint
    (runs / "cartpole.legs.json").write_text("[12.5]")
    returns.run_config("cartpole", 4, runs, print)
    assert commands[-1][3:] == ["train", "--resume", str(runs / "cartpole")]
    assert len(json.loads((runs / "cartpole.legs.json").read_text())) == 2  # the wall time of both legs

    (runs / "acrobot").mkdir()
    (runs / "acrobot" / "config.yaml").write_text("started, stopped before its first checkpoint")
    returns.run_config("acrobot", 4, runs, print)
    assert commands[-1][3:] == ["train", "acrobot", "--seeds", "4", "--out", str(runs / "acrobot"),
                                "--checkpoint-every", "98", "--keep", "2"]  # 976 updates in 10 chunks
    assert not (runs / "acrobot" / "config.yaml").exists()

    assert returns.run_config("acrobot", 4, runs, print) == runs / "acrobot" and len(commands) == 2  # finished


def test_a_run_folder_becomes_a_result_and_a_table_row(tmp_path):
    runs = tmp_path / "runs"
    folder = runs / "cartpole"
    assert cli(["train", *CARTPOLE_RUN, "--out", str(folder)]) == 0
    (runs / "cartpole.legs.json").write_text("[30.0, 12.0]")
    result = returns.collect("cartpole", folder, runs)
    summary = json.loads((folder / "summary.json").read_text())
    assert result["eval_return_sampled"] == summary["eval_return_stochastic"]["per_seed"]
    assert result["seeds"] == 2 and result["batch_size"] == 64 and result["total_timesteps"] == 256
    assert np.array(result["episode_return"]).shape == (2, 4) and result["wall_s"] == 42.0
    assert returns.is_current(result, "cartpole", 2) and not returns.is_current(result, "cartpole", 4)
    assert not returns.is_current({**result, "config_sha": "another"}, "cartpole", 2)

    results = tmp_path / "results"
    (results).mkdir()
    (results / "cartpole.json").write_text(json.dumps(result))
    md, png = returns.write_table(configs.references(), ["cartpole", "acrobot"], results, tmp_path, "cpu", "cmd")
    text = md.read_text()
    assert "| reference | verdict | minutes | machine |" in text and "**within noise**" in text
    mean, se = stats.mean_se(result["eval_return_sampled"])
    row = next(line for line in text.splitlines() if line.startswith("| cartpole |"))
    machine = result["machine"]
    assert f"| {returns.verdict(mean, se, 500)} | 0.7 | {machine['cpu']}, {machine['cores']} cores |" in row and "500 at 1.5e5 steps (PPO, gymnax README)" in row
    assert "| acrobot | Acrobot-v1 | — | 5e5 | not measured yet |" in text
    assert returns.machine_cell({"backend": "gpu", "devices": 1, "device_kind": "NVIDIA H200"}) == "1 x NVIDIA H200"
    assert png.read_bytes().startswith(b"\x89PNG")
    assert returns.write_table(configs.references(), ["cartpole"], results, tmp_path, "cpu", "cmd")[0].name == \
        md.name.replace(".md", "-2.md")  # a table is never replaced

