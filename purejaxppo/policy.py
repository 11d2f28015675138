"""A trained run's policy, to act with outside training: `make_policy(cfg, state)`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.compiler import compiler_options
from purejaxppo.config import PPOConfig
from purejaxppo.errors import NO_VALUE, ConfigError
from purejaxppo.gate import Bundle, bundle_of
from purejaxppo.rollout import restart
from purejaxppo.train import LearnerState


def make_policy(cfg: PPOConfig | Bundle, state: LearnerState, network=None) -> "Policy":
    """A deployable policy of one run's state: `act(obs, key=None) -> env action`.

    `obs` is one observation [*obs_shape] or a batch [n, *obs_shape]; without a key the
    policy acts by its mode (argmax / mean), with one it samples. It goes through the
    same agent as training (continuous actions clipped to the action bounds), so a loaded
    policy acts exactly as it did in training. Jitted; one compile per shape.

    A recurrent policy (`policy: gru`) remembers: `act` keeps one memory per row of the
    batch from call to call. Pass `new_episode=True` (or one bool per row) with the first
    observation of each episode to start that row afresh; the first call, and a call with
    another batch size, start every row afresh; `act.reset()` forgets everything.
    `mask` (one bool per action, or one row per observation): the actions allowed, for a
    policy trained on an environment with action masks (`act(obs, mask=env.action_mask(s))`);
    without it every action is allowed.
    `network`: the module the run trained, when it was given to `make_train` as one.
    `cfg`: the run's config, or its `gate.Bundle` (then nothing is built again; pass
    network= to `gate` instead).
    """
    if not isinstance(state, LearnerState):
        raise ConfigError("state", type(state).__name__, "must be a LearnerState (ppo.load gives one: "
                          "cfg, state = ppo.load(folder))")
    agent = bundle_of(cfg, network=network, update_epochs=False).agent
    _check_params_fit(agent, state.params, network)
    return Policy(agent, state.params, state.agent_state)


def _check_params_fit(agent, params, network) -> None:
    """The state's parameters are the ones the agent's network takes (names and shapes, by
    jax.eval_shape: nothing runs); else a ConfigError saying which network to pass."""
    obs = jax.ShapeDtypeStruct(agent.network.obs_shape, jnp.float32)
    expected, _ = jax.eval_shape(lambda key, obs: agent.init(key, obs, 1), jax.random.PRNGKey(0), obs)

    def shapes(tree):
        return jax.tree.structure(tree), [tuple(np.shape(x)) for x in jax.tree.leaves(tree)]

    if shapes(expected) != shapes(params):
        built = "the network passed as network=" if network is not None else "the network the config names"
        raise ConfigError("network", NO_VALUE, f"the state's parameters do not fit {built}; a state trained with "
                          f"a network passed as a module (make_train(cfg, network=...)) needs the same module "
                          f"again: make_policy(cfg, state, network=module)")


class Policy:
    """See `make_policy`."""

    def __init__(self, agent, params, agent_state):
        self.agent, self.params, self.agent_state = agent, params, agent_state
        self.carry = None  # the memory of the last call's rows (recurrent policies)
        self._act = jax.jit(self._step, static_argnums=4, compiler_options=compiler_options())

    def _step(self, carry, obs, key, new_episode, deterministic, mask):
        fresh = self.agent.initial_carry(obs.shape[0])
        carry = restart(carry, fresh, new_episode)
        carry, env_action, _, _, _ = self.agent.act(self.params, self.agent_state, carry, obs, key, deterministic,
                                                    mask)
        return carry, env_action

    def reset(self) -> None:
        """Forget the memory: the next call starts every row afresh."""
        self.carry = None

    def __call__(self, obs, key=None, new_episode=False, mask=None):
        obs = jnp.asarray(obs, jnp.float32)
        want = self.agent.network.obs_shape
        if obs.shape[obs.ndim - len(want):] != want or obs.ndim not in (len(want), len(want) + 1):
            raise ConfigError("obs", NO_VALUE, f"has shape {list(obs.shape)}; this policy takes one observation "
                              f"{list(want)} or a batch [n, {', '.join(map(str, want))}]")
        batched = obs.ndim > len(want)
        batch = obs if batched else obs[None]
        rows = batch.shape[0]
        carry = self.carry
        if carry is None or (self.agent.recurrent and jax.tree.leaves(carry)[0].shape[0] != rows):
            carry, new_episode = self.agent.initial_carry(rows), True
        new_episode = jnp.broadcast_to(jnp.asarray(new_episode, jnp.bool_), (rows,))
        if mask is not None:
            mask = jnp.broadcast_to(jnp.asarray(mask, jnp.bool_), (rows, self.agent.action_space.num_actions))
        self.carry, env_action = self._act(carry, batch, jax.random.PRNGKey(0) if key is None else key,
                                           new_episode, key is None, mask)
        return env_action if batched else env_action[0]
