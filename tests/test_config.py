"""Every bad input is caught before compiling, with a message naming field, value and rule."""

import subprocess
import sys

import jax.numpy as jnp
import pytest

import purejaxppo as ppo
from purejaxppo.config import ConfigError

CARTPOLE = "configs/cartpole.yaml"


def error_for(**values):
    with pytest.raises(ConfigError) as info:
        ppo.make_config(values)
    return info.value


@pytest.mark.parametrize("values, field, rule", [
    (dict(num_envs=3, num_steps=5, num_minibatches=4), "num_minibatches", "must divide the batch"),
    (dict(clip_eps=0.0), "clip_eps", "must be positive"),
    (dict(clip_eps=-0.1), "clip_eps", "must be positive"),
    (dict(lr=-1e-3), "lr", "must be positive"),
    (dict(num_envs=0), "num_envs", "at least 1"),
    (dict(num_steps=-5), "num_steps", "at least 1"),
    (dict(update_epochs=0), "update_epochs", "at least 1"),
    (dict(gamma=1.5), "gamma", "[0, 1]"),
    (dict(gae_lambda=-0.1), "gae_lambda", "[0, 1]"),
    (dict(update_epochs=6, max_epochs=5), "update_epochs", "must not exceed max_epochs"),
    (dict(num_envs="four"), "num_envs", "must be an integer"),
    (dict(num_envs=4.5), "num_envs", "must be an integer"),
    (dict(lr="fast"), "lr", "must be a number"),
    (dict(anneal_lr="yes"), "anneal_lr", "true or false"),
    (dict(hidden_sizes=[64, 0]), "hidden_sizes", "positive integers"),
    (dict(activation="gelu"), "activation", "one of tanh, relu"),
    (dict(target_kl=0.0), "target_kl", "positive"),
    (dict(total_timesteps=100), "total_timesteps", "at least one batch"),
    (dict(env="CartPole-v2"), "env", "did you mean CartPole-v1"),
    (dict(env="Breakout"), "env", "Breakout-MinAtar"),
    (dict(env_params={"max_steps": 3}), "env_params.max_steps", "no such parameter"),
    (dict(env="CartPole-v1", log_std_init=-0.5), "log_std_init", "only applies to continuous"),
    (dict(clip_epsilon=0.2), "clip_epsilon", "did you mean clip_eps"),
])
def test_bad_input_is_named(values, field, rule):
    error = error_for(**values)
    assert error.field == field
    assert rule in str(error)
    assert field in str(error)


def test_unknown_key_in_yaml_is_an_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("env: CartPole-v1\nnum_env: 8\n")
    with pytest.raises(ConfigError, match="num_env.*did you mean num_envs"):
        ppo.load_config(path)
    with pytest.raises(ConfigError, match="learning_rate"):
        ppo.load_config(CARTPOLE, overrides={"learning_rate": 1e-3})


def test_config_loads_and_hparams_are_traced_values():
    cfg = ppo.load_config(CARTPOLE, overrides={"num_envs": 8, "env_params": {"max_steps_in_episode": 200}})
    assert cfg.num_envs == 8 and cfg.batch_size == 8 * 128
    assert cfg.lr == 2.5e-4 and cfg.anneal_lr is True and cfg.epochs_scan == 4
    hp = ppo.HParams.from_config(cfg)
    assert hp.update_epochs.dtype == jnp.int32 and float(hp.clip_eps) == pytest.approx(0.2)
    assert float(ppo.HParams.from_config(ppo.make_config({"target_kl": None})).target_kl) == float("inf")
    env = ppo.make_env(cfg)
    assert env.env.env._params.max_steps_in_episode == 200


def test_continuous_env_accepts_log_std_init():
    cfg = ppo.make_config(dict(env="Pendulum-v1", log_std_init=-0.5))
    assert ppo.make_env(cfg).action_space.kind == "continuous"


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "purejaxppo.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


@pytest.mark.parametrize("args, needle", [
    (["train", CARTPOLE, "--set", "num_minibatches=3"], "num_minibatches=3"),
    (["train", CARTPOLE, "--set", "clip_eps=0"], "clip_eps=0"),
    (["train", CARTPOLE, "--set", "gamma=2"], "gamma=2"),
    (["train", CARTPOLE, "--set", "nonsense=1"], "nonsense"),
    (["train", CARTPOLE, "--set", "env=Pong"], "Pong-misc"),
    (["train", CARTPOLE, "--seeds", "0"], "--seeds=0"),
    (["train", CARTPOLE, "--max-parallel", "0"], "--max-parallel=0"),
    (["train", "configs/missing.yaml"], "file not found"),
])
def test_cli_bad_input_exits_2_without_traceback(args, needle):
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_refuses_to_overwrite_a_run_folder(tmp_path):
    (tmp_path / "metrics.csv").write_text("precious\n")
    result = run_cli("train", CARTPOLE, "--out", str(tmp_path))
    assert result.returncode == 2 and "--out" in result.stderr
    assert (tmp_path / "metrics.csv").read_text() == "precious\n"


@pytest.mark.parametrize("name", ["cartpole", "acrobot", "pendulum", "minatar_breakout",
                                  "minatar_space_invaders"])
def test_shipped_configs_load(name):
    cfg = ppo.load_config(f"configs/{name}.yaml")
    assert cfg.num_updates >= 1
