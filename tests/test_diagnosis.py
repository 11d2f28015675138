"""The clip-fraction diagnosis knows when its advice cannot apply (experiments.diagnosis): a single
epoch, where the clip cannot act between epochs, and returns already at a cap (the user's, or a
task's optimum) or at a published return, a reference and never called a cap
(configs/references.yaml), in the rules and in the sweep and run summaries."""

import numpy as np
import pytest

from purejaxppo.config import ConfigError
from purejaxppo.experiments import diagnosis, report
from purejaxppo.experiments.diagnosis import Ceiling, diagnose
from purejaxppo.experiments.spec import make_spec
from test_report_ranking import Stand

AFFORDABLE = "more epochs or a tighter clip are affordable"
CAP = Ceiling(500.0, "the task's optimum (500, cartpole in configs/references.yaml)", True)


def test_a_single_epoch_is_not_told_to_use_more_epochs_or_a_tighter_clip():
    line = diagnose([0.004])
    assert line.startswith("single epoch: the one epoch clips 0.4%") and AFFORDABLE not in line
    assert "never between epochs" in line
    assert diagnose([0.004, np.nan, np.nan]).startswith("single epoch")  # epochs that never ran are dropped
    assert diagnose([0.004, 0.004]).startswith("under-used") and AFFORDABLE in diagnose([0.004, 0.004])
    assert diagnose([0.05]).startswith("in range: the last epoch (1)")  # nothing to advise: unchanged
    assert diagnose([0.004], max_kl=3.0).startswith("runaway")  # a runaway is still one


def test_returns_at_the_cap_or_the_reference_are_not_told_to_use_the_batch_more():
    clip = [0.001, 0.002, 0.005]
    line = diagnose(clip, mean_return=500.0, cap=CAP)
    assert line.startswith("at the cap: the mean return 500 already reaches the task's optimum (500, cartpole")
    assert AFFORDABLE not in line and "nothing left to gain" in line
    assert diagnose(clip, mean_return=512.0, cap=CAP).startswith("at the cap")  # above the reference too
    for below in (499.0, float("nan"), None):  # below the cap, or no return known: the advice stands
        assert diagnose(clip, mean_return=below, cap=CAP).startswith("under-used")
    assert diagnose(clip, mean_return=500.0).startswith("under-used")  # no cap known
    assert diagnose([0.004], mean_return=500.0, cap=CAP).startswith("at the cap")  # the cap is read first
    # what is not advice to use the batch more still fires at the cap
    assert diagnose([0.05, 0.15, 0.25], mean_return=500.0, cap=CAP).startswith("over-used")
    assert diagnose(clip, max_kl=5.0, mean_return=500.0, cap=CAP).startswith("runaway")
    assert diagnose([0.01, 0.05, 0.1], mean_return=500.0, cap=CAP).startswith("in range")


@pytest.mark.parametrize("env, value, method, config", [
    ("Acrobot-v1", -80.0, "PPO", "acrobot"), ("MountainCar-v0", -118.0, "PPO", "mountaincar"),
    ("Breakout-MinAtar", 28.0, "PPO", "minatar_breakout"), ("Pendulum-v1", -130.0, "ES", "pendulum")])
def test_a_published_return_is_a_reference_never_a_cap(env, value, method, config):
    """A PPO (or ES) baseline is what a run should reach, not what it cannot exceed: a run at it is
    "at the reference", and neither called at a cap nor told there is nothing left to gain."""
    found = diagnosis.ceiling(env)
    assert found == (value, f"the published {method} return of {env} ({value:g}, {config} in configs/references.yaml)",
                     False)
    line = diagnose([0.001, 0.002, 0.005], mean_return=value + 1.0, cap=found)
    assert line.startswith(f"at the reference: the mean return {value + 1:g} already reaches the published {method} "
                           f"return of {env}")
    assert "cap" not in line and "nothing left to gain" not in line and AFFORDABLE not in line
    assert "the last epoch clips 0.5% < 2%" in line
    assert diagnose([0.001, 0.002, 0.005], mean_return=value - 1.0, cap=found).startswith("under-used")


def test_the_cap_is_the_users_or_the_tasks_optimum():
    # CartPole's published 500 is also its episode cap (references.yaml: cap: true): the task's optimum
    assert diagnosis.ceiling("CartPole-v1") == (500.0, "the task's optimum (500, cartpole in configs/references.yaml)",
                                                True)
    assert diagnosis.ceiling("MemoryChain-bsuite") == (1.0, "the task's optimum (1, memory_chain_gru in "
                                                            "configs/references.yaml)", True)  # method: optimum
    assert diagnosis.ceiling("no-such-env") is None and diagnosis.ceiling(None) is None
    assert diagnosis.ceiling("CartPole-v1", return_cap=200)[0] == 200.0  # the user's cap comes first
    assert diagnosis.ceiling("Acrobot-v1", return_cap=-60).cap  # the user's is a cap, even over a reference
    assert diagnosis.ceiling("no-such-env", return_cap=-3.5) == (-3.5, "the environment's cap (-3.5, "
                                                                       "diagnosis.return_cap)", True)
    assert make_spec({"diagnosis": {"return_cap": -120}}).diagnosis["return_cap"] == -120  # a return may be negative
    with pytest.raises(ConfigError, match="diagnosis.return_cap.*finite number"):
        make_spec({"diagnosis": {"return_cap": "high"}})
    with pytest.raises(ConfigError, match="diagnosis.under_used_below.*non-negative"):
        make_spec({"diagnosis": {"under_used_below": -1}})


def test_a_sweep_at_the_cap_and_a_one_epoch_point_are_diagnosed_so():
    train, evals = [[400.0, 420.0, 410.0], [300.0, 310.0, 320.0]], [[500.0] * 3, [450.0, 460.0, 470.0]]
    rows = report.sweep_summary(Stand(train, evals, clip=0.001, env="CartPole-v1"))
    assert rows[0]["diagnosis"].startswith("at the cap: the mean return 500 already reaches the task's optimum (500")
    assert rows[1]["diagnosis"].startswith("under-used")  # 460 is below the cap
    # judged on the return the points are ranked on: the train return (410) is not at the cap
    assert report.sweep_summary(Stand(train, evals, {"rank_by": "train"}, clip=0.001,
                                      env="CartPole-v1"))[0]["diagnosis"].startswith("under-used")
    # Acrobot's -80 is PPO's published return, not a cap: a point past it is at the reference
    acrobot = report.sweep_summary(Stand([[-90.0] * 3] * 2, [[-70.0] * 3, [-95.0] * 3], clip=0.001, env="Acrobot-v1"))
    assert acrobot[0]["diagnosis"].startswith("at the reference: the mean return -70 already reaches the published "
                                              "PPO return of Acrobot-v1 (-80, acrobot in configs/references.yaml)")
    assert acrobot[1]["diagnosis"].startswith("under-used")
    capped = report.sweep_summary(Stand(train, evals, {"diagnosis": {"return_cap": 450}}, clip=0.001))
    assert [row["diagnosis"].split(":")[0] for row in capped] == ["at the cap", "at the cap"]
    one = report.sweep_summary(Stand(train, evals, clip=0.001, epochs=1))
    assert all(row["diagnosis"].startswith("single epoch") for row in one)
    assert AFFORDABLE not in report.sweep_markdown(one, ["clip_eps"])


def test_a_run_at_the_cap_is_diagnosed_so():
    seeds, updates, epochs = 2, 3, 4
    metrics = {"episode_return": np.full((seeds, updates), 480.0), "kl_k3": np.full((seeds, updates, epochs), 0.01),
               "clip_fraction": np.full((seeds, updates, epochs), 0.001),
               "epochs_run": np.full((seeds, updates), epochs), "explained_variance": np.zeros((seeds, updates))}
    common = dict(steps_per_run=100, run_seconds=1.0, compile_seconds=1.0, env="CartPole-v1")
    at_cap = report.summarize(metrics, evaluation={"deterministic": np.full((seeds, 4), 500.0)}, **common)
    assert at_cap["diagnosis"].startswith("at the cap: the mean return 500")  # the final policy's return
    below = report.summarize(metrics, evaluation={"deterministic": np.full((seeds, 4), 420.0)}, **common)
    assert below["diagnosis"].startswith("under-used")
    assert report.summarize(metrics, **common)["diagnosis"].startswith("under-used")  # no evaluation: 480 < 500
