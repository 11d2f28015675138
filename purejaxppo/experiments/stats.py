"""Statistics over seeds and runs: pure numpy functions, no I/O, no formatting.

purejaxppo.experiments.report turns what these return into tables and plots;
tests/test_stats.py checks each of them against numpy or scipy by hand. Nothing here
imports scipy, so importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Mapping

import numpy as np

# for scripts and notebooks; quiet_nan_warnings is the report modules' own helper
__all__ = ["best_and_indistinguishable", "centred_mean_over_steps", "finite", "interquartile_mean",
           "last_epoch_values", "mean_by_epoch", "mean_se", "mean_se_by_step", "per_run", "probability_of_improvement",
           "seeds_to_separate", "smoothing_window"]


def finite(values) -> np.ndarray:
    """The finite values, flattened to float64 (NaN and ±Inf dropped)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    return x[np.isfinite(x)]


@contextlib.contextmanager
def quiet_nan_warnings():
    """nanmean of an all-NaN slice (an epoch no seed ran) is NaN: expected, not a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        yield


def mean_se(values) -> tuple[float, float]:
    """Mean and standard error (sample std / sqrt(n)) over the finite values.

    Both are NaN when no value is finite; se is NaN for a single value.
    """
    x = finite(values)
    if x.size == 0:
        return math.nan, math.nan
    se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan
    return float(x.mean()), se


def mean_se_by_step(curves) -> tuple[np.ndarray, np.ndarray | None]:
    """[runs, steps] -> per step, the mean and standard error over the runs' finite values.

    se is None for a single run (no spread to show).
    """
    curves = np.asarray(curves, dtype=np.float64)
    with quiet_nan_warnings():
        mean = np.nanmean(curves, axis=0)
        if curves.shape[0] < 2:
            return mean, None
        count = np.maximum(np.sum(np.isfinite(curves), axis=0), 1)
        return mean, np.nanstd(curves, axis=0, ddof=1) / np.sqrt(count)


def smoothing_window(total_steps: float, fraction: float = 0.05) -> float:
    """The default window of `centred_mean_over_steps` for a run of `total_steps` environment
    steps: `fraction` of it (5%), rounded to two significant digits so that a legend can state it."""
    window = float(total_steps) * fraction
    return float(f"{window:.2g}") if window > 0 else 1.0


def centred_mean_over_steps(steps, curves, window: float) -> np.ndarray:
    """Each row of `curves` ([runs, points] or [points]) smoothed over the environment steps
    `steps` ([points], increasing) by a centred window `window` steps wide: point i is the
    mean of the finite points j with |steps[j] - steps[i]| <= window / 2. The window is
    symmetric, so the smoothed curve does not lag the data: a step in the data stays where it
    is (it crosses half its height at the step, up to the spacing of the points); near either
    end the window is cut short (it holds only the points that exist). A NaN (an update in
    which no episode ended) has no weight; a point with no finite value in its window is NaN.
    What the learning-curve plots draw (`report.plots.curve_with_band`)."""
    if not window > 0:
        raise ValueError(f"window must be positive, got {window}")
    steps = np.asarray(steps, dtype=np.float64)
    curves = np.asarray(curves, dtype=np.float64)
    seen = np.isfinite(curves)
    zero = np.zeros((*curves.shape[:-1], 1))
    total = np.concatenate([zero, np.cumsum(np.where(seen, curves, 0.0), axis=-1)], axis=-1)
    count = np.concatenate([zero, np.cumsum(seen, axis=-1)], axis=-1)
    low = np.searchsorted(steps, steps - window / 2, side="left")   # first point inside the window
    high = np.searchsorted(steps, steps + window / 2, side="right")  # one past the last
    sums, counts = total[..., high] - total[..., low], count[..., high] - count[..., low]
    return np.divide(sums, counts, out=np.full_like(sums, np.nan), where=counts > 0)


def _iqm_of_sorted(x: np.ndarray) -> np.ndarray:
    """Interquartile mean along the last axis of values sorted along it: drop
    floor(n/4) values at each end, average the rest (as scipy.stats.trim_mean(x, 0.25))."""
    n = x.shape[-1]
    cut = int(0.25 * n)
    return x[..., cut:n - cut].mean(axis=-1)


def interquartile_mean(values, *, confidence: float = 0.95, resamples: int = 2000,
                       seed: int = 0) -> tuple[float, float, float]:
    """IQM (25% trimmed mean) of the finite values and a percentile-bootstrap interval.

    Returns (iqm, low, high). The interval is the central `confidence` part of the IQMs
    of `resamples` resamples with replacement, drawn from `np.random.default_rng(seed)`,
    so the same values and seed give the same interval. Constant data (or one value)
    gives low == iqm == high; no finite value gives NaNs.
    """
    x = finite(values)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    iqm = float(_iqm_of_sorted(np.sort(x)))
    draws = np.random.default_rng(seed).integers(0, x.size, size=(resamples, x.size))
    boot = _iqm_of_sorted(np.sort(x[draws], axis=-1))
    tail = 50.0 * (1.0 - confidence)
    low, high = np.percentile(boot, [tail, 100.0 - tail])
    return iqm, float(low), float(high)


def probability_of_improvement(x, y) -> float:
    """P(a random run of x beats a random run of y) over the finite values; ties count half.

    The fraction of all (x_i, y_j) pairs with x_i > y_j, plus half of those with
    x_i == y_j (the Mann-Whitney U statistic over n·m). NaN if either side is empty.
    """
    x, y = finite(x), finite(y)
    if x.size == 0 or y.size == 0:
        return math.nan
    wins = np.sum(x[:, None] > y[None, :])
    ties = np.sum(x[:, None] == y[None, :])
    return float((wins + 0.5 * ties) / (x.size * y.size))


def best_and_indistinguishable(means, ses, within: float = 2.0) -> tuple[int | None, list[bool]]:
    """The index of the highest mean, and for each mean whether it is indistinguishable from it.

    Indistinguishable: best - mean <= `within` · sqrt(se_best² + se²), a NaN se counting
    as 0. The best is indistinguishable from itself; a NaN mean never is. (None, all
    False) when no mean is finite.
    """
    means = np.asarray(means, dtype=np.float64)
    if not np.any(np.isfinite(means)):
        return None, [False] * means.size
    best = int(np.nanargmax(means))
    ses = np.nan_to_num(np.asarray(ses, dtype=np.float64), nan=0.0)
    diff = means[best] - means
    return best, [bool(d <= within * math.hypot(ses[best], s)) for d, s in zip(diff, ses)]


def seeds_to_separate(difference: float, sd_a: float, sd_b: float, within: float = 2.0) -> int | None:
    """How many seeds per point would separate two points whose means differ by `difference`,
    at the observed standard deviations over seeds `sd_a` and `sd_b`: the smallest n (at least 2,
    the fewest with a standard error) with

        difference > within · sqrt((sd_a² + sd_b²) / n),   i.e.   n > within² (sd_a² + sd_b²) / difference²

    (the rule of `best_and_indistinguishable`, with both standard errors at n seeds). None when
    no n does: the means are equal, or a number is not finite."""
    d, variance = abs(float(difference)), float(sd_a) ** 2 + float(sd_b) ** 2
    if not (math.isfinite(d) and math.isfinite(variance)) or d == 0.0:
        return None
    return max(2, math.floor(within**2 * variance / d**2) + 1)


def last_epoch_values(per_epoch: np.ndarray, epochs_run: np.ndarray) -> np.ndarray:
    """[..., E] per-epoch metric -> [...] value of the last epoch that ran."""
    index = np.clip(np.asarray(epochs_run).astype(int) - 1, 0, per_epoch.shape[-1] - 1)
    return np.take_along_axis(np.asarray(per_epoch), index[..., None], axis=-1)[..., 0]


def per_run(metrics: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Metrics with a leading run axis ([runs, updates, ...]) -> one number per run each.

    final_return: episode return of the last update; mean_kl_k3: KL (k3) over every
    update and epoch that ran; max_update_kl: the largest of the updates' mean KL;
    last_epoch_clip_fraction: clip fraction of each update's last epoch, averaged over
    updates; explained_variance: of the last update; epochs_run: mean per update.
    """
    m = {k: np.asarray(v) for k, v in metrics.items()}
    with quiet_nan_warnings():
        return {
            "final_return": m["episode_return"][:, -1],
            "mean_kl_k3": np.nanmean(m["kl_k3"], axis=(1, 2)),
            "max_update_kl": np.nanmax(np.nanmean(m["kl_k3"], axis=2), axis=1),
            "last_epoch_clip_fraction": np.nanmean(last_epoch_values(m["clip_fraction"], m["epochs_run"]), axis=1),
            "explained_variance": m["explained_variance"][:, -1],
            "epochs_run": m["epochs_run"].mean(axis=1),
        }


def mean_by_epoch(per_epoch) -> np.ndarray:
    """[runs, updates, epochs] -> [epochs]: mean over runs and updates of the finite values
    (NaN for an epoch no run reached)."""
    with quiet_nan_warnings():
        return np.nanmean(np.asarray(per_epoch), axis=(0, 1))
