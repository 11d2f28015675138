"""The clip-fraction diagnosis knows when its advice cannot apply (experiments.diagnosis): a single
epoch, where the clip cannot act between epochs, and returns already at the environment's cap or
the reference (configs/references.yaml), in the rules and in the sweep and run summaries."""

import numpy as np
import pytest

from purejaxppo.config import ConfigError
from purejaxppo.experiments import diagnosis, report
from purejaxppo.experiments.diagnosis import diagnose
from purejaxppo.experiments.spec import make_spec
from test_report_ranking import Stand

AFFORDABLE = "more epochs or a tighter clip are affordable"
CAP = (500.0, "the reference (500, cartpole in configs/references.yaml)")


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
    assert line.startswith("at the cap: the mean return 500 already reaches the reference (500, cartpole")
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


def test_the_cap_is_the_users_or_the_highest_reference_of_the_environment():
    value, what = diagnosis.ceiling("CartPole-v1")
    assert value == 500.0 and "cartpole in configs/references.yaml" in what and what.startswith("the reference")
    assert diagnosis.ceiling("Acrobot-v1")[0] == -80.0
    assert diagnosis.ceiling("MemoryChain-bsuite")[1].startswith("the task's optimum (1,")
    assert diagnosis.ceiling("no-such-env") is None and diagnosis.ceiling(None) is None
    assert diagnosis.ceiling("CartPole-v1", return_cap=200)[0] == 200.0  # the user's cap comes first
    assert diagnosis.ceiling("no-such-env", return_cap=-3.5) == (-3.5, "the environment's cap (-3.5, diagnosis.return_cap)")
    assert make_spec({"diagnosis": {"return_cap": -120}}).diagnosis["return_cap"] == -120  # a return may be negative
    with pytest.raises(ConfigError, match="diagnosis.return_cap.*finite number"):
        make_spec({"diagnosis": {"return_cap": "high"}})
    with pytest.raises(ConfigError, match="diagnosis.under_used_below.*non-negative"):
        make_spec({"diagnosis": {"under_used_below": -1}})


def test_a_sweep_at_the_cap_and_a_one_epoch_point_are_diagnosed_so():
    train, evals = [[400.0, 420.0, 410.0], [300.0, 310.0, 320.0]], [[500.0] * 3, [450.0, 460.0, 470.0]]
    rows = report.sweep_summary(Stand(train, evals, clip=0.001, env="CartPole-v1"))
    assert rows[0]["diagnosis"].startswith("at the cap: the mean return 500 already reaches the reference (500")
    assert rows[1]["diagnosis"].startswith("under-used")  # 460 is below the cap
    # judged on the return the points are ranked on: the train return (410) is not at the cap
    assert report.sweep_summary(Stand(train, evals, {"rank_by": "train"}, clip=0.001,
                                      env="CartPole-v1"))[0]["diagnosis"].startswith("under-used")
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
