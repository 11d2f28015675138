"""Your own environments: registered from Python, named by import path, or installed with
an entry point; a gymnax Environment is adapted; one that breaks the protocol is refused
in one line before anything compiles."""

import jax
import numpy as np
import pytest

import purejaxppo as ppo
import user_envs
from purejaxppo import envs
from purejaxppo.errors import ConfigError

TINY = dict(num_envs=4, num_steps=16, num_minibatches=2, update_epochs=2, total_timesteps=4 * 16 * 3)
# one corridor, whichever way it is named (registered, an import path, an entry point): one program, compiled once
LENGTH = {"length": 5}


def short_run(cfg):
    learner = ppo.Learner(cfg)
    state, metrics = jax.jit(learner.run)(learner.init(jax.random.PRNGKey(0)))
    return learner, state, metrics


def test_a_registered_environment_trains_with_its_parameters(registry):
    registry.register("corridor", user_envs.corridor)
    cfg = ppo.make_config(dict(TINY, env="corridor", env_params=LENGTH))
    learner, _, metrics = short_run(cfg)
    assert learner.env.obs_shape == (5,) and learner.env.action_space.num_actions == 3
    assert np.all(np.asarray(metrics["first_minibatch_ratio_error"]) == 0)
    assert int(np.sum(metrics["episodes_finished"])) > 0
    registry.register("corridor", user_envs.Corridor)  # again (a notebook cell run twice): replaced
    assert registry.registered()["corridor"] is user_envs.Corridor


@pytest.mark.slow  # two CartPole training programs: run by .ci/run after the default suite
def test_an_import_path_names_an_environment_and_a_gymnax_environment_is_adapted():
    learner, _, metrics = short_run(ppo.make_config(dict(TINY, env="user_envs:corridor", env_params=LENGTH)))
    assert learner.env.max_episode_steps == 20 and learner.env.obs_shape == (5,)
    gym = ppo.Learner(ppo.make_config(dict(TINY, env="user_envs:gymnax_cartpole")))
    builtin = ppo.Learner(ppo.make_config(dict(TINY, env="CartPole-v1")))
    assert (gym.env.obs_shape, gym.env.action_space, gym.env.max_episode_steps) == (
        builtin.env.obs_shape, builtin.env.action_space, builtin.env.max_episode_steps)
    key = jax.random.PRNGKey(4)
    a, b = jax.jit(gym.run)(gym.init(key)), jax.jit(builtin.run)(builtin.init(key))
    np.testing.assert_array_equal(a[1]["episode_return"], b[1]["episode_return"])  # the same environment


def test_an_installed_package_offers_environments_through_its_entry_point(tmp_path, monkeypatch):
    (tmp_path / "their_envs.py").write_text("from user_envs import Corridor\n\ndef make(**p):\n    return Corridor(**p)\n")
    info = tmp_path / "their_envs-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: their-envs\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[purejaxppo.envs]\ntheir-corridor = their_envs:make\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "their-corridor" in envs.registered()
    learner, _, _ = short_run(ppo.make_config(dict(TINY, env="their-corridor", env_params=LENGTH)))
    assert learner.env.obs_shape == (5,)


@pytest.mark.parametrize("name, message", [
    ("brax/mine", "clashes with the built-in family brax/"),
    ("gymnax", "clashes with the built-in family gymnax/"),
    ("CartPole-v1", "clashes with the built-in gymnax environment"),
    ("pkg:thing", "cannot hold ':'"),
    ("", "non-empty string"),
])
def test_a_name_that_clashes_is_refused(registry, name, message):
    with pytest.raises(ConfigError, match=message):
        registry.register(name, user_envs.corridor)


@pytest.mark.parametrize("factory, message", [
    ("user_envs:no_step", "lacks step (the protocol: obs_shape, action_space, max_episode_steps, reset, step"),
    ("user_envs:broken", "user_envs:broken's factory(**env_params) failed: TypeError: broken() missing 1 required"),
    ("user_envs:nothing", "module user_envs has no nothing"),
])
def test_a_factory_that_fails_or_whose_result_lacks_a_member_is_one_config_error(factory, message):
    with pytest.raises(ConfigError) as caught:
        ppo.make_config(dict(TINY, env=factory))
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("problem, message", [
    ("int_obs", "reset's obs must be float32[6]; it is int32[6]"),
    ("reward_vector", "step's reward must be float32[]; it is float32[2]"),
    ("float_done", "step's terminated must be bool[]; it is float32[]"),
])
def test_reset_or_step_outputs_of_the_wrong_shape_or_dtype_are_found_by_eval_shape(problem, message):
    with pytest.raises(ConfigError) as caught:
        ppo.make_config(dict(TINY, env="user_envs:broken", env_params={"problem": problem}))
    assert str(caught.value).startswith("env='user_envs:broken': ") and message in str(caught.value)


def test_an_unknown_name_lists_the_registered_ones(registry):
    registry.register("corridor", user_envs.corridor)
    with pytest.raises(ConfigError, match="registered: corridor"):
        ppo.make_config(dict(TINY, env="nofamily/thing"))
