"""The one environment protocol every adapter (gymnax, brax) implements.

    reset(key) -> (obs, state)
    step(key, state, action) -> (obs, state, reward, terminated, truncated, info)

for a single environment (the learner vmaps it). `obs` is a flat float32 vector;
`terminated` (a true end: no bootstrap) and `truncated` (a time limit: bootstrap) are
booleans and both may be true. An adapter's `step` is the raw transition: it does not
reset. One wrapper, `wrappers.AutoReset`, starts new episodes for every adapter and
reports the observation an episode ended on as `info["final_observation"]`.
Keys are raw `jax.random.PRNGKey` arrays.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class ActionSpace:
    """`kind` is "discrete" (`num_actions` choices) or "continuous" (a box of `shape`)."""

    kind: str
    num_actions: int = 0
    shape: tuple[int, ...] = ()
    low: Any = None
    high: Any = None

    @property
    def size(self) -> int:
        """Network output size: number of logits, or of Gaussian means."""
        if self.kind == "discrete":
            return self.num_actions
        return int(jnp.prod(jnp.asarray(self.shape))) if self.shape else 1


class Env(Protocol):
    obs_size: int
    action_space: ActionSpace
    max_episode_steps: int  # the time limit: every episode ends within it
    reset_strategy: str     # how the training rollout draws resets: "per_step" or "per_rollout" (see rollout)

    def reset(self, key): ...

    def step(self, key, state, action): ...
