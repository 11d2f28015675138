"""Brax behind the environment protocol: our own episode handling (time limit -> truncated and
bootstrapped, the environment's done -> terminated, not), fresh resets, the settings' checks,
and learning on `fast` (CPU compiles of Brax are slow: these tests use `fast` and `spring`; those
that compile a rollout of `inverted_pendulum` or train are long checks, `-m slow`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
from purejaxppo.errors import ConfigError
from purejaxppo.gae import gae
from purejaxppo.rollout import rollout

PENDULUM = {"backend": "spring"}


def push(force):
    """A policy that pushes with a constant force (and says its value is 1 + sum(obs))."""
    def policy(carry, obs, key):
        action = jnp.full((obs.shape[0], 1), force, jnp.float32)
        return carry, action, action, jnp.zeros(obs.shape[0]), 1.0 + jnp.sum(obs, axis=-1)
    return policy


def run(env, policy, num_envs, num_steps, seed=0):
    obs, state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(seed), num_envs))
    return jax.jit(lambda s, o, k: rollout(env, policy, s, o, k, num_steps, env.reset_strategy))(
        state, obs, jax.random.PRNGKey(seed + 1))


@pytest.fixture(scope="module")
def pendulum_rollouts():
    """inverted_pendulum: 4 steps of no force end by the time limit (episode_length 4); a
    full push topples the pole (|angle| > 0.2: Brax's done) long before 1000 steps."""
    short = ppo.make_env(ppo.make_config({"env": "brax/inverted_pendulum",
                                          "env_params": {**PENDULUM, "episode_length": 4}}))
    long = ppo.make_env(ppo.make_config({"env": "brax/inverted_pendulum", "env_params": PENDULUM}))
    return run(short, push(0.0), 2, 10)[3], run(long, push(3.0), 2, 40)[3]


@pytest.mark.slow  # compiles Brax rollouts: run by .ci/run after the default suite
def test_the_time_limit_truncates_and_the_environments_done_terminates(pendulum_rollouts):
    limited, toppled = pendulum_rollouts
    np.testing.assert_array_equal(limited.truncated[:, 0], [0, 0, 0, 1, 0, 0, 0, 1, 0, 0])
    assert not np.any(limited.terminated)
    assert np.any(toppled.terminated[:, 0]) and not np.any(toppled.truncated)
    end = int(np.argmax(toppled.terminated[:, 0]))
    assert 2 < end < 39 and int(toppled.episode_length[end, 0]) == end + 1


@pytest.mark.slow  # compiles Brax rollouts: run by .ci/run after the default suite
def test_a_truncated_step_is_bootstrapped_and_a_terminated_one_is_not(pendulum_rollouts):
    gamma = 0.9
    for traj in pendulum_rollouts:
        next_values = 1.0 + jnp.sum(traj.final_obs, axis=-1)  # the policy's value of the final observation
        _, targets = gae(traj.reward, traj.value, next_values, traj.terminated, traj.truncated, gamma, 1.0)
        for t, e in zip(*np.nonzero(np.asarray(traj.episode_done))):
            expected = traj.reward[t, e] + (0.0 if traj.terminated[t, e] else gamma * next_values[t, e])
            np.testing.assert_allclose(targets[t, e], expected, rtol=1e-6)
    limited, toppled = pendulum_rollouts
    # the final observation is the one the episode ended on, not the fresh episode's first
    assert not np.array_equal(limited.final_obs[3], limited.obs[4])
    np.testing.assert_array_equal(limited.final_obs[2], limited.obs[3])


@pytest.mark.slow  # compiles Brax rollouts: run by .ci/run after the default suite
def test_slots_that_reset_together_start_from_different_fresh_states(pendulum_rollouts):
    limited, _ = pendulum_rollouts
    starts = np.asarray(limited.obs)[[0, 4, 8]]  # both slots restart at steps 4 and 8
    assert not np.array_equal(starts[1, 0], starts[1, 1])  # two slots, the same step
    assert not np.array_equal(starts[0, 0], starts[1, 0])  # a reset is not the first state again
    # a later rollout (new key) draws new ones
    env = ppo.make_env(ppo.make_config({"env": "brax/inverted_pendulum",
                                        "env_params": {**PENDULUM, "episode_length": 4}}))
    later = run(env, push(0.0), 2, 10, seed=5)[3]
    assert not np.array_equal(np.asarray(later.obs[4]), starts[1])


def test_action_repeat_sums_rewards_and_shortens_the_episode():
    cfg = ppo.make_config({"env": "brax/fast", "env_params": {"episode_length": 12, "action_repeat": 3}})
    env = ppo.make_env(cfg)
    assert env.max_episode_steps == 4
    one = ppo.make_env(ppo.make_config({"env": "brax/fast", "env_params": {"episode_length": 12}}))
    repeated, single = run(env, push(1.0), 1, 4)[3], run(one, push(1.0), 1, 12)[3]
    np.testing.assert_allclose(repeated.reward[:, 0], np.asarray(single.reward[:, 0]).reshape(4, 3).sum(1),
                               rtol=1e-5)
    np.testing.assert_array_equal(repeated.truncated[:, 0], [0, 0, 0, 1])


def test_the_action_range_is_read_from_the_environment():
    env = ppo.make_env(ppo.make_config({"env": "brax/inverted_pendulum", "env_params": PENDULUM}))
    np.testing.assert_array_equal(env.action_space.low, [-3.0])
    np.testing.assert_array_equal(env.action_space.high, [3.0])


@pytest.mark.parametrize("values, field, words", [
    ({"env": "brax/antt"}, "env", "did you mean ant"),
    ({"env": "brx/ant"}, "env", "unknown environment family"),
    ({"env": "brax/fast", "env_params": {"backend": "physx"}}, "env_params.backend", "one of generalized"),
    ({"env": "brax/fast", "env_params": {"action_repeat": 0}}, "env_params.action_repeat", "at least 1"),
    ({"env": "brax/fast", "env_params": {"episode_length": 2.5}}, "env_params.episode_length", "integer"),
    ({"env": "brax/fast", "env_params": {"max_steps_in_episode": 9}}, "env_params.max_steps_in_episode",
     "no such parameter; it has backend, episode_length"),
    ({"env": "CartPole-v1", "env_params": {"backend": "spring"}}, "env_params.backend", "no such parameter"),
])
def test_bad_brax_settings_are_refused_naming_the_field(values, field, words):
    with pytest.raises(ConfigError, match=words) as error:
        ppo.make_config(values)
    assert error.value.field == field


@pytest.mark.slow  # trains on Brax: run by .ci/run after the default suite
@pytest.mark.parametrize("squash", ["clip", "tanh"])
def test_fast_learns_to_push_forward(squash):
    """The optimum is 143.1 (push forward at every step of the 128-step episode); a policy
    that does not learn (the initial mean action 0 does not push) scores 0 greedily. Both
    ways a Gaussian sample becomes an action learn it."""
    cfg = ppo.load_config("configs/brax/fast.yaml", {"total_timesteps": 16 * 32 * 48, "action_squash": squash})
    out = jax.jit(ppo.make_train(cfg, eval_episodes=4))(jax.random.PRNGKey(0))
    assert float(jnp.min(out.evaluation["deterministic"])) > 135
    assert float(jnp.max(jnp.abs(out.metrics["first_minibatch_ratio_error"]))) < 1e-5  # rounding: normalize_obs


def test_building_an_env_leaves_no_mujoco_log_in_the_users_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ppo.make_config({"env": "brax/halfcheetah", "env_params": {"backend": "positional"}})  # its XML warns
    assert list(tmp_path.iterdir()) == []


# humanoid's and ant's models take seconds to build on a CPU: long checks
@pytest.mark.parametrize("path", [
    pytest.param(path, marks=pytest.mark.slow) if path.endswith(("humanoid.yaml", "ant.yaml")) else path
    for path in sorted(str(p) for p in __import__("pathlib").Path("configs/brax").glob("*.yaml"))])
def test_every_shipped_brax_config_is_valid(path):
    cfg = ppo.load_config(path)
    assert cfg.env.startswith("brax/") and cfg.normalize_obs


@pytest.mark.slow  # compiles Brax rollouts: run by .ci/run after the default suite
def test_a_replay_shows_one_whole_episode(tmp_path):
    from purejaxppo.experiments import replay
    from purejaxppo.gate import gate

    bundle = gate({"env": "brax/inverted_pendulum", "env_params": {**PENDULUM, "episode_length": 50},
                   "normalize_obs": True})
    state = ppo.Learner(bundle).init(jax.random.PRNGKey(0))
    html, total, steps = replay.render(bundle, state, jax.random.PRNGKey(1))
    assert "<html>" in html and "brax-viewer" in html
    assert 1 <= steps <= 50 and total == steps  # a reward of 1 for every step the pole stays up


def test_a_replay_is_drawn_for_brax_alone():
    from purejaxppo.experiments import replay
    from purejaxppo.gate import gate

    with pytest.raises(ConfigError, match="replays are drawn for Brax"):
        replay.render(gate({}), ppo.Learner(gate({})).init(jax.random.PRNGKey(0)), jax.random.PRNGKey(1))


@pytest.mark.slow
def test_eval_renders_a_replay_of_a_trained_run(tmp_path, capsys, monkeypatch):
    """... building the environment once and restoring the checkpoint once for it all."""
    import collections
    import json

    import purejaxppo.envs
    from purejaxppo.experiments import replay
    from purejaxppo.experiments.checkpoint import Checkpoints
    from purejaxppo.experiments.cli import main

    out, replay_file = tmp_path / "run", tmp_path / "replay.html"
    assert main(["train", "brax/inverted_pendulum", "--set", "num_envs=4", "--set", "num_steps=8",
                 "--set", "total_timesteps=64", "--set", "env_params={backend: spring, episode_length: 20}",
                 "--eval-episodes", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    counts = collections.Counter()

    def counted(name, real):
        def call(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(purejaxppo.envs, "make_raw_env", counted("env", purejaxppo.envs.make_raw_env))
    monkeypatch.setattr(replay, "make_raw_env", counted("env", replay.make_raw_env))
    monkeypatch.setattr(Checkpoints, "restore", counted("restore", Checkpoints.restore))
    assert main(["eval", str(out), "--episodes", "2", "--render", str(replay_file), "--json"]) == 0
    assert dict(counts) == {"env": 1, "restore": 1}
    printed = json.loads(capsys.readouterr().out)
    assert "brax-viewer" in replay_file.read_text() and 1 <= printed["replay"]["steps"] <= 20
    assert printed["replay"]["return"] == printed["replay"]["steps"]  # 1 per step the pole stays up
    # a replay never replaces a file
    assert main(["eval", str(out), "--render", str(replay_file)]) == 2
    assert "--render" in capsys.readouterr().err
