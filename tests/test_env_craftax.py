"""Craftax behind the environment protocol: flat float32 observations, the time limit
(truncated, bootstrapped) told apart from death (terminated, not), the names and settings'
checks, and a tiny training run. Craftax compiles slowly on a CPU (a vmapped Classic step
takes about 8 s): the episode tests share one compiled scan, and are long checks (`-m slow`), as
is the training run; the names, settings and the environments' shapes (traced) are checked here."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("craftax")

import purejaxppo as ppo
from purejaxppo.envs import make_env, make_raw_env
from purejaxppo.errors import ConfigError

CLASSIC = "craftax/Craftax-Classic-Symbolic-v1"
NOOP = 0  # Craftax's action 0 does nothing: a living agent stays alive for a few steps


@pytest.fixture(scope="module")
def episodes():
    """Three Classic envs, time limit 5, 5 NOOP steps each. Env 0 lives; env 1's health is
    set to 0 before step 3 (it dies there); env 2's before step 5 (it dies on the step the
    time limit is reached)."""
    env = make_raw_env(CLASSIC, {"max_timesteps": 5})
    kill_at = jnp.array([[0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 1]], jnp.bool_)  # [step, env]

    def run(key):
        reset_key, step_key = jax.random.split(key)
        obs, state = jax.vmap(env.reset)(jax.random.split(reset_key, 3))

        def step(state, inputs):
            key, kill = inputs
            state = state.replace(player_health=jnp.where(kill, 0, state.player_health))
            out = jax.vmap(env.step)(jax.random.split(key, 3), state, jnp.full(3, NOOP, jnp.int32))
            return out[1], (out[0], out[2], out[3], out[4], out[5])

        unlocked = jax.vmap(env.achievements)(state)
        _, steps = jax.lax.scan(step, state, (jax.random.split(step_key, 5), kill_at))
        return obs, steps, unlocked

    return env, jax.jit(run)(jax.random.PRNGKey(0))


@pytest.mark.slow  # the compiled Classic episodes (about 20 s on a 2-core CPU)
def test_reset_and_step_give_flat_float32_observations_and_bool_flags(episodes):
    env, (first_obs, (obs, reward, terminated, truncated, info), _) = episodes
    assert (env.obs_size, env.action_space.kind, env.action_space.num_actions) == (1345, "discrete", 17)
    assert env.reset_strategy == "per_rollout" and env.max_episode_steps == 5
    assert first_obs.shape == (3, env.obs_size) and first_obs.dtype == jnp.float32
    assert obs.shape == (5, 3, env.obs_size) and obs.dtype == jnp.float32
    assert reward.dtype == jnp.float32 and reward.shape == (5, 3)
    assert terminated.dtype == jnp.bool_ and truncated.dtype == jnp.bool_ and info == {}
    assert np.all(np.isfinite(obs)) and np.all((obs >= 0) & (obs <= 1))  # Craftax's Box(0, 1)


@pytest.mark.slow  # the compiled Classic episodes (about 20 s on a 2-core CPU)
def test_the_time_limit_truncates_and_death_terminates(episodes):
    _, (_, (_, _, terminated, truncated, _), _) = episodes
    np.testing.assert_array_equal(truncated[:, 0], [0, 0, 0, 0, 1])  # alive at the time limit
    np.testing.assert_array_equal(terminated[:, 0], [0, 0, 0, 0, 0])
    np.testing.assert_array_equal(terminated[:3, 1], [0, 0, 1])      # dies at step 3
    np.testing.assert_array_equal(truncated[:3, 1], [0, 0, 0])
    np.testing.assert_array_equal(terminated[:, 2], [0, 0, 0, 0, 1])  # dies on the last step: both
    np.testing.assert_array_equal(truncated[:, 2], [0, 0, 0, 0, 1])


def test_make_env_builds_both_offered_environments_with_their_time_limits():
    classic = make_env(ppo.make_config({"env": CLASSIC}))
    assert (classic.obs_size, classic.action_space.num_actions, classic.max_episode_steps) == (1345, 17, 10000)
    full = make_env(ppo.make_config({"env": "craftax/Craftax-Symbolic-v1", "env_params": {"max_timesteps": 7}}))
    assert (full.obs_size, full.action_space.num_actions, full.max_episode_steps) == (8268, 43, 7)
    assert full.reset_strategy == "per_rollout"
    # shapes and dtypes of a step through the wrappers, traced only (compiling full Craftax is slow)
    obs, state = jax.eval_shape(full.reset, jax.random.PRNGKey(0))
    out = jax.eval_shape(full.step, jax.random.PRNGKey(1), state, jnp.int32(0))
    assert (obs.shape, obs.dtype, out[0].shape, out[2].dtype, out[3].dtype, out[4].dtype) == \
        ((8268,), jnp.float32, (8268,), jnp.float32, jnp.bool_, jnp.bool_)


@pytest.mark.slow  # the compiled Classic episodes (about 20 s on a 2-core CPU)
def test_achievements_are_readable_from_the_raw_state(episodes):
    env, (_, _, unlocked) = episodes
    assert len(env.achievement_names) == 22 and env.achievement_names[0] == "collect_wood"
    assert unlocked.shape == (3, 22) and unlocked.dtype == jnp.bool_ and not np.any(unlocked)  # a fresh world


@pytest.mark.parametrize("values, field, words", [
    ({"env": "craftax/Craftax-Classic-Symbolic-v2"}, "env", "did you mean Craftax-Classic-Symbolic-v1"),
    ({"env": "craftax/Craftax-Pixels-AutoReset-v1"}, "env", "use craftax/Craftax-Pixels-v1"),
    ({"env": "craftax/Craftax-Symbolic-AutoReset-v1"}, "env", "reset here"),
    ({"env": CLASSIC, "env_params": {"max_timestep": 5}}, "env_params.max_timestep",
     "no such parameter; did you mean max_timesteps"),
    ({"env": CLASSIC, "env_params": {"god_mode": True}}, "env_params.god_mode", "no such parameter"),
    ({"env": CLASSIC, "env_params": {"max_timesteps": 0}}, "env_params.max_timesteps", "at least 1"),
    ({"env": CLASSIC, "env_params": {"max_timesteps": 2.5}}, "env_params.max_timesteps", "integer"),
    ({"env": CLASSIC, "env_params": {"always_diamond": "yes"}}, "env_params.always_diamond", "true or false"),
    ({"env": CLASSIC, "env_params": {"fractal_noise_angles": [1, 2, 3, 4]}}, "env_params.fractal_noise_angles",
     "not offered"),
])
def test_bad_craftax_names_and_settings_are_refused_naming_the_field(values, field, words):
    with pytest.raises(ConfigError, match=words) as error:
        ppo.make_config(values)
    assert error.value.field == field


def test_settings_are_passed_to_craftax_in_their_defaults_types():
    env = make_raw_env("craftax/Craftax-Symbolic-v1", {"god_mode": True, "day_length": 100.0})
    assert env.params.god_mode is True and env.params.day_length == 100 and isinstance(env.params.day_length, int)


@pytest.mark.slow  # about 60 s on a 2-core CPU, mostly compiling
@pytest.mark.parametrize("name", ["classic_symbolic", "classic_symbolic_rnn"])
def test_a_tiny_training_run_gives_finite_metrics(name):
    """The shipped config (MLP and GRU), shrunk; a time limit of 4 ends episodes in every
    update (the episode metrics of an update where none ended are NaN by design)."""
    cfg = ppo.load_config(f"configs/craftax/{name}.yaml", {
        "num_envs": 4, "num_steps": 8, "total_timesteps": 64, "num_minibatches": 2, "hidden_sizes": [16],
        "gru_size": 16, "env_params": {"max_timesteps": 4}})
    out = jax.jit(ppo.make_train(cfg))(jax.random.PRNGKey(0))
    assert cfg.num_updates == 2
    np.testing.assert_array_equal(out.metrics["episode_length"], [4, 4])
    for name, values in out.metrics.items():
        assert np.all(np.isfinite(np.asarray(values, np.float64))), name


@pytest.mark.parametrize("name, limit", [("classic_symbolic", 10000), ("symbolic", 100000)])
def test_the_shipped_craftax_configs_are_valid(name, limit):
    cfg = ppo.load_config(f"configs/craftax/{name}.yaml")
    assert cfg.env.startswith("craftax/") and cfg.env_params == {"max_timesteps": limit}
    assert (cfg.num_envs, cfg.num_steps, cfg.lr, cfg.gae_lambda, cfg.hidden_sizes) == (1024, 64, 2e-4, 0.8, (512,) * 3)


@pytest.mark.parametrize("name, limit", [("classic_symbolic_rnn", 10000), ("symbolic_rnn", 100000)])
def test_the_shipped_craftax_ppo_rnn_configs_are_the_papers(name, limit):
    cfg = ppo.load_config(f"configs/craftax/{name}.yaml")
    assert cfg.env_params == {"max_timesteps": limit} and cfg.num_envs % cfg.num_minibatches == 0
    assert (cfg.policy, cfg.gru_size, cfg.hidden_sizes, cfg.activation) == ("gru", 512, (512, 512), "relu")
    assert (cfg.num_envs, cfg.num_steps, cfg.lr, cfg.gae_lambda, cfg.max_grad_norm) == (1024, 64, 2e-4, 0.8, 1.0)


@pytest.mark.slow
def test_the_pixel_environments_are_offered_as_images_for_a_cnn_torso():
    """Craftax-Classic-Pixels-v1: 63 x 63 RGB in [0, 1]. (Its first build renders Craftax's
    textures, about a minute, cached by Craftax for later builds.)"""
    cfg = ppo.make_config({"env": "craftax/Craftax-Classic-Pixels-v1", "torso": "cnn", "cnn_channels": [8, 16],
                           "cnn_kernels": [4, 3], "cnn_strides": [2, 2], "hidden_sizes": [32], "num_envs": 2,
                           "num_steps": 8, "num_minibatches": 2, "total_timesteps": 32,
                           "env_params": {"max_timesteps": 4}})
    learner = ppo.Learner(cfg)
    assert learner.env.obs_shape == (63, 63, 3) and learner.env.action_space.num_actions == 17
    state, metrics = jax.jit(learner.run)(learner.init(jax.random.PRNGKey(0)))
    assert 0.0 <= float(state.obs.min()) and float(state.obs.max()) <= 1.0 and state.obs.shape == (2, 63, 63, 3)
    assert np.all(np.asarray(metrics["first_minibatch_ratio_error"]) == 0)
    assert int(np.sum(metrics["episodes_finished"])) >= 2  # the 4-step time limit ended episodes
