import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
from purejaxppo.envs import AutoReset, EpisodeStats
from purejaxppo.envs.gymnax import GymnaxEnv
from purejaxppo.errors import ConfigError


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "Breakout-MinAtar",
                                  "MountainCarContinuous-v0"])
def test_auto_reset_matches_gymnax_own_step(name):
    """Raw adapter + AutoReset (reset drawn from the key) == gymnax's auto-resetting step."""
    import gymnax

    # short episodes so resets by time limit happen too
    ours = AutoReset(GymnaxEnv(name, {"max_steps_in_episode": 20}))
    theirs, params = gymnax.make(name)
    params = params.replace(max_steps_in_episode=20)
    space = theirs.action_space(params)
    key = jax.random.PRNGKey(0)
    obs_a, state_a = ours.reset(key)
    obs_b, state_b = theirs.reset(key, params)
    step_a, step_b = jax.jit(ours.step), jax.jit(lambda k, s, a: theirs.step(k, s, a, params))
    ends = 0
    for t in range(60):
        key, k_act, k_step = jax.random.split(key, 3)
        action = space.sample(k_act)
        obs_a, state_a, r_a, term_a, trunc_a, info_a = step_a(k_step, state_a, action)
        obs_b, state_b, r_b, term_b, trunc_b, info_b = step_b(k_step, state_b, action)
        assert obs_a.shape == np.shape(obs_b) and obs_a.dtype == jnp.float32  # gymnax's shape, as float32
        np.testing.assert_allclose(obs_a, np.asarray(obs_b, np.float32), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(info_a["final_observation"], np.asarray(info_b["final_observation"], np.float32),
                                   rtol=1e-6, atol=1e-6)
        assert float(r_a) == pytest.approx(float(r_b))
        assert bool(term_a) == bool(term_b) and bool(trunc_a) == bool(trunc_b)
        ends += bool(term_a) or bool(trunc_a)
    assert ends >= 2


def test_episode_stats_restart_after_reset():
    env = AutoReset(EpisodeStats(GymnaxEnv("Pendulum-v1", {"max_steps_in_episode": 3})))
    obs, state = env.reset(jax.random.PRNGKey(0))
    returns, dones = [], []
    for t in range(7):
        obs, state, reward, term, trunc, info = env.step(jax.random.PRNGKey(t), state, jnp.zeros(1))
        returns.append((float(reward), float(info["episode_return"]), int(info["episode_length"])))
        dones.append(bool(info["episode_done"]))
    assert dones == [False, False, True, False, False, True, False]
    assert [length for _, _, length in returns] == [1, 2, 3, 1, 2, 3, 1]
    assert returns[2][1] == pytest.approx(sum(r for r, _, _ in returns[:3]), rel=1e-5)
    assert returns[3][1] == pytest.approx(returns[3][0])


def test_minatar_observations_keep_their_image_shape():
    env = ppo.make_env(ppo.make_config(dict(env="Breakout-MinAtar")))
    obs, state = env.reset(jax.random.PRNGKey(0))
    assert obs.shape == env.obs_shape == (10, 10, 4) and env.obs_size == 400 and obs.dtype == jnp.float32
    obs, state, reward, terminated, truncated, info = env.step(jax.random.PRNGKey(1), state, 0)
    assert info["final_observation"].shape == (10, 10, 4)
    assert terminated.dtype == jnp.bool_ and truncated.dtype == jnp.bool_


@pytest.mark.parametrize("family", ["craftax", "xminigrid", "jumanji", "playground"])
def test_a_family_whose_extra_is_not_installed_names_the_pip_command(family, monkeypatch):
    import importlib.util

    from purejaxppo.envs import EXTRAS
    from purejaxppo.extras import install_line

    module = EXTRAS[family][0]  # playground's is mujoco_playground
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    with pytest.raises(ConfigError, match=re.escape(f"not installed here: {install_line(family)}")) as error:
        ppo.make_config({"env": f"{family}/Anything-v1"})
    assert error.value.field == "env"
