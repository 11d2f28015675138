"""How to read a grid point's per-epoch clip fraction: documented rules, configurable thresholds.

A sweep file sets the thresholds under `sweep: diagnosis: {...}`; the rule that fired is
reported with its numbers. `diagnose` is a pure function on numpy arrays; `ceiling` reads
configs/references.yaml (the return a run cannot usefully exceed).
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from purejaxppo import configs

# return_cap (none by default): the highest return the environment allows, given by the user
DIAGNOSIS_DEFAULTS = {"under_used_below": 0.02, "over_used_above": 0.2, "over_used_by_epoch": 3,
                      "runaway_kl_above": 1.0, "return_cap": None}


def ceiling(env: str | None, return_cap: float | None = None) -> tuple[float, str] | None:
    """(value, what it is) of the return beyond which no advice to use the batch more can
    help a run of `env`: `return_cap` where given (sweep: diagnosis: return_cap:, the
    environment's cap), else the highest published return of a shipped config of that
    environment (configs/references.yaml; a task's optimum is its cap); None if neither."""
    if return_cap is not None:
        return float(return_cap), f"the environment's cap ({return_cap:g}, diagnosis.return_cap)"
    found = configs.references_by_env().get(env)
    if found is None:
        return None
    value, name, method = found
    what = "the task's optimum" if method == "optimum" else "the reference"
    return value, f"{what} ({value:g}, {name} in configs/references.yaml)"


def diagnose(clip_by_epoch, thresholds: Mapping[str, float] | None = None, max_kl: float | None = None, *,
             mean_return: float | None = None, cap: tuple[float, str] | None = None) -> str:
    """One line on the batch's use, from the mean clip fraction of each epoch that ran,
    and `max_kl`: the largest mean KL (k3) of any one update of any run read here;
    `mean_return` (the return the point is judged on) and `cap` (`ceiling`: value, what it
    is) tell when advice to use the batch more cannot apply.

    Epochs that did not run (NaN) are dropped first; the rules are tried in this order:

    runaway: some update's KL exceeds `runaway_kl_above` (1 nat; PPO's updates move
        ~0.01-0.05): the policy left the trust region (the clip bounds neither the ratio
        nor the KL), so the clip fraction says nothing about epochs → lower lr,
        max_grad_norm, clip_eps or epochs. (Runs with NaN/Inf are "diverged", apart.)
    over-used: epoch `over_used_by_epoch` (1-based) already clips ≥ `over_used_above`:
        later epochs move a shrinking, biased subset → fewer epochs or a larger batch.
    under-used: the last epoch still clips < `under_used_below`: the policy barely moved
        → more epochs or a tighter clip are affordable; unless
        at the cap: `mean_return` already reaches the `cap` (the environment's cap or the
            reference): there is nothing for more epochs or a tighter clip to gain, or
        single epoch: only one epoch ran: the clip acts only across the minibatches of that
            one pass (with one minibatch, never: the ratio is 1), so the per-epoch reading
            does not apply; compare with points of more epochs.
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
        if cap is not None and mean_return is not None and math.isfinite(mean_return) and mean_return >= cap[0]:
            return (f"at the cap: the mean return {mean_return:.4g} already reaches {cap[1]}; the last epoch clips "
                    f"{c[-1]:.1%} < {t['under_used_below']:.0%}, but more epochs or a tighter clip have nothing "
                    f"left to gain here")
        if c.size == 1:
            return (f"single epoch: the one epoch clips {c[-1]:.1%} — with 1 epoch the clip acts only across the "
                    f"minibatches of its one pass, never between epochs, so the per-epoch rules do not apply; "
                    f"compare with the points of more epochs")
        return (f"under-used: the last epoch ({c.size}) clips {c[-1]:.1%} < {t['under_used_below']:.0%} — "
                f"more epochs or a tighter clip are affordable")
    return (f"in range: the last epoch ({c.size}) clips {c[-1]:.1%}, between {t['under_used_below']:.0%} "
            f"and the over-use line ({t['over_used_above']:.0%} by epoch {k})")
