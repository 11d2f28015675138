"""What the MountainCar study (benchmarks/mountaincar_study.py) supplies in place of config keys:
the time limit as a termination, gymnax-blines' initialisation and its learning-rate warm-up."""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import mountaincar_study as study
from purejaxppo import train
from purejaxppo.envs import make_raw_env


def _coast(env, steps):
    """(terminated, truncated) of each of `steps` steps of the do-nothing action from a reset."""
    _, state = env.reset(jax.random.PRNGKey(0))

    def step(state, key):
        _, state, _, terminated, truncated, _ = env.step(key, state, jnp.int32(1))
        return state, (terminated, truncated)

    return jax.lax.scan(step, state, jax.random.split(jax.random.PRNGKey(1), steps))[1]


def test_the_time_limit_ends_the_episode_only_in_the_study_env():
    cut = make_raw_env("benchmarks.mountaincar_study:mountaincar_time_limit_ends")
    terminated, truncated = map(np.asarray, _coast(cut, 200))
    assert not terminated[:199].any() and terminated[199] and truncated[199]  # coasting never reaches the flag
    terminated, truncated = map(np.asarray, _coast(make_raw_env("MountainCar-v0"), 200))
    assert not terminated.any() and truncated[199] and not truncated[:199].any()  # the library's: a truncation


def test_the_warm_up_falls_linearly_then_leaves_the_configs_rate(monkeypatch):
    monkeypatch.setattr(train, "learning_rate", train.learning_rate)  # restored after the test
    study.with_warmup(5e-3, 49)
    hp = types.SimpleNamespace(lr=jnp.float32(5e-4), anneal_lr=jnp.bool_(False),
                               lr_warmup_updates=jnp.int32(0), lr_warmup_start=jnp.float32(0.0))
    rate = [float(train.learning_rate(hp, jnp.int32(u), 488)) for u in (0, 49, 100, 487)]
    assert rate == pytest.approx([5e-3, 5e-4, 5e-4, 5e-4])
    assert float(train.learning_rate(hp, jnp.int32(24), 488)) == pytest.approx(5e-3 + (5e-4 - 5e-3) * 24 / 49)


@pytest.mark.parametrize("init", ["lecun", "orthogonal"])
def test_the_network_has_the_initialisation_asked_for(init):
    net = study.actor_critic(3, init=init)
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, 2)))["params"]
    logits, value = net.apply({"params": params}, jnp.zeros((5, 2)))
    assert logits.shape == (5, 3) and value.shape == (5,)
    head = params["_Mlp_0"]["Dense_2"]
    biases = np.asarray(params["_Mlp_0"]["Dense_0"]["bias"])
    if init == "lecun":  # flax's default kernel, biases in [0, 0.05)
        assert (biases >= 0).all() and (biases < 0.05).all() and biases.any()
        assert np.abs(np.asarray(head["kernel"])).max() > 0.05
    else:  # the built-in's: zero biases, a policy head at gain 0.01
        assert not biases.any() and np.abs(np.asarray(head["kernel"])).max() < 0.05


def test_any_gymnax_game_can_have_its_time_limit_cut():
    cut = make_raw_env("benchmarks.mountaincar_study:time_limit_ends", {"name": "Acrobot-v1"})
    terminated, truncated = map(np.asarray, _coast(cut, 500))  # coasting: Acrobot's 500-step limit
    assert terminated[499] and truncated[499] and not terminated[:499].any()


@pytest.mark.slow  # two training programs: run by .ci/run after the default suite
def test_bootstrap_truncation_false_trains_as_the_studys_environment_whose_time_limit_terminates():
    """The config key replaces the study's environment: the same numbers, and different ones
    with the time limit bootstrapped (4 envs x 64 steps x 4 updates: each env reaches the 200-step limit)."""
    import purejaxppo as ppo

    tiny = dict(num_envs=4, num_steps=64, num_minibatches=2, update_epochs=2, total_timesteps=4 * 64 * 4)

    def run(**values):
        out = ppo.make_train(ppo.make_config(dict(tiny, **values)))(jax.random.PRNGKey(0))
        return np.asarray(out.metrics["value_loss"]), out.state.params

    study_loss, study_params = run(env="benchmarks.mountaincar_study:mountaincar_time_limit_ends")
    cut_loss, cut_params = run(env="MountainCar-v0", bootstrap_truncation=False)
    kept_loss, _ = run(env="MountainCar-v0")
    np.testing.assert_allclose(cut_loss, study_loss, rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), cut_params, study_params)
    assert not np.allclose(kept_loss[-1], cut_loss[-1], rtol=1e-3)
