"""The agent: the one place where the network is applied.

Acting in the rollout, the bootstrap values, the loss, the post-update diagnostics,
evaluation and a deployed policy all go through `Agent.step` (one step), `Agent.act`
(built on it) or `Agent.unroll` (sequences). Beside its parameters an agent carries
state of its own (`agent_state`, a dict in the learner state and in every call): with
`normalize_obs`, the running statistics of the observations (`"obs_stats"`), by which
every observation is normalised before the network sees it; with a recurrent policy,
the memory of each training environment (`"carry"`, rows [num_envs, ...]). Without
either, it is `{}`.

A recurrent policy's memory (its carry) is passed in and returned by every call; a
fresh episode starts from `initial_carry`. Without memory the carry is `()`.

An agent on an environment with action masks (and `mask_actions`) is `masked`: every call
takes the allowed actions as `mask`, and its distribution is over those alone.
"""

from __future__ import annotations

import jax.numpy as jnp

from purejaxppo import normalize
from purejaxppo.config import PPOConfig
from purejaxppo.distributions import Categorical, TanhGaussian
from purejaxppo.networks import Network, make_network


class Agent:
    """A policy and value network over one environment's action space."""

    def __init__(self, network: Network, action_space, normalize_obs: bool = False,
                 obs_clip: float = 10.0, squash: str = "clip", masked: bool = False):
        self.network = network
        self.action_space = action_space
        self.masked = masked  # the environment's action mask applies: the policy is over the allowed actions
        self.normalize_obs = normalize_obs
        self.obs_clip = obs_clip
        self.squash = squash  # continuous actions: "clip" to the box for the step, or "tanh" into it
        self.recurrent = network.recurrent

    def init(self, key, obs, num_envs: int = 0):
        """Parameters and agent state, from one observation; a recurrent agent's state
        holds the fresh memory of `num_envs` training environments."""
        agent_state = {"obs_stats": normalize.init_stats(obs.shape)} if self.normalize_obs else {}
        return self.network.init(key), self.with_carry(agent_state, self.initial_carry(num_envs))

    def initial_carry(self, batch_size: int):
        """The memory of `batch_size` fresh episodes (() without memory)."""
        return self.network.initial_carry((batch_size,))

    def carry(self, agent_state):
        """The training environments' memory kept in the agent state (() without memory)."""
        return agent_state["carry"] if self.recurrent else ()

    def with_carry(self, agent_state, carry):
        return {**agent_state, "carry": carry} if self.recurrent else agent_state

    def observe(self, agent_state, obs):
        """The agent state after seeing a batch of observations [..., obs_size] (the
        learner calls it once per update, with the rollout's observations)."""
        if not self.normalize_obs:
            return agent_state
        return {**agent_state, "obs_stats": normalize.merge(agent_state["obs_stats"], obs)}

    def _observation(self, agent_state, obs):
        if self.normalize_obs:
            return normalize.normalize(agent_state["obs_stats"], obs, self.obs_clip)
        return obs

    def _distribution(self, dist, mask):
        if self.squash == "tanh":
            return TanhGaussian(dist, self.action_space.low, self.action_space.high)
        if self.masked and mask is not None:
            return Categorical.masked(dist.logits, mask)
        return dist

    def step(self, params, agent_state, carry, obs, mask=None):
        """One step: obs [..., *obs_shape] (carry rows [..., ...]) -> (action distribution,
        value [...], carry after seeing obs). `mask` [..., num_actions]: the allowed actions
        (applied when the agent is `masked`; None: all)."""
        dist, value, carry = self.network.apply(params, carry, self._observation(agent_state, obs))
        return self._distribution(dist, mask), value, carry

    def unroll(self, params, agent_state, carry, obs, done, mask=None):
        """Whole sequences, obs [B, T, *obs_shape] and done [B, T] (episode ended at that
        step), each from its carry (rows [B, ...]) -> (action distribution [B, T], value
        [B, T]), as `step` computed them in the rollout. Without memory, any leading shape."""
        dist, value = self.network.unroll(params, carry, self._observation(agent_state, obs), done)
        return self._distribution(dist, mask), value

    def act(self, params, agent_state, carry, obs, key, deterministic=False, mask=None):
        """A batch of observations -> (carry, env_action, action, log_prob, value).

        `mask` [batch, num_actions]: the allowed actions (see `step`); a masked policy
        never takes another, sampled or by its mode.
        `action` is the mode of the policy (deterministic) or a sample from it;
        `deterministic` may be a traced bool (one program for both, e.g. evaluations).
        Continuous actions are clipped to the action bounds (or, with tanh squashing,
        squashed into them) for the environment only (`env_action`); the unclipped
        (unsquashed) `action` and its log-probability go to the learner.
        """
        dist, value, carry = self.step(params, agent_state, carry, obs, mask)
        if isinstance(deterministic, bool):  # known while tracing: the mode needs no key
            action = dist.mode() if deterministic else dist.sample(key)
        else:
            action = jnp.where(deterministic, dist.mode(), dist.sample(key))
        log_prob = dist.log_prob(action)
        env_action = action
        if isinstance(dist, TanhGaussian):
            env_action = dist.to_env(action)
        elif self.action_space.kind == "continuous":
            env_action = jnp.clip(action, self.action_space.low, self.action_space.high)
        return carry, env_action, action, log_prob, value


def make_agent(cfg: PPOConfig, env, module=None) -> Agent:
    """The agent of a checked config on its built environment, with `module` as its
    network when given (see `networks.make_network`)."""
    network = make_network(cfg, env, module)
    return Agent(network, env.action_space, cfg.normalize_obs, cfg.obs_clip, cfg.action_squash or "clip",
                 masked=cfg.mask_actions and env.has_action_mask)
