"""Fast guards of the core's equivalences, in the README's test command: each property's long
check stays in the slow set (named in each test), and here it is checked again on a tiny
config (a few updates of 2 CartPole envs x 8 steps, a hidden layer of 8), seconds each.

Where the two sides are one compiled program given other values (the same jit, traced
hyperparameters), they are compared bit for bit; where they are two programs (vmapped and
single, masked and unmasked epochs), XLA may round them differently, and they are compared
as conftest.assert_trees_equal_to_float_rounding compares two programs: integers exactly,
floats to float32 rounding (the slow tests' tolerances, or tighter)."""

import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
from conftest import assert_trees_equal_to_float_rounding

# 3 updates of 2 envs x 8 steps; episodes cut at 10 steps, so that some end in every update
TINY = dict(env="CartPole-v1", num_envs=2, num_steps=8, num_minibatches=2, update_epochs=2,
            total_timesteps=2 * 8 * 3, hidden_sizes=[8], env_params={"max_steps_in_episode": 10})


def leaves_differ(a, b) -> bool:
    return any(not np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_vmapped_seeds_and_hyperparameters_equal_single_runs():
    """test_train.py::test_vmapped_seeds_and_hparams_equal_single_runs, tiny: one vmapped
    program over 3 keys and 3 learning rates and clip ranges (HParams.stack) equals 3 single
    runs, each given its own key and hyperparameters. Two programs (vmapped and single), so
    floats to float32 rounding (relative 1e-6, absolute 1e-6 for the explained variance, which
    cancels near 1; the slow test allows 1e-5), integers exactly."""
    cfg = ppo.make_config(TINY)
    train = ppo.make_train(cfg)
    keys = jax.random.split(jax.random.PRNGKey(7), 3)
    hps = ppo.HParams.stack(cfg, lr=[1e-4, 3e-3, 3e-2], clip_eps=[0.1, 0.2, 0.3])
    batched = ppo.jit(jax.vmap(train))(keys, hps)
    single = ppo.jit(train)
    runs = []
    for i in range(3):
        one = single(keys[i], jax.tree.map(lambda x: x[i], hps))
        assert_trees_equal_to_float_rounding(jax.tree.map(lambda x: x[i], (batched.state, batched.metrics)),
                                             (one.state, one.metrics), atol=1e-6)
        runs.append(one)
    # not vacuous: the runs differ from each other (keys and hyperparameters both reach them)
    assert leaves_differ(runs[0].state.params, runs[1].state.params)
    assert leaves_differ(runs[0].metrics["episode_return"], runs[1].metrics["episode_return"])
    np.testing.assert_array_equal(batched.metrics["learning_rate"][:, 0], hps.lr)


def test_masked_epochs_and_a_kl_stop_change_nothing_they_should_not():
    """test_train.py::test_masked_epochs_change_nothing, tiny. (1) Scanning 3 epochs of which the
    third is masked (max_epochs 3, update_epochs 2) trains as scanning 2 unmasked ones: a
    second program (no mask), so parameters and optimiser state to float32 rounding, the random
    stream exactly, the masked epoch's diagnostics NaN. (2) A KL target that every epoch
    exceeds stops each update after its first epoch: bit for bit the same program given
    update_epochs 1."""
    masked_cfg = ppo.make_config({**TINY, "max_epochs": 3})
    train = ppo.jit(ppo.make_train(masked_cfg))
    hp = ppo.HParams.from_config(masked_cfg)  # passed to the jit: traced, the masked path
    masked = train(jax.random.PRNGKey(1), hp)
    plain = ppo.jit(ppo.make_train(ppo.make_config(TINY)))(jax.random.PRNGKey(1))  # known: no mask compiled
    assert masked.metrics["clip_fraction"].shape == (3, 3) and plain.metrics["clip_fraction"].shape == (3, 2)
    assert_trees_equal_to_float_rounding((masked.state.params, masked.state.opt_state),
                                         (plain.state.params, plain.state.opt_state))
    np.testing.assert_array_equal(masked.state.key, plain.state.key)
    np.testing.assert_array_equal(masked.metrics["episode_return"], plain.metrics["episode_return"])
    np.testing.assert_allclose(masked.metrics["clip_fraction"][:, :2], plain.metrics["clip_fraction"], rtol=1e-6)
    assert np.all(np.isnan(np.asarray(masked.metrics["clip_fraction"])[:, 2:]))
    assert np.all(np.asarray(masked.metrics["epochs_run"]) == 2)

    stopped = train(jax.random.PRNGKey(1), hp.replace(target_kl=np.float32(1e-12)))
    assert np.all(np.asarray(stopped.metrics["epochs_run"]) == 1)
    assert np.all(np.isnan(np.asarray(stopped.metrics["kl_k3"])[:, 1:]))
    one_epoch = train(jax.random.PRNGKey(1), hp.replace(update_epochs=np.int32(1)))
    chex.assert_trees_all_equal(stopped, one_epoch)
    assert leaves_differ(stopped.state.params, masked.state.params)  # the stop did act


def test_the_clip_never_acts_at_one_full_batch_epoch():
    """test_train.py::test_full_batch_single_epoch_clip_never_acts, tiny: with one epoch of one
    minibatch the only gradient step sees the policy that collected the data (every ratio is 1,
    to float rounding), so a clip range of 0.01 trains bit for bit as one of 1e6 (one program,
    clip_eps traced), and no sample is clipped."""
    cfg = ppo.make_config({**TINY, "num_minibatches": 1, "update_epochs": 1})
    train = ppo.jit(ppo.make_train(cfg))
    hp = ppo.HParams.from_config(cfg)
    hp = hp.replace(lr=np.float32(0.05))  # large steps, so that a clip would matter (see the end)
    narrow = train(jax.random.PRNGKey(3), hp.replace(clip_eps=np.float32(0.01)))
    wide = train(jax.random.PRNGKey(3), hp.replace(clip_eps=np.float32(1e6)))
    chex.assert_trees_all_equal(narrow.state, wide.state)
    # every metric but clip_cases, the updated policy's ratios counted against each band
    chex.assert_trees_all_equal({k: v for k, v in narrow.metrics.items() if k != "clip_cases"},
                                {k: v for k, v in wide.metrics.items() if k != "clip_cases"})
    assert np.all(np.asarray(narrow.metrics["clip_fraction"]) == 0.0)
    assert np.all(np.asarray(narrow.metrics["ratio_outside"]) == 0.0)
    # the step's ratios: 1 (one ulp of 1, 6e-8, with jax 0.9.2), far inside even the narrow band
    assert np.max(np.asarray(narrow.metrics["first_minibatch_ratio_error"])) <= 1e-6
    # not vacuous: the step moved the policy beyond the narrow band, where a clip would have acted
    assert np.asarray(narrow.metrics["clip_cases"])[:, :, 1:].sum() > 0


def test_the_continuous_pendulum_run_keeps_the_reference_numbers():
    """test_learner.py::test_train_keeps_the_numbers_saved_before_the_learner_state[pendulum]
    without its evaluation (200-step episodes; the evaluation draws from a stream of its own,
    so training is the same): the reference file's Pendulum case (2 envs x 32 steps, 6 updates,
    3 epochs scanned and 2 run, a KL target never reached) keeps its parameters and losses to
    the slow test's tolerances, its episodes, epochs run, learning rates and random stream
    exactly."""
    if str(Path(__file__).parent / "data") not in sys.path:
        sys.path.insert(0, str(Path(__file__).parent / "data"))
    from make_train_reference import CASES

    reference = np.load(Path(__file__).parent / "data" / "train_reference.npz")
    out = ppo.jit(ppo.make_train(ppo.make_config(CASES["pendulum"])))(jax.random.PRNGKey(3))
    got = {f"params{jax.tree_util.keystr(path)}": np.asarray(leaf)
           for path, leaf in jax.tree_util.tree_leaves_with_path(out.state.params)}
    got.update({f"metrics/{k}": np.asarray(v) for k, v in out.metrics.items()})
    got["key"] = np.asarray(out.state.key)
    names = [n[len("pendulum/"):] for n in reference.files
             if n.startswith("pendulum/") and not n.startswith("pendulum/evaluation/")]
    assert "params['params']['log_std']" in names and set(names) <= set(got)
    exact = ("key", "metrics/episode_return", "metrics/episodes_finished", "metrics/epochs_run",
             "metrics/learning_rate")
    for name in names:
        expected = reference[f"pendulum/{name}"]
        if name in exact:
            np.testing.assert_array_equal(got[name], expected, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], expected, rtol=1e-4, atol=1e-6, err_msg=name)
    # 3 epochs scanned, 2 run: the masked path is what the numbers come from
    assert np.all(got["metrics/epochs_run"] == 2) and np.all(np.isnan(got["metrics/kl_k3"][:, 2]))


def test_a_user_network_with_a_pytree_memory_trains_and_replays_its_sequences():
    """test_networks.py::test_a_recurrent_user_module_with_a_pytree_memory_replays_its_sequences,
    tiny: an LSTM whose memory is a pair (c, h) trains (finite losses, every epoch run), keeps
    each env's memory in the agent state, and the update replays whole sequences from the
    memory they started with: the first minibatch's ratio is 1 to float rounding, from the
    second update on too, where that memory is not the initial zeros."""
    cfg = ppo.make_config({**TINY, "network": "user_networks:lstm", "network_kwargs": {"size": 4}})
    out = ppo.jit(ppo.make_train(cfg))(jax.random.PRNGKey(2))
    state, metrics = out.state, out.metrics
    c, h = state.agent_state["carry"]
    assert c.shape == h.shape == (cfg.num_envs, 4) and np.any(np.asarray(h) != 0)
    assert np.max(np.asarray(metrics["first_minibatch_ratio_error"])) <= 1e-6, metrics["first_minibatch_ratio_error"]
    assert np.all(np.asarray(metrics["epochs_run"]) == cfg.update_epochs)
    for name in ("policy_loss", "value_loss", "entropy", "total_loss", "grad_norm"):
        assert np.all(np.isfinite(np.asarray(metrics[name]))), name
    assert int(state.updates_done) == cfg.num_updates


def _play(env, actions, seed=0):
    """Steps of `env` (auto-resetting) under a fixed list of actions, in one compiled scan ->
    (reward, terminated, truncated, episode_length), each [len(actions)]."""
    obs, state = env.reset(jax.random.PRNGKey(seed))

    def step(state, inputs):
        key, action = inputs
        _, state, reward, terminated, truncated, info = env.step(key, state, action)
        return state, (reward, terminated, truncated, info["episode_length"])

    keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(actions))
    out = ppo.jit(lambda s: jax.lax.scan(step, s, (keys, jnp.asarray(actions, jnp.int32)))[1])(state)
    return jax.tree.map(np.asarray, out)


def test_xminigrid_the_goal_terminates_and_the_time_limit_truncates():
    """test_env_xminigrid.py::test_the_time_limit_truncates_and_the_goal_terminates, in one
    program (max_steps 6): the goal in 5 steps terminates only; 6 turns truncate only; the goal
    on the 6th (last allowed) step does both."""
    pytest.importorskip("xminigrid")
    forward, turn_right, pick_up = 0, 1, 3  # pick_up with nothing in front: a step that does nothing
    to_the_goal = [forward, forward, turn_right, forward, forward]  # Empty-5x5: from (1, 1) facing right to (3, 3)
    env = ppo.make_env(ppo.make_config({"env": "xminigrid/MiniGrid-Empty-5x5", "env_params": {"max_steps": 6}}))
    reward, terminated, truncated, length = _play(env, to_the_goal + [turn_right] * 6 + [pick_up] + to_the_goal)
    np.testing.assert_array_equal(terminated, [0, 0, 0, 0, 1] + [0] * 6 + [0] * 5 + [1])
    np.testing.assert_array_equal(truncated, [0, 0, 0, 0, 0] + [0] * 5 + [1] + [0] * 5 + [1])
    np.testing.assert_array_equal(length, [1, 2, 3, 4, 5] + [1, 2, 3, 4, 5, 6] * 2)
    np.testing.assert_allclose(reward[[4, 16]], [1 - 0.9 * 5 / 6, 1 - 0.9 * 6 / 6], rtol=1e-5)
    assert not np.any(np.delete(reward, [4, 16]))


def test_jumanji_a_crash_terminates_and_the_time_limit_truncates():
    """test_env_jumanji.py::test_the_time_limit_truncates_and_a_crash_terminates, in one program:
    Snake on a 6x6 grid with a time limit of 4 steps, always moving up: an episode that starts
    in one of the top rows hits the wall (terminated only; Jumanji reports it with discount 0,
    as it does its time limit), one that starts lower reaches the limit (truncated only). The
    start cells are drawn from the seed: seed 0 gives two crashes, then a time limit."""
    pytest.importorskip("jumanji")
    env = ppo.make_env(ppo.make_config({"env": "jumanji/Snake-v1",
                                        "env_params": {"time_limit": 4, "num_rows": 6, "num_cols": 6}}))
    assert env.max_episode_steps == 4
    _, terminated, truncated, length = _play(env, [0] * 11)  # 0: up
    np.testing.assert_array_equal(terminated, [0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(truncated, [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(length, [1, 2, 3, 1, 2, 3, 1, 2, 3, 4, 1])
