"""The two action distributions PPO needs, as small pytrees (no distrax)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from purejaxppo import pytree


MASKED_LOGIT = float(jnp.finfo(jnp.float32).min)  # an action a mask rules out: probability exactly 0


@pytree.dataclass
class Categorical:
    """Categorical over the last axis of `logits`."""

    logits: jnp.ndarray

    @classmethod
    def masked(cls, logits, mask) -> "Categorical":
        """Over the actions where `mask` [..., num_actions] is true only: the others get the
        lowest finite logit, so their probability is exactly 0 (never sampled, never the
        mode), the valid ones' probabilities and the entropy are those of the valid logits
        alone, and no gradient reaches a masked logit. (A finite logit, not -inf: -inf
        would make the entropy's 0 * log 0 a NaN.)"""
        return cls(jnp.where(mask, logits, MASKED_LOGIT))

    def log_prob(self, action):
        """log p(action), picked by a one-hot select (exact: one term, the rest 0), whose
        gradient is elementwise too: a gather's is a scatter-add, a slow loop on a CPU."""
        logp = jax.nn.log_softmax(self.logits)
        picked = action[..., None] == jnp.arange(logp.shape[-1])
        return jnp.sum(jnp.where(picked, logp, 0.0), axis=-1)

    def entropy(self):
        logp = jax.nn.log_softmax(self.logits)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)

    def sample(self, key):
        return jax.random.categorical(key, self.logits, axis=-1)

    def mode(self):
        return jnp.argmax(self.logits, axis=-1)


@pytree.dataclass
class DiagGaussian:
    """Independent Gaussians over the last axis; log-probabilities sum over it."""

    mean: jnp.ndarray
    log_std: jnp.ndarray  # broadcasts against mean

    def log_prob(self, x):
        z = (x - self.mean) * jnp.exp(-self.log_std)
        per_dim = -0.5 * z**2 - self.log_std - 0.5 * math.log(2 * math.pi)
        return jnp.sum(per_dim, axis=-1)

    def entropy(self):
        per_dim = jnp.broadcast_to(self.log_std + 0.5 * math.log(2 * math.pi * math.e), self.mean.shape)
        return jnp.sum(per_dim, axis=-1)

    def sample(self, key):
        noise = jax.random.normal(key, self.mean.shape, self.mean.dtype)
        return self.mean + jnp.exp(self.log_std) * noise

    def mode(self):
        return self.mean


@pytree.dataclass
class TanhGaussian:
    """A diagonal Gaussian over u, squashed into the box [low, high] for the environment:
    a = low + (tanh(u) + 1) / 2 * (high - low).

    The learner stores u (`sample`, `mode`) and its log-probability under the squashed
    density: log p(a) = log N(u) - sum log |da/du|, with da/du = (high - low) / 2 * (1 -
    tanh(u)^2), computed stably as log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)). In
    a probability ratio of two policies at the same u the log-determinant cancels exactly.
    The entropy of the squashed law has no closed form: `entropy` is the Gaussian's plus
    the log-determinant at the mean, a deterministic estimate that, like the exact value,
    falls as the mean saturates the squash.
    """

    base: DiagGaussian
    low: jnp.ndarray
    high: jnp.ndarray

    def _log_det(self, u):
        half_range = (self.high - self.low) / 2.0
        return jnp.sum(jnp.log(half_range) + 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u)), axis=-1)

    def to_env(self, u):
        return self.low + (jnp.tanh(u) + 1.0) / 2.0 * (self.high - self.low)

    def log_prob(self, u):
        return self.base.log_prob(u) - self._log_det(u)

    def entropy(self):
        return self.base.entropy() + self._log_det(self.base.mean)

    def sample(self, key):
        return self.base.sample(key)

    def mode(self):
        return self.base.mean
