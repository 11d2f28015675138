"""The gate (purejaxppo.gate): one command builds each environment once and checks each network
once, however many layers (plan, memory bound, learners, run folder, evaluation) it passes."""

import collections
import json

import pytest

import purejaxppo.envs
from conftest import CARTPOLE_RUN
from purejaxppo.experiments import cli
from purejaxppo.networks import Network

TINY = ["--set", "total_timesteps=128", "--set", "num_steps=16", "--set", "num_minibatches=2"]


@pytest.fixture
def counted(monkeypatch):
    """Counts of environments built (`make_raw_env`) and networks checked (`Network.check`)."""
    counts = collections.Counter()
    make_raw_env, check = purejaxppo.envs.make_raw_env, Network.check

    def build(*args, **kwargs):
        counts["env"] += 1
        return make_raw_env(*args, **kwargs)

    def check_network(self):
        counts["network"] += 1
        return check(self)

    monkeypatch.setattr(purejaxppo.envs, "make_raw_env", build)
    monkeypatch.setattr(Network, "check", check_network)
    return counts


@pytest.mark.parametrize("network", [
    pytest.param([], id="built-in"),
    pytest.param(["--set", "network=user_networks:two_towers"], id="user's",
                 marks=pytest.mark.slow)])  # a training program of its own: run by .ci/run after the default suite
def test_a_train_run_and_its_evaluation_build_the_env_once_and_check_the_network_once(
        counted, tmp_path, monkeypatch, capsys, network):
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))  # user_networks
    run = tmp_path / "run"
    assert cli.main(["train", *CARTPOLE_RUN, *network, "--out", str(run)]) == 0  # the shared training's programs
    assert dict(counted) == {"env": 1, "network": 1}
    counted.clear()
    capsys.readouterr()
    assert cli.main(["eval", str(run), "--episodes", "2", "--json"]) == 0
    assert dict(counted) == {"env": 1, "network": 1}
    # ... and the run's own final evaluation reports each run as eval does: the same fields, the same runs
    evaluated = json.loads(capsys.readouterr().out)["runs"]
    own = json.loads((run / "summary.json").read_text())["runs"]
    assert [sorted(row) for row in own] == [sorted(row) for row in evaluated] and len(own) == 2
    assert [(row["run"], row["seed"], row["step"]) for row in own] == [(r["run"], r["seed"], r["step"]) for r in evaluated]
    assert all(row["mean_length"] >= 1 and len(row["returns"]) == 2 for row in own)  # CARTPOLE_RUN: 2 episodes


@pytest.mark.slow  # two groups compile their programs: run by .ci/run after the default suite
def test_a_sweep_builds_one_env_and_checks_one_network_per_group(counted, tmp_path):
    out = tmp_path / "sweep"
    assert cli.main(["sweep", "sweeps/clip_epochs", *TINY, "--seeds", "1", "--grid", "clip_eps=0.2",
                     "--grid", "update_epochs=1,2", "--grid", "num_envs=2,4", "--out", str(out)]) == 0
    assert dict(counted) == {"env": 2, "network": 2}  # two static groups (num_envs); run sets share theirs
