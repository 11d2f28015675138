"""The CI check that no test is skipped in every stage: .ci/skipped_everywhere.py's logic on small
records, the record tests/conftest.py writes, and .ci/run recording each of its pytest stages."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("skipped_everywhere", ROOT / ".ci" / "skipped_everywhere.py")
skipped_everywhere = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(skipped_everywhere)


def write_records(folder, stages: dict) -> Path:
    """FOLDER/STAGE.jsonl for each {stage: [(id, outcome, reason)]}. -> folder"""
    folder.mkdir(exist_ok=True)
    for stage, lines in stages.items():
        (folder / f"{stage}.jsonl").write_text(
            "".join(json.dumps({"id": i, "outcome": o, "reason": r}) + "\n" for i, o, r in lines))
    return folder


def check(records: dict) -> dict:
    """skipped_everywhere of {stage: [(id, outcome, reason)]}."""
    return skipped_everywhere.skipped_everywhere(
        {stage: [dict(id=i, outcome=o, reason=r) for i, o, r in lines] for stage, lines in records.items()})


def test_a_test_skipped_in_every_stage_fails_the_check(tmp_path, capsys):
    folder = write_records(tmp_path / "records", {
        "oldest": [("tests/test_a.py::test_x", "skipped", "Skipped: no jax2onnx"), ("tests/test_a.py::test_y", "passed", "")],
        "newest": [("tests/test_a.py::test_x", "skipped", "Skipped: no GPU"), ("tests/test_a.py::test_y", "passed", "")],
    })
    assert skipped_everywhere.main([str(folder)]) == 1
    out = capsys.readouterr().out
    flagged = [line for line in out.splitlines() if line.startswith("skipped in every CI stage")]
    assert flagged == ["skipped in every CI stage that collected it: tests/test_a.py::test_x "
                       "(newest: Skipped: no GPU; oldest: Skipped: no jax2onnx)"]


def test_a_test_that_ran_in_one_stage_passes_the_check(tmp_path, capsys):
    for outcome in ("passed", "failed"):  # a failure is the stage's to report: the test ran
        folder = write_records(tmp_path / outcome, {
            "long": [("tests/test_e.py::test_onnx", "skipped", "Skipped: could not import 'jax2onnx'")],
            "onnx": [("tests/test_e.py::test_onnx", outcome, "")],
        })
        assert skipped_everywhere.main([str(folder)]) == 0
    assert "skipped in every" not in capsys.readouterr().out


def test_a_deselected_test_is_not_a_skip():
    # a stage that deselected a test has no line for it: test_fast (deselected in the long stage) ran in
    # the fast one, fine; test_slow (deselected in the fast stage) was skipped wherever it was collected
    assert check({"fast": [("t.py::test_fast", "passed", "")],
                  "long": [("t.py::test_slow", "passed", "")]}) == {}
    assert check({"fast": [("t.py::test_fast", "passed", "")],
                  "long": [("t.py::test_slow", "skipped", "Skipped: needs 2 devices")]}) == {
        "t.py::test_slow": {"long": "Skipped: needs 2 devices"}}


def test_a_test_file_skipped_whole_is_fine_where_one_of_its_tests_ran():
    # importorskip at the file's top: the stage records the file's id, not its tests'
    skipped = ("tests/test_env_playground.py", "skipped", "Skipped: could not import 'mujoco_playground'")
    assert check({"oldest": [skipped], "newest": [("tests/test_env_playground.py::test_step", "passed", "")]}) == {}
    assert check({"oldest": [skipped], "newest": [("tests/test_env_playground_more.py::test_step", "passed", "")]}) == {
        "tests/test_env_playground.py": {"oldest": skipped[2]}}


def test_no_records_is_an_error(tmp_path, capsys):
    assert skipped_everywhere.main([str(tmp_path)]) == 2
    assert f"no stage records (*.jsonl) in {tmp_path}" in capsys.readouterr().out


def test_the_conftest_hook_records_each_test_outcome(tmp_path):
    (tmp_path / "test_tiny.py").write_text(
        "import pytest\n"
        "import os\n"
        "def test_runs(tmp_path): os.chdir(tmp_path)\n"  # a test that changes directory: the record stays put
        "def test_skips(): pytest.skip('nothing to see')\n"  # skipped in its call
        "@pytest.mark.skipif(True, reason='not here')\n"
        "def test_skipif(): pass\n"  # skipped in its setup
        "def test_deselected(): pass\n")  # no line
    (tmp_path / "test_absent.py").write_text(  # skipped whole while collected: one line, the file's
        "import pytest\n"
        "pytest.importorskip('purejaxppo_no_such_module')\n"
        "def test_never(): pass\n")
    record = tmp_path / "records" / "stage.jsonl"  # its folder does not exist yet
    # given relative to where pytest starts, as a test then changes directory
    env = dict(os.environ, PUREJAXPPO_TEST_RECORD="records/stage.jsonl", PYTHONPATH=str(ROOT / "tests"))
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                           "-o", "addopts=", "-p", "conftest", "--rootdir", str(tmp_path), "-k", "not deselected", "test_tiny.py", "test_absent.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert lines.pop(0) == {"id": "test_absent.py", "outcome": "skipped",
                            "reason": "Skipped: could not import 'purejaxppo_no_such_module': "
                                      "No module named 'purejaxppo_no_such_module'"}
    assert lines == [{"id": "test_tiny.py::test_runs", "outcome": "passed", "reason": ""},
                     {"id": "test_tiny.py::test_skips", "outcome": "skipped", "reason": "Skipped: nothing to see"},
                     {"id": "test_tiny.py::test_skipif", "outcome": "skipped", "reason": "Skipped: not here"}]


def test_ci_run_records_every_pytest_stage_and_checks_them():
    script = (ROOT / ".ci" / "run").read_text()
    stages = [line for line in script.splitlines() if re.search(r"-m pytest\b", line)]
    assert len(stages) == 4, stages
    for line in stages:
        assert re.search(r'PUREJAXPPO_TEST_RECORD="\$PWD"/\.ci-records/\w+\.jsonl ', line), line
    names = [re.search(r"PUREJAXPPO_TEST_RECORD=(\S+)", line)[1] for line in stages]
    assert len(set(names)) == len(names), names
    lines = script.splitlines()
    check = [n for n, line in enumerate(lines) if ".ci/skipped_everywhere.py .ci-records" in line]
    assert check and check[0] > lines.index(stages[-1]), "the check runs after the last pytest stage"
