"""Policy export (purejaxppo.export, `purejaxppo export`): every policy kind, in both formats,
loaded here as a user loads it (jax.export.deserialize; onnxruntime), acts as `make_policy`
does on hundreds of observations: the same greedy actions (continuous: within 1e-4), a
recurrent one over three steps carrying its own memory, a masked one under the mask given.
The ONNX cases need the `onnx` extra (jax2onnx, onnxruntime) and are skipped without it."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
import user_networks
from purejaxppo import export
from purejaxppo.config import ConfigError
from purejaxppo.experiments import cli
from purejaxppo.extras import install_line
from purejaxppo.normalize import RunningStats

FORMATS = ["stablehlo", "onnx"]
N = 300  # observations per check


def tiny(**values):
    return ppo.make_config({"num_envs": 4, "num_steps": 16, "num_minibatches": 2, "total_timesteps": 640, **values})


def initialised(cfg, network=None, seed=0):
    return ppo.Learner(cfg, network=network).init(jax.random.PRNGKey(seed))


def need(format):
    if format == "onnx":
        pytest.importorskip("jax2onnx")
        pytest.importorskip("onnxruntime")


def load(path, format):
    """The exported file, loaded as a user would, without purejaxppo: inputs -> outputs (numpy)."""
    if format == "stablehlo":
        exported = jax.export.deserialize(bytearray(Path(path).read_bytes()))
        return lambda *inputs: [np.asarray(x) for x in exported.call(*inputs)]
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return lambda *inputs: session.run(None, dict(zip(names, inputs)))


def exported(tmp_path, cfg, state, format, stem="policy", **kwargs):
    """Export to a file; -> (the file loaded as a user loads it, its metadata)."""
    need(format)
    path = tmp_path / f"{stem}{export.FORMATS[format]}"
    result = export.export_policy(cfg, state, format, path=path, **kwargs)
    assert result.path == path and path.read_bytes() == result.data
    meta = json.loads(Path(f"{path}.json").read_text())
    assert meta == result.metadata and meta["format"] == format
    return load(path, format), meta


def names(meta, side):
    return [item["name"] for item in meta[side]]


def observations(rng, shape, n=N, scale=2.0):
    return (scale * rng.standard_normal((n, *shape))).astype(np.float32)


@pytest.mark.parametrize("format", FORMATS)
def test_cartpole_mlp_picks_make_policys_greedy_actions_for_any_batch(tmp_path, format):
    cfg = tiny()
    state = initialised(cfg)
    run, meta = exported(tmp_path, cfg, state, format)
    assert names(meta, "inputs") == ["obs"] and names(meta, "outputs") == ["action"]
    assert meta["inputs"][0] == {"name": "obs", "shape": ["batch", 4], "dtype": "float32"}
    assert meta["action_space"] == {"kind": "discrete", "num_actions": 2}
    assert meta["config_hash"] == export.config_hash(cfg) and meta["versions"]["jax"] == jax.__version__
    policy = ppo.make_policy(cfg, state)
    obs = observations(np.random.default_rng(1), (4,))
    want = np.asarray(policy(obs))
    assert 0 < want.mean() < 1  # both actions are taken: a constant export would fail
    for n in (N, 1, 7):  # a batch of any size
        (action,) = run(obs[:n])
        assert action.shape == (n,) and action.dtype == np.int32
        np.testing.assert_array_equal(action, want[:n])


@pytest.mark.parametrize("format", FORMATS)
def test_memory_chain_gru_carries_its_memory_over_three_steps(tmp_path, format):
    cfg = tiny(env="MemoryChain-bsuite", policy="gru", gru_size=16, hidden_sizes=[16])
    state = initialised(cfg)
    run, meta = exported(tmp_path, cfg, state, format)
    assert names(meta, "inputs") == ["carry", "obs"] and names(meta, "outputs") == ["new_carry", "action"]
    assert meta["recurrent"] and meta["initial_carry"] == {"carry": "zeros"}
    assert meta["inputs"][0]["shape"] == ["batch", 16]
    policy = ppo.make_policy(cfg, state)
    rng = np.random.default_rng(2)
    carry = np.zeros((N, 16), np.float32)
    for step in range(3):
        obs = observations(rng, tuple(meta["observation"]["shape"]))
        want = np.asarray(policy(obs))  # make_policy remembers from call to call
        new_carry, action = run(carry, obs)
        np.testing.assert_array_equal(action, want)
        np.testing.assert_allclose(new_carry, np.asarray(policy.carry), rtol=1e-5, atol=1e-5)
        if step:  # the memory matters: the same observations from a fresh carry give another memory
            fresh, _ = run(np.zeros_like(carry), obs)
            assert np.abs(fresh - new_carry).max() > 1e-3
        carry = new_carry


def with_stats(state, mean, var):
    stats = RunningStats(jnp.float32(1000.0), jnp.asarray(mean, jnp.float32), jnp.asarray(var, jnp.float32))
    return state.replace(agent_state={**state.agent_state, "obs_stats": stats})


def saturating(state, factor=3000.0):
    """The actor's output layer scaled up: its means reach past the action bounds."""
    params = jax.tree_util.tree_map_with_path(
        lambda path, x: x * factor if "actor" in jax.tree_util.keystr(path) and "Dense_2" in jax.tree_util.keystr(path)
        else x, state.params)
    return state.replace(params=params)


@pytest.mark.parametrize("squash", ["clip", "tanh"])
@pytest.mark.parametrize("format", FORMATS)
def test_pendulum_continuous_normalised_within_1e4_with_the_statistics_baked_in(tmp_path, format, squash):
    cfg = tiny(env="Pendulum-v1", normalize_obs=True, action_squash=squash)
    mean, var = [0.5, -0.3, 1.0], [4.0, 0.25, 9.0]
    state = saturating(with_stats(initialised(cfg), mean, var))
    run, meta = exported(tmp_path, cfg, state, format)
    assert meta["observation"]["normalized"] and meta["action_space"]["squash"] == squash
    assert meta["action_space"]["low"] == [-2.0] and meta["action_space"]["high"] == [2.0]
    assert names(meta, "outputs") == ["action"] and meta["outputs"][0]["shape"] == ["batch", 1]
    obs = (np.asarray(mean) + 3 * np.sqrt(var) * np.random.default_rng(3).standard_normal((N, 3))).astype(np.float32)
    want = np.asarray(ppo.make_policy(cfg, state)(obs))
    (action,) = run(obs)
    assert action.shape == want.shape == (N, 1)
    np.testing.assert_allclose(action, want, rtol=0, atol=1e-4)
    assert np.all(np.abs(action) <= 2.0) and np.mean(np.abs(want) > 1.99) > 0.3  # the bounds are reached
    unnormalised = np.asarray(ppo.make_policy(cfg, with_stats(state, [0, 0, 0], [1, 1, 1]))(obs))
    assert np.abs(unnormalised - want).max() > 0.1  # so the statistics are what made the actions equal


@pytest.mark.slow  # compiles and exports policies of their own: run by .ci/run after the default suite
@pytest.mark.parametrize("format", FORMATS)
def test_cnn_torso_on_image_observations(tmp_path, format):
    cfg = tiny(env="Breakout-MinAtar", torso="cnn", cnn_channels=[8, 8], hidden_sizes=[32])
    state = initialised(cfg)
    run, meta = exported(tmp_path, cfg, state, format)
    assert meta["observation"]["shape"] == [10, 10, 4]
    obs = (np.random.default_rng(4).random((N, 10, 10, 4)) < 0.2).astype(np.float32)
    want = np.asarray(ppo.make_policy(cfg, state)(obs))
    (action,) = run(obs)
    np.testing.assert_array_equal(action, want)
    assert len(set(want.tolist())) > 1


@pytest.mark.parametrize("format", FORMATS)
def test_a_masked_policy_takes_the_mask_after_the_observation_and_honours_it(tmp_path, format):
    cfg = tiny(env="user_envs:corridor")
    state = initialised(cfg)
    run, meta = exported(tmp_path, cfg, state, format)
    assert meta["masked"] and names(meta, "inputs") == ["obs", "mask"]
    assert meta["inputs"][1] == {"name": "mask", "shape": ["batch", 3], "dtype": "bool"}
    rng = np.random.default_rng(5)
    obs = observations(rng, tuple(meta["observation"]["shape"]))
    policy = ppo.make_policy(cfg, state)
    everything = np.ones((N, 3), bool)
    (free,) = run(obs, everything)
    np.testing.assert_array_equal(free, np.asarray(policy(obs)))
    mask = rng.random((N, 3)) < 0.5
    mask[np.arange(N), free] = False  # the greedy action of each row is ruled out
    mask[np.arange(N), (free + 1 + rng.integers(0, 2, N)) % 3] = True
    (action,) = run(obs, mask)
    np.testing.assert_array_equal(action, np.asarray(policy(obs, mask=mask)))
    assert np.all(mask[np.arange(N), action]) and np.all(action != free)


@pytest.mark.slow  # compiles and exports policies of their own: run by .ci/run after the default suite
@pytest.mark.parametrize("format", FORMATS)
def test_a_users_own_networks_feedforward_and_with_a_pair_as_memory(tmp_path, format):
    cfg = tiny()
    towers = user_networks.TwoTowers(num_outputs=2, width=16)
    state = initialised(cfg, towers)
    run, meta = exported(tmp_path, cfg, state, format, "towers", network=towers)
    obs = observations(np.random.default_rng(6), (4,))
    np.testing.assert_array_equal(run(obs)[0], np.asarray(ppo.make_policy(cfg, state, network=towers)(obs)))

    lstm = user_networks.LSTMActorCritic(num_outputs=2, size=8)
    state = initialised(cfg, lstm)
    run, meta = exported(tmp_path, cfg, state, format, "lstm", network=lstm)
    assert names(meta, "inputs") == ["carry_0", "carry_1", "obs"]
    assert names(meta, "outputs") == ["new_carry_0", "new_carry_1", "action"]
    policy = ppo.make_policy(cfg, state, network=lstm)
    rng = np.random.default_rng(7)
    c, h = np.zeros((N, 8), np.float32), np.zeros((N, 8), np.float32)
    for _ in range(3):
        obs = observations(rng, (4,))
        c, h, action = run(c, h, obs)
        np.testing.assert_array_equal(action, np.asarray(policy(obs)))


@pytest.mark.slow  # two more exports (the command's --outputs all, of an MLP, is checked here)
@pytest.mark.parametrize("format", FORMATS)
def test_outputs_all_adds_the_heads_and_the_value_after_the_action(tmp_path, format):
    cfg = tiny(env="MemoryChain-bsuite", policy="gru", gru_size=8, hidden_sizes=[8])
    state = initialised(cfg)
    run, meta = exported(tmp_path, cfg, state, format, "gru", outputs="all")
    assert names(meta, "outputs") == ["new_carry", "action", "logits", "value"]
    obs = observations(np.random.default_rng(8), tuple(meta["observation"]["shape"]))
    carry = np.zeros((N, 8), np.float32)
    agent = ppo.Learner(cfg).agent
    dist, value, new_carry = agent.step(state.params, state.agent_state, jnp.asarray(carry), jnp.asarray(obs))
    got = run(carry, obs)
    for have, want in zip(got, [new_carry, dist.mode(), dist.logits, value]):
        np.testing.assert_allclose(have, np.asarray(want), rtol=1e-5, atol=1e-5)

    cfg = tiny(env="Pendulum-v1")
    state = initialised(cfg)
    run, meta = exported(tmp_path, cfg, state, format, "pendulum", outputs="all")
    assert names(meta, "outputs") == ["action", "mean", "log_std", "value"]
    obs = observations(np.random.default_rng(9), (3,))
    action, mean, log_std, value = run(obs)
    dist, want_value, _ = ppo.Learner(cfg).agent.step(state.params, state.agent_state, (), jnp.asarray(obs))
    np.testing.assert_allclose(mean, np.asarray(dist.mean), atol=1e-5)
    np.testing.assert_allclose(log_std, np.broadcast_to(np.asarray(dist.log_std), mean.shape), atol=1e-6)
    np.testing.assert_allclose(value, np.asarray(want_value), rtol=1e-5, atol=1e-5)


def test_a_file_that_does_not_act_as_make_policy_is_refused_and_not_kept(tmp_path, monkeypatch):
    cfg = tiny()
    state = initialised(cfg)
    real = export._runner

    def off_by_one(format, data):
        run = real(format, data)
        return lambda inputs: [1 - out for out in run(inputs)]  # every greedy action flipped

    monkeypatch.setattr(export, "_runner", off_by_one)
    path = tmp_path / "policy.stablehlo"
    with pytest.raises(export.ExportMismatch, match="another greedy action"):
        export.export_policy(cfg, state, path=path)
    assert list(tmp_path.iterdir()) == []  # neither the file, nor its metadata, nor a temporary one


def test_a_policy_that_is_not_finite_is_refused_and_nothing_written(tmp_path):
    """A diverged run's parameters (a NaN in one weight) would export a file answering one action
    to everything, and NaN compares equal to NaN in the check: refused, naming the array."""
    cfg = tiny()
    state = initialised(cfg)
    first = jax.tree_util.tree_leaves_with_path(state.params)[0][0]
    broken = state.replace(params=jax.tree_util.tree_map_with_path(
        lambda path, x: x.at[(0,) * x.ndim].set(jnp.nan) if path == first else x, state.params))
    with pytest.raises(export.ExportError, match=r"the policy is not finite \(params\..* holds NaN or Inf"):
        export.export_policy(cfg, broken, path=tmp_path / "policy.stablehlo")
    assert list(tmp_path.iterdir()) == []
    export.export_policy(cfg, state)  # the same policy, finite: exported


def test_bad_arguments_are_one_line_naming_the_argument(tmp_path, monkeypatch):
    cfg = tiny()
    state = initialised(cfg)
    (tmp_path / "taken.onnx").write_text("mine")
    cases = [(dict(format="tflite"), "format", "one of stablehlo, onnx"),
             (dict(outputs="everything"), "outputs", "one of action, all"),
             (dict(path=tmp_path / "taken.onnx"), "path", "never replaces a file"),
             (dict(path=tmp_path / "no" / "p.onnx"), "path", "does not exist")]
    for kwargs, field, needle in cases:
        with pytest.raises(ConfigError) as info:
            export.export_policy(cfg, state, **kwargs)
        assert info.value.field == field and needle in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="must be a LearnerState"):
        export.export_policy(cfg, {"params": state.params})
    monkeypatch.setitem(sys.modules, "jax2onnx", None)  # not installed
    with pytest.raises(ConfigError, match=re.escape(f"not installed: {install_line('onnx')} (jax2onnx")) as info:
        export.export_policy(cfg, state, "onnx")
    assert info.value.field == "format"
    assert (tmp_path / "taken.onnx").read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == [
        "taken.onnx"]


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A tiny CartPole run, trained by the command line (2 seeds)."""
    where = tmp_path_factory.mktemp("export-run")
    (where / "c.yaml").write_text("env: CartPole-v1\nnum_envs: 4\nnum_steps: 16\nnum_minibatches: 2\n"
                                  "total_timesteps: 640\nnormalize_obs: true\n")
    assert cli.main(["train", str(where / "c.yaml"), "--seeds", "2", "--eval-episodes", "0",
                     "--out", str(where / "run")]) == 0
    return where / "run"


@pytest.mark.parametrize("format", FORMATS)
def test_the_command_writes_a_verified_file_beside_its_metadata(run_folder, tmp_path, capsys, format):
    need(format)
    out = tmp_path / f"p{export.FORMATS[format]}"
    capsys.readouterr()
    assert cli.main(["export", str(run_folder), "--run", "1", "--format", format, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "verified" in printed and "largest difference" in printed
    meta = json.loads(Path(f"{out}.json").read_text())
    cfg, state = ppo.load(run_folder, run=1)
    assert meta["source"] == {"folder": str(run_folder), "run": 1, "update": 10}
    assert meta["config_hash"] == export.config_hash(cfg) and meta["observation"]["normalized"]
    obs = observations(np.random.default_rng(10), (4,))
    np.testing.assert_array_equal(load(out, format)(obs)[0], np.asarray(ppo.make_policy(cfg, state)(obs)))
    capsys.readouterr()
    assert cli.main(["export", str(run_folder), "--format", format, "--out", str(out)]) == 2  # never replaced
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and "never replaces a file" in err


def test_the_command_writes_into_the_folder_by_default_and_refuses_bad_options(run_folder, capsys):
    capsys.readouterr()
    assert cli.main(["export", str(run_folder), "--outputs", "all"]) == 0
    written = run_folder / "policy-run0-update10.stablehlo"
    meta = json.loads(Path(f"{written}.json").read_text())
    assert names(meta, "outputs") == ["action", "logits", "value"] and meta["file"] == written.name
    for argv, field in ((["--run", "2"], "--run"), (["--checkpoint", "3"], "--checkpoint"),
                        (["--format", "tflite"], "--format")):
        capsys.readouterr()
        assert cli.main(["export", str(run_folder), *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("purejaxppo: error: ") and field in err, err
    capsys.readouterr()
    assert cli.main(["export", str(run_folder.parent)]) == 2
    assert "no checkpoints/ folder" in capsys.readouterr().err


def test_an_export_into_the_folder_takes_its_lock_as_any_writer_does(run_folder, tmp_path, capsys):
    """Writing into the folder, export is one of its writers: refused while a run holds the lock
    (its process alive), and leaves no lock behind. Written elsewhere, it only reads the folder."""
    import os
    import socket

    lock = run_folder / ".lock"
    lock.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))  # a live process: "a run"
    try:
        capsys.readouterr()
        assert cli.main(["export", str(run_folder), "--run", "1"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is being written by process" in err, err
        assert not (run_folder / "policy-run1-update10.stablehlo").exists()
        assert cli.main(["export", str(run_folder), "--run", "1", "--out", str(tmp_path / "p.stablehlo")]) == 0
    finally:
        lock.unlink()
    assert cli.main(["export", str(run_folder), "--run", "1"]) == 0
    assert (run_folder / "policy-run1-update10.stablehlo").exists() and not lock.exists()


def test_the_file_written_is_the_one_named(run_folder, tmp_path, capsys, monkeypatch):
    """--out policy.onnx is ONNX (the format follows the suffix where --format is not given), never
    StableHLO under that name; a suffix another format's than --format's is refused; --out DIR/
    writes the default name into DIR, not a file called DIR."""
    monkeypatch.setattr(export, "check_onnx_installed", lambda: (_ for _ in ()).throw(
        ppo.ConfigError("format", "onnx", "needs the onnx extra")))  # whether ONNX was asked for, installed or not
    capsys.readouterr()
    assert cli.main(["export", str(run_folder), "--out", str(tmp_path / "p.onnx")]) == 2
    assert "needs the onnx extra" in capsys.readouterr().err
    assert cli.main(["export", str(run_folder), "--format", "stablehlo", "--out", str(tmp_path / "p.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out=" in err and "has the suffix of onnx, but the format is stablehlo" in err
    (tmp_path / "into").mkdir()
    assert cli.main(["export", str(run_folder), "--run", "1", "--out", str(tmp_path / "into")]) == 0, \
        capsys.readouterr().err
    assert cli.main(["export", str(run_folder), "--run", "1", "--out", f"{tmp_path / 'new'}/"]) == 2
    assert "a folder that does not exist" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "into").iterdir()) == ["policy-run1-update10.stablehlo",
                                                                      "policy-run1-update10.stablehlo.json"]
    assert list(tmp_path.glob("new*")) == []  # a folder that does not exist: refused, as any such --out
    assert list(tmp_path.iterdir()) == [tmp_path / "into"]
    with pytest.raises(ppo.ConfigError, match="is a folder: give the file to write"):
        export.export_policy(ppo.load(run_folder)[0], ppo.load(run_folder)[1], path=tmp_path / "into")


def test_the_command_exits_1_when_the_file_does_not_act_as_the_policy(run_folder, tmp_path, capsys, monkeypatch):
    real = export._runner
    monkeypatch.setattr(export, "_runner", lambda format, data: (lambda inputs: [1 - x for x in real(format, data)(
        inputs)]))
    capsys.readouterr()
    assert cli.main(["export", str(run_folder), "--out", str(tmp_path / "p.stablehlo")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "greedy action" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_the_check_of_greedy_actions_tolerates_ties_alone():
    masked = float(np.finfo(np.float32).min)
    logits = np.array([[1.0, 1.0 + 1e-7, masked], [2.0, 0.5, masked]], np.float32)
    want = np.argmax(logits, -1)
    assert export._check_actions(np.array([0, 0]), want, logits, 1) == 1  # row 0: a tie, either is right
    for have in ([2, 0], [1, 1], [0, 2], [1, 3]):  # a masked action, a worse one, one out of range
        with pytest.raises(export.ExportMismatch):
            export._check_actions(np.array(have), want, logits, 1)
