"""Test-wide settings."""

import os
import tempfile

import pytest


# One tiny CartPole config for the tests that train it in this process (test_learner, test_train):
# `jax.jit(ppo.make_train(cfg))` of it is one program, compiled once a session. 6 updates of 4 envs x
# 16 steps, 2 epochs of 2 minibatches; episodes cut at 40 steps.
TINY_CARTPOLE = dict(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=2,
                     total_timesteps=4 * 16 * 6, env_params={"max_steps_in_episode": 40})

# One command line's training, run (in this process) by tests in several files: its programs (the
# runs' start, one update, the evaluation) compile once a session and load from the persistent
# cache after. 2 seeds of the shipped cartpole.yaml, 4 updates of 64 steps, 2 evaluation episodes.
CARTPOLE_RUN = ["configs/cartpole.yaml", "--seeds", "2", "--set", "num_steps=16", "--set", "total_timesteps=256",
                "--eval-episodes", "2"]


def pytest_configure(config):
    # the command line's persistent compilation cache: one fresh folder for this test session,
    # shared by the processes the tests start, never the user's own cache
    # (with pytest-xdist, made by the controlling process and inherited by its workers: they share it)
    if "PYTEST_XDIST_WORKER" not in os.environ:
        os.environ["PUREJAXPPO_CACHE_DIR"] = tempfile.mkdtemp(prefix="purejaxppo-test-cache-")
    # ... and by this process, from before its first compile (JAX decides once whether to use it):
    # the tests' many programs that are the same (one tiny config, trained by several tests, or a
    # run folder the command line trains again) compile once per session, then load in about 1 s
    # instead of 5-10 s. The package's own thresholds, as `purejaxppo train` (run in this process
    # by many tests) sets them again: tiny programs are not worth a file.
    from purejaxppo.experiments import compile_cache

    compile_cache.enable(os.environ["PUREJAXPPO_CACHE_DIR"])


# `python -m MODULE ARGV` for each (argv, variables) in turn, in one new process (one start of
# Python and JAX for them all): each with the variables added to the process's environment (and
# taken away after), its exit code and what it wrote to the file descriptors named (2, or 1 and 2
# as one stream; Python's lines and XLA's alike), an uncaught exception printed as Python prints
# it at exit
_MODULE_RUNS = """
import json, os, runpy, sys, tempfile, traceback
module, runs, streams = json.loads(sys.argv[1])
results = []
for argv, variables in runs:
    sys.argv = [module, *argv]
    environ = dict(os.environ)
    os.environ.update(variables)
    with tempfile.TemporaryFile() as held:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = {fd: os.dup(fd) for fd in streams}
        for fd in streams:
            os.dup2(held.fileno(), fd)
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            os.environ.clear()
            os.environ.update(environ)
        held.seek(0)
        results.append([code, held.read().decode(errors="replace")])
print("RESULTS " + json.dumps(results))
"""


def run_module_each(module: str, runs, streams=(2,), env=None, timeout=300) -> list:
    """[(exit code, output)] of `python -m module argv` for each (argv, variables) of `runs`,
    run one after the other in one new process (with `env`, default this one's)."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _MODULE_RUNS, json.dumps([module, runs, list(streams)])],
                          capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    line = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")][-1]
    return [tuple(result) for result in json.loads(line[len("RESULTS "):])]


def assert_trees_equal_to_float_rounding(actual, expected, atol=1e-7):
    """Two programs that compute the same numbers: integer and bool leaves exactly, float leaves to
    float32 rounding. jax 0.11's XLA may round one computation differently in two programs (its
    vectorised math and fusions depend on the program around them); jax 0.9's happened not to. Where
    one program is reused (chunks, resume), the tests compare bit for bit instead. `atol`: for
    quantities that cancel near 1 (explained variance is 1 - a ratio: its float32 rounding is
    1.2e-7), computed from states that differ by rounding already."""
    import chex
    import jax
    import numpy as np

    chex.assert_trees_all_equal_structs(actual, expected)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(actual), jax.tree.leaves(expected)):
        a, b = np.asarray(a), np.asarray(b)
        if np.issubdtype(a.dtype, np.floating):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=atol, err_msg=jax.tree_util.keystr(path))
        else:
            np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(path))


def cut_back(whole, cut, step: int, kept=("config.yaml", "progress.jsonl")):
    """A copy `cut` of the finished run folder `whole` as a crash just after its checkpoint at
    update `step` would have left it: no newer checkpoint, none of the result files (only the
    folder's files named in `kept`). -> cut"""
    import shutil

    shutil.copytree(whole, cut)
    for path in (cut / "checkpoints").iterdir():
        if path.name.isdigit() and int(path.name) > step:
            shutil.rmtree(path)
    for path in cut.iterdir():
        if path.is_file() and path.name not in kept:
            path.unlink()
    return cut


def assert_metrics_csv_within_rounding(folder, reference, rows: int, rtol: float) -> None:
    """Two run or sweep folders' metrics.csv, from the same runs on other process or device layouts:
    `rows` rows each, the same columns, every cell equal or within `rtol` (relative; absolute
    below 1)."""
    import csv

    def table(path):
        with open(path / "metrics.csv") as f:
            return list(csv.DictReader(f))

    ours, theirs = table(folder), table(reference)
    assert len(ours) == len(theirs) == rows
    for a, b in zip(ours, theirs):
        assert a.keys() == b.keys()
        for key in a:
            if a[key] != b[key]:
                assert abs(float(a[key]) - float(b[key])) <= rtol * max(1.0, abs(float(b[key]))), (key, a[key], b[key])


def assert_acyclic(graph: dict) -> None:
    """`graph` (name -> the names it imports) has no import cycle; the message shows one."""
    def visit(name, path):
        assert name not in path, f"import cycle: {' -> '.join([*path, name])}"
        for other in graph.get(name, ()):
            visit(other, [*path, name])

    for name in graph:
        visit(name, [])


@pytest.fixture
def registry():
    """purejaxppo.envs, whose registrations made by a test are forgotten after it."""
    from purejaxppo import envs

    saved = dict(envs._REGISTERED)
    yield envs
    envs._REGISTERED.clear()
    envs._REGISTERED.update(saved)


@pytest.fixture
def exits(monkeypatch):
    """os._exit(code) raises SystemExit(code), so that a stopped command can be watched in this process."""
    def exit_(code):
        raise SystemExit(code)

    monkeypatch.setattr(os, "_exit", exit_)


@pytest.fixture
def no_drawing(monkeypatch):
    """A sweep's points are never drawn (a size bound must answer before): drawing them fails."""
    from purejaxppo.experiments import kinds

    def drawn(*args):
        raise AssertionError("points were drawn before the sweep's size was checked")

    for kind in {type(kind) for kind in (kinds.GRID, kinds.TRAIN, *kinds.KEYED.values())}:
        monkeypatch.setattr(kind, "points", drawn)


# PUREJAXPPO_TEST_RECORD=FILE (set by .ci/run, one file per stage): one JSON line per test that pytest
# collected and ran or skipped, {"id", "outcome": "passed" | "failed" | "skipped", "reason"}, and one per
# test file skipped whole while collected (importorskip: its id is the file's), for
# .ci/skipped_everywhere.py. Written by the controlling process only: with pytest-xdist it sees every
# worker's reports; a test deselected by markers gets no line.
_RECORD: list = []  # the record's absolute path, found once at the session's start (tests change directory)


def _record_path():
    return _RECORD[0] if _RECORD else None


def _record(report, outcome):
    import json

    reason = ""
    if outcome == "skipped":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    with open(_record_path(), "a") as f:
        f.write(json.dumps({"id": report.nodeid, "outcome": outcome, "reason": reason}) + "\n")


def pytest_sessionstart(session):
    path = os.environ.get("PUREJAXPPO_TEST_RECORD")
    if path and "PYTEST_XDIST_WORKER" not in os.environ:
        _RECORD[:] = [os.path.abspath(path)]
        os.makedirs(os.path.dirname(_RECORD[0]), exist_ok=True)
        open(_RECORD[0], "w").close()


def pytest_collectreport(report):
    if _record_path() and report.skipped:
        _record(report, "skipped")


def pytest_runtest_logreport(report):
    # a test's outcome: its setup's when that did not pass (skipped, or an error), else its call's;
    # an expected failure (xfail) ran
    if _record_path() and (report.when == "call" or (report.when == "setup" and not report.passed)):
        skipped = report.skipped and not hasattr(report, "wasxfail")
        _record(report, "skipped" if skipped else "failed" if report.failed else "passed")
