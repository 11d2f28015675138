"""MuJoCo Playground behind the environment protocol (`env: playground/<Task>`): the suite's
tasks with MJX's jax implementation by default, the action range from the model, our time
limit as truncation, NaN physics as a flagged termination; refused names, settings and a
robot task whose assets are not installed, each one line before anything compiles; a run
over two devices that checkpoints, resumes and evaluates; the shipped CPU config's learning."""

import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("mujoco_playground")

import purejaxppo as ppo
from conftest import cut_back
from purejaxppo.envs import make_raw_env
from purejaxppo.errors import ConfigError

CARTPOLE = "playground/CartpoleBalance"


@pytest.fixture(scope="module")
def cartpole():
    return make_raw_env(CARTPOLE, {"episode_length": 5})


def test_a_suite_task_is_a_continuous_box_env_on_mjx_jax_with_our_time_limit(cartpole):
    assert cartpole.impl == "jax" and cartpole._env.mjx_model.impl.value == "jax"  # not Playground's warp
    assert cartpole.obs_shape == (5,) and cartpole.max_episode_steps == 5 and cartpole.reset_strategy == "per_rollout"
    space = cartpole.action_space
    assert space.kind == "continuous" and space.shape == (1,)
    np.testing.assert_array_equal(space.low, [-1.0])
    np.testing.assert_array_equal(space.high, [1.0])

    def episode(key):
        obs, state = cartpole.reset(key)
        def step(state, key):
            obs, state, reward, terminated, truncated, info = cartpole.step(key, state, jnp.ones(1))
            return state, (obs, reward, terminated, truncated, info["physics_nan"])
        return jax.lax.scan(step, state, jax.random.split(key, 6))[1]

    obs, reward, terminated, truncated, nan = jax.jit(episode)(jax.random.PRNGKey(0))
    assert obs.dtype == jnp.float32 and reward.dtype == jnp.float32 and terminated.dtype == jnp.bool_
    np.testing.assert_array_equal(truncated[:5], [0, 0, 0, 0, 1])  # episode_length 5: the 5th step truncates
    assert not terminated.any() and not nan.any() and np.all(reward > 0)  # the suite's tasks end only on NaN


def test_nan_physics_terminate_flagged_with_the_observation_zeroed(cartpole):
    obs, state = jax.jit(cartpole.reset)(jax.random.PRNGKey(0))
    data = state.env_state.data
    broken = state.replace(env_state=state.env_state.replace(data=data.replace(qvel=data.qvel.at[0].set(jnp.nan))))
    obs, _, reward, terminated, truncated, info = jax.jit(cartpole.step)(jax.random.PRNGKey(1), broken, jnp.zeros(1))
    assert bool(terminated) and bool(info["physics_nan"]) and not bool(truncated)
    assert np.all(np.isfinite(np.asarray(obs))) and np.isfinite(float(reward))


def test_action_repeat_counts_agent_steps_as_brax_does():
    env = make_raw_env(CARTPOLE, {"episode_length": 10, "action_repeat": 4})
    assert env.action_repeat == 4 and env.max_episode_steps == math.ceil(10 / 4)


@pytest.mark.parametrize("name, params, field, words", [
    ("CartpoleBalanse", {}, "env", "did you mean CartpoleBalance"),
    ("CartpoleBalance", {"episode_lenght": 5}, "env_params.episode_lenght", "has no such parameter"),
    ("CartpoleBalance", {"episode_length": 0}, "env_params.episode_length", "at least 1"),
    ("CartpoleBalance", {"impl": "mujoco"}, "env_params.impl", "must be jax"),
    ("CartpoleBalance", {"action_repeat": 0}, "env_params.action_repeat", "at least 1"),
    ("CartpoleBalance", {"obs_key": "pixels"}, "env_params.obs_key", "one array, not a dict"),
    ("CartpoleBalance", {"impl": "warp"}, "env_params.impl", "one contact pool for all envs"),
    ("CartpoleBalance", {"ctrl_dt": "fast"}, "env_params.ctrl_dt", "must be a number"),
])
def test_bad_names_and_settings_are_refused_naming_the_field(name, params, field, words):
    with pytest.raises(ConfigError, match=words) as caught:
        make_raw_env(f"playground/{name}", params)
    assert caught.value.field == field


def test_a_robot_task_without_menagerie_is_one_line_exit_2_and_no_folder(tmp_path, monkeypatch):
    """Go1's model comes from MuJoCo Menagerie, which Playground would clone from GitHub at
    first use (offline: a traceback): refused in one line naming the folder and how to fill it."""
    from mujoco_playground._src import mjx_env

    if mjx_env.MENAGERIE_PATH.exists():
        pytest.skip("MuJoCo Menagerie is installed here")
    result = subprocess.run([sys.executable, "-m", "purejaxppo.experiments.cli", "train", "cartpole", "--set",
                             "env=playground/Go1JoystickFlatTerrain", "--out", str(tmp_path / "run")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("purejaxppo: error: env='playground/Go1JoystickFlatTerrain': "
                                                   "needs MuJoCo Menagerie's robot models, not found at "), lines
    assert "git clone https://github.com/google-deepmind/mujoco_menagerie" in lines[0]
    assert not (tmp_path / "run").exists() and not mjx_env.MENAGERIE_PATH.exists()


@pytest.mark.slow  # builds 28 MJX models (~40 s)
def test_every_shipped_playground_config_loads_and_the_gpu_ones_cover_the_suite():
    """One GPU-sized config per dm_control-suite task (Playground's own PPO settings), each of
    whose env builds with its settings; the CPU-sized ones beside them."""
    from mujoco_playground import dm_control_suite

    from purejaxppo import configs

    names = [n for n in configs.names() if n.startswith("playground/")]
    envs = {}
    for name in names:
        cfg = ppo.load_config(configs.find(name))
        envs.setdefault(name.startswith("playground/gpu/"), set()).add(cfg.env)
        assert configs.references()[name]["size"] == ("gpu" if name.startswith("playground/gpu/") else "cpu")
    assert envs[True] == {f"playground/{task}" for task in dm_control_suite.ALL_ENVS}
    assert "playground/CartpoleBalance" in envs[False]


@pytest.mark.slow  # compiles MJX programs over two devices (~1 min on 2 cores): run by .ci/run
def test_two_seeds_over_two_devices_checkpoint_resume_and_evaluate(tmp_path):
    """The shipped CPU config, cut short: two seeds sharded over two devices (MJX's state holds
    zero-size arrays, data.act), a checkpoint every 2 updates; cut back to the first, resumed,
    the metrics equal the whole run's bit for bit; `eval` reads the folder; no MuJoCo log file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    cli = [sys.executable, "-m", "purejaxppo.experiments.cli"]
    train = [*cli, "train", "playground/cartpole_balance", "--seeds", "2", "--set", "num_envs=4", "--set",
             "num_steps=16", "--set", "total_timesteps=384", "--checkpoint-every", "2", "--eval-episodes", "2",
             "--set", "env_params={episode_length: 40}", "--no-cache"]
    whole = subprocess.run([*train, "--out", str(tmp_path / "whole")], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=900)
    assert whole.returncode == 0, whole.stderr[-3000:]
    cut = cut_back(tmp_path / "whole", tmp_path / "cut", 2)
    resumed = subprocess.run([*cli, "train", "--resume", str(cut), "--no-cache"], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (cut / "metrics.csv").read_text() == (tmp_path / "whole" / "metrics.csv").read_text()
    evaluated = subprocess.run([*cli, "eval", str(cut), "--episodes", "2", "--no-cache"], env=env, cwd=tmp_path,
                               capture_output=True, text=True, timeout=900)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


@pytest.mark.learning
def test_the_shipped_cpu_cartpole_balance_config_balances_the_pole():
    """The shipped CPU config (1e6 steps, 2 seeds): greedy evaluation 994 ± 2.4 of 1000 when
    tuned. Thresholded at a mean of 700 (the issue's bar): after one update the same seeds score
    339 and 401 (the pole starts upright and the reward is dense, so a poor policy still scores)."""
    cfg = ppo.load_config("configs/playground/cartpole_balance.yaml")
    assert cfg.total_timesteps == 1_000_000 and cfg.env_params["impl"] == "jax"
    out = jax.jit(jax.vmap(ppo.make_train(cfg, eval_episodes=8)))(jax.random.split(jax.random.PRNGKey(0), 2))
    greedy = np.asarray(out.evaluation["deterministic"]).mean(axis=1)
    print("greedy evaluation per seed:", greedy)
    assert greedy.mean() >= 700, greedy
