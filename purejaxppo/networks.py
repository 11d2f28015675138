"""Separate actor and critic MLPs with the reference initialisation.

Orthogonal weights (gain sqrt(2) in hidden layers, 0.01 on the policy head, 1.0 on the
value head), zero biases. Continuous actions use a state-independent log-std parameter.
"""

from __future__ import annotations

import math
from typing import Sequence

import flax.linen as nn

from purejaxppo.distributions import Categorical, DiagGaussian

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "swish": nn.swish}


class MLP(nn.Module):
    hidden_sizes: Sequence[int]
    out_size: int
    out_gain: float
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x):
        act = ACTIVATIONS[self.activation]
        for width in self.hidden_sizes:
            x = act(nn.Dense(width, kernel_init=nn.initializers.orthogonal(math.sqrt(2)),
                             bias_init=nn.initializers.zeros)(x))
        return nn.Dense(self.out_size, kernel_init=nn.initializers.orthogonal(self.out_gain),
                        bias_init=nn.initializers.zeros)(x)


class ActorCritic(nn.Module):
    """obs [..., obs_size] -> (action distribution, value [...])."""

    action_kind: str  # "discrete" | "continuous"
    action_size: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    log_std_init: float = 0.0

    @nn.compact
    def __call__(self, obs):
        out = MLP(self.hidden_sizes, self.action_size, 0.01, self.activation, name="actor")(obs)
        value = MLP(self.hidden_sizes, 1, 1.0, self.activation, name="critic")(obs)[..., 0]
        if self.action_kind == "discrete":
            return Categorical(out), value
        log_std = self.param("log_std", nn.initializers.constant(self.log_std_init), (self.action_size,))
        return DiagGaussian(out, log_std), value
