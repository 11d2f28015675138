"""The benchmark suite's own logic (the harness, benchmarks/harness.py), with fake contenders: no JAX
compile; and its entry, `python -m benchmarks`, running the cases listed in benchmarks/cases.py."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import harness as suite
from conftest import assert_acyclic
from benchmarks.harness import Case, Contender, Comparison, Prepared, Skip


def test_median_range():
    assert suite.median_range([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert suite.median_range([4.0, 1.0]) == {"median": 2.5, "min": 1.0, "max": 4.0, "n": 2}
    assert suite.median_range([]) == {"median": None, "min": None, "max": None, "n": 0}
    assert suite.median_range([None, 5.0])["median"] == 5.0


def test_interleave_order():
    assert suite.interleave(["A", "B"], 3) == [(1, "A"), (1, "B"), (2, "A"), (2, "B"), (3, "A"), (3, "B")]
    assert suite.interleave(["A"], 0) == []


def test_loaded_marking():
    assert not suite.is_loaded([1.0, 2.0], cores=2)  # at the core count: not loaded
    assert suite.is_loaded([1.0, 2.1], cores=2)
    assert not suite.is_loaded([], cores=2)


def test_hardware_slug():
    assert suite.hardware_slug("cpu", cores=2) == "cpu2"
    assert suite.hardware_slug("gpu", "NVIDIA H200") == "h200"
    assert suite.hardware_slug("tpu", "") == "tpu"


class FakeClock:
    """Each contender's run() advances the clock by its own duration; reading is free."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def fake_group(clock, calls, durations, loads_iter=None, baseline="A", extra=()):
    def contender(name, steps=100.0):
        def build():
            def run():
                calls.append(name)
                clock.t += durations[name].pop(0)
            return Prepared(run, steps=steps, compile_s=0.5, info={"fake": True})
        return Contender(name, f"fake {name}", build)

    def skipped():
        raise Skip("peer not installed here")

    def broken():
        raise RuntimeError("boom\nsecond line")

    contenders = [contender("A"), contender("B")]
    if "skip" in extra:
        contenders.append(Contender("S", "a peer", skipped))
    if "error" in extra:
        contenders.append(Contender("E", "broken", broken))
    return Comparison("g", contenders, baseline=baseline)


def test_run_group_interleaves_and_summarizes():
    clock, calls = FakeClock(), []
    durations = {"A": [1.0, 2.0, 3.0], "B": [0.5, 1.0, 1.0]}
    loads = iter([1.0, 1.0, 1.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    g = fake_group(clock, calls, durations)
    out = suite.run_group(g, rounds=3, cores=2, clock=clock, load=lambda: next(loads))
    assert calls == ["A", "B", "A", "B", "A", "B"]
    a, b = out["cells"]
    assert a["status"] == b["status"] == "ok"
    assert a["times_s"] == [1.0, 2.0, 3.0] and a["rounds"] == [1, 2, 3]
    assert a["time_s"]["median"] == 2.0
    assert a["steps_per_s"] == {"median": 50.0, "min": 100 / 3, "max": 100.0, "n": 3}
    # per-round ratios against A in the same round: 2, 2, 3 -> median 2 (speed), 0.5 (time)
    assert b["speed_vs_baseline"] == {"median": 2.0, "min": 2.0, "max": 3.0, "n": 3}
    assert b["time_vs_baseline"]["median"] == 0.5
    assert "speed_vs_baseline" not in a
    # B's round-1 execution saw load 3.0 (after it) > 2 cores: B is loaded, A is not
    assert b["loaded"] and not a["loaded"]
    table = suite.group_table(out)
    assert "**loaded**" in table.splitlines()[3] and "**loaded**" not in table.splitlines()[2]
    assert "2.00x (2.00–3.00)" in table


def test_skipped_and_failing_contenders_are_reported_not_estimated():
    clock, calls = FakeClock(), []
    g = fake_group(clock, calls, {"A": [1.0, 1.0], "B": [1.0, 1.0]}, extra=("skip", "error"))
    out = suite.run_group(g, rounds=2, cores=2, clock=clock, load=lambda: 0.0)
    cells = {c["contender"]: c for c in out["cells"]}
    assert cells["S"]["status"] == "skipped" and cells["S"]["reason"] == "peer not installed here"
    assert cells["E"]["status"] == "error" and cells["E"]["reason"] == "RuntimeError: boom"
    assert "times_s" in cells["S"] and cells["S"]["times_s"] == [] and "steps_per_s" not in cells["S"]
    assert calls == ["A", "B", "A", "B"]
    table = suite.group_table(out)
    assert "| S | skipped: peer not installed here |" in table
    assert "| E | error: RuntimeError: boom |" in table


def test_missing_baseline_gives_no_ratio():
    clock, calls = FakeClock(), []
    g = fake_group(clock, calls, {"A": [1.0], "B": [1.0]}, baseline="nobody")
    out = suite.run_group(g, rounds=1, cores=2, clock=clock, load=lambda: 0.0)
    assert all("speed_vs_baseline" not in c for c in out["cells"])


def test_cases_and_results_files(tmp_path):
    clock = FakeClock()

    def groups(sizes):
        calls = []
        return [fake_group(clock, calls, {"A": [1.0] * sizes["n"], "B": [2.0] * sizes["n"]}, extra=("skip",))]

    case = Case("fake", "a fake case", {"quick": {"n": 2}, "full": {"n": 3}}, groups,
                summarize=lambda r: "SUMMARY LINE")
    with pytest.raises(ValueError, match="two cases are named 'fake'"):
        suite.by_name([case, case])
    result = suite.run_case(case, mode="quick", rounds=2, warmup=0, log=lambda m: None, clock=clock,
                            load=lambda: 0.0, cores=2)
    assert result["sizes"] == {"n": 2}
    result["summary"] = suite.summary_for(case, result)
    run = {"command": "python -m benchmarks --quick", "date": "2026-01-02",
           "started": "2026-01-02 00:00:00", "finished": "2026-01-02 00:01:00", "wall_s": 60.0,
           "machine": {"cpu": "Fake CPU", "cores": 2, "os": "test", "backend": "cpu", "devices": 1,
                       "device_kind": "cpu", "hardware": "cpu2"},
           "versions": {"jax": "0.0", "purejaxppo": "0.0"}, "quick": True, "rounds": 2, "warmup": 0,
           "notes": [], "cases": [result]}
    paths = suite.write_results(run, tmp_path, [case], plots=False)
    assert paths["md"] == tmp_path / "2026-01-02-cpu2-suite-quick.md"
    assert paths["json"] == tmp_path / "2026-01-02-cpu2-suite-quick.json"
    md = paths["md"].read_text()
    assert "cpu2 (Fake CPU, 2 cores" in md and "2026-01-02" in md and "jax 0.0" in md
    assert "quick mode: fewer than 3 rounds" in md
    assert "SUMMARY LINE" in md and "skipped: peer not installed here" in md
    data = json.loads(paths["json"].read_text())
    assert data["cases"][0]["groups"][0]["cells"][1]["speed_vs_baseline"]["median"] == 0.5
    assert data["machine"]["hardware"] == "cpu2"


def test_cli_rejects_too_few_rounds_and_unknown_cases(tmp_path, capsys):
    cases = [Case("x", "x", {"quick": {}, "full": {}}, lambda s: [])]
    assert suite.main(["--rounds", "2", "--out", str(tmp_path)], cases) == 2
    assert suite.main(["--quick", "--rounds", "1", "--out", str(tmp_path)], cases) == 2
    assert suite.main(["--cases", "nope", "--out", str(tmp_path)], cases) == 2
    assert not list(tmp_path.iterdir())


def test_result_names_full_and_subset(tmp_path):
    run = {"command": "c", "date": "2026-01-02", "started": "s", "finished": "f", "wall_s": 1.0,
           "machine": {"cpu": "x", "cores": 2, "os": "o", "backend": "gpu", "devices": 1,
                       "device_kind": "NVIDIA H200", "hardware": "h200"},
           "versions": {}, "quick": False, "rounds": 3, "warmup": 1, "notes": [], "cases": []}
    assert suite.write_results(dict(run), tmp_path, [], plots=False)["md"].name == "2026-01-02-h200-suite.md"
    sub = suite.write_results(dict(run, subset=["fusion", "limit"]), tmp_path, [], plots=False)
    assert sub["md"].name == "2026-01-02-h200-suite-fusion+limit.md"


# --------------------------------------------------------------------------------------
# contenders in a process of their own (benchmarks/peer.py's protocol)
FAKE_PEER = """
import json, sys, time
mode = sys.argv[1]
if mode == "crash":
    print("some library noise")
    sys.stderr.write("Traceback ...\\nImportError: no module named fakepeer\\n")
    sys.exit(1)
if mode == "error":
    print("PEER_ERROR " + json.dumps({"reason": "ValueError: unsupported setting"}), flush=True)
    sys.exit(1)
print("library noise on stdout", flush=True)
print("PEER_READY " + json.dumps({"compile_s": 1.25, "info": {"kind": "fake"}}), flush=True)
n = 0
for line in sys.stdin:
    if line.strip() == "quit":
        break
    n += 1
    if mode == "dies" and n == 2:
        sys.exit(3)
    print("PEER_DONE " + json.dumps({"seconds": 0.5 * n, "final_return": 100.0 + n}), flush=True)
"""


def fake_peer(tmp_path, mode):
    script = tmp_path / "fake_peer.py"
    script.write_text(FAKE_PEER)
    import sys

    return suite.PeerProcess([sys.executable, str(script), mode], timeout_s=60)


def test_peer_process_reports_its_own_times_and_returns(tmp_path):
    proc = fake_peer(tmp_path, "ok")
    group = Comparison("g", [Contender("peer", "a fake peer", lambda: proc.prepare(steps=10.0, info={"runs": 1}))],
                  baseline="peer")
    clock = FakeClock()  # never advances: only the times the peer reports can make up the cell
    result = suite.run_group(group, rounds=3, clock=clock, load=lambda: 0.0, cores=2)
    cell = result["cells"][0]
    assert cell["status"] == "ok" and cell["compile_s"] == 1.25
    assert cell["times_s"] == [0.5, 1.0, 1.5]                   # the peer's own measurements
    assert cell["info"]["final_return"] == 103.0 and cell["info"]["kind"] == "fake" and cell["info"]["runs"] == 1
    assert proc.proc.poll() is not None                          # closed once the group was timed


@pytest.mark.parametrize("mode, reason", [("crash", "exit 1) before PEER_READY: ImportError: no module named fakepeer"),
                                          ("error", "ValueError: unsupported setting")])
def test_peer_that_cannot_start_is_skipped_with_its_reason(tmp_path, mode, reason):
    proc = fake_peer(tmp_path, mode)
    result = suite.run_group(Comparison("g", [Contender("peer", "x", lambda: proc.prepare(steps=1.0))]), rounds=2,
                             clock=FakeClock(), load=lambda: 0.0, cores=2)
    cell = result["cells"][0]
    assert cell["status"] == "skipped" and reason in cell["reason"] and cell["times_s"] == []


def test_peer_dying_mid_rounds_keeps_what_it_measured_and_the_others_run_on(tmp_path):
    proc = fake_peer(tmp_path, "dies")
    calls, clock = [], FakeClock()

    def other():
        def run():
            calls.append(1)
            clock.t += 1.0
        return Prepared(run, steps=1.0)

    group = Comparison("g", [Contender("peer", "x", lambda: proc.prepare(steps=1.0)), Contender("other", "y", other)])
    result = suite.run_group(group, rounds=3, clock=clock, load=lambda: 0.0, cores=2)
    peer, rest = result["cells"]
    assert peer["status"] == "error" and peer["reason"].startswith("round 2:") and peer["times_s"] == [0.5]
    assert rest["status"] == "ok" and len(calls) == 3


def test_missing_peer_venv_is_a_skip_saying_how_to_set_it_up(monkeypatch, tmp_path):
    suite_cases = pytest.importorskip("benchmarks.cases")
    monkeypatch.setenv("PJRL_REPO", str(tmp_path / "no-checkout"))
    with pytest.raises(Skip, match="no PureJaxRL checkout at .*no-checkout .*set PJRL_REPO"):
        suite_cases.peer_python("pjrl")
    monkeypatch.setenv("REJAX_VENV", str(tmp_path / "no-venv"))
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(Skip, match="rejax is not installed here and there is no venv at .*no-venv"):
        suite_cases.peer_python("rejax")


# --------------------------------------------------------------------------------------
# the entry and the layout: the harness apart from the cases, no import circle
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def benchmark_imports(path: Path) -> set[str]:
    """The benchmarks modules a file imports, anywhere in it (local imports too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "benchmarks":
            names.update(node.module.split(".")[1:2] or [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[1] for a in node.names if a.name.startswith("benchmarks."))
    return names


def test_the_harness_imports_no_case_and_no_benchmark_module_imports_itself_back():
    graph = {path.stem: benchmark_imports(path) - {path.stem} for path in BENCHMARKS.glob("*.py")}
    assert graph["harness"] == set()  # it runs the cases it is given
    assert graph["cases"] == {"harness", "brax_side_by_side"} and graph["__main__"] == {"harness", "cases", "returns"}
    assert graph["returns"] == {"harness"}  # the returns case: its own runner, beside the timing cases
    assert all(path.stem not in benchmark_imports(path) for path in BENCHMARKS.glob("*.py"))
    assert_acyclic(graph)


def test_python_m_benchmarks_lists_the_cases_in_order():
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], capture_output=True, text=True,
                          timeout=300, cwd=BENCHMARKS.parent)
    assert done.returncode == 0, done.stderr
    assert "--quick" in done.stdout and "--replot" in done.stdout  # every option is the suite's
    assert "scaling,limit,fusion,overheads,peers,headline" in done.stdout.replace("\n", "").replace(" ", "")


# --------------------------------------------------------------------------------------
# the suite's inputs and results files: checked first, never replaced, never lost
ONE_CASE = [Case("x", "x", {"quick": {}, "full": {}}, lambda s: [])]


def test_out_is_checked_before_anything_is_measured(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(suite, "run_case", lambda *a, **k: pytest.fail("measured before --out was checked"))
    (tmp_path / "file").write_text("")
    for out, needle in ((tmp_path / "file" / "results", "cannot be written: Not a directory"),
                        (tmp_path / ("o" * 300), "too long for the file system")):
        assert suite.main(["--quick", "--out", str(out)], ONE_CASE) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and err.startswith("python -m benchmarks: error: --out=") and needle in err


def test_a_results_file_is_never_replaced_and_never_lost(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(suite, "machine_info", lambda: {"cpu": "c", "cores": 2, "os": "o", "backend": "cpu",
                                                        "devices": 1, "device_kind": "cpu", "hardware": "cpu2"})
    assert suite.main(["--quick", "--out", str(tmp_path)], ONE_CASE) == 0
    assert suite.main(["--quick", "--out", str(tmp_path)], ONE_CASE) == 0  # the same day, the same machine
    first, second = sorted(tmp_path.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    assert second.name == first.name.replace("-quick.json", "-quick-2.json"), (first, second)
    assert json.loads(first.read_text())["files"]["json"] == first.name  # the first run's file as it was
    # the folder becomes unwritable while measuring: the measurements are written elsewhere, and said where
    real = suite.write_results

    def into_a_vanished_folder(run, out_dir, cases, plots=True):
        if out_dir == tmp_path:
            raise PermissionError(13, "Permission denied")
        return real(run, out_dir, cases, plots)

    monkeypatch.setattr(suite, "write_results", into_a_vanished_folder)
    capsys.readouterr()
    assert suite.main(["--quick", "--out", str(tmp_path)], ONE_CASE) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "could not write the results into" in line and "Permission denied" in line, line
    kept = Path(line.rsplit("they are in ", 1)[1])
    assert json.loads(next(kept.glob("*.json")).read_text())["quick"] is True


def test_write_kept_adds_the_next_number_and_replaces_nothing(tmp_path):
    """The one way benchmarks/ writes a measurement (harness.write_kept, new_stem, newest): a rerun
    on the same day adds <stem>-2, -3, ... beside the earlier files, which stay as they were."""
    assert suite.write_kept(tmp_path / "r.md", "first") == tmp_path / "r.md"
    assert suite.write_kept(tmp_path / "r.md", "second") == tmp_path / "r-2.md"
    assert suite.write_kept(str(tmp_path / "r.md"), b"third") == tmp_path / "r-3.md"
    assert [(tmp_path / n).read_bytes() for n in ("r.md", "r-2.md", "r-3.md")] == [b"first", b"second", b"third"]
    assert suite.newest(tmp_path / "r.md") == tmp_path / "r-3.md" and suite.newest(tmp_path / "q.md") is None
    for other in ("r-9.json", "r-x.md", "rr-7.md", "r-2-limit.md"):  # another ending, name or stem: not r.md's
        (tmp_path / other).write_text("")
    assert suite.write_kept(tmp_path / "r.md", "fourth") == tmp_path / "r-4.md"
    (tmp_path / "r-2.md").unlink()  # a gap: the next number is still one past the highest, the newest
    assert suite.write_kept(tmp_path / "r.md", "fifth") == tmp_path / "r-5.md" == suite.newest(tmp_path / "r.md")
    # a set of files shares one stem: taken where any one of them exists
    (tmp_path / "s-x.png").write_text("")
    assert suite.new_stem(tmp_path, "s", [".md", ".json"]) == "s"
    assert suite.new_stem(tmp_path, "s", [".md", ".json", "-x.png"]) == "s-2"


def test_a_rerun_replaces_no_plot_of_an_earlier_run(tmp_path, monkeypatch):
    """An earlier run's plot stays, even where its markdown and JSON are gone (moved, or never written)."""
    monkeypatch.setattr(suite, "machine_info", lambda: {"cpu": "c", "cores": 2, "os": "o", "backend": "cpu",
                                                        "devices": 1, "device_kind": "cpu", "hardware": "cpu2"})
    drawn = iter(range(10))
    case = [Case("x", "x", {"quick": {}, "full": {}}, lambda s: [],
                 plot=lambda result, png, run: png.write_bytes(b"plot %d" % next(drawn)))]
    assert suite.main(["--quick", "--out", str(tmp_path)], case) == 0
    (png,) = tmp_path.glob("*.png")
    for end in (".md", ".json"):
        png.with_name(png.name.replace("-x.png", end)).unlink()
    assert suite.main(["--quick", "--out", str(tmp_path)], case) == 0
    assert png.read_bytes() == b"plot 0"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [png.name, *(png.name.replace("-quick-x.png", f"-quick-2{end}") for end in (".md", ".json", "-x.png"))])


def test_the_returns_case_measures_a_stale_result_again_into_a_new_file(tmp_path, monkeypatch, capsys):
    """A per-config result that is not current is measured again beside it (<config>-2.json), and the
    newest is the one read: for the table, and for whether it is current."""
    from benchmarks import returns

    committed = json.loads((returns.PER_CONFIG / "cartpole.json").read_text())  # a real result's fields
    results, out = tmp_path / "results", tmp_path / "out"
    results.mkdir()
    stale = json.dumps({**committed, "config_sha": "an-older-config", "seeds": 4})
    (results / "cartpole.json").write_text(stale)
    measured = []
    monkeypatch.setattr(returns, "run_config", lambda name, seeds, runs, log: measured.append(name) or tmp_path)
    monkeypatch.setattr(returns, "collect", lambda name, folder, runs: {**committed, "config_sha": returns.config_sha(
        name), "seeds": 4, "eval_return_sampled": [123.0] * 4})
    argv = ["--cases", "returns", "--configs", "cartpole", "--results", str(results), "--out", str(out),
            "--runs", str(tmp_path / "runs")]
    assert returns.main(argv) == 0 and measured == ["cartpole"]
    assert (results / "cartpole.json").read_text() == stale  # the earlier measurement, as it was
    assert returns.read_result(results, "cartpole")["eval_return_sampled"] == [123.0] * 4
    assert "| cartpole |" in capsys.readouterr().out and "123" in next(out.glob("*.md")).read_text()
    assert returns.main(argv) == 0 and measured == ["cartpole"]  # the newest is current: not measured again
    assert sorted(p.name for p in results.iterdir()) == ["cartpole-2.json", "cartpole.json"]
    assert len(list(out.glob("*.md"))) == 2  # the table too: a second one


def test_replot_of_a_missing_or_malformed_file_is_one_line(tmp_path, capsys):
    (tmp_path / "not.json").write_text("{oops")
    (tmp_path / "other.json").write_text('{"cases": []}')
    (tmp_path / "list.json").write_text("[1, 2]")
    for name, needle in (("missing.json", "cannot be read: No such file or directory"),
                         ("not.json", "not a JSON file"), ("other.json", "not a results file of the suite"),
                         ("list.json", "not a results file of the suite"), ("r" * 300, "too long")):
        assert suite.main(["--replot", str(tmp_path / name), "--out", str(tmp_path / "out")], ONE_CASE) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "--replot=" in err and needle in err, err
    assert not (tmp_path / "out").exists()


def test_extra_passes_variants_each_drop_their_pass():
    """benchmarks/extra_passes.py times our program without each pass: were a stub to stop
    reaching its pass (a renamed method), it would time nothing. Each variant traces fewer
    matrix products than the shipped program."""
    import jax

    from benchmarks.extra_passes import variant
    from benchmarks.peer import SETTINGS, ours_config

    cfg = ours_config({**SETTINGS, "total_timesteps": SETTINGS["num_envs"] * SETTINGS["num_steps"]})
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    dots = {without: str(jax.make_jaxpr(variant(cfg, without))(keys)).count("dot_general")
            for without in (None, "clip cases", "bootstrap")}
    assert dots["clip cases"] < dots[None] and dots["bootstrap"] < dots[None], dots


def test_every_benchmarks_module_imports():
    """A benchmark that uses a name the package no longer has fails here, not when someone runs it
    (one fresh process: several modules set XLA's flags as they are imported)."""
    root = Path(__file__).parent.parent
    names = sorted(p.stem for p in (root / "benchmarks").glob("*.py") if p.stem != "__init__")
    assert "pbt_step" in names and "__main__" in names
    code = "import importlib\nfor name in %r:\n    importlib.import_module('benchmarks.' + name)\n" % names
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


# --------------------------------------------------------------------------------------
# benchmarks/ uses the experiment side's public names only: a name in the `__all__` of the module that
# defines it (a package's `__all__` may name what it gathers from its own modules: report, kinds)
PACKAGE_ROOT = BENCHMARKS.parent
# names benchmarks need from experiment modules that declare no `__all__` yet (their owners' to declare);
# each entry fails here once its module has an `__all__` (that decides then) or no benchmark uses it
AWAITING_ALL: dict[str, set[str]] = {}


def experiment_side(module: str) -> bool:
    return module == "purejaxppo.experiments" or module.startswith("purejaxppo.experiments.")


def module_file(dotted: str, root: Path = PACKAGE_ROOT) -> Path | None:
    """The source of a module of the package (`purejaxppo.experiments.stats`), None if it is not one."""
    base = root.joinpath(*dotted.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def public_face(path: Path, root: Path = PACKAGE_ROOT) -> tuple[set[str] | None, set[str]]:
    """A module's `__all__` (None without one) and the names it defines at its top level (for a
    package: also what it imports from its own modules)."""
    package = ".".join(path.parent.relative_to(root).parts)
    declared, defined = None, set()
    statements = list(ast.parse(path.read_text()).body)
    while statements:
        node = statements.pop(0)
        if isinstance(node, (ast.If, ast.Try)):
            statements += node.body + node.orelse + getattr(node, "finalbody", [])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                defined.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
                if isinstance(target, ast.Name) and target.id == "__all__":
                    declared = {e.value for e in node.value.elts}
        elif (isinstance(node, ast.ImportFrom) and path.name == "__init__.py" and node.module
              and node.module.startswith(package + ".")):
            defined.update(a.asname or a.name for a in node.names)
    return declared, defined


def experiment_names_used(path: Path, root: Path = PACKAGE_ROOT) -> list[tuple[int, str, str]]:
    """(line, module, name) for each name a file takes from a purejaxppo.experiments module: imported
    (`from purejaxppo.experiments.stats import mean_se`) or read off an imported module
    (`stats.mean_se`, `ppo.experiments.parallel.ShardedRuns`); a module imported as such is no name."""
    tree = ast.parse(path.read_text())
    modules, used = {}, []  # local name -> the module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                if module_file(f"{node.module}.{a.name}", root):
                    modules[a.asname or a.name] = f"{node.module}.{a.name}"
                elif experiment_side(node.module):
                    used.append((node.lineno, node.module, a.name))
    for node in ast.walk(tree):
        chain = []
        while isinstance(node, ast.Attribute):
            chain.insert(0, node.attr)
            node = node.value
        if not chain or not isinstance(node, ast.Name) or node.id not in modules:
            continue
        module = modules[node.id]
        while chain and module_file(f"{module}.{chain[0]}", root):
            module = f"{module}.{chain.pop(0)}"
        if chain and experiment_side(module):
            used.append((node.lineno, module, chain[0]))
    return used


def public_name_problems(benchmarks: Path = BENCHMARKS, root: Path = PACKAGE_ROOT,
                         awaiting: dict = AWAITING_ALL) -> list[str]:
    problems = []
    for path in sorted(benchmarks.glob("*.py")):
        for line, module, name in sorted(set(experiment_names_used(path, root))):
            where = f"{path.name}:{line}: {name} from {module}"
            declared, defined = public_face(module_file(module, root), root)
            if declared is None:
                if name not in awaiting.get(module, ()):
                    problems.append(f"{where}, a module without __all__")
            elif name not in declared:
                problems.append(f"{where}: not in its __all__")
            elif name not in defined:
                problems.append(f"{where}, which does not define it: import it from the module that does")
    return problems


def test_benchmarks_use_only_the_experiment_sides_public_names():
    assert public_name_problems() == []
    used = {(m, n) for p in BENCHMARKS.glob("*.py") for _, m, n in experiment_names_used(p)}
    assert {("purejaxppo.experiments.parallel", "ShardedRuns"), ("purejaxppo.experiments.stats", "mean_se"),
            ("purejaxppo.experiments.report", "format_mean_se")} <= used  # imported and read off a module
    for module, names in AWAITING_ALL.items():  # no allowance outlives its reason
        assert public_face(module_file(module))[0] is None, f"{module} has an __all__ now: drop it from AWAITING_ALL"
        assert {(module, n) for n in names} <= used, f"AWAITING_ALL[{module!r}] lists a name no benchmark uses"
    for module in ("parallel", "stats", "live", "sweep", "paths"):  # each listed name is defined there
        declared, defined = public_face(module_file(f"purejaxppo.experiments.{module}"))
        assert declared is not None and declared <= defined, (module, declared - defined)
