"""Recurrent policies (`policy: gru`): the memory restarts exactly where an episode ends,
the update replays whole sequences from the memory they started with (so the first
minibatch's ratio is exactly 1), a truncated step bootstraps with the memory that saw its
final observation, and evaluation, deployed policies and checkpoints carry the memory."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
from conftest import assert_trees_equal_to_float_rounding
from purejaxppo.errors import ConfigError
from purejaxppo.experiments.checkpoint import Checkpoints
from purejaxppo.experiments.sweep import make_spec, sweep
from purejaxppo.rollout import rollout

# CartPole cut at 20 steps: within 32 steps, episodes both terminate (the pole falls) and
# are truncated (the time limit)
GRU = dict(env="CartPole-v1", policy="gru", gru_size=8, hidden_sizes=[8], num_envs=8, num_steps=32,
           num_minibatches=2, update_epochs=2, total_timesteps=8 * 32 * 4, env_params={"max_steps_in_episode": 20})
STEPS = 32


def batch_major(x):
    return jnp.swapaxes(x, 0, 1)


@pytest.fixture(scope="module")
def case():
    """A rollout of an untrained GRU agent that starts from a memory that is not fresh."""
    cfg = ppo.make_config(GRU)
    learner = ppo.Learner(cfg)
    agent, env = learner.agent, learner.env
    state = learner.init(jax.random.PRNGKey(0))
    start = jax.random.normal(jax.random.PRNGKey(1), agent.carry(state.agent_state).shape)
    policy = functools.partial(agent.act, state.params, state.agent_state)
    out = jax.jit(lambda s, o, c: rollout(env, policy, s, o, jax.random.PRNGKey(2), STEPS, env.reset_strategy,
                                          carry=c, initial_carry=agent.initial_carry(cfg.num_envs)))(
        state.env_state, state.obs, start)
    traj = out[3]
    assert np.any(traj.terminated & ~traj.truncated) and np.any(traj.truncated & ~traj.terminated)
    return cfg, learner, state, start, out


def test_the_memory_restarts_exactly_where_an_episode_ends_in_the_rollout(case):
    cfg, learner, state, start, (_, _, end_carry, traj) = case
    agent, fresh = learner.agent, learner.agent.initial_carry(cfg.num_envs)
    step = jax.jit(functools.partial(agent.step, state.params, state.agent_state))
    h = start
    for t in range(STEPS):
        _, value, after = step(h, traj.obs[t])
        np.testing.assert_array_equal(value, traj.value[t])
        np.testing.assert_array_equal(after, traj.hidden[t])
        h = jnp.where(traj.episode_done[t][:, None], fresh, after)
    np.testing.assert_array_equal(end_carry, h)
    # and the restart matters: after an episode's end, the old memory gives other values
    t, env = map(int, np.argwhere(np.asarray(traj.episode_done[:-1]))[0])
    _, kept, _ = step(traj.hidden[t], traj.obs[t + 1])
    assert kept[env] != traj.value[t + 1, env]


def test_the_update_replays_whole_sequences_as_the_rollout_computed_them(case):
    cfg, learner, state, start, (_, _, _, traj) = case
    agent = learner.agent
    unroll = jax.jit(functools.partial(agent.unroll, state.params, state.agent_state))
    # (a program of its own here, so to float rounding; inside the learner too, to a few ulps:
    # first_minibatch_ratio_error, test_training_replays_exactly_and_runs_in_chunks_bit_for_bit)
    dist, value = unroll(start, batch_major(traj.obs), batch_major(traj.episode_done))
    assert_trees_equal_to_float_rounding((value, dist.log_prob(batch_major(traj.action))),
                                         (batch_major(traj.value), batch_major(traj.log_prob)))
    # a minibatch of some environments' sequences replays them alone, the same
    envs = np.array([2, 0])
    dist, value = unroll(start[envs], batch_major(traj.obs)[envs], batch_major(traj.episode_done)[envs])
    assert_trees_equal_to_float_rounding(value, batch_major(traj.value)[envs])


def test_a_truncated_step_bootstraps_with_the_memory_that_saw_its_final_observation(case):
    cfg, learner, state, _, (_, _, _, traj) = case
    agent = learner.agent
    step = jax.jit(functools.partial(agent.step, state.params, state.agent_state))
    _, next_values, _ = step(traj.hidden, traj.final_obs)  # as the learner computes them
    ongoing = ~np.asarray(traj.episode_done[:-1])
    # where the episode goes on, that is the next step's value (computed for all steps at
    # once here, one step at a time in the rollout: equal to float rounding)
    np.testing.assert_allclose(np.asarray(next_values[:-1])[ongoing], np.asarray(traj.value[1:])[ongoing],
                               rtol=1e-5, atol=1e-6)
    # where it was truncated, it is not what a fresh memory would say of the final observation
    truncated = np.asarray(traj.truncated & ~traj.terminated)
    _, fresh_values, _ = step(agent.network.initial_carry(traj.final_obs.shape[:2]), traj.final_obs)
    assert np.all(np.abs(np.asarray(next_values)[truncated] - np.asarray(fresh_values)[truncated]) > 1e-4)


def test_training_replays_its_sequences_exactly():
    """The replay properties below, of a run in two chunks of two updates: one program fewer than
    the run in one piece it equals, bit for bit (the long check below)."""
    cfg = ppo.make_config(GRU)
    learner = ppo.Learner(cfg)
    hp = ppo.HParams.from_config(cfg)
    run = jax.jit(learner.run, static_argnums=2)
    start = jax.jit(learner.init)(jax.random.PRNGKey(5))
    half, first = run(start, hp, 2)
    state, rest = run(half, hp, 2)
    metrics = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), first, rest)
    assert np.max(metrics["first_minibatch_ratio_error"]) <= 1e-6, metrics["first_minibatch_ratio_error"]
    assert state.agent_state["carry"].shape == (cfg.num_envs, cfg.gru_size)
    assert np.all(np.isfinite(metrics["policy_loss"])) and np.all(metrics["episodes_finished"] > 0)
    _, frozen = run(start, hp.replace(lr=jnp.float32(0.0)), 2)
    assert np.max(np.abs(frozen["kl_k1"])) <= 1e-6, frozen["kl_k1"]
    np.testing.assert_array_equal(frozen["clip_fraction"], 0.0)


@pytest.mark.slow  # a third program, the run in one piece: run by .ci/run after the default suite
def test_training_replays_exactly_and_runs_in_chunks_bit_for_bit():
    cfg = ppo.make_config(GRU)
    learner = ppo.Learner(cfg)
    hp = ppo.HParams.from_config(cfg)
    run = jax.jit(learner.run, static_argnums=2)
    start = jax.jit(learner.init)(jax.random.PRNGKey(5))
    whole = run(start, hp, 4)
    half, first = run(start, hp, 2)
    rest = run(half, hp, 2)
    chex.assert_trees_all_equal((rest[0], jax.tree.map(lambda a, b: jnp.concatenate([a, b]), first, rest[1])), whole)
    state, metrics = whole
    # the replay computes the GRU in another place of the program than the rollout did: 0 on most
    # machines and jax versions, one ulp of 1 (6e-8) in one update of four with jax 0.9.2 on an AMD EPYC
    # (XLA's code for the host's CPU); a replay from the wrong memory, or step by step, is off by far more
    assert np.max(metrics["first_minibatch_ratio_error"]) <= 1e-6, metrics["first_minibatch_ratio_error"]
    assert state.agent_state["carry"].shape == (cfg.num_envs, cfg.gru_size)
    assert np.all(np.isfinite(metrics["policy_loss"])) and np.all(metrics["episodes_finished"] > 0)
    # with a learning rate of 0 every minibatch of every epoch replays its sequences (to that rounding):
    # minibatches are whole sequences from their starting memory (single steps would not replay)
    _, frozen = run(start, hp.replace(lr=jnp.float32(0.0)), 2)
    assert np.max(np.abs(frozen["kl_k1"])) <= 1e-6, frozen["kl_k1"]
    np.testing.assert_array_equal(frozen["clip_fraction"], 0.0)


def test_minibatches_must_split_the_environments():
    with pytest.raises(ConfigError, match="num_minibatches.*must divide num_envs=8 with policy gru"):
        ppo.make_config({**GRU, "num_minibatches": 16})  # divides the batch (256), not the 8 sequences
    ppo.make_config({**GRU, "policy": "mlp", "num_minibatches": 16})


def test_a_deployed_recurrent_policy_remembers_and_restarts_where_told(case):
    cfg, learner, state, _, (_, _, _, traj) = case
    act = ppo.make_policy(cfg, state)
    fresh = learner.agent.initial_carry(cfg.num_envs)
    dist, _ = learner.agent.unroll(state.params, state.agent_state, fresh, batch_major(traj.obs),
                                   batch_major(traj.episode_done))
    greedy = batch_major(dist.mode())  # [T, B]
    first = np.concatenate([np.ones((1, cfg.num_envs), bool), np.asarray(traj.episode_done[:-1])])
    for t in range(STEPS):
        np.testing.assert_array_equal(act(np.asarray(traj.obs[t]), new_episode=first[t]), greedy[t])
    act.reset()
    np.testing.assert_array_equal(act(np.asarray(traj.obs[0])), greedy[0])


@pytest.mark.slow  # compiles a whole training program: run by .ci/run after the default suite
def test_checkpoints_carry_the_memory_and_resume_bit_for_bit(tmp_path):
    cfg = ppo.make_config({**GRU, "normalize_obs": True})
    spec = make_spec({"seeds": 2, "eval_episodes": 4})
    meta = {"command": "train", "config": cfg.to_dict(), "spec": {"seeds": 2, "eval_episodes": 4}, "first_seed": 0,
            "checkpoint_every": 2, "max_parallel": None, "keep": None}
    chunked = sweep(cfg, spec=spec, checkpoints=Checkpoints(tmp_path / "checkpoints"), checkpoint_every=2, meta=meta)
    whole = sweep(cfg, spec=spec)
    for k in range(2):
        chex.assert_trees_all_equal(chunked.states[k], whole.states[k])
        chex.assert_trees_all_equal(chunked.evaluation[k], whole.evaluation[k])
        assert np.all(np.isfinite(whole.evaluation[k]["deterministic"]))
    _, loaded = ppo.load(tmp_path, run=1)
    chex.assert_trees_all_equal(loaded.agent_state, jax.tree.map(np.asarray, whole.states[1].agent_state))
    assert np.any(loaded.agent_state["carry"] != 0)
