"""How to read a grid point's per-epoch clip fraction: documented rules, configurable thresholds.

A sweep file sets the thresholds under `sweep: diagnosis: {...}`; the rule that fired is
reported with its numbers. Pure functions on numpy arrays: no I/O.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

DIAGNOSIS_DEFAULTS = {"under_used_below": 0.02, "over_used_above": 0.2, "over_used_by_epoch": 3,
                      "runaway_kl_above": 1.0}


def diagnose(clip_by_epoch, thresholds: Mapping[str, float] | None = None, max_kl: float | None = None) -> str:
    """One line on the batch's use, from the mean clip fraction of each epoch that ran,
    and `max_kl`: the largest mean KL (k3) of any one update of any run read here.

    Epochs that did not run (NaN) are dropped first; the rules are tried in this order:

    runaway: some update's KL exceeds `runaway_kl_above` (1 nat; PPO's updates move
        ~0.01-0.05): the policy left the trust region (the clip bounds neither the ratio
        nor the KL), so the clip fraction says nothing about epochs → lower lr,
        max_grad_norm, clip_eps or epochs. (Runs with NaN/Inf are "diverged", apart.)
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
    if max_kl is not None and max_kl > t["runaway_kl_above"]:
        return (f"runaway: an update's KL reached {max_kl:.3g} > {t['runaway_kl_above']:g} — the policy left "
                f"the trust region; lower lr, max_grad_norm, clip_eps or the epochs")
    k = int(t["over_used_by_epoch"])
    if c.size >= k and c[k - 1] >= t["over_used_above"]:
        return (f"over-used: epoch {k} already clips {c[k - 1]:.1%} ≥ {t['over_used_above']:.0%} — later "
                f"epochs move a shrinking, biased subset; fewer epochs or a larger batch")
    if c[-1] < t["under_used_below"]:
        return (f"under-used: the last epoch ({c.size}) clips {c[-1]:.1%} < {t['under_used_below']:.0%} — "
                f"more epochs or a tighter clip are affordable")
    return (f"in range: the last epoch ({c.size}) clips {c[-1]:.1%}, between {t['under_used_below']:.0%} "
            f"and the over-use line ({t['over_used_above']:.0%} by epoch {k})")
