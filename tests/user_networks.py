"""Networks a user writes (flax.linen), imported by the tests as `user_networks:<factory>`."""

import flax.linen as nn
import jax.numpy as jnp

from user_envs import fail


class TwoTowers(nn.Module):
    """A feed-forward actor-critic of the contract: obs [batch, ...] -> (actor_out, value [batch])."""

    num_outputs: int
    width: int = 64
    value_width: int = 1  # 1: the contract's value [batch]; anything else breaks it

    @nn.compact
    def __call__(self, obs):
        x = obs.reshape(obs.shape[0], -1)
        pi = nn.tanh(nn.Dense(self.width, name="pi_0")(x))
        pi = nn.tanh(nn.Dense(self.width, name="pi_1")(pi))
        pi = nn.Dense(self.num_outputs, kernel_init=nn.initializers.orthogonal(0.01), name="pi_out")(pi)
        v = nn.tanh(nn.Dense(self.width, name="v_0")(x))
        v = nn.tanh(nn.Dense(self.width, name="v_1")(v))
        v = nn.Dense(self.value_width, name="v_out")(v)
        return pi, (v[:, 0] if self.value_width == 1 else v)


def two_towers(num_outputs, **kwargs):
    return TwoTowers(num_outputs, **kwargs)


def failing(num_outputs, how="raise"):
    """A factory that does not return (see user_envs.fail)."""
    fail(how)


class IntegerLogits(nn.Module):
    """Outputs of the contract's shapes but not its dtypes: integer logits."""

    num_outputs: int

    @nn.compact
    def __call__(self, obs):
        return jnp.round(nn.Dense(self.num_outputs)(obs)).astype(jnp.int32), nn.Dense(1)(obs)[:, 0]


def wrong_outputs(num_outputs, extra=1):
    """Ignores what it is told: one logit too many."""
    return TwoTowers(num_outputs + extra)


class LSTMActorCritic(nn.Module):
    """A recurrent actor-critic of the contract: its memory is a pair (c, h)."""

    num_outputs: int
    size: int = 16

    def initial_carry(self, batch_shape):
        zeros = jnp.zeros((*batch_shape, self.size), jnp.float32)
        return zeros, zeros

    @nn.compact
    def __call__(self, carry, obs):
        carry, h = nn.OptimizedLSTMCell(self.size)(carry, nn.tanh(nn.Dense(self.size)(obs)))
        return carry, nn.Dense(self.num_outputs)(h), nn.Dense(1)(h)[:, 0]


def lstm(num_outputs, **kwargs):
    return LSTMActorCritic(num_outputs, **kwargs)


class WithLogStd(nn.Module):
    """Continuous means, and a parameter named as the library's log-std."""

    num_outputs: int

    @nn.compact
    def __call__(self, obs):
        self.param("log_std", nn.initializers.zeros, (self.num_outputs,))
        return nn.Dense(self.num_outputs)(obs), nn.Dense(1)(obs)[:, 0]


class WithBatchStats(nn.Module):
    num_outputs: int

    @nn.compact
    def __call__(self, obs):
        x = nn.BatchNorm(use_running_average=False)(obs)
        return nn.Dense(self.num_outputs)(x), nn.Dense(1)(x)[:, 0]
