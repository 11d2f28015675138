"""Jumanji behind the environment protocol: flattened observations (the action mask last
in Snake), flattened multi-discrete actions, a crash terminates and the time limit
truncates, no auto-reset in the adapter, refused names and settings, a tiny training run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("jumanji")

import purejaxppo as ppo
from purejaxppo.envs import ActionSpace, make_raw_env
from purejaxppo.errors import ConfigError

SNAKE = "jumanji/Snake-v1"
UP = 0


def first_valid(obs):
    """Snake's first allowed move, read from the action mask: the last 4 observations."""
    return jnp.argmax(obs[-4:] > 0.5).astype(jnp.int32)


def play(env, policy, num_steps, seed=0):
    """num_steps of `env` (auto-resetting) under `policy(obs) -> action` -> stacked
    (obs, reward, terminated, truncated, info)."""
    obs, state = env.reset(jax.random.PRNGKey(seed))

    def step(carry, key):
        state, obs = carry
        obs, state, reward, terminated, truncated, info = env.step(key, state, policy(obs))
        return (state, obs), (obs, reward, terminated, truncated, info)

    keys = jax.random.split(jax.random.PRNGKey(seed + 1), num_steps)
    return jax.jit(lambda s, o: jax.lax.scan(step, (s, o), keys)[1])(state, obs)


def test_snake_gives_flat_float32_observations_with_the_action_mask_last():
    env = make_raw_env(SNAKE)
    assert env.obs_size == 12 * 12 * 5 + 1 + 4 and env.action_space == ActionSpace("discrete", num_actions=4)
    assert env.max_episode_steps == 4000 and env.reset_strategy == "per_rollout"
    obs, state = jax.jit(env.reset)(jax.random.PRNGKey(0))
    assert obs.shape == (env.obs_size,) and obs.dtype == jnp.float32
    np.testing.assert_array_equal(obs[-4:], np.asarray(state.env_state.action_mask, np.float32))
    assert float(obs[-5]) == 0.0  # step_count
    obs, state, reward, terminated, truncated, info = jax.jit(env.step)(jax.random.PRNGKey(1), state,
                                                                        first_valid(obs))
    assert obs.shape == (env.obs_size,) and obs.dtype == jnp.float32 and float(obs[-5]) == 1.0
    assert reward.dtype == jnp.float32 and reward.shape == ()
    assert terminated.dtype == jnp.bool_ and truncated.dtype == jnp.bool_ and info == {}
    assert int(state.steps) == 1 and int(state.env_state.step_count) == 1  # the raw step: no reset


@pytest.mark.slow  # two compiled Snake episodes: run by .ci/run after the default suite
def test_the_time_limit_truncates_and_a_crash_terminates():
    limited = ppo.make_env(ppo.make_config({"env": SNAKE, "env_params": {"time_limit": 3}}))
    assert limited.max_episode_steps == 3
    _, _, terminated, truncated, info = play(limited, first_valid, 7)
    np.testing.assert_array_equal(truncated, [0, 0, 1, 0, 0, 1, 0])  # Jumanji says discount 0 here
    assert not np.any(terminated)
    np.testing.assert_array_equal(info["episode_length"], [1, 2, 3, 1, 2, 3, 1])

    crashing = ppo.make_env(ppo.make_config({"env": SNAKE, "env_params": {"num_rows": 6, "num_cols": 6}}))
    _, _, terminated, truncated, info = play(crashing, lambda obs: jnp.int32(UP), 8)
    assert not np.any(truncated)
    end = int(np.argmax(terminated))  # up into the wall: at most 6 steps from any row
    assert terminated[end] and end < 6 and int(info["episode_length"][end]) == end + 1


def test_multi_discrete_actions_are_flattened_row_major():
    env = make_raw_env("jumanji/Cleaner-v0", {"time_limit": 5})
    assert env.action_space.num_actions == 4 ** 3 and env.max_episode_steps == 5
    np.testing.assert_array_equal(env._action(jnp.int32(1 * 16 + 2 * 4 + 3)), [1, 2, 3])
    obs, state = env.reset(jax.random.PRNGKey(0))
    steps = jax.jit(lambda s, a: env.step(jax.random.PRNGKey(1), s, a))
    obs, state, reward, *_ = steps(state, jnp.int32(63))
    assert obs.shape == (env.obs_size,) and obs.dtype == jnp.float32 and reward.dtype == jnp.float32


def test_an_environment_without_a_time_limit_gets_ours_and_a_generator_can_be_set():
    knapsack = make_raw_env("jumanji/Knapsack-v1")
    assert knapsack.max_episode_steps == 1000 and knapsack.obs_size == 4 * 50
    assert knapsack.action_space.num_actions == 50
    small = make_raw_env("jumanji/Knapsack-v1", {"generator": {"num_items": 10, "total_budget": 2.5},
                                                 "time_limit": 20})
    assert small.max_episode_steps == 20 and small.obs_size == 40 and small.action_space.num_actions == 10


@pytest.mark.parametrize("values, field, words", [
    ({"env": "jumanji/Snak-v1"}, "env", "did you mean Snake-v1"),
    ({"env": "jumanji/Sokoban-v0"}, "env", "downloads its levels"),
    ({"env": "jumanji/JobShop-v0"}, "env", "more than the 10000"),
    ({"env": "jumanji/Connector-v3"}, "env", "one reward per agent"),
    ({"env": SNAKE, "env_params": {"num_row": 6}}, "env_params.num_row", "no such parameter; did you mean num_rows"),
    ({"env": SNAKE, "env_params": {"time_limit": 0}}, "env_params.time_limit", "at least 1"),
    ({"env": SNAKE, "env_params": {"num_rows": 2.5}}, "env_params.num_rows", "integer"),
    ({"env": SNAKE, "env_params": {"viewer": 1}}, "env_params.viewer", "Python object"),
    ({"env": "jumanji/Knapsack-v1", "env_params": {"generator": {"items": 3}}}, "env_params.generator.items",
     "did you mean num_items"),
    ({"env": "jumanji/Knapsack-v1", "env_params": {"generator": {"num_items": 0}}},
     "env_params.generator.num_items", "at least 1"),
])
def test_bad_names_and_settings_are_refused_naming_the_field(values, field, words):
    with pytest.raises(ConfigError, match=words) as error:
        ppo.make_config(values)
    assert error.value.field == field


@pytest.mark.slow  # compiles a whole training program: run by .ci/run after the default suite
def test_a_tiny_training_run_from_the_shipped_config():
    cfg = ppo.load_config("configs/jumanji/snake.yaml", {"num_envs": 4, "num_steps": 8, "total_timesteps": 64,
                                                         "hidden_sizes": [16], "num_minibatches": 2})
    assert cfg.env.startswith("jumanji/Snake")
    env = ppo.make_env(cfg)
    assert env.action_space.num_actions == 4
    out = jax.jit(ppo.make_train(cfg))(jax.random.PRNGKey(0))
    for name in ("policy_loss", "value_loss", "entropy", "total_loss", "grad_norm"):
        assert np.all(np.isfinite(np.asarray(out.metrics[name], np.float64))), name
