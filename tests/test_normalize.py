"""The running normaliser and the reward scaler against numpy, and the learner using them."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
from purejaxppo import normalize


def test_merged_batches_equal_numpy_over_the_whole_stream():
    rng = np.random.default_rng(0)
    # batches of different sizes, scales and offsets, some of a single sample
    batches = [rng.normal(loc=3.0 * i, scale=1.0 + i, size=(n, 5)) for i, n in enumerate([7, 1, 300, 2, 64, 1])]
    stats = normalize.init_stats((5,))
    seen = []
    for batch in batches:
        stats = jax.jit(normalize.merge)(stats, jnp.asarray(batch, jnp.float32))
        seen.append(batch)
        stream = np.concatenate(seen)
        assert float(stats.count) == len(stream)
        np.testing.assert_allclose(stats.mean, stream.mean(axis=0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(stats.var, stream.var(axis=0), rtol=1e-4)


def test_leading_axes_are_samples_and_empty_stats_change_nothing():
    x = jnp.arange(24.0).reshape(2, 3, 4)
    stats = normalize.init_stats((4,))
    np.testing.assert_allclose(normalize.normalize(stats, x, 100.0), x, rtol=1e-6)  # mean 0, var 1
    merged = normalize.merge(stats, x)
    flat = np.asarray(x).reshape(-1, 4)
    np.testing.assert_allclose(merged.mean, flat.mean(0))
    np.testing.assert_allclose(merged.var, flat.var(0), rtol=1e-6)
    z = normalize.normalize(merged, x, 1.0)
    assert float(jnp.max(jnp.abs(z))) == 1.0  # clipped to ±clip
    np.testing.assert_allclose(normalize.normalize(merged, x, 100.0).reshape(-1, 4),
                               (flat - flat.mean(0)) / np.sqrt(flat.var(0) + normalize.EPS), rtol=1e-5)


def test_rewards_are_divided_by_the_std_of_the_discounted_return():
    rng = np.random.default_rng(1)
    steps, envs, gamma = 50, 3, 0.9
    rewards = [rng.normal(2.0, 1.0, size=(steps, envs)) for _ in range(2)]
    dones = [rng.random((steps, envs)) < 0.1 for _ in range(2)]
    scaler = normalize.init_reward_scaler(envs)
    g = np.zeros(envs)
    returns = []
    for reward, done in zip(rewards, dones):
        scaler, scaled = normalize.scale_rewards(scaler, jnp.asarray(reward, jnp.float32), jnp.asarray(done),
                                                 gamma, 5.0)
        for t in range(steps):  # the loop of the docstring
            g = gamma * g + reward[t]
            returns.append(g.copy())
            g = np.where(done[t], 0.0, g)
        std = np.std(np.concatenate(returns))
        np.testing.assert_allclose(scaled, np.clip(reward / std, -5.0, 5.0), rtol=1e-4)
        np.testing.assert_allclose(scaler.discounted_return, g, rtol=1e-5)


@pytest.mark.slow  # a training program of its own (the statistics' counts after training: test_checkpoint's too)
def test_a_normalised_learner_keeps_the_first_ratio_at_one_and_counts_every_observation():
    cfg = ppo.make_config(dict(env="Pendulum-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=2,
                               total_timesteps=4 * 16 * 3, normalize_obs=True, normalize_reward=True))
    learner = ppo.Learner(cfg)
    state, metrics = jax.jit(lambda k: learner.run(learner.init(k)))(jax.random.PRNGKey(0))
    # the rollout and the first minibatch see the same statistics: the ratio starts at 1 (to float
    # rounding: XLA fuses the normalisation differently for the rollout's and a minibatch's shapes;
    # statistics merged before the update instead would put it at 1e-2 and beyond)
    assert np.max(np.abs(metrics["first_minibatch_ratio_error"])) < 1e-6
    stats = state.agent_state["obs_stats"]
    assert float(stats.count) == cfg.num_updates * cfg.batch_size
    assert float(state.reward_scaler.stats.count) == cfg.num_updates * cfg.batch_size
    # Pendulum's observations are cos, sin (in [-1, 1]) and the angular velocity (in [-8, 8])
    assert np.all(np.abs(stats.mean[:2]) <= 1.0) and np.all(stats.var > 0)
    # normalisation off: the learner state holds no statistics
    plain = ppo.Learner(ppo.make_config({**cfg.to_dict(), "normalize_obs": False, "normalize_reward": False}))
    bare = jax.eval_shape(plain.init, jax.random.PRNGKey(0))
    assert bare.agent_state == {} and bare.reward_scaler == {}


@pytest.mark.slow  # two training programs (reward_scale is static): run by .ci/run after the default suite
def test_reward_scale_multiplies_the_rewards_the_learner_sees():
    base = dict(env="Pendulum-v1", num_envs=4, num_steps=8, num_minibatches=2, update_epochs=1,
                total_timesteps=4 * 8 * 2)
    scaled, plain = (jax.jit(ppo.make_train(ppo.make_config({**base, "reward_scale": scale})))(jax.random.PRNGKey(2))
                     for scale in (0.5, 1.0))
    assert not np.allclose(scaled.metrics["value_loss"], plain.metrics["value_loss"])  # it reaches the targets
    chex.assert_trees_all_equal(scaled.metrics["episode_return"], plain.metrics["episode_return"])  # reported unscaled
