"""Checkpoints: the full learner state of every run saved with orbax, resumed bit for bit,
refused when broken or foreign; a saved policy acts as it did in training."""

import os
import signal
import subprocess
import sys
import time

import chex
import jax
import numpy as np
import pytest

import purejaxppo as ppo
from conftest import CARTPOLE_RUN, cut_back
from purejaxppo.experiments.checkpoint import CheckpointError, Checkpoints
from purejaxppo.experiments.cli import main
from purejaxppo.experiments.sweep import make_spec, sweep

# normalised observations and rewards: their statistics are learner state that must survive a resume
TINY = dict(num_envs=4, num_steps=16, num_minibatches=2, total_timesteps=4 * 16 * 6,
            env_params={"max_steps_in_episode": 60}, normalize_obs=True, normalize_reward=True)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Three seeds in chunks of 2 updates with a checkpoint after each, and the same runs
    in one piece without checkpoints."""
    folder = tmp_path_factory.mktemp("run")
    cfg = ppo.make_config(TINY)
    spec = make_spec({"seeds": 3, "eval_episodes": 8})
    meta = {"command": "train", "config": cfg.to_dict(), "spec": {"seeds": 3, "eval_episodes": 8}, "first_seed": 0,
            "checkpoint_every": 2, "max_parallel": None, "keep": 2}
    chunked = sweep(cfg, spec=spec, checkpoints=Checkpoints(folder / "checkpoints", keep=2), checkpoint_every=2,
                    meta=meta)
    whole = sweep(cfg, spec=spec)
    return folder, cfg, chunked, whole


def test_chunks_with_checkpoints_equal_one_piece_bit_for_bit(saved):
    folder, cfg, chunked, whole = saved
    for k in range(3):
        chex.assert_trees_all_equal(chunked.states[k], whole.states[k])
        chex.assert_trees_all_equal(chunked.metrics[k], whole.metrics[k])
        chex.assert_trees_all_equal(chunked.evaluation[k], whole.evaluation[k])
    assert chunked.timings.checkpoints == 3 and whole.timings.checkpoints == 0
    assert Checkpoints(folder / "checkpoints").steps() == [4, 6]  # --keep 2


def test_load_and_make_policy_act_as_in_training(saved):
    folder, cfg, chunked, _ = saved
    loaded_cfg, state = ppo.load(folder, run=1)
    assert loaded_cfg == cfg
    chex.assert_trees_all_equal(state, jax.tree.map(np.asarray, chunked.states[1]))  # the full learner state
    assert int(state.updates_done) == cfg.num_updates
    assert float(state.agent_state["obs_stats"].count) == cfg.num_updates * cfg.batch_size
    assert float(state.reward_scaler.stats.count) == cfg.num_updates * cfg.batch_size
    # the deployed policy acts as the agent did: the greedy action and the sampled one
    learner = ppo.Learner(cfg)
    obs = np.asarray(state.obs)
    act = ppo.make_policy(loaded_cfg, state)
    _, greedy, *_ = learner.agent.act(state.params, state.agent_state, (), obs, None, deterministic=True)
    np.testing.assert_array_equal(act(obs), greedy)
    np.testing.assert_array_equal(act(obs[0]), greedy[0])
    key = jax.random.PRNGKey(4)
    _, sampled, *_ = learner.agent.act(state.params, state.agent_state, (), obs, key)
    np.testing.assert_array_equal(act(obs, key), sampled)
    # and the loaded state evaluates to the returns training reported for the final policy,
    # greedy and sampled (training evaluated both with one program, `deterministic` traced)
    for mode, deterministic in (("deterministic", True), ("stochastic", False)):
        returns = jax.jit(learner.evaluate, static_argnums=(1, 2))(state, 8, deterministic)
        np.testing.assert_array_equal(returns, chunked.evaluation[1][mode])
    assert not np.array_equal(chunked.evaluation[1]["deterministic"], chunked.evaluation[1]["stochastic"])
    # an earlier checkpoint, and all runs at once
    _, early = ppo.load(folder, step=4, run=2)
    assert int(early.updates_done) == 4
    _, every = ppo.load(folder, run=None)
    assert every.params["params"]["actor"]["Dense_0"]["kernel"].shape[0] == 3
    with pytest.raises(CheckpointError, match="no checkpoint at step 2"):
        ppo.load(folder, step=2)
    with pytest.raises(CheckpointError, match="has no run 7"):
        ppo.load(folder, run=7)


def test_half_written_corrupted_and_foreign_checkpoints(saved, tmp_path):
    import shutil

    folder, cfg, *_ = saved
    copy = tmp_path / "run"
    shutil.copytree(folder, copy)
    # a save cut short leaves orbax's temporary folder: never listed as a checkpoint
    (copy / "checkpoints" / "8.orbax-checkpoint-tmp-1234").mkdir()
    assert Checkpoints(copy / "checkpoints").steps() == [4, 6]
    # corrupted data: refused with one line naming the checkpoint
    for path in (copy / "checkpoints" / "6" / "state").rglob("*"):
        if path.is_file() and path.stat().st_size > 100 and "d" in path.parent.name:
            path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(CheckpointError, match="unreadable"):
        ppo.load(copy)
    # corrupted metadata: refused
    meta_file = next((copy / "checkpoints" / "4" / "meta").glob("metadata"))
    meta_file.write_text("{not json")
    with pytest.raises(CheckpointError, match="unreadable"):
        ppo.load(copy, step=4)
    # a checkpoint some other program wrote: refused
    import orbax.checkpoint as ocp

    foreign = tmp_path / "foreign" / "checkpoints"
    foreign.mkdir(parents=True)
    with ocp.CheckpointManager(foreign) as manager:
        manager.save(1, args=ocp.args.Composite(meta=ocp.args.JsonSave({"hello": 1})))
    with pytest.raises(CheckpointError, match="not a purejaxppo-checkpoint"):
        ppo.load(tmp_path / "foreign")
    with pytest.raises(CheckpointError, match="no checkpoints/ folder"):
        ppo.load(tmp_path)


def test_cli_refuses_a_changed_resume_before_compiling(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", *CARTPOLE_RUN, "--checkpoint-every", "1", "--out", str(out)]
    assert main(args) == 0
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["1", "2", "3", "4"]
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--set", "lr=0.001", "--set", "num_envs=8"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "lr 0.00025 -> 0.001" in error and "num_envs 4 -> 8" in error
    assert main(["sweep", "--resume", str(out)]) == 2
    assert "resume it with purejaxppo train --resume" in capsys.readouterr().err
    assert main(["train", "--resume", str(out)]) == 2  # finished: nothing to resume, nothing overwritten
    assert "finished run" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path / "nothing")]) == 2
    # eval of the saved policies
    assert main(["eval", str(out), "--episodes", "4", "--json"]) == 0
    import json

    report = json.loads(capsys.readouterr().out)
    assert len(report["runs"]) == 2 and all(len(r["returns"]) == 4 for r in report["runs"])
    assert report["step"] == 4 and report["min"] <= report["median"] <= report["max"]
    for run in report["runs"]:  # CartPole gives 1 per step: the mean length is the mean return (4 whole
        # numbers over 4: exact in float32 and float64 alike)
        assert run["mean_length"] == run["mean"] and run["at_time_limit"] == sum(
            r == 500 for r in run["returns"])
    assert report["at_time_limit"] == sum(run["at_time_limit"] for run in report["runs"])


# --------------------------------------------------------------------------------------
# Faults, for real: SIGKILL and Ctrl-C in a subprocess, then resume
# --------------------------------------------------------------------------------------
RUN = ["-m", "purejaxppo.experiments.cli", "train", "configs/cartpole.yaml", "--seeds", "2", "--set", "num_steps=8",
       "--set", "num_envs=2", "--set", "total_timesteps=1280", "--checkpoint-every", "1"]


def _env(cache):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_COMPILATION_CACHE_DIR=str(cache),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    return env


def _checkpoints(folder):
    folder = folder / "checkpoints"
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def _start_and_stop(args, folder, env, sig, after):
    """Start a run, send `sig` once it has a checkpoint newer than `after`; the run must
    still be going then (else the test proves nothing)."""
    log = folder.parent / f"{folder.name}-{sig.name}.log"
    with open(log, "w") as output:  # a file, not a pipe: a full pipe would stall the run
        proc = subprocess.Popen([sys.executable, *args], env=env, stdout=output, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while not [s for s in _checkpoints(folder) if s > after] and time.time() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be stopped"
        proc.send_signal(sig)
        proc.wait(timeout=120)
    return proc.returncode, log.read_text()


@pytest.mark.slow
def test_sigkill_and_ctrl_c_then_resume_equal_the_run_never_interrupted(tmp_path):
    env = _env(tmp_path / "cache")
    whole = subprocess.run([sys.executable, *RUN, "--out", str(tmp_path / "whole")], env=env, capture_output=True,
                           text=True, timeout=600)
    assert whole.returncode == 0, whole.stderr[-3000:]

    cut = tmp_path / "cut"
    code, _ = _start_and_stop([*RUN, "--out", str(cut)], cut, env, signal.SIGKILL, after=0)
    assert code == -signal.SIGKILL
    killed_at = _checkpoints(cut)[-1]
    assert 1 <= killed_at < 80 and not (cut / "summary.md").exists()

    resume = ["-m", "purejaxppo.experiments.cli", "train", "--resume", str(cut)]
    code, err = _start_and_stop(resume, cut, env, signal.SIGINT, after=killed_at)
    assert code == 130, err[-3000:]
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith(f"resume with: purejaxppo train --resume {cut}")
    assert _checkpoints(cut)[-1] > killed_at

    done = subprocess.run([sys.executable, *resume], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # the metrics of every update and the final state of both seeds: bit for bit
    assert (cut / "metrics.csv").read_text() == (tmp_path / "whole" / "metrics.csv").read_text()
    for run in (0, 1):
        chex.assert_trees_all_equal(ppo.load(cut, run=run)[1], ppo.load(tmp_path / "whole", run=run)[1])


@pytest.mark.slow
def test_sweep_resumed_from_a_middle_checkpoint_equals_the_whole_sweep(tmp_path, capsys):
    """Two static groups (num_envs 2 and 4) run one after the other; cut the folder back to
    a checkpoint where the first group has finished and the second has done one update
    (as a crash there would leave it), resume, and get the same metrics, bit for bit."""
    whole = tmp_path / "whole"
    args = ["sweep", "configs/sweeps/clip_epochs.yaml", "--set", "total_timesteps=2048", "--set", "num_steps=64",
            "--grid", "num_envs=2,4", "--grid", "clip_eps=0.1,0.3", "--seeds", "2", "--checkpoint-every", "1"]
    assert main([*args, "--out", str(whole)]) == 0
    first_group = 2048 // (2 * 64)  # updates of the num_envs=2 group, which runs first
    cut = cut_back(whole, tmp_path / "cut", first_group + 1, kept=("sweep.yaml", "progress.jsonl"))
    capsys.readouterr()
    assert main(["sweep", "--resume", str(cut)]) == 0
    assert "resuming" in capsys.readouterr().out
    assert (cut / "metrics.csv").read_text() == (whole / "metrics.csv").read_text()
    assert (cut / "summary.csv").read_text() == (whole / "summary.csv").read_text()


def test_a_run_folder_written_by_0_4_loads_and_acts_as_it_did_there(tmp_path):
    """tests/data/run_0_4: `purejaxppo train cartpole --seeds 2 --set num_envs=4 --set
    num_steps=16 --set total_timesteps=256 --set hidden_sizes=[8]` written by purejaxppo 0.4
    (main at 6a7bf5a, pure-JAX networks). The flax networks keep its parameter layout: it
    restores, and evaluates and acts as 0.4 computed from it (numbers printed by 0.4's
    checkpoint.evaluate_folder and make_policy on the same folder)."""
    import shutil
    from pathlib import Path

    from purejaxppo.experiments.saved import SavedRun

    folder = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "data" / "run_0_4", folder)
    returns = {r["run"]: r["returns"].tolist() for r in SavedRun(folder).evaluate(episodes=4)}
    assert returns == {0: [22.0, 19.0, 17.0, 23.0], 1: [59.0, 48.0, 45.0, 56.0]}
    cfg, state = ppo.load(folder, run=1)
    obs = np.array([[0.01, 0.2, -0.03, -0.3], [0.0, -0.5, 0.05, 0.6]], np.float32)
    assert ppo.make_policy(cfg, state)(obs).tolist() == [0, 1]


def test_zero_size_leaves_save_and_come_back_with_their_shapes(tmp_path):
    """orbax refuses zero-size arrays (MJX's `data.act` where a model has no activations):
    they are left out of the stored tree and rebuilt, shape and dtype, from the run's state;
    every other leaf comes back bit for bit."""
    states = {"s": {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "act": np.zeros((2, 0), np.float32),
                    "contact": {"pos": np.zeros((2, 0, 3), np.int32)}, "key": np.uint32([[1, 2], [3, 4]])}}
    meta = {"updates_done": {"s": 1}, "sets": {"s": {"config": {}, "runs": [0, 1], "run_configs": [{}, {}]}}}
    checkpoints = Checkpoints(tmp_path / "checkpoints")
    checkpoints.save(1, states, {"s": {"r": np.ones((2, 4), np.float32)}}, meta)
    got, history, _ = checkpoints.restore(None, jax.eval_shape(lambda: states))
    chex.assert_trees_all_equal(got, states)
    assert got["s"]["contact"]["pos"].dtype == np.int32 and got["s"]["contact"]["pos"].shape == (2, 0, 3)
    np.testing.assert_array_equal(history["s"]["r"], np.ones((2, 4), np.float32))


@pytest.mark.slow
def test_an_env_state_with_zero_size_arrays_runs_over_two_devices_and_resumes_bit_for_bit(tmp_path):
    """An environment whose state holds zero-size arrays (as MJX's: `env: playground/...`),
    two seeds sharded over two devices, checkpoints every 2 updates: cut back to the first
    checkpoint and resumed, its metrics equal the whole run's, bit for bit."""
    env = _env(tmp_path / "cache")
    args = ["-m", "purejaxppo.experiments.cli", "train", "cartpole", "--set",
            "env=user_envs:empty_leaves_corridor", "--set", "env_params={}", "--seeds", "2", "--set", "num_envs=2",
            "--set", "num_steps=8", "--set", "total_timesteps=96", "--checkpoint-every", "2"]
    here = os.path.dirname(__file__)
    env["PYTHONPATH"] = os.pathsep.join([here, os.path.dirname(here)])
    whole = subprocess.run([sys.executable, *args, "--out", str(tmp_path / "whole")], env=env, cwd=here,
                           capture_output=True, text=True, timeout=600)
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert _checkpoints(tmp_path / "whole") == [2, 4, 6]
    cut = cut_back(tmp_path / "whole", tmp_path / "cut", 2)
    resumed = subprocess.run([sys.executable, "-m", "purejaxppo.experiments.cli", "train", "--resume", str(cut)],
                             env=env, cwd=here, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (cut / "metrics.csv").read_text() == (tmp_path / "whole" / "metrics.csv").read_text()
