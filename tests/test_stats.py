"""purejaxppo.experiments.stats and purejaxppo.experiments.diagnosis: each statistic against numpy/scipy or a hand count."""

import itertools
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats as sp

from purejaxppo.experiments import diagnosis, report, stats
from purejaxppo.experiments.diagnosis import diagnose


# ------------------------------------------------------------------ mean and standard error
def test_mean_se_matches_numpy():
    x = np.array([1.0, 2.5, 4.0, 7.0, -3.0])
    mean, se = stats.mean_se(x)
    assert mean == pytest.approx(np.mean(x), rel=1e-15)
    assert se == pytest.approx(np.std(x, ddof=1) / np.sqrt(x.size), rel=1e-15)
    assert stats.mean_se([1, 2, 3]) == pytest.approx((2.0, 1 / math.sqrt(3)))  # sample std 1


def test_mean_se_drops_non_finite_and_needs_two_values_for_se():
    assert stats.mean_se([1.0, np.nan, 3.0, np.inf, -np.inf]) == stats.mean_se([1.0, 3.0])
    mean, se = stats.mean_se([4.0, np.nan])
    assert mean == 4.0 and math.isnan(se)
    for empty in ([], [np.nan, np.nan]):
        assert all(math.isnan(v) for v in stats.mean_se(empty))


def test_mean_se_by_step_matches_numpy_per_column():
    curves = np.array([[1.0, 2.0, np.nan], [3.0, 6.0, 5.0], [5.0, 7.0, 9.0]])
    mean, se = stats.mean_se_by_step(curves)
    for j in range(3):
        column = curves[:, j][np.isfinite(curves[:, j])]
        assert mean[j] == pytest.approx(column.mean())
        assert se[j] == pytest.approx(column.std(ddof=1) / np.sqrt(column.size))
    mean, se = stats.mean_se_by_step(curves[:1])
    assert se is None and np.array_equal(mean, curves[0], equal_nan=True)


# ------------------------------------------------------------------ smoothing over environment steps
def _crossing(steps, curve, level):
    """The first step at which `curve` reaches `level` (it rises through it)."""
    return steps[np.argmax(curve >= level)]


def test_smoothing_does_not_lag_a_step_in_the_returns():
    # a learning curve that jumps from 0 to 1 at step 10,000 (3 seeds, an update every 100 steps):
    # the smoothed curve must cross half height at the step (within one update) and reach 95% of
    # it within one window. A trailing EMA (the plots' smoothing up to 0.4) lags by window·ln 2
    # (half height) and 3 windows (95%): the bold curve showed a maze solved at ~8k steps at ~25k.
    steps, window, jump = np.arange(1, 201) * 100.0, 2000.0, 10_000.0
    curves = np.tile(np.where(steps >= jump, 1.0, 0.0), (3, 1))
    mean, _ = stats.mean_se_by_step(stats.centred_mean_over_steps(steps, curves, window))
    half, ninety_five = _crossing(steps, mean, 0.5), _crossing(steps, mean, 0.95)
    assert abs(half - jump) <= 100.0 and ninety_five - jump <= window, (half, ninety_five)
    # falling steps alike: a centred window is symmetric, so it lags neither way
    fall = stats.centred_mean_over_steps(steps, 1.0 - curves[0], window)
    assert abs(steps[np.argmax(fall <= 0.5)] - jump) <= 100.0


def test_centred_mean_over_steps_is_the_mean_of_the_points_within_half_a_window():
    steps = np.array([100.0, 200.0, 400.0, 450.0, 900.0, 1000.0])  # uneven spacing: the window is in steps
    x = np.array([[3.0, -1.0, np.nan, 1.0, 5.0, 2.0], [2.0, 7.0, 1.0, 8.0, 2.0, np.nan]])
    smoothed = stats.centred_mean_over_steps(steps, x, window=300.0)
    for i in range(steps.size):
        near = np.abs(steps - steps[i]) <= 150.0
        for r in range(2):
            np.testing.assert_allclose(smoothed[r, i], np.nanmean(x[r, near]), rtol=1e-12)
    # a window narrower than the spacing follows the data; NaN where no point in the window ended an episode
    np.testing.assert_array_equal(stats.centred_mean_over_steps(steps, x, 1e-3), x)
    np.testing.assert_allclose(stats.centred_mean_over_steps(steps, x, 1e12), np.nanmean(x, axis=1)[:, None] + 0 * steps)
    assert np.isnan(stats.centred_mean_over_steps([1.0, 2.0, 30.0], [np.nan, 1.0, np.nan], 4.0)[2])
    with pytest.raises(ValueError, match="window"):
        stats.centred_mean_over_steps(steps, x, 0.0)


def test_smoothing_window_is_five_percent_of_the_run_in_two_digits():
    assert stats.smoothing_window(1e7) == 5e5
    assert stats.smoothing_window(499712) == 25000.0  # 24985.6 rounded for the legend


# ------------------------------------------------------------------ interquartile mean
@pytest.mark.parametrize("n", range(1, 14))
def test_iqm_matches_scipy_trim_mean(n):
    x = np.random.default_rng(n).standard_t(2, size=n)  # heavy tails: trimming matters
    assert stats.interquartile_mean(x)[0] == pytest.approx(sp.trim_mean(x, 0.25), rel=1e-12)


def test_iqm_by_hand():
    # n = 8: drop the 2 lowest and 2 highest of 1..7, 100 -> mean(3, 4, 5, 6)
    assert stats.interquartile_mean([7, 100, 1, 5, 2, 6, 3, 4])[0] == 4.5
    # n = 5: drop 1 at each end of 1, 2, 3, 10, 50 -> mean(2, 3, 10)
    assert stats.interquartile_mean([10, 1, 3, 2, 50])[0] == 5.0
    # n = 3: nothing dropped; NaN values are left out first
    assert stats.interquartile_mean([1, np.nan, 2, 6])[0] == 3.0


def test_bootstrap_interval_contains_iqm_and_is_deterministic():
    x = np.random.default_rng(7).normal(100, 20, size=10)
    iqm, low, high = stats.interquartile_mean(x)
    assert low < iqm < high
    assert stats.interquartile_mean(x) == (iqm, low, high)  # same seed, same interval
    assert stats.interquartile_mean(x, seed=1) != (iqm, low, high)
    _, low50, high50 = stats.interquartile_mean(x, confidence=0.5)
    assert low < low50 < high50 < high


def test_bootstrap_interval_is_scipys_percentile_bootstrap():
    x = np.random.default_rng(3).normal(size=7)
    ci = sp.bootstrap((x,), lambda s, axis=-1: sp.trim_mean(s, 0.25, axis=axis), n_resamples=2000,
                      method="percentile", random_state=np.random.default_rng(0)).confidence_interval
    _, low, high = stats.interquartile_mean(x)
    assert (low, high) == pytest.approx((ci.low, ci.high), rel=1e-12)


def test_bootstrap_interval_collapses_for_constant_data_and_is_nan_for_none():
    assert stats.interquartile_mean([3.25] * 6) == (3.25, 3.25, 3.25)
    assert stats.interquartile_mean([0.1]) == (0.1, 0.1, 0.1)
    assert all(math.isnan(v) for v in stats.interquartile_mean([np.nan]))


# ------------------------------------------------------------------ probability of improvement
def brute_force_improvement(x, y):
    score = 0.0
    for a, b in itertools.product(x, y):
        score += 1.0 if a > b else 0.5 if a == b else 0.0
    return score / (len(x) * len(y))


def test_probability_of_improvement_counts_pairs_and_half_ties():
    x, y = [1, 2, 2, 3], [2, 2, 0, 5, 1]
    # x wins 1 (1>0) + 2 + 2 (each 2 > 0, 1) + 4 (3 > all but 5) = 9 pairs, ties 1 (1=1) + 2 + 2 = 5
    assert stats.probability_of_improvement(x, y) == (9 + 5 / 2) / 20 == brute_force_improvement(x, y)
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.integers(0, 4, size=rng.integers(1, 9)), rng.integers(0, 4, size=rng.integers(1, 9))
        p = stats.probability_of_improvement(x, y)
        assert p == pytest.approx(brute_force_improvement(x, y), rel=1e-12)
        assert p + stats.probability_of_improvement(y, x) == pytest.approx(1.0, rel=1e-12)
        u = sp.mannwhitneyu(x, y, alternative="two-sided").statistic
        assert p == pytest.approx(u / (x.size * y.size), rel=1e-12)


def test_probability_of_improvement_edges():
    assert stats.probability_of_improvement([5.0], [5.0]) == 0.5
    assert stats.probability_of_improvement([1, 2], [3, 4]) == 0.0
    assert stats.probability_of_improvement([3, np.nan], [1, 2]) == 1.0  # NaN runs left out
    assert math.isnan(stats.probability_of_improvement([], [1.0]))


# ------------------------------------------------------------------ indistinguishable from best
def test_indistinguishable_within_two_standard_errors():
    means, ses = [1.0, 5.0, 4.0, np.nan, 3.0], [0.5, 0.5, np.nan, 1.0, 0.5]
    best, same = stats.best_and_indistinguishable(means, ses)
    assert best == 1
    # 4 > 2·hypot(.5, .5); 1 == 2·hypot(.5, 0) (NaN se counts 0: on the line is in); NaN mean never;
    # 2 > 2·hypot(.5, .5) = 1.41
    assert same == [False, True, True, False, False]
    _, wider = stats.best_and_indistinguishable(means, ses, within=3.0)
    assert wider == [False, True, True, False, True]
    assert stats.best_and_indistinguishable([np.nan, np.nan], [1.0, 1.0]) == (None, [False, False])


# ------------------------------------------------------------------ per-run values
def test_last_epoch_values_and_per_run():
    clip = np.array([[[0.1, 0.2, np.nan], [0.3, 0.4, np.nan]],
                     [[0.0, 0.1, 0.5], [0.2, 0.3, 0.7]]])  # [runs, updates, epochs]
    epochs = np.array([[2, 2], [3, 3]])
    np.testing.assert_array_equal(stats.last_epoch_values(clip, epochs), [[0.2, 0.4], [0.5, 0.7]])
    np.testing.assert_array_equal(stats.last_epoch_values(clip[1], np.array([0, 9])), [0.0, 0.7])  # clamped
    kl = np.array([[[1.0, 3.0, np.nan], [5.0, 7.0, np.nan]], [[1.0, 1.0, 1.0], [2.0, 2.0, 8.0]]])
    values = stats.per_run({"episode_return": np.array([[1.0, 2.0], [3.0, 4.0]]), "kl_k3": kl,
                            "clip_fraction": clip, "epochs_run": epochs,
                            "explained_variance": np.array([[0.1, 0.5], [0.2, 0.9]])})
    np.testing.assert_allclose(values["final_return"], [2.0, 4.0])
    np.testing.assert_allclose(values["mean_kl_k3"], [4.0, 15 / 6])
    np.testing.assert_allclose(values["max_update_kl"], [6.0, 4.0])
    np.testing.assert_allclose(values["last_epoch_clip_fraction"], [0.3, 0.6])
    np.testing.assert_allclose(values["explained_variance"], [0.5, 0.9])
    np.testing.assert_allclose(values["epochs_run"], [2.0, 3.0])
    np.testing.assert_allclose(stats.mean_by_epoch(clip), [0.15, 0.25, 0.6])


# ------------------------------------------------------------------ diagnosis
def test_over_used_fires_at_its_threshold_by_its_epoch():
    assert diagnose([0.1, 0.15, 0.2]).startswith("over-used: epoch 3 already clips 20.0% ≥ 20%")
    assert diagnose([0.1, 0.15, 0.1999]).startswith("in range")
    assert diagnose([0.5, 0.6]).startswith("in range: the last epoch (2)")  # epoch 3 never ran
    assert diagnose([0.5, 0.0], {"over_used_by_epoch": 1}).startswith("over-used: epoch 1")


def test_a_runaway_kl_is_flagged_and_never_read_as_under_used():
    # lr 10 with a huge max_grad_norm: mean KL 97 while the clip fraction looks tiny
    assert diagnose([0.001, 0.001], max_kl=97.0).startswith("runaway: an update's KL reached 97 > 1")
    assert diagnose([0.001, 0.001], max_kl=1.0).startswith("under-used")  # at the bound: not yet
    assert diagnose([0.001], {"runaway_kl_above": 0.5}, max_kl=0.6).startswith("runaway")
    metrics = {"episode_return": np.zeros((2, 3)), "kl_k3": np.array([[[0.01]] * 3, [[0.01], [5.0], [0.01]]]),
               "clip_fraction": np.full((2, 3, 1), 0.001), "epochs_run": np.ones((2, 3)),
               "explained_variance": np.zeros((2, 3))}
    summary = report.summarize(metrics, steps_per_run=10, run_seconds=1.0, compile_seconds=1.0)
    assert summary["runaway"] == 1 and summary["diagnosis"].startswith("runaway: an update's KL reached 5")
    assert ("runaway runs (an update's KL > 1)", "1") in report.summary_lines(summary)


def test_under_used_fires_below_its_threshold():
    assert diagnose([0.1, 0.05, 0.0199]).startswith("under-used: the last epoch (3) clips 2.0% < 2%")
    assert diagnose([0.1, 0.05, 0.02]).startswith("in range")
    assert diagnose([0.001, 0.1, 0.3, 0.01]).startswith("over-used")  # over-use is read first


def test_in_range_and_no_data():
    line = diagnose([0.01, 0.05, 0.1])
    assert line == "in range: the last epoch (3) clips 10.0%, between 2% and the over-use line (20% by epoch 3)"
    assert diagnose([np.nan, np.nan]) == "no data (every run diverged)"
    assert diagnose([]) == "no data (every run diverged)"
    assert diagnosis.DIAGNOSIS_DEFAULTS == {"under_used_below": 0.02, "over_used_above": 0.2,
                                            "over_used_by_epoch": 3, "runaway_kl_above": 1.0, "return_cap": None}


def test_report_does_not_reexport_the_statistics():
    # the 0.x re-exports are gone: importers use purejaxppo.experiments.stats and .diagnosis themselves
    for name in ("mean_se", "interquartile_mean", "probability_of_improvement", "last_epoch_values", "diagnose",
                 "DIAGNOSIS_DEFAULTS"):
        assert not hasattr(report, name), name


# ------------------------------------------------------------------ what importing costs
IMPORT_PROBE = r"""
import importlib.abc, json, sys

WATCHED = ("matplotlib", "scipy")  # rich is fine: flax.linen (the network language) imports it
importers = {}


class Spy(importlib.abc.MetaPathFinder):
    # records, for each watched package, the module whose import statement first asked for it
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in WATCHED and top not in importers:
            frame = sys._getframe(1)
            while frame is not None and frame.f_globals.get("__name__", "").startswith("importlib"):
                frame = frame.f_back
            importers[top] = frame.f_globals.get("__name__") if frame is not None else None
        return None


sys.meta_path.insert(0, Spy())
import purejaxppo
import purejaxppo.experiments.diagnosis, purejaxppo.experiments.stats
from purejaxppo.experiments.spec import make_spec

make_spec({"seeds": 2, "diagnosis": {"over_used_above": 0.3}})
print(json.dumps({"loaded": [m for m in WATCHED if m in sys.modules], "importers": importers,
                  "report": "purejaxppo.experiments.report" in sys.modules}))
"""


def test_import_purejaxppo_loads_no_plotting_or_scipy():
    done = subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert not seen["loaded"], seen
    assert not seen["report"]  # a sweep spec is checked without the report module (spec.py is below it)
