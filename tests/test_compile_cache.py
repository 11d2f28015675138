"""The command line's persistent compilation cache: a second run of the same config reads
its programs from the cache (and computes the same numbers, without jaxlib's false alarms
about machine features on stderr); --no-cache writes none."""

import math
import os
import re
import subprocess
import sys

import pytest

from conftest import CARTPOLE_RUN
from purejaxppo.experiments import cli
from purejaxppo.experiments.runs import progress_chunk

CONFIG = "env: CartPole-v1\nnum_envs: 4\nnum_steps: 16\nnum_minibatches: 2\ntotal_timesteps: 256\n"


def train(folder, cache, *options):
    env = {**os.environ, "PUREJAXPPO_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-m", "purejaxppo", "train", "tiny.yaml", "--eval-episodes", "4",
                           "--out", str(folder), *options], cwd=folder.parent, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "machine feature" not in done.stderr and "version compatibility" not in done.stderr  # false alarms
    return (folder / "metrics.csv").read_text()


def entries(cache):
    return sorted(p.name for p in cache.iterdir() if p.name.endswith("-cache")) if cache.exists() else []


@pytest.mark.slow
def test_a_second_run_reads_its_programs_from_the_cache(tmp_path):
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    cache = tmp_path / "cache"
    first = train(tmp_path / "a", cache)
    written = entries(cache)
    # all three programs (init, the chunk of updates, evaluation): live progress is reported from the
    # host between chunks, so no program holds a host callback (JAX caches none that does)
    assert len(written) >= 3
    second = train(tmp_path / "b", cache)
    assert entries(cache) == written  # every program found: nothing compiled, nothing new written
    assert second == first  # the same executables: the same numbers
    train(tmp_path / "c", tmp_path / "unused", "--no-cache")
    assert entries(tmp_path / "unused") == []


@pytest.mark.slow
def test_eval_from_a_warm_cache_prints_no_false_alarms(tmp_path):
    """jaxlib 0.9.2 (the oldest end) prints its false alarms on every program read from the cache:
    eval's evaluation program, read back, must not show them."""
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    cache = tmp_path / "cache"
    train(tmp_path / "run", cache)
    env = {**os.environ, "PUREJAXPPO_CACHE_DIR": str(cache)}
    for _ in range(2):  # the first writes the evaluation program, the second reads it
        done = subprocess.run([sys.executable, "-m", "purejaxppo", "eval", "run", "--episodes", "300"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert "machine feature" not in done.stderr and "version compatibility" not in done.stderr, done.stderr


def test_tiny_ops_are_never_cached_even_when_they_compile_slowly(tmp_path):
    """A loaded machine may take longer than MIN_COMPILE_SECONDS over a seed or a conversion; such
    entries were read back by every later run, each printing jaxlib's false alarms."""
    script = ("import sys\n"
              "from purejaxppo.experiments import compile_cache\n"
              "compile_cache.MIN_COMPILE_SECONDS = 0  # every compile counts as slow\n"
              "compile_cache.enable(sys.argv[1])\n"
              "import jax, jax.numpy as jnp\n"
              "jax.random.PRNGKey(3).block_until_ready()\n"
              "(-jnp.arange(3.0)).astype(jnp.int32).block_until_ready()\n")
    cache = tmp_path / "cache"
    done = subprocess.run([sys.executable, "-c", script, str(cache)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert entries(cache) == []


# jaxlib 0.9.2's false alarm (the oldest end: .ci/oldest.txt), printed by its C++ code on fd 2 for every
# program read back from the cache; newer jaxlibs print none on the machine that compiled
FALSE_ALARM = ("E0000 00:00:1764979200.000000    4242 cpu_client.cc:1] Loading XLA:CPU AOT result. Target machine "
               "feature +prefer-no-gather is not supported on the host machine. This could lead to execution errors "
               "such as SIGILL.\n")
# `purejaxppo export` twice in one process, the second reading its programs back from the cache, each
# read back printing FALSE_ALARM as jaxlib 0.9.2 does (jax.monitoring's cache-hit event, fired within
# the compile); every program is cached (no thresholds), a conversion's as much as the policy's
EXPORT_TWICE = """
import os, sys
import jax
from purejaxppo.experiments import cli, compile_cache
compile_cache.MIN_COMPILE_SECONDS = compile_cache.MIN_ENTRY_BYTES = 0
hits = []
def on_event(event, **kwargs):
    if event == "/jax/compilation_cache/cache_hits":
        hits.append(event)
        os.write(2, sys.argv[3].encode())
jax.monitoring.register_event_listener(on_event)
for n in (1, 2):
    assert cli.main(["export", sys.argv[1], "--format", "stablehlo", "--out", f"{sys.argv[2]}/policy{n}.stablehlo"]) == 0
    jax.clear_caches()
print(f"programs read back from the cache: {len(hits)}")
"""
LIBRARY_WARNING = re.compile(r"^[WE]\d{4} |could lead to|^WARNING:|Assume version compatibility", re.MULTILINE)


def test_export_from_a_warm_cache_prints_no_library_warning(tmp_path):
    """`purejaxppo export` compiles inside quiet_cache_loads, as train and eval do: what it prints is
    its own lines, none of the library's (XLA's, absl's, JAX's)."""
    assert cli.main(["train", *CARTPOLE_RUN, "--out", str(tmp_path / "run")]) == 0  # compiled once a session
    env = {**os.environ, "PUREJAXPPO_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", EXPORT_TWICE, str(tmp_path / "run"), str(tmp_path), FALSE_ALARM],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    hits = int(re.search(r"programs read back from the cache: (\d+)", done.stdout).group(1))
    assert hits > 0  # the second export read its programs back: the alarms were printed, within the export
    assert done.stdout.count("verified: loaded with jax.export.deserialize") == 2
    assert not LIBRARY_WARNING.search(done.stdout + done.stderr), done.stdout + done.stderr


def test_progress_chunks_divide_the_run_into_between_half_and_twice_progress_points_reports():
    assert progress_chunk(4, points=25) == 1            # a short run: every update reported
    assert progress_chunk(976, points=25) == 61         # 976 = 16 x 61: 16 reports, one program
    assert progress_chunk(1000, points=25) == 50        # the fewest chunks of at least 12.5: 20
    assert progress_chunk(32, points=25) == 2
    for n in (1, 7, 50, 976, 1000, 3906, 2**20):
        k = progress_chunk(n, points=25)
        assert n % k == 0 and min(n, 12.5) <= n // k <= 50
    # no divisor fits (a prime above 50): 25 chunks of 4 updates, the last of 1 (a program of its own)
    assert progress_chunk(97, points=25) == 4
    for n in (53, 97, 1009, 7919, 2 * 7919):
        k = progress_chunk(n, points=25)
        assert 12.5 <= math.ceil(n / k) <= 25
