"""The two action distributions PPO needs, as small pytrees (no distrax)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class Categorical:
    """Categorical over the last axis of `logits`."""

    logits: jnp.ndarray

    def log_prob(self, action):
        logp = jax.nn.log_softmax(self.logits)
        return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self):
        logp = jax.nn.log_softmax(self.logits)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)

    def sample(self, key):
        return jax.random.categorical(key, self.logits, axis=-1)

    def mode(self):
        return jnp.argmax(self.logits, axis=-1)


@struct.dataclass
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
