"""What goes wrong only at run time is counted and named, never averaged away: steps whose
action mask allows no action (the policy then takes action 0), and episodes that do not end
within `max_episode_steps` (left out of the evaluation's mean, counted in training)."""

import csv
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
from purejaxppo.envs import ActionSpace
from purejaxppo.experiments import report
from purejaxppo.experiments.cli import main

TINY = dict(num_envs=4, num_steps=16, num_minibatches=2, total_timesteps=640)  # 10 updates


class DeadEnds:
    """Every third step of an episode (steps 2 and 5) its mask allows no action; elsewhere
    actions 1 and 2 only. The reward is 1 for action 0, so a return counts the steps it was
    taken. Episodes end at their time limit of 6 steps."""

    obs_shape = (1,)
    action_space = ActionSpace("discrete", num_actions=3)
    max_episode_steps = 6

    def reset(self, key):
        return jnp.zeros(1), jnp.int32(0)

    def action_mask(self, steps):
        return jnp.where(steps % 3 == 2, jnp.array([False, False, False]), jnp.array([False, True, True]))

    def step(self, key, steps, action):
        steps = steps + 1
        reward = (action == 0).astype(jnp.float32)
        return jnp.zeros(1), steps, reward, jnp.bool_(False), steps >= self.max_episode_steps, {}


class LateState(NamedTuple):
    length: jnp.ndarray
    steps: jnp.ndarray


class Late:
    """Declares max_episode_steps 5, but half its episodes (drawn at reset) last 8 steps,
    the others 3; 1 per step."""

    obs_shape = (1,)
    action_space = ActionSpace("discrete", num_actions=2)
    max_episode_steps = 5

    def reset(self, key):
        return jnp.zeros(1), LateState(jnp.where(jax.random.bernoulli(key), 8, 3), jnp.int32(0))

    def step(self, key, state, action):
        steps = state.steps + 1
        ended = steps >= state.length
        return jnp.zeros(1), LateState(state.length, steps), jnp.float32(1.0), ended, jnp.bool_(False), {}


class Endless(Late):
    """Never ends an episode."""

    def reset(self, key):
        return jnp.zeros(1), LateState(jnp.int32(10**6), jnp.int32(0))


def dead_ends():
    return DeadEnds()


def late():
    return Late()


def endless():
    return Endless()


def train(env, seeds=1, eval_episodes=8):
    cfg = ppo.make_config(dict(TINY, env=f"test_runtime_counts:{env}"))
    out = jax.jit(jax.vmap(ppo.make_train(cfg, eval_episodes)))(jax.random.split(jax.random.PRNGKey(0), seeds))
    return cfg, jax.tree.map(np.asarray, out)


def summary_of(out, **names):
    return report.summarize(out.metrics, steps_per_run=640, run_seconds=1.0, compile_seconds=1.0,
                            evaluation=out.evaluation, **names)


def test_steps_whose_mask_allows_no_action_are_counted_and_take_action_0():
    cfg, out = train("dead_ends", seeds=2, eval_episodes=3)
    # each env's step t (from 0, one episode every 6 steps) allows no action where t % 3 == 2
    per_update = [4 * sum(t % 3 == 2 for t in range(16 * u, 16 * u + 16)) for u in range(cfg.num_updates)]
    np.testing.assert_array_equal(out.metrics["no_action_steps"], [per_update] * 2)
    for mode in ("deterministic", "stochastic"):
        np.testing.assert_array_equal(out.evaluation[f"{mode}_no_action_steps"], 2)  # steps 2 and 5 of each
        np.testing.assert_array_equal(out.evaluation[mode], 2.0)  # action 0 there, greedy or sampled; never elsewhere
    # training took action 0 at each of them too: every finished episode returned 2
    np.testing.assert_array_equal(out.metrics["episode_return"], 2.0)
    assert np.all(np.isfinite(out.metrics["total_loss"]))
    summary = summary_of(out, env="dead_ends")
    assert summary["counts"]["no_action_steps"] == 2 * sum(per_update) == 424
    assert summary["warnings"] == ["448 steps had an action mask that allowed no action (dead_ends) (424 in training, "
                                   "12 in greedy evaluation, 12 in sampled evaluation): the policy took action 0 "
                                   "there (every action masked alike)"]
    assert ("warning", summary["warnings"][0]) in report.summary_lines(summary)


@pytest.mark.slow  # a training program of its own: run by .ci/run after the default suite
def test_evaluation_episodes_that_do_not_end_in_time_are_counted_and_left_out_of_the_mean():
    _, out = train("late")
    returns = out.evaluation["deterministic"][0]
    unfinished = int(np.sum(np.isnan(returns)))
    assert 0 < unfinished < 8 and np.all(returns[~np.isnan(returns)] == 3.0)  # the 8-step ones: no partial 5
    summary = summary_of(out, env="late", max_episode_steps=5)
    assert summary["eval_return"]["mean"] == 3.0
    assert summary["counts"]["unfinished_deterministic"] == unfinished
    assert (f"{unfinished} of 8 greedy evaluation episodes did not end within max_episode_steps=5 (late): left out "
            f"of the mean") in summary["warnings"]
    # in training, each episode that ran past 5 steps is counted once (the ones of 3 are not)
    overlong = out.metrics["overlong_episodes"][0]
    assert overlong.sum() > 0 and summary["counts"]["overlong_episodes"] == overlong.sum()
    assert (f"{overlong.sum()} training episodes ran past max_episode_steps=5 (late) without ending: the "
            f"environment does not end its episodes at its own time limit") in summary["warnings"]


@pytest.mark.slow  # a training program of its own: run by .ci/run after the default suite
def test_episodes_that_never_end_are_counted_once_each_in_training_and_evaluation():
    _, out = train("endless", eval_episodes=3)
    np.testing.assert_array_equal(out.metrics["episodes_finished"], 0)
    np.testing.assert_array_equal(out.metrics["overlong_episodes"][0], [4] + [0] * 9)  # 4 envs, at their step 6
    assert np.all(np.isnan(out.evaluation["deterministic"])) and np.all(np.isnan(out.evaluation["stochastic"]))
    summary = summary_of(out)
    assert summary["counts"]["unfinished_stochastic"] == 3
    assert summary["warnings"] == [
        "4 training episodes ran past max_episode_steps without ending: the environment does not end its episodes "
        "at its own time limit",
        "3 of 3 greedy evaluation episodes did not end within max_episode_steps: left out of the mean",
        "3 of 3 sampled evaluation episodes did not end within max_episode_steps: left out of the mean"]


@pytest.mark.slow  # a training program of its own: run by .ci/run after the default suite
def test_a_run_that_went_well_has_no_warning():
    cfg = ppo.make_config(dict(TINY, env="CartPole-v1"))
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    good = jax.tree.map(np.asarray, jax.jit(jax.vmap(ppo.make_train(cfg, 2)))(keys))
    summary = summary_of(good)
    assert summary["warnings"] == [] and not any(label == "warning" for label, _ in report.summary_lines(summary))
    assert summary["counts"] == {"no_action_steps": 0, "overlong_episodes": 0, "eval_episodes_deterministic": 4,
                                 "unfinished_deterministic": 0, "no_action_steps_deterministic": 0,
                                 "eval_episodes_stochastic": 4, "unfinished_stochastic": 0,
                                 "no_action_steps_stochastic": 0}


@pytest.mark.slow  # a training program of its own: run by .ci/run after the default suite
def test_the_train_command_names_the_counts_in_its_table_and_summary(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text("env: test_runtime_counts:endless\nnum_envs: 4\nnum_steps: 16\nnum_minibatches: 2\n"
                              "total_timesteps: 640\n")
    assert main(["train", "c.yaml", "--out", "o", "--eval-episodes", "2"]) == 0
    printed = " ".join(capsys.readouterr().out.replace("│", " ").split())  # the table's wrapped cells, joined
    markdown = Path("o/summary.md").read_text()
    for text in ("4 training episodes ran past max_episode_steps=5 (test_runtime_counts:endless)",
                 "2 of 2 greedy evaluation episodes did not end within max_episode_steps=5",
                 "2 of 2 sampled evaluation episodes did not end"):
        assert text in printed and text in markdown
    assert main(["eval", "o", "--episodes", "2"]) == 2  # no return to report: one line that says why
    assert capsys.readouterr().err.strip().splitlines() == [
        "purejaxppo: error: o: none of the 2 episodes ended within the environment's max_episode_steps: its "
        "episodes never end, so there is no return to report"]


@pytest.mark.slow  # compiles its own run; the counts: the test above, the command's lines: the endless ones
def test_the_train_and_eval_commands_count_steps_whose_mask_allows_no_action(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text("env: test_runtime_counts:dead_ends\nnum_envs: 4\nnum_steps: 16\n"
                              "num_minibatches: 2\ntotal_timesteps: 640\n")
    assert main(["train", "c.yaml", "--out", "o", "--eval-episodes", "2"]) == 0
    markdown = Path("o/summary.md").read_text()
    # 4 envs x 160 steps, episodes of 6 whose steps 2 and 5 have no action: 4 x (26 x 2 + 1) in training; 2 in
    # each evaluation episode
    assert "220 steps had an action mask that allowed no action (test_runtime_counts:dead_ends) (212 in training, " \
           "4 in greedy evaluation, 4 in sampled evaluation)" in markdown, markdown


def test_the_sweep_table_counts_them_per_point(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("s.yaml").write_text("env: test_runtime_counts:endless\nnum_envs: 4\nnum_steps: 16\nnum_minibatches: 2\n"
                              "total_timesteps: 640\nsweep:\n  seeds: 1\n  eval_episodes: 2\n  grid:\n    lr: [0.001]\n")
    assert main(["sweep", "s.yaml", "--out", "o"]) == 0
    assert "- lr=0.001: 4 training episodes ran past max_episode_steps" in capsys.readouterr().out
    assert "- lr=0.001: 2 of 2 greedy evaluation episodes did not end" in Path("o/summary.md").read_text()
    (row,) = csv.DictReader(open("o/summary.csv"))
    assert (row["overlong_episodes"], row["unfinished_deterministic"], row["no_action_steps"]) == ("4", "2", "0")
