"""A sweep's summary ranks its points on the final policy's evaluation return (sweep: rank_by:),
says which return every derived column uses, and what its seeds can tell (report.sweep): on a
stand-in result with chosen numbers, no training."""

import math
import types

import numpy as np
import pytest

from purejaxppo.config import ConfigError
from purejaxppo.experiments import report, stats
from purejaxppo.experiments.spec import SweepSpec, make_spec

UPDATES, EPOCHS = 4, 2


class Stand:
    """What sweep_summary reads of a SweepResult: points, their runs' metrics and evaluation.
    `train[i]` and `evals[i]`: point i's per-seed final train return and evaluation return."""

    def __init__(self, train, evals, section=None, clip=0.05, points=None, env="stand-in", epochs=EPOCHS):
        self.points = points or [{"clip_eps": 0.1 * (i + 1)} for i in range(len(train))]
        self.base, self.epochs = types.SimpleNamespace(env=env), epochs
        seeds = len(train[0])
        self.spec = make_spec({"seeds": seeds, **(section or {})})
        self.diverged = np.zeros(len(train) * seeds, bool)
        self.train, self.evals, self.clip = np.asarray(train, float), np.asarray(evals, float), clip

    def point_runs(self, i):
        return range(i * self.spec.seeds, (i + 1) * self.spec.seeds)

    def point(self, i):
        seeds = self.spec.seeds
        returns = np.zeros((seeds, UPDATES))
        returns[:, -1] = self.train[i]
        metrics = {"episode_return": returns, "kl_k3": np.full((seeds, UPDATES, self.epochs), 0.01),
                   "clip_fraction": np.full((seeds, UPDATES, self.epochs), self.clip),
                   "epochs_run": np.full((seeds, UPDATES), self.epochs), "explained_variance": np.zeros((seeds, UPDATES))}
        episodes = np.repeat(self.evals[i][:, None], 2, axis=1)
        evaluation = {"deterministic": episodes, "stochastic": episodes - 1.0} if self.spec.eval_episodes else {}
        return types.SimpleNamespace(metrics=metrics, evaluation=evaluation)


# point 0 trains best in its last update; point 1's final policy evaluates best
TRAIN = [[500.0, 490.0, 495.0], [300.0, 320.0, 310.0], [100.0, 120.0, 110.0]]
EVALS = [[200.0, 210.0, 190.0], [480.0, 470.0, 490.0], [150.0, 160.0, 170.0]]


def test_a_three_seed_sweep_ranks_on_evaluation_and_warns_about_its_three_seeds():
    rows = report.sweep_summary(Stand(TRAIN, EVALS))
    assert [row["best"] for row in rows] == [False, True, False]  # the highest evaluation return, not training
    assert all(row["ranked_on"] == "eval" and row["ranked_seeds"] == 3 for row in rows)
    assert [row["indistinguishable_from_best"] for row in rows] == [False, True, False]
    assert rows[0]["p_beats_best"] == stats.probability_of_improvement(EVALS[0], EVALS[1]) == 0.0
    assert rows[1]["p_beats_best"] == 0.5
    assert rows[2]["iqm_return"] == pytest.approx(160.0)  # of the evaluation return (3 seeds: the mean)
    assert rows[1]["ranked_sd"] == pytest.approx(np.std(EVALS[1], ddof=1))
    text = report.sweep_markdown(rows, ["clip_eps"])
    assert "| IQM of eval return [95% CI] |" in text and "| P(beats best), eval return |" in text
    assert "| ≈ best, eval return |" in text and "Ranked on the eval return" in text
    assert "Few seeds: 3 seeds per point" in text and "it is the plain mean" in text
    assert "five" not in text.lower() and "5 seeds" not in text
    # the top two on evaluation: 480 ± 10 s.d. and 200 ± 10 s.d. are 280 apart: 2 seeds separate them
    assert "The top two on eval return, clip_eps=0.2 (480) and clip_eps=0.1 (200)" in text
    assert "2 seeds per point would separate them" in text
    best_line = next(line for line in text.splitlines() if line.endswith("| best |"))
    assert best_line.startswith("| 0.2 |")


def test_rank_by_train_ranks_on_the_last_update_and_says_so():
    for rows in (report.sweep_summary(Stand(TRAIN, EVALS), rank_by="train"),
                 report.sweep_summary(Stand(TRAIN, EVALS, {"rank_by": "train"}))):
        assert [row["best"] for row in rows] == [True, False, False]
        assert rows[0]["iqm_return"] == pytest.approx(495.0) and rows[1]["p_beats_best"] == 0.0
        text = report.sweep_markdown(rows, ["clip_eps"])
        assert "| ≈ best, train return |" in text and "rank_by: train" in text
    sampled = report.sweep_summary(Stand(TRAIN, EVALS, {"rank_by": "eval_stochastic"}))
    assert sampled[1]["best"] and sampled[1]["iqm_return"] == pytest.approx(479.0)
    # without evaluation episodes there is no evaluation return: the train return ranks
    rows = report.sweep_summary(Stand(TRAIN, EVALS, {"eval_episodes": 0}))
    assert rows[0]["best"] and rows[0]["ranked_on"] == "train"
    assert "(no evaluation return to rank on; docs/sweeps.md)" in report.sweep_markdown(rows, ["clip_eps"])
    with pytest.raises(ValueError, match="rank_by"):
        report.sweep_summary(Stand(TRAIN, EVALS), rank_by="final")


def test_enough_seeds_give_no_warning_and_the_seed_count_is_computed():
    five = report.sweep_markdown(report.sweep_summary(Stand([[1.0] * 5, [2.0] * 5], [[1.0, 2, 3, 4, 5],
                                                                                     [2.0, 3, 4, 5, 6]])), ["clip_eps"])
    assert "Few seeds" not in five
    # means 4 and 3, s.d. 1.58 each: n > 4 (2.5 + 2.5) / 1 = 20, so 21 seeds; they have 5
    assert "21 seeds per point would separate them" in five and "they have 5." in five
    one = report.sweep_markdown(report.sweep_summary(Stand([[1.0], [2.0]], [[3.0], [4.0]])), ["clip_eps"])
    assert "Few seeds: 1 seed per point" in one and "with 1 seed their spread is unknown" in one


def test_seeds_to_separate_is_the_smallest_n_whose_two_standard_errors_the_difference_exceeds():
    for d, a, b in ((1.0, 1.0, 1.0), (3.0, 2.0, 5.0), (0.5, 0.1, 0.3), (10.0, 1.0, 1.0)):
        n = stats.seeds_to_separate(d, a, b)
        assert d > 2 * math.sqrt((a * a + b * b) / n)
        assert n == 2 or not d > 2 * math.sqrt((a * a + b * b) / (n - 1))  # and n - 1 would not
    assert stats.seeds_to_separate(1.0, 1.0, 1.0) == 9  # 4 · 2 / 1 = 8 is not enough (equal, not above)
    assert stats.seeds_to_separate(-1.0, 1.0, 1.0) == 9  # the order of the two does not matter
    assert stats.seeds_to_separate(0.0, 1.0, 1.0) is None and stats.seeds_to_separate(1.0, math.nan, 1.0) is None
    assert stats.seeds_to_separate(1.0, 0.0, 0.0) == 2


def test_rank_by_is_checked_in_one_line_and_kept_in_the_spec():
    with pytest.raises(ConfigError, match="sweep.rank_by.*must be one of eval, eval_stochastic, train"):
        make_spec({"rank_by": "best"})
    with pytest.raises(ConfigError, match="eval_episodes is 0"):
        make_spec({"rank_by": "eval", "eval_episodes": 0})
    assert make_spec({"seeds": 2}).to_dict()["rank_by"] == "eval"  # before it existed: tests/test_faults.py
    spec = make_spec({"grid": {"lr": [1e-3, 1e-4]}, "seeds": 2, "rank_by": "train"})
    assert spec.to_dict()["rank_by"] == "train" and make_spec(spec.to_dict()) == spec
    unevaluated = make_spec({"grid": {"lr": [1e-3]}, "eval_episodes": 0})  # nothing to rank on but training
    assert unevaluated.rank_by == "train" and make_spec(unevaluated.to_dict()) == unevaluated
    saved = {k: v for k, v in unevaluated.to_dict().items() if k != "rank_by"}  # from before rank_by
    assert SweepSpec.with_defaults(saved)["rank_by"] == "train"
    assert SweepSpec.with_defaults({"seeds": 2})["rank_by"] == "eval"


# ------------------------------------------------------------------ heatmaps
def test_heatmap_cells_hold_the_mean_and_standard_error_of_their_runs():
    points = [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}, {"a": 1, "b": "y"}, {"a": 1, "b": "x", "c": 0}]
    xs, ys, mean, se = report.heatmap_cells(points, [[1.0, 3.0], [5.0], [np.nan], [2.0, np.inf]], "a", "b")
    assert (xs, ys) == (["1", "2"], ["x", "y"])
    assert mean[0, 0] == 2.0 and se[0, 0] == pytest.approx(np.std([1.0, 3.0, 2.0], ddof=1) / math.sqrt(3))
    assert mean[0, 1] == 5.0 and np.isnan(se[0, 1])  # one run: no spread
    assert np.isnan(mean[1, 0]) and np.isnan(mean[1, 1])  # no finite run / no run at all


def _contrast(colour, text):
    lum = report.plots.relative_luminance(colour)
    other = 0.0 if text == "black" else 1.0
    return (max(lum, other) + 0.05) / (min(lum, other) + 0.05)


def test_the_text_colour_is_readable_on_every_cell_of_the_colour_maps():
    import matplotlib

    for name in ("viridis", "magma", "coolwarm", "gray"):
        cmap = matplotlib.colormaps[name]
        for colour in cmap(np.linspace(0.0, 1.0, 256)):
            assert _contrast(colour, report.text_colour(colour)) >= 4.5  # WCAG AA for normal text
    viridis = matplotlib.colormaps["viridis"]
    assert report.text_colour(viridis(1.0)) == "black" and report.text_colour(viridis(0.0)) == "white"
    assert report.text_colour((1.0, 1.0, 1.0)) == "black" and report.text_colour((0.0, 0.0, 0.0, 1.0)) == "white"


def test_the_return_heatmap_shows_the_ranked_return_with_its_standard_error_in_a_readable_colour(monkeypatch):
    from purejaxppo.experiments.report import sweep as sweep_report

    points = [{"clip_eps": c, "update_epochs": e} for e in (1, 4) for c in (0.1, 0.2)]
    train = [[10.0, 20.0, 30.0]] * 4
    evals = [[100.0, 110.0, 120.0], [200.0, 200.0, 200.0], [300.0, 310.0, 320.0], [500.0, 500.0, 500.0]]
    stand = Stand(train, evals, points=points)
    rows = report.sweep_summary(stand)
    drawn = {}
    monkeypatch.setattr(sweep_report, "figure_bytes", lambda fig, dpi: drawn.setdefault("fig", fig) and b"")
    dict(report.sweep_plots(stand, rows, ["clip_eps", "update_epochs"]))["heatmap_return.png"]()
    ax = drawn["fig"].axes[0]
    assert "eval return (mean ± s.e. over seeds)" in ax.get_title()
    cells = {t.get_text(): t.get_color() for t in ax.texts}
    assert set(cells) == {"110\n± 5.8", "200\n± 0", "310\n± 5.8", "500\n± 0"}  # of the evaluation, not the train return
    image = ax.images[0]
    for text in ax.texts:
        x, y = (round(v) for v in text.get_position())
        colour = image.cmap(image.norm(image.get_array()[y, x]))
        assert _contrast(colour, text.get_color()) >= 4.5
    assert cells["500\n± 0"] == "black" and cells["110\n± 5.8"] == "white"  # the brightest cell is not white on yellow
