"""How to read a grid point's per-epoch clip fraction: documented rules, configurable thresholds.

A sweep file sets the thresholds under `sweep: diagnosis: {...}`; the rule that fired is
reported with its numbers. `diagnose` is a pure function on numpy arrays; `ceiling` reads
configs/references.yaml (the task's optimum, or else a published return: a reference, not a cap).
"""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple

import numpy as np

from purejaxppo import configs

# return_cap (none by default): the highest return the environment allows, given by the user
DIAGNOSIS_DEFAULTS = {"under_used_below": 0.02, "over_used_above": 0.2, "over_used_by_epoch": 3,
                      "runaway_kl_above": 1.0, "return_cap": None}


class Ceiling(NamedTuple):
    """A return a run of an environment is judged against (`ceiling`): its value, what it is (as
    the diagnosis names it) and whether it is a cap (no run can exceed it) or only a reference."""

    value: float
    what: str
    cap: bool


def ceiling(env: str | None, return_cap: float | None = None) -> Ceiling | None:
    """The return beyond which a run of `env` is not told to use the batch more: a cap, the
    highest return the environment allows (`return_cap` where given, sweep: diagnosis:
    return_cap:; else a task's optimum in configs/references.yaml: an entry of method
    "optimum" or marked `cap: true`, as CartPole's 500), or else a reference, the highest
    published return of a shipped config of that environment (PPO's, or another method's:
    a run may exceed it); None if neither."""
    if return_cap is not None:
        return Ceiling(float(return_cap), f"the environment's cap ({return_cap:g}, diagnosis.return_cap)", True)
    found = configs.references_by_env().get(env)
    if found is None:
        return None
    value, name, method = found
    where = f"({value:g}, {name} in configs/references.yaml)"
    if method == "optimum" or configs.references()[name].get("cap"):
        return Ceiling(value, f"the task's optimum {where}", True)
    return Ceiling(value, f"the published {method} return of {env} {where}", False)


def diagnose(clip_by_epoch, thresholds: Mapping[str, float] | None = None, max_kl: float | None = None, *,
             mean_return: float | None = None, cap: Ceiling | None = None) -> str:
    """One line on the batch's use, from the mean clip fraction of each epoch that ran,
    and `max_kl`: the largest mean KL (k3) of any one update of any run read here;
    `mean_return` (the return the point is judged on) and `cap` (`ceiling`: a cap or a
    reference) tell when advice to use the batch more is not given.

    Epochs that did not run (NaN) are dropped first; the rules are tried in this order:

    runaway: some update's KL exceeds `runaway_kl_above` (1 nat; PPO's updates move
        ~0.01-0.05): the policy left the trust region (the clip bounds neither the ratio
        nor the KL), so the clip fraction says nothing about epochs → lower lr,
        max_grad_norm, clip_eps or epochs. (Runs with NaN/Inf are "diverged", apart.)
    over-used: epoch `over_used_by_epoch` (1-based) already clips ≥ `over_used_above`:
        later epochs move a shrinking, biased subset → fewer epochs or a larger batch.
    under-used: the last epoch still clips < `under_used_below`: the policy barely moved
        → more epochs or a tighter clip are affordable; unless
        at the cap: `mean_return` already reaches a cap (the environment's, or the task's
            optimum): there is nothing for more epochs or a tighter clip to gain, or
        at the reference: `mean_return` already reaches a published return, which is no cap
            (a run may exceed it): the run is not told to use the batch more, or
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
        if cap is not None and mean_return is not None and math.isfinite(mean_return) and mean_return >= cap.value:
            clips = f"the last epoch clips {c[-1]:.1%} < {t['under_used_below']:.0%}"
            if cap.cap:
                return (f"at the cap: the mean return {mean_return:.4g} already reaches {cap.what}; {clips}, but more "
                        f"epochs or a tighter clip have nothing left to gain here")
            return (f"at the reference: the mean return {mean_return:.4g} already reaches {cap.what}; {clips}, but "
                    f"the run already matches the published return, so more epochs or a tighter clip are not called for")
        if c.size == 1:
            return (f"single epoch: the one epoch clips {c[-1]:.1%} — with 1 epoch the clip acts only across the "
                    f"minibatches of its one pass, never between epochs, so the per-epoch rules do not apply; "
                    f"compare with the points of more epochs")
        return (f"under-used: the last epoch ({c.size}) clips {c[-1]:.1%} < {t['under_used_below']:.0%} — "
                f"more epochs or a tighter clip are affordable")
    return (f"in range: the last epoch ({c.size}) clips {c[-1]:.1%}, between {t['under_used_below']:.0%} "
            f"and the over-use line ({t['over_used_above']:.0%} by epoch {k})")
