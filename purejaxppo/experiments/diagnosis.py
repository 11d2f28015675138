"""How to read a grid point's per-epoch clip fraction: documented rules, configurable thresholds.

A sweep file sets the thresholds under `sweep: diagnosis: {...}`; the rule that fired is
reported with its numbers. Pure functions on numpy arrays: no I/O.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

DIAGNOSIS_DEFAULTS = {"under_used_below": 0.02, "over_used_above": 0.2, "over_used_by_epoch": 3}


def diagnose(clip_by_epoch, thresholds: Mapping[str, float] | None = None) -> str:
    """One line on the batch's use, from the mean clip fraction of each epoch that ran.

    Epochs that did not run (NaN) are dropped first; the rules are tried in this order:

    over-used: epoch `over_used_by_epoch` (1-based) already clips ≥ `over_used_above`:
        later epochs move a shrinking, biased subset → fewer epochs or a larger batch.
    under-used: the last epoch still clips < `under_used_below`: the policy barely moved
        → more epochs or a tighter clip are affordable.
    in range: neither.
    """
    t = {**DIAGNOSIS_DEFAULTS, **(thresholds or {})}
    c = np.asarray(clip_by_epoch, np.float64)
    c = c[np.isfinite(c)]
    if c.size == 0:
        return "no data (every run diverged)"
    k = int(t["over_used_by_epoch"])
    if c.size >= k and c[k - 1] >= t["over_used_above"]:
        return (f"over-used: epoch {k} already clips {c[k - 1]:.1%} ≥ {t['over_used_above']:.0%} — later "
                f"epochs move a shrinking, biased subset; fewer epochs or a larger batch")
    if c[-1] < t["under_used_below"]:
        return (f"under-used: the last epoch ({c.size}) clips {c[-1]:.1%} < {t['under_used_below']:.0%} — "
                f"more epochs or a tighter clip are affordable")
    return (f"in range: the last epoch ({c.size}) clips {c[-1]:.1%}, between {t['under_used_below']:.0%} "
            f"and the over-use line ({t['over_used_above']:.0%} by epoch {k})")
