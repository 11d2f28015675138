"""The MountainCar-v0 study (benchmarks/results/2026-12-04-mountaincar-cpu.md): what keeps the
shipped config (configs/mountaincar.yaml) from gymnax-blines' PPO return, one variable at a time.

The three differences are config keys now (`bootstrap_truncation: false`, `init: lecun`,
`lr_warmup_updates` / `lr_warmup_start`) and the shipped config uses them; the study's own
versions below stay, to rerun its table as it was measured.

Two of the variables had no config key, so this study supplies them:
- the networks' initialisation: `network: benchmarks.mountaincar_study:actor_critic` with
  network_kwargs {init: orthogonal | lecun, actor_gain: G} (the built-in MLPs are orthogonal with
  gain sqrt(2) in hidden layers, 1.0 on the value head and 0.01 on the policy head; `lecun` is
  flax's default Dense kernel, variance 1 / fan-in, with biases drawn uniformly from [0, 0.05),
  gymnax-blines' initialisation);
- a learning-rate warm-up from a higher rate: `--warmup LR0,UPDATES` before the train or sweep
  arguments runs them with the rate falling linearly from LR0 to the config's lr over the first
  UPDATES updates, then constant (gymnax-blines: 5e-3 to 5e-4 over 12,500 optimiser steps, i.e.
  about 49 updates of 4 minibatches x 64 epochs). It replaces `purejaxppo.train.learning_rate`
  for this process only.

    python -m benchmarks.mountaincar_study train configs/mountaincar.yaml --seeds 4 \\
        --set network=benchmarks.mountaincar_study:actor_critic --set network_kwargs='{init: lecun}'
    python -m benchmarks.mountaincar_study --warmup 5e-3,49 train configs/mountaincar.yaml --seeds 4
"""

from __future__ import annotations

import sys
from typing import Sequence

import flax.linen as nn
import jax.numpy as jnp

from purejaxppo.networks import ACTIVATIONS, HIDDEN_GAIN


class _Mlp(nn.Module):
    hidden_sizes: Sequence[int]
    out_size: int
    out_gain: float
    scheme: str
    activation: str

    def _dense(self, size, gain):
        if self.scheme == "lecun":
            return nn.Dense(size, kernel_init=nn.initializers.lecun_normal(),
                            bias_init=nn.initializers.uniform(0.05))
        return nn.Dense(size, kernel_init=nn.initializers.orthogonal(gain), bias_init=nn.initializers.zeros)

    @nn.compact
    def __call__(self, x):
        for width in self.hidden_sizes:
            x = ACTIVATIONS[self.activation](self._dense(width, HIDDEN_GAIN)(x))
        return self._dense(self.out_size, self.out_gain)(x)


class ActorCritic(nn.Module):
    num_outputs: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    scheme: str = "orthogonal"
    actor_gain: float = 0.01

    @nn.compact
    def __call__(self, obs):
        x = obs.reshape(obs.shape[0], -1)
        logits = _Mlp(self.hidden_sizes, self.num_outputs, self.actor_gain, self.scheme, self.activation)(x)
        return logits, _Mlp(self.hidden_sizes, 1, 1.0, self.scheme, self.activation)(x)[:, 0]


def actor_critic(num_outputs: int, init: str = "orthogonal", actor_gain: float = 0.01,
                 hidden_sizes: Sequence[int] = (64, 64), activation: str = "relu") -> ActorCritic:
    return ActorCritic(num_outputs, tuple(hidden_sizes), activation, init, float(actor_gain))


def time_limit_ends(name: str = "MountainCar-v0"):
    """gymnax's environment `name` whose time limit is a termination (no bootstrap from the last
    state), as in gymnax before 1.0, whose `done` included it and which gymnax-blines trained
    on: `env: benchmarks.mountaincar_study:time_limit_ends`, `env_params: {name: Breakout-MinAtar}`
    for another game. The library's gymnax adapter otherwise reports the limit as a truncation,
    and GAE bootstraps it. (The environment's own parameters are its defaults.)"""
    import gymnax

    env, _ = gymnax.make(name)
    natural = env.is_terminated

    def is_terminated(state, params):
        return jnp.logical_or(natural(state, params), state.time >= params.max_steps_in_episode)

    env.is_terminated = is_terminated  # gymnax's step_env asks is_terminal, which asks is_terminated
    return env


def mountaincar_time_limit_ends():
    """MountainCar-v0 with its 200-step limit as a termination (`time_limit_ends`)."""
    return time_limit_ends("MountainCar-v0")


def with_warmup(lr0: float, warm_updates: int) -> None:
    """Replace the library's rate with one falling linearly from lr0 to hp.lr over the first
    `warm_updates` updates (then hp.lr, or its linear decay when anneal_lr)."""
    from purejaxppo import train

    library_rate = train.learning_rate

    def rate(hp, updates_done, num_updates):
        frac = jnp.minimum(updates_done.astype(jnp.float32) / warm_updates, 1.0)
        return jnp.where(frac < 1.0, lr0 + (hp.lr - lr0) * frac, library_rate(hp, updates_done, num_updates))

    train.learning_rate = rate


def main(argv: list[str]) -> int:
    if argv[:1] == ["--warmup"]:
        lr0, updates = argv[1].split(",")
        with_warmup(float(lr0), int(updates))
        argv = argv[2:]
    from purejaxppo.experiments.cli import main as cli

    return cli(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
