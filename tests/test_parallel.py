import json
import subprocess
import sys
import textwrap

import pytest

from conftest import assert_metrics_csv_within_rounding

SCRIPT = textwrap.dedent("""
    import json, jax, numpy as np, purejaxppo as ppo
    from purejaxppo.experiments.parallel import ShardedRuns
    cfg = ppo.make_config(dict(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3))
    keys = jax.random.split(jax.random.PRNGKey(5), 5)   # 5 runs on 4 devices: padded to 8
    runs = ShardedRuns(ppo.make_train(cfg), keys)
    out = runs()
    print("RESULT", json.dumps({
        "devices": runs.num_devices, "padded": runs.padded_runs,
        "params": [np.asarray(x).tolist() for x in jax.tree.leaves(out.state.params)],
        "returns": np.asarray(out.metrics["episode_return"]).tolist()}))
""")


def run(devices):
    env = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(l for l in result.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.slow
def test_sharded_over_devices_equals_one_device():
    import numpy as np

    one, four = run(1), run(4)
    assert one["devices"] == 1 and one["padded"] == 5
    assert four["devices"] == 4 and four["padded"] == 8
    for a, b in zip(one["params"], four["params"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(one["returns"], four["returns"], rtol=1e-5)


@pytest.mark.slow  # compiles a training program of its own: run by .ci/run after the default suite
def test_a_lone_run_is_not_copied_to_every_device():
    import jax
    import purejaxppo as ppo
    from purejaxppo.experiments.parallel import ShardedRuns

    cfg = ppo.make_config(dict(num_envs=2, num_steps=8, num_minibatches=1, update_epochs=1,
                               total_timesteps=16))
    runs = ShardedRuns(ppo.make_train(cfg), jax.random.PRNGKey(0)[None])
    assert runs.num_devices == 1 and runs.padded_runs == 1
    assert runs().metrics["episode_return"].shape == (1, 1)


EMPTY_CONSTANT_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from purejaxppo.experiments.parallel import ShardedRuns
    x = jnp.arange(12.0).reshape(4, 3)
    step = lambda c, _: (c.at[:].set(c * 2), None)   # indexes with an empty array: a zero-size constant
    for chunk in (None, 1):                            # vmapped, and lax.map one run at a time
        runs = ShardedRuns(lambda r: jax.lax.scan(step, r, None, length=2)[0], x, chunk=chunk)
        assert runs.num_devices == 2
        np.testing.assert_array_equal(runs(), 4 * np.asarray(x))
    # zero-size inputs and outputs (MJX's state holds a dozen: data.act where a model has no activations)
    state = {"x": x, "act": jnp.zeros((4, 0)), "contact": jnp.zeros((4, 0, 3), jnp.int32)}
    twice = lambda s: {**s, "x": s["x"] * 2, "act": s["act"] + 1, "new": jnp.zeros((0, 2))}
    runs = ShardedRuns(twice, state)
    out = runs()
    np.testing.assert_array_equal(out["x"], 2 * np.asarray(x))
    assert {k: (v.shape, v.dtype) for k, v in out.items() if k != "x"} == {
        "act": ((4, 0), np.float32), "contact": ((4, 0, 3), np.int32), "new": ((4, 0, 2), np.float32)}
    print("OK")
""")


def test_zero_size_constants_inputs_and_outputs_compile_over_two_devices():
    """jax 0.11.2's XLA segfaulted compiling a shard_map over 2+ devices whose body captures a
    zero-size constant (gymnax's SpaceInvaders-MinAtar does, with `x.at[:].set(...)`), or that
    has a zero-size input (MJX's state): ShardedRunSets makes such constants and inputs in the
    body, and such outputs beside it, instead."""
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", EMPTY_CONSTANT_SCRIPT], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0 and "OK" in result.stdout, (result.returncode, result.stderr[-3000:])


def test_sharded_programs_compile_with_the_package_compiler_options(monkeypatch):
    """The CLI's and sweeps' programs get `compiler_options()` for their devices' platform
    (LLVM -O1 on a CPU, XLA's defaults elsewhere): an option XLA does not know, put there,
    fails their compile."""
    import jax.numpy as jnp
    from purejaxppo import compiler_options
    from purejaxppo.experiments import parallel

    assert compiler_options("cpu") == {"xla_backend_optimization_level": 1}
    assert compiler_options("gpu") is None
    asked = []
    monkeypatch.setattr(parallel, "compiler_options", lambda platform: asked.append(platform) or {"xla_no_such": 1})
    with pytest.raises(Exception, match="xla_no_such"):
        parallel.ShardedRuns(lambda x: x * 2, jnp.ones((2, 3)))
    assert asked == ["cpu"]


@pytest.mark.slow
def test_two_processes_on_loopback_equal_one(tmp_path):
    """Multi-host for real: two processes joined by jax.distributed (gloo over 127.0.0.1)
    run one sweep, started with the same command; process 0 writes what a single process
    writes, process 1 nothing."""
    import os
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["-m", "purejaxppo.experiments.cli", "sweep", "configs/sweeps/clip_epochs.yaml", "--set", "total_timesteps=2048",
            "--set", "num_envs=4", "--grid", "clip_eps=0.1,0.3", "--grid", "update_epochs=1,2", "--seeds", "1"]
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    base_env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    procs = []
    for i in range(2):
        env = {**base_env, "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2",
               "JAX_PROCESS_ID": str(i)}
        procs.append(subprocess.Popen([sys.executable, *args, "--out", str(tmp_path / "multi")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    assert "on 2 device(s)" in outputs[0]
    assert outputs[1].splitlines()[0].startswith("purejaxppo: process 1 of 2 joined (via JAX_* variables)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["multi"]  # the same command: one folder, process 0's
    assert (tmp_path / "multi" / "summary.csv").exists()
    single = subprocess.run([sys.executable, *args, "--out", str(tmp_path / "single")], env=base_env,
                            capture_output=True, text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]
    assert_metrics_csv_within_rounding(tmp_path / "multi", tmp_path / "single", rows=4 * 4, rtol=1e-5)


def _tiny_runs():
    import jax
    import purejaxppo as ppo

    cfg = ppo.make_config(dict(num_envs=4, num_steps=16, num_minibatches=2, update_epochs=2,
                               total_timesteps=4 * 16 * 2))
    return ppo.make_train(cfg), jax.random.split(jax.random.PRNGKey(5), 8)


def test_results_that_cannot_fit_are_refused_before_compiling(monkeypatch):
    import jax
    from purejaxppo.config import ConfigError
    from purejaxppo.experiments.parallel import ShardedRuns

    def compile_called(*args, **kwargs):
        raise AssertionError("compiled although the results cannot fit")

    monkeypatch.setattr(jax.stages.Lowered, "compile", compile_called)
    train, keys = _tiny_runs()
    with pytest.raises(ConfigError, match="results alone need"):
        ShardedRuns(train, keys, memory_bytes=10_000)


@pytest.mark.slow  # compiles the runs twice (vmapped, then in chunks): run by .ci/run after the default suite
def test_too_many_runs_in_flight_are_refused_with_a_max_parallel_that_fits():
    import re

    from purejaxppo.config import ConfigError
    from purejaxppo.experiments.parallel import ShardedRuns

    train, keys = _tiny_runs()
    runs = ShardedRuns(train, keys)  # the free memory of this machine: fits
    assert runs.in_flight == -(-8 // runs.num_devices)  # all of a device's runs at once
    held = runs.memory.argument_size_in_bytes + runs.memory.output_size_in_bytes
    limit = held + runs.memory.temp_size_in_bytes * 3 // 4
    with pytest.raises(ConfigError, match="runs in flight") as refused:
        runs._check_memory(limit)  # what ShardedRuns(train, keys, memory_bytes=limit) raises after compiling
    fits = int(re.search(r"fit: set max_parallel \(--max-parallel\) to (\d+)", str(refused.value)).group(1))
    assert 1 <= fits < runs.in_flight
    chunked = ShardedRuns(train, keys, chunk=fits, memory_bytes=limit)  # the advice holds: no error
    assert chunked.in_flight == fits
    memory = chunked.memory
    assert memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes <= limit
