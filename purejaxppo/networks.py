"""Actor-critic networks as pure functions over parameter dicts (no flax.linen).

Two networks, one interface:

    net.init(key, obs_size)             -> params
    net.initial_carry(batch_shape)      -> the memory of a fresh episode (() without memory)
    net.apply(params, carry, obs)       -> (distribution, value, carry)   one step, any batch shape
    net.unroll(params, carry, obs, done) -> (distribution, value)          sequences [B, T, ...]

`ActorCritic`: separate actor and critic MLPs. `RecurrentActorCritic` (`policy: gru`):
obs -> dense encoder -> GRU -> separate actor and critic MLP heads; `unroll` replays
sequences from their starting carry and restarts the memory after every step that ended
an episode (`done`), as the rollout does.

Initialisation: orthogonal weights (gain sqrt(2) in hidden layers, 0.01 on the policy
head, 1.0 on the value head and in the GRU), zero biases; continuous actions have a
state-independent log-std parameter. Parameters are nested dicts under "params", the
layout of purejaxppo 0.3 (its checkpoints load).
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import jax.numpy as jnp

from purejaxppo.distributions import Categorical, DiagGaussian

ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu, "swish": jax.nn.swish}
HIDDEN_GAIN = math.sqrt(2)


# --------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------
def dense_init(key, in_size: int, out_size: int, gain: float) -> dict:
    kernel = jax.nn.initializers.orthogonal(gain)(key, (in_size, out_size), jnp.float32)
    return {"kernel": kernel, "bias": jnp.zeros((out_size,), jnp.float32)}


def dense(params: dict, x):
    return x @ params["kernel"] + params["bias"]


def mlp_init(key, in_size: int, hidden_sizes: Sequence[int], out_size: int, out_gain: float) -> dict:
    """Layers "Dense_0" ... "Dense_n": hidden layers, then the output layer."""
    sizes = [in_size, *hidden_sizes, out_size]
    keys = jax.random.split(key, len(sizes) - 1)
    gains = [HIDDEN_GAIN] * len(hidden_sizes) + [out_gain]
    return {f"Dense_{i}": dense_init(keys[i], sizes[i], sizes[i + 1], gains[i]) for i in range(len(sizes) - 1)}


def mlp(params: dict, x, activation: str):
    act = ACTIVATIONS[activation]
    last = len(params) - 1
    for i in range(last):
        x = act(dense(params[f"Dense_{i}"], x))
    return dense(params[f"Dense_{last}"], x)


def gru_init(key, in_size: int, size: int) -> dict:
    """A GRU cell: the input and recurrent projections of the reset, update and candidate gates."""
    input_key, recurrent_key = jax.random.split(key)
    return {"input": dense_init(input_key, in_size, 3 * size, 1.0),
            "recurrent": dense_init(recurrent_key, size, 3 * size, 1.0)}


def gru(params: dict, h, x):
    """One GRU step (Cho et al. 2014): h' = (1 - z) * n + z * h, with
    r, z = sigmoid(W_i x + W_h h) (reset, update) and n = tanh(W_in x + r * (W_hn h))."""
    xr, xz, xn = jnp.split(dense(params["input"], x), 3, axis=-1)
    hr, hz, hn = jnp.split(dense(params["recurrent"], h), 3, axis=-1)
    r = jax.nn.sigmoid(xr + hr)
    z = jax.nn.sigmoid(xz + hz)
    n = jnp.tanh(xn + r * hn)
    return (1.0 - z) * n + z * h


# --------------------------------------------------------------------------------------
# Networks
# --------------------------------------------------------------------------------------
class _Heads:
    """The actor and critic MLPs over features, and the distribution they give."""

    recurrent = False

    def __init__(self, action_kind: str, action_size: int, hidden_sizes: Sequence[int] = (64, 64),
                 activation: str = "tanh", log_std_init: float = 0.0):
        self.action_kind = action_kind  # "discrete" | "continuous"
        self.action_size = action_size
        self.hidden_sizes = tuple(hidden_sizes)
        self.activation = activation
        self.log_std_init = log_std_init

    def _init_heads(self, key, in_size: int) -> dict:
        actor_key, critic_key = jax.random.split(key)
        params = {"actor": mlp_init(actor_key, in_size, self.hidden_sizes, self.action_size, 0.01),
                  "critic": mlp_init(critic_key, in_size, self.hidden_sizes, 1, 1.0)}
        if self.action_kind == "continuous":
            params["log_std"] = jnp.full((self.action_size,), self.log_std_init, jnp.float32)
        return params

    def _heads(self, params: dict, features):
        """features [..., in_size] -> (logits or means [..., action_size], value [...])."""
        out = mlp(params["actor"], features, self.activation)
        return out, mlp(params["critic"], features, self.activation)[..., 0]

    def _distribution(self, params: dict, out):
        if self.action_kind == "discrete":
            return Categorical(out)
        return DiagGaussian(out, params["log_std"])


class ActorCritic(_Heads):
    """Separate actor and critic MLPs on the observation; no memory (its carry is ())."""

    def init(self, key, obs_size: int) -> dict:
        return {"params": self._init_heads(key, obs_size)}

    def initial_carry(self, batch_shape) -> tuple:
        return ()

    def apply(self, params, carry, obs):
        out, value = self._heads(params["params"], obs)
        return self._distribution(params["params"], out), value, carry

    def unroll(self, params, carry, obs, done):
        dist, value, _ = self.apply(params, carry, obs)  # no memory: every step alone
        return dist, value


class RecurrentActorCritic(_Heads):
    """obs -> dense encoder (gru_size, activation) -> GRU (gru_size) -> actor and critic MLPs."""

    recurrent = True

    def __init__(self, action_kind: str, action_size: int, hidden_sizes: Sequence[int] = (64, 64),
                 activation: str = "tanh", log_std_init: float = 0.0, gru_size: int = 128):
        super().__init__(action_kind, action_size, hidden_sizes, activation, log_std_init)
        self.gru_size = gru_size

    def init(self, key, obs_size: int) -> dict:
        encoder_key, gru_key, heads_key = jax.random.split(key, 3)
        return {"params": {"encoder": dense_init(encoder_key, obs_size, self.gru_size, HIDDEN_GAIN),
                           "gru": gru_init(gru_key, self.gru_size, self.gru_size),
                           **self._init_heads(heads_key, self.gru_size)}}

    def initial_carry(self, batch_shape) -> jnp.ndarray:
        return jnp.zeros((*batch_shape, self.gru_size), jnp.float32)

    def _step(self, p, carry, obs):
        """-> (actor output, value, carry after seeing obs)."""
        carry = gru(p["gru"], carry, ACTIVATIONS[self.activation](dense(p["encoder"], obs)))
        out, value = self._heads(p, carry)
        return out, value, carry

    def apply(self, params, carry, obs):
        out, value, carry = self._step(params["params"], carry, obs)
        return self._distribution(params["params"], out), value, carry

    def unroll(self, params, carry, obs, done):
        """Sequences obs [B, T, obs_size], done [B, T] from carry [B, gru_size] ->
        (distribution [B, T], value [B, T]); the memory restarts after a done step. Each
        step is computed as `apply` computes it (the same operations on the same shapes
        of one step), so a replay with unchanged parameters gives the rollout's numbers
        bit for bit."""
        p = params["params"]
        fresh = self.initial_carry(carry.shape[:-1])

        def step(h, inputs):
            x, ended = inputs
            out, value, h = self._step(p, h, x)
            return jnp.where(ended[:, None], fresh, h), (out, value)

        _, (out, value) = jax.lax.scan(step, carry, (jnp.swapaxes(obs, 0, 1), jnp.swapaxes(done, 0, 1)))
        return self._distribution(p, jnp.swapaxes(out, 0, 1)), jnp.swapaxes(value, 0, 1)
