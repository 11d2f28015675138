"""XLand-MiniGrid behind the environment protocol: flat float32 views, the goal terminates
and the time limit truncates (both when the goal is reached on the last step), no
auto-reset in the adapter, refused names and settings, and a tiny training run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("xminigrid")

import purejaxppo as ppo
from purejaxppo.envs import ActionSpace, make_raw_env
from purejaxppo.errors import ConfigError

EMPTY = "xminigrid/MiniGrid-Empty-5x5"
FORWARD, TURN_RIGHT = 0, 1
# Empty-5x5: the agent starts at (1, 1) facing right, the goal is at (3, 3): five steps
TO_THE_GOAL = [FORWARD, FORWARD, TURN_RIGHT, FORWARD, FORWARD]


def play(env, actions, seed=0):
    """Steps of `env` (auto-resetting) under a fixed list of actions -> stacked (obs, reward,
    terminated, truncated, info)."""
    obs, state = env.reset(jax.random.PRNGKey(seed))

    def step(carry, inputs):
        state, _ = carry
        key, action = inputs
        obs, state, reward, terminated, truncated, info = env.step(key, state, action)
        return (state, obs), (obs, reward, terminated, truncated, info)

    keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(actions))
    _, out = jax.jit(lambda s, o: jax.lax.scan(step, (s, o), (keys, jnp.asarray(actions, jnp.int32))))(state, obs)
    return out


def test_reset_and_step_give_float32_views_of_their_shape_and_bool_flags():
    env = make_raw_env(EMPTY)
    assert env.obs_size == 7 * 7 * 2 and env.action_space == ActionSpace("discrete", num_actions=6)
    assert env.max_episode_steps == 100 and env.reset_strategy == "per_step"
    obs, state = jax.jit(env.reset)(jax.random.PRNGKey(0))
    assert obs.shape == env.obs_shape == (7, 7, 2) and obs.dtype == jnp.float32
    obs, state, reward, terminated, truncated, info = jax.jit(env.step)(jax.random.PRNGKey(1), state, FORWARD)
    assert obs.shape == env.obs_shape == (7, 7, 2) and obs.dtype == jnp.float32
    assert reward.dtype == jnp.float32 and reward.shape == ()
    assert terminated.dtype == jnp.bool_ and truncated.dtype == jnp.bool_ and info == {}
    assert int(state.state.step_num) == 1  # the raw step: no reset


@pytest.mark.slow  # three compiled episodes (about 10 s on a 2-core CPU): run by .ci/run after the default suite
def test_the_time_limit_truncates_and_the_goal_terminates():
    turning = ppo.make_env(ppo.make_config({"env": EMPTY, "env_params": {"max_steps": 3}}))
    assert turning.max_episode_steps == 3
    _, reward, terminated, truncated, info = play(turning, [TURN_RIGHT] * 7)
    np.testing.assert_array_equal(truncated, [0, 0, 1, 0, 0, 1, 0])
    assert not np.any(terminated) and not np.any(reward)
    np.testing.assert_array_equal(info["episode_length"], [1, 2, 3, 1, 2, 3, 1])

    walking = ppo.make_env(ppo.make_config({"env": EMPTY}))
    _, reward, terminated, truncated, info = play(walking, TO_THE_GOAL + [TURN_RIGHT])
    np.testing.assert_array_equal(terminated, [0, 0, 0, 0, 1, 0])
    assert not np.any(truncated)
    np.testing.assert_allclose(reward, [0, 0, 0, 0, 1 - 0.9 * 5 / 100, 0], rtol=1e-6)
    # the goal reached on the last allowed step: both
    last = ppo.make_env(ppo.make_config({"env": EMPTY, "env_params": {"max_steps": 5}}))
    _, reward, terminated, truncated, _ = play(last, TO_THE_GOAL)
    assert bool(terminated[4]) and bool(truncated[4]) and float(reward[4]) == pytest.approx(0.1)


def test_settings_are_xminigrids_params():
    env = make_raw_env(EMPTY, {"view_size": 3, "height": 7, "width": 7})
    assert env.obs_size == 3 * 3 * 2
    assert env.max_episode_steps == 4 * 7 * 7  # Empty's formula follows the new size
    assert make_raw_env("xminigrid/MiniGrid-DoorKey-5x5", {"max_steps": 40.0}).max_episode_steps == 40


@pytest.mark.parametrize("values, field, words", [
    ({"env": "xminigrid/MiniGrid-Empty5x5"}, "env", "did you mean MiniGrid-Empty-5x5"),
    ({"env": "xminigrid/MiniGrid-DorKey-5x5"}, "env", "did you mean MiniGrid-DoorKey-5x5"),
    ({"env": "xminigrid/XLand-MiniGrid-R1-9x9"}, "env", "needs a benchmark ruleset"),
    ({"env": EMPTY, "env_params": {"max_step": 3}}, "env_params.max_step", "no such parameter; did you mean max_steps"),
    ({"env": EMPTY, "env_params": {"max_steps": 0}}, "env_params.max_steps", "at least 1"),
    ({"env": EMPTY, "env_params": {"max_steps": 2.5}}, "env_params.max_steps", "integer"),
    ({"env": EMPTY, "env_params": {"view_size": 4}}, "env_params.view_size", "odd"),
    ({"env": EMPTY, "env_params": {"render_mode": "ascii"}}, "env_params.render_mode", "one of rgb_array"),
])
def test_bad_names_and_settings_are_refused_naming_the_field(values, field, words):
    with pytest.raises(ConfigError, match=words) as error:
        ppo.make_config(values)
    assert error.value.field == field


def test_every_offered_name_is_a_minigrid_name():
    from purejaxppo.envs.xminigrid import env_names

    names = env_names()
    assert "MiniGrid-Empty-5x5" in names and "MiniGrid-DoorKey-5x5" in names
    assert not [n for n in names if not n.startswith("MiniGrid-")]


@pytest.mark.slow  # compiles a whole training program: run by .ci/run after the default suite
def test_a_tiny_training_run_from_the_shipped_config():
    cfg = ppo.load_config("configs/xminigrid/empty_5x5.yaml", {"num_envs": 4, "num_steps": 8, "total_timesteps": 64,
                                                               "hidden_sizes": [16], "num_minibatches": 2})
    assert cfg.env == EMPTY
    assert ppo.make_env(cfg).obs_size == 98
    out = jax.jit(ppo.make_train(cfg))(jax.random.PRNGKey(0))
    for name in ("policy_loss", "value_loss", "entropy", "total_loss", "grad_norm"):
        assert np.all(np.isfinite(np.asarray(out.metrics[name], np.float64))), name
