import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, jax, numpy as np, purejaxppo as ppo
    from purejaxppo.parallel import ShardedRuns
    cfg = ppo.make_config(dict(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3))
    keys = jax.random.split(jax.random.PRNGKey(5), 5)   # 5 runs on 4 devices: padded to 8
    runs = ShardedRuns(ppo.make_train(cfg), keys)
    out = runs()
    print("RESULT", json.dumps({
        "devices": runs.num_devices, "padded": runs.padded_runs,
        "params": [np.asarray(x).tolist() for x in jax.tree.leaves(out.runner_state.params)],
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


def test_a_lone_run_is_not_copied_to_every_device():
    import jax
    import purejaxppo as ppo
    from purejaxppo.parallel import ShardedRuns

    cfg = ppo.make_config(dict(num_envs=2, num_steps=8, num_minibatches=1, update_epochs=1,
                               total_timesteps=16))
    runs = ShardedRuns(ppo.make_train(cfg), jax.random.PRNGKey(0)[None])
    assert runs.num_devices == 1 and runs.padded_runs == 1
    assert runs().metrics["episode_return"].shape == (1, 1)
