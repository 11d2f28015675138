"""The agent: the one place where the network is applied.

Acting in the rollout, the bootstrap values, the loss, the post-update diagnostics,
evaluation and a deployed policy all call `Agent.apply` (or `Agent.act`, built on it).
Beside its parameters an agent carries state of its own (`agent_state`, a dict in the
learner state and in every call): with `normalize_obs`, the running statistics of the
observations (`"obs_stats"`), by which every observation is normalised before the
network sees it; later a recurrent carry. Without, it is `{}`.
"""

from __future__ import annotations

import jax.numpy as jnp

from purejaxppo import normalize
from purejaxppo.config import PPOConfig
from purejaxppo.distributions import TanhGaussian
from purejaxppo.networks import ActorCritic


class Agent:
    """A policy and value network over one environment's action space."""

    def __init__(self, network: ActorCritic, action_space, normalize_obs: bool = False, obs_clip: float = 10.0,
                 squash: str = "clip"):
        self.network = network
        self.action_space = action_space
        self.normalize_obs = normalize_obs
        self.obs_clip = obs_clip
        self.squash = squash  # continuous actions: "clip" to the box for the step, or "tanh" into it

    def init(self, key, obs):
        """Parameters and agent state, from one observation [obs_size]."""
        agent_state = {"obs_stats": normalize.init_stats(obs.shape)} if self.normalize_obs else {}
        return self.network.init(key, obs), agent_state

    def observe(self, agent_state, obs):
        """The agent state after seeing a batch of observations [..., obs_size] (the
        learner calls it once per update, with the rollout's observations)."""
        if not self.normalize_obs:
            return agent_state
        return {**agent_state, "obs_stats": normalize.merge(agent_state["obs_stats"], obs)}

    def apply(self, params, agent_state, obs):
        """obs [..., obs_size] -> (action distribution, value [...])."""
        if self.normalize_obs:
            obs = normalize.normalize(agent_state["obs_stats"], obs, self.obs_clip)
        dist, value = self.network.apply(params, obs)
        if self.squash == "tanh":
            dist = TanhGaussian(dist, self.action_space.low, self.action_space.high)
        return dist, value

    def act(self, params, agent_state, obs, key, deterministic=False):
        """A batch of observations -> (env_action, action, log_prob, value).

        `action` is the mode of the policy (deterministic) or a sample from it.
        Continuous actions are clipped to the action bounds (or, with tanh squashing,
        squashed into them) for the environment only (`env_action`); the unclipped
        (unsquashed) `action` and its log-probability go to the learner.
        """
        dist, value = self.apply(params, agent_state, obs)
        action = dist.mode() if deterministic else dist.sample(key)
        log_prob = dist.log_prob(action)
        env_action = action
        if isinstance(dist, TanhGaussian):
            env_action = dist.to_env(action)
        elif self.action_space.kind == "continuous":
            env_action = jnp.clip(action, self.action_space.low, self.action_space.high)
        return env_action, action, log_prob, value


def make_agent(cfg: PPOConfig, env) -> Agent:
    space = env.action_space
    log_std_init = 0.0 if cfg.log_std_init is None else cfg.log_std_init
    network = ActorCritic(space.kind, space.size, tuple(cfg.hidden_sizes), cfg.activation, log_std_init)
    return Agent(network, space, cfg.normalize_obs, cfg.obs_clip, cfg.action_squash or "clip")
