"""PPO's losses and diagnostics as small pure functions over per-sample arrays."""

from __future__ import annotations

import jax.numpy as jnp


def clipped_surrogate(log_prob, old_log_prob, advantages, clip_eps):
    """Per-sample min(r*A, clip(r, 1-c, 1+c)*A), r = exp(log_prob - old_log_prob).

    Returns (objective, clipped): `clipped` marks the samples whose gradient the clip
    zeroed, namely A > 0 with r > 1+c and A < 0 with r < 1-c. A ratio outside the band
    on the *other* side (e.g. A > 0, r < 1-c) keeps its gradient: the min picks r*A.
    """
    ratio = jnp.exp(log_prob - old_log_prob)
    objective = jnp.minimum(ratio * advantages, jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages)
    clipped = ((advantages > 0) & (ratio > 1.0 + clip_eps)) | ((advantages < 0) & (ratio < 1.0 - clip_eps))
    return objective, clipped


def value_loss(values, old_values, targets, vf_clip_eps):
    """0.5 * mean(max((v - R)^2, (v_old + clip(v - v_old, -e, e) - R)^2)).

    With vf_clip_eps = +inf (clipping off) both terms are equal: plain squared error.
    """
    unclipped = (values - targets) ** 2
    clipped_values = old_values + jnp.clip(values - old_values, -vf_clip_eps, vf_clip_eps)
    return 0.5 * jnp.mean(jnp.maximum(unclipped, (clipped_values - targets) ** 2))


def kl_estimates(log_prob, old_log_prob):
    """Batch means of the two usual KL(old || new) estimators from samples of the old policy.

    k1 = mean(log pi_old - log pi_new) (unbiased, can be negative);
    k3 = mean((r - 1) - log r) (unbiased, never negative, lower variance).
    """
    log_ratio = log_prob - old_log_prob
    k1 = jnp.mean(-log_ratio)
    k3 = jnp.mean(jnp.expm1(log_ratio) - log_ratio)
    return k1, k3


def normalize(x, eps=1e-8):
    return (x - x.mean()) / (x.std() + eps)


def explained_variance(predictions, targets):
    """1 - Var(targets - predictions) / Var(targets); NaN when the targets are constant."""
    var_targets = jnp.var(targets)
    return jnp.where(var_targets > 0, 1.0 - jnp.var(targets - predictions) / var_targets, jnp.nan)


def ppo_loss(log_prob, entropy, values, batch, hp):
    """The PPO objective on one minibatch, given the current policy's outputs on it.

    `batch` holds old_log_prob, old_value, advantage (raw GAE, normalised here, per
    minibatch) and target. Returns (total_loss, terms): the loss terms, and per sample the
    log-probability and whether the clip zeroed its gradient, from which `ratio_diagnostics`
    summarises any number of minibatches at once.
    """
    advantages = normalize(batch["advantage"])
    objective, clipped = clipped_surrogate(log_prob, batch["old_log_prob"], advantages, hp.clip_eps)
    policy_loss = -jnp.mean(objective)
    v_loss = value_loss(values, batch["old_value"], batch["target"], hp.vf_clip_eps)
    mean_entropy = jnp.mean(entropy)
    total = policy_loss + hp.vf_coef * v_loss - hp.ent_coef * mean_entropy
    terms = {"policy_loss": policy_loss, "value_loss": v_loss, "entropy": mean_entropy, "total_loss": total,
             "log_prob": log_prob, "clipped": clipped}
    return total, terms


def ratio_diagnostics(log_prob, old_log_prob, clipped, clip_eps):
    """Over samples of any shape (e.g. [minibatches, samples] of one epoch): the KL
    estimates k1 and k3, the clip fraction (share of `clipped`, from clipped_surrogate) and
    the share of ratios outside the band, |r - 1| > clip_eps."""
    k1, k3 = kl_estimates(log_prob, old_log_prob)
    ratio = jnp.exp(log_prob - old_log_prob)
    return {"kl_k1": k1, "kl_k3": k3, "clip_fraction": jnp.mean(clipped),
            "ratio_outside": jnp.mean(jnp.abs(ratio - 1.0) > clip_eps)}
