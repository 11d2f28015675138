"""The three options that reproduce gymnax-blines' PPO on MountainCar-v0
(benchmarks/results/2026-12-04-mountaincar-cpu.md): `init: lecun`, a learning-rate warm-up
(`lr_warmup_updates`, `lr_warmup_start`) and `bootstrap_truncation: false` (checked at the
learner's level against gymnax's environment with its time limit made a termination,
`user_envs:time_limit_ends`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
from purejaxppo.gae import gae
from purejaxppo.train import learning_rate

TINY = dict(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=2,
            total_timesteps=4 * 16 * 6)


def _params(**values):
    return ppo.Learner(ppo.make_config(dict(TINY, **values))).init(jax.random.PRNGKey(0)).params["params"]


def test_lecun_init_keeps_the_parameter_tree_and_draws_lecun_kernels_and_small_positive_biases():
    default, lecun = _params(), _params(init="lecun")
    assert jax.tree.map(jnp.shape, default) == jax.tree.map(jnp.shape, lecun)  # checkpoints load either way
    for tower in ("actor", "critic"):
        for i in range(3):
            bias = np.asarray(lecun[tower][f"Dense_{i}"]["bias"])
            assert (bias >= 0).all() and (bias < 0.05).all() and bias.max() > 0  # uniform in [0, 0.05)
            if i < 2:  # 64 of them: the uniform's spread, 0.05 / sqrt(12)
                assert bias.std() == pytest.approx(0.05 / np.sqrt(12), rel=0.3)
            assert not np.asarray(default[tower][f"Dense_{i}"]["bias"]).any()
    w = np.asarray(lecun["actor"]["Dense_1"]["kernel"])  # 64 x 64: variance 1 / fan-in
    assert w.std() == pytest.approx(1 / 8, rel=0.1) and abs(w.mean()) < 0.01
    head = np.asarray(lecun["actor"]["Dense_2"]["kernel"])  # not the orthogonal 0.01-gain head
    assert head.std() == pytest.approx(1 / 8, rel=0.3)
    assert np.abs(np.asarray(default["actor"]["Dense_2"]["kernel"])).max() < 0.05


@pytest.mark.slow  # compiles a GRU and a CNN: run by .ci/run after the default suite
def test_lecun_init_reaches_the_gru_and_cnn_built_ins_with_their_layout():
    gru = dict(policy="gru", gru_size=8, hidden_sizes=[8])
    default, lecun = _params(**gru), _params(**gru, init="lecun")
    assert jax.tree.map(jnp.shape, default) == jax.tree.map(jnp.shape, lecun)
    for layer in (lecun["encoder"], lecun["gru"]["input"], lecun["gru"]["recurrent"]):
        assert (np.asarray(layer["bias"]) > 0).any() and (np.asarray(layer["bias"]) < 0.05).all()
    cnn = dict(env="Breakout-MinAtar", torso="cnn")
    default, lecun = _params(**cnn), _params(**cnn, init="lecun")
    assert jax.tree.map(jnp.shape, default) == jax.tree.map(jnp.shape, lecun)
    bias = np.asarray(lecun["torso"]["Conv_0"]["bias"])
    assert (bias > 0).any() and (bias < 0.05).all() and not np.asarray(default["torso"]["Conv_0"]["bias"]).any()


def test_the_warm_up_moves_linearly_from_its_start_to_lr_then_leaves_the_schedule_as_it_was():
    U = 20
    cfg = ppo.make_config(dict(TINY, lr=5e-4, anneal_lr=False, lr_warmup_updates=5, lr_warmup_start=5e-3))
    hp = ppo.HParams.from_config(cfg)
    rate = [float(learning_rate(hp, jnp.int32(u), U)) for u in (0, 1, 4, 5, 19)]
    assert rate == pytest.approx([5e-3, 5e-3 - 9e-4, 5e-3 - 4 * 9e-4, 5e-4, 5e-4])
    annealed = hp.replace(anneal_lr=np.bool_(True))  # after the warm-up: the run's decay, as without one
    rate = [float(learning_rate(annealed, jnp.int32(u), U)) for u in (0, 4, 5, 10)]
    assert rate == pytest.approx([5e-3, 5e-3 - 4 * 9e-4, 5e-4 * 15 / 20, 5e-4 * 10 / 20])
    none = hp.replace(lr_warmup_updates=np.int32(0))
    assert float(learning_rate(none, jnp.int32(0), U)) == pytest.approx(5e-4)


@pytest.mark.slow  # a training program of its own: run by .ci/run after the default suite
def test_the_warm_up_is_a_traced_hyperparameter_the_trained_rates_follow():
    cfg = ppo.make_config(TINY)  # 6 updates, anneal_lr
    hp = ppo.HParams.from_config(cfg).replace(lr_warmup_updates=jnp.int32(2), lr_warmup_start=jnp.float32(0.0))
    rates = np.asarray(jax.jit(ppo.make_train(cfg))(jax.random.PRNGKey(0), hp).metrics["learning_rate"])
    np.testing.assert_allclose(rates, cfg.lr * np.array([0.0, 0.5, 4 / 6, 3 / 6, 2 / 6, 1 / 6]), rtol=1e-6)


def test_gae_without_bootstrapping_a_truncation_is_gae_with_it_as_a_termination():
    rng = np.random.default_rng(0)
    T, N = 30, 3
    rewards, values, next_values = (jnp.asarray(rng.normal(size=(T, N)), jnp.float32) for _ in range(3))
    terminated, truncated = jnp.asarray(rng.random((T, N)) < 0.1), jnp.asarray(rng.random((T, N)) < 0.1)
    cut = gae(rewards, values, next_values, terminated | truncated, truncated, 0.99, 0.95)
    ends = gae(rewards, values, next_values, terminated | truncated, jnp.zeros_like(truncated), 0.99, 0.95)
    kept = gae(rewards, values, next_values, terminated, truncated, 0.99, 0.95)
    np.testing.assert_array_equal(cut[0], ends[0])
    at = np.asarray(truncated & ~terminated)  # only there do the two differ: by gamma * V(final observation)
    np.testing.assert_allclose(np.asarray(kept[0] - cut[0])[at], 0.99 * np.asarray(next_values)[at], rtol=1e-5)


def _coast(env, steps):
    """(terminated, truncated) of each of `steps` steps of the do-nothing action from a reset."""
    _, state = env.reset(jax.random.PRNGKey(0))

    def step(state, key):
        _, state, _, terminated, truncated, _ = env.step(key, state, jnp.int32(1))
        return state, (terminated, truncated)

    return jax.lax.scan(step, state, jax.random.split(jax.random.PRNGKey(1), steps))[1]


def test_the_reference_environment_ends_at_its_time_limit_where_the_librarys_truncates():
    from purejaxppo.envs import make_raw_env

    terminated, truncated = map(np.asarray, _coast(make_raw_env("user_envs:time_limit_ends"), 200))
    assert not terminated[:199].any() and terminated[199] and truncated[199]  # coasting never reaches the flag
    terminated, truncated = map(np.asarray, _coast(make_raw_env("MountainCar-v0"), 200))
    assert not terminated.any() and truncated[199] and not truncated[:199].any()  # the library's: a truncation


@pytest.mark.slow  # three training programs: run by .ci/run after the default suite
def test_bootstrap_truncation_false_trains_as_an_environment_whose_time_limit_terminates():
    """The same numbers as gymnax's MountainCar with its time limit made a termination, and
    different ones with the limit bootstrapped (4 envs x 64 steps x 4 updates: each env reaches
    the 200-step limit)."""
    tiny = dict(num_envs=4, num_steps=64, num_minibatches=2, update_epochs=2, total_timesteps=4 * 64 * 4)

    def run(**values):
        out = ppo.make_train(ppo.make_config(dict(tiny, **values)))(jax.random.PRNGKey(0))
        return np.asarray(out.metrics["value_loss"]), out.state.params

    ends_loss, ends_params = run(env="user_envs:time_limit_ends")
    cut_loss, cut_params = run(env="MountainCar-v0", bootstrap_truncation=False)
    kept_loss, _ = run(env="MountainCar-v0")
    np.testing.assert_allclose(cut_loss, ends_loss, rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), cut_params, ends_params)
    assert not np.allclose(kept_loss[-1], cut_loss[-1], rtol=1e-3)
