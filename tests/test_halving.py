"""Successive halving (kinds/halving.py): its section, its rungs' decisions, a halving whose
survivors are the full grid's runs bit for bit, its report, and (slow) a folder's resume."""

import json

import chex
import numpy as np
import pytest

import purejaxppo as ppo
from purejaxppo.experiments.cli import main
from purejaxppo.config import ConfigError, make_config
from purejaxppo.experiments.kinds.halving import Rungs, budgets
from purejaxppo.experiments.kinds.halving_report import halving_markdown, halving_summary
from purejaxppo.experiments.plan import plan
from purejaxppo.experiments.spec import make_spec
from purejaxppo.experiments.sweep import sweep

from conftest import TINY_CARTPOLE, cut_back


# --------------------------------------------------------------------------------------
# its section and its rungs' decisions (no compile)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("section, field, words", [
    ({"eta": 1}, "sweep.halving.eta", "at least 2"),
    ({"rungs": 1.5}, "sweep.halving.rungs", "integer"),
    ({"eta": 3, "rung": 3}, "sweep.halving.rung", "unknown"),
    ([3, 3], "sweep.halving", "mapping"),
])
def test_a_bad_halving_section_is_named(section, field, words):
    with pytest.raises(ConfigError) as caught:
        make_spec({"grid": {"lr": [1e-3, 1e-4]}, "halving": section})
    assert caught.value.field == field and words in str(caught.value)


def test_halving_needs_points_to_choose_among_and_one_kind():
    with pytest.raises(ConfigError, match="1 point to choose among"):
        make_spec({"grid": {"lr": [1e-3]}, "seeds": 4, "halving": {}})
    with pytest.raises(ConfigError, match="given with"):
        make_spec({"pbt": {"population": 2, "interval": 1, "hyperparameters": {"lr": {"uniform": [0.1, 0.2]}}},
                   "halving": {}})
    spec = make_spec({"random": {"trials": 9, "lr": {"loguniform": [1e-4, 1e-2]}}, "halving": {}})
    assert spec.kind == "halving" and spec.section == {"eta": 3, "rungs": 3}
    spec = make_spec({"grid": {"lr": [1e-3, 1e-4]}, "halving": {"rungs": 2}})
    assert make_spec(spec.to_dict()) == spec  # it reloads as it was (a folder's sweep.yaml)


def test_points_run_equal_budgets_and_the_first_rung_at_least_one_update():
    cfg = make_config(TINY_CARTPOLE)  # 6 updates
    with pytest.raises(ConfigError, match="equal budgets"):
        plan(cfg, make_spec({"grid": {"total_timesteps": [384, 768]}, "halving": {"eta": 2, "rungs": 2}}))
    with pytest.raises(ConfigError, match="first rung of no update") as caught:
        plan(cfg, make_spec({"grid": {"lr": [1e-3, 1e-4]}, "halving": {"eta": 3, "rungs": 3}}))  # 6 // 9 = 0
    assert caught.value.field == "sweep.halving.rungs"


def test_rungs_end_at_the_budget_divided_by_eta_per_rung_to_go():
    assert budgets({"eta": 3, "rungs": 3}, 976) == [108, 325, 976]  # the shipped CartPole's 976 updates
    assert budgets({"eta": 2, "rungs": 4}, 64) == [8, 16, 32, 64]


def test_a_rung_keeps_the_top_one_over_eta_by_the_mean_over_finite_seeds():
    rungs = Rungs([1, 3, 9], list(range(7)))
    values = {0: [1.0, 3.0], 1: [5.0, None], 2: [None, None], 3: [4.0, 4.0], 4: [4.0, 4.0], 5: [0.0, 0.0],
              6: [9.0, -9.0]}
    assert rungs.end(values, eta=3) == [1, 3]  # means 2, 5, -inf, 4, 4 (tie: the first point), 0, 0
    assert rungs.rung == 1 and rungs.running() == [1, 3]
    assert rungs.end({1: [0.0, 0.0], 3: [1.0, 1.0]}, eta=3) == [3]  # at least one goes on
    again = Rungs.from_meta(json.loads(json.dumps(rungs.meta())))  # as a checkpoint's meta holds it
    assert again == rungs


# --------------------------------------------------------------------------------------
# a halving run, beside the full grid
# --------------------------------------------------------------------------------------
GRID = {"lr": [1e-4, 1e-3, 3e-3, 1e-2]}


TINY = {**TINY_CARTPOLE, "total_timesteps": 4 * 16 * 4}  # 4 updates
SECTION = {"grid": GRID, "seeds": 2, "eval_episodes": 0, "rank_by": "train"}


@pytest.fixture(scope="module")
def halved():
    """4 points x 2 seeds of the tiny CartPole (4 updates), eta 2, 2 rungs, ranked on the train return."""
    return sweep(make_config(TINY), spec=make_spec({**SECTION, "halving": {"eta": 2, "rungs": 2}}))


def test_the_top_half_on_the_first_rungs_return_goes_on_to_the_full_budget(halved):
    rungs = halved.between.rungs
    assert rungs.budgets == [2, 4] and rungs.ended[0]["points"] == [0, 1, 2, 3]
    values = rungs.ended[0]["values"]
    top = sorted(range(4), key=lambda i: -np.mean(values[i]))[:2]
    assert rungs.running() == sorted(top)
    assert sorted(k for s in halved.run_sets for k in s.runs) == [2 * i + s for i in sorted(top) for s in range(2)]
    for i in top:
        for s in range(2):  # a survivor's metrics run every update; its first rung's last return is what was ranked
            returns = halved.run(2 * i + s).metrics["episode_return"]
            assert returns.shape == (4,) and float(returns[1]) == values[i][s]
    stopped = next(k for k in range(8) if k // 2 not in top)
    with pytest.raises(LookupError, match="stopped it early"):
        halved.run(stopped)


@pytest.mark.slow  # the same grid at the full budget beside it (two more compiles)
def test_the_points_that_go_on_are_their_full_grid_runs_bit_for_bit(halved):
    """A survivor continues its own runs in a smaller program (the run axis compacted): its
    state and every update's metrics are the full grid's, its schedules its config's (the same
    numbers for this tiny config on CPU; programs of other run counts may round differently)."""
    full = sweep(make_config(TINY), spec=make_spec(SECTION))
    for k in (k for s in halved.run_sets for k in s.runs):
        chex.assert_trees_all_equal(halved.run(k).state, full.run(k).state)
        chex.assert_trees_all_equal(halved.run(k).metrics, full.run(k).metrics)
    first = [[float(full.metrics[2 * i + s]["episode_return"][1]) for s in range(2)] for i in range(4)]
    assert halved.between.rungs.ended[0]["values"] == first  # every point's first rung, as the full grid has it


def test_the_summary_gives_each_points_rung_and_return_and_the_steps_spent(halved):
    result = halved
    summary = halving_summary(result)
    batch = 4 * 16
    assert summary["env_steps"] == (4 * 2 * 2 + 2 * 2 * 2) * batch  # 4 points to 2 updates, 2 on to 4
    assert summary["env_steps_full_grid"] == 4 * 2 * 4 * batch
    rows = {row["point"]: row for row in summary["points"]}
    kept = result.between.rungs.running()
    assert all(rows[i]["rung"] == (2 if i in kept else 1) for i in range(4))
    assert summary["best"]["point"] in kept and summary["points"][0] is summary["best"]
    for i in kept:
        final = [float(result.run(2 * i + s).metrics["episode_return"][-1]) for s in range(2)]
        assert rows[i]["return"] == np.mean(final) and rows[i]["updates"] == 4
    text = halving_markdown(summary)
    assert "rung 1: 4 point(s) to 2 updates; rung 2: 2 point(s) to 4 updates" in text and "(75.0%)" in text


# --------------------------------------------------------------------------------------
# through the command line, and its resume (slow)
# --------------------------------------------------------------------------------------
HALVING_FILE = """env: CartPole-v1
num_envs: 4
num_steps: 16
num_minibatches: 2
update_epochs: 2
total_timesteps: 576
env_params: {max_steps_in_episode: 40}
sweep:
  grid: {lr: [1.0e-4, 1.0e-3, 1.0e-2], update_epochs: [1, 2, 3]}
  seeds: 2
  eval_episodes: 4
  halving: {eta: 3, rungs: 2}
"""


@pytest.mark.slow  # a halving sweep through the command line, resumed in its second rung, compiled again
def test_a_halving_folder_resumed_in_a_later_rung_is_the_same_run(tmp_path, capsys):
    """9 points in 3 run sets (their epochs), 3 updates then 9; a checkpoint per update. Cut back
    to the checkpoint after the second rung's first update, it resumes to the same files and
    states; eval and load read the runs of the last rung."""
    (tmp_path / "h.yaml").write_text(HALVING_FILE)
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main(["sweep", str(tmp_path / "h.yaml"), "--out", str(whole), "--checkpoint-every", "1"]) == 0
    summary = json.loads((whole / "summary.json").read_text())
    assert [r["points"] for r in summary["rungs"]] == [9, 3] and summary["env_steps_fraction"] < 0.6
    kept = sorted(row["point"] for row in summary["points"] if row["rung"] == 2)
    cut_back(whole, cut, 3 + 1, kept=("sweep.yaml", "progress.jsonl"))  # rung 1 ends at step 3: the next update's
    capsys.readouterr()
    assert main(["sweep", "--resume", str(cut)]) == 0
    assert "resuming" in capsys.readouterr().out
    for name in ("metrics.csv", "summary.csv", "summary.json", "summary.md"):
        assert (cut / name).read_text() == (whole / name).read_text(), name
    runs = [2 * i + s for i in kept for s in range(2)]
    for k in runs:
        chex.assert_trees_all_equal(ppo.load(cut, run=k), ppo.load(whole, run=k))
    capsys.readouterr()
    assert main(["eval", str(whole), "--episodes", "2", "--json"]) == 0
    assert [r["run"] for r in json.loads(capsys.readouterr().out)["runs"]] == runs


@pytest.mark.learning
def test_the_shipped_cartpole_halving_picks_a_point_that_solves_it_for_under_40_percent_of_the_steps(tmp_path):
    """configs/sweeps/halving_cartpole.yaml: 27 points x 2 seeds at the shipped config's budget,
    eta 3, 3 rungs: its best point's greedy evaluation return is 475 or more, for at most 40% of
    the environment steps of the full grid."""
    assert main(["sweep", "configs/sweeps/halving_cartpole.yaml", "--out", str(tmp_path / "h")]) == 0
    summary = json.loads((tmp_path / "h" / "summary.json").read_text())
    assert summary["best"]["rung"] == 3 and summary["best"]["return"] >= 475, summary["best"]
    assert summary["env_steps"] <= 0.4 * summary["env_steps_full_grid"]
