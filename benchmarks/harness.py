"""The timing suite's harness: what a case is, one timing helper, running cases, one results writer.

    python -m benchmarks [--quick] [--cases scaling,limit,...] [--rounds N] [--out DIR]

A case (the list `CASES` in benchmarks/cases.py) is one small definition: a name, a title, sizes
for --quick and for the full run, and a function that turns those sizes into groups. A group
is one comparison: contenders that run the same amount of work (env steps), compiled
first and then timed in interleaved rounds (A B C A B C ...), so that slow drift of the
machine hits all of them alike. Each contender's `build()` compiles its program with
`jax.jit(f).lower(...).compile()` (that time is reported as compile, never counted in the
timed runs) and returns a `Prepared` whose `run()` executes it once, blocking. A
contender that cannot run raises `Skip(reason)` in `build()`: it is reported as skipped
with the reason, never estimated.

Every timed execution records the 1-minute load average (os.getloadavg) before and after
it; a cell (one contender of one group) whose load exceeded the core count in any round
is marked `loaded` in the table (its rounds are still shown, not silently averaged in).
The table gives per cell the median and range over rounds of the time and of env
steps/s, and against the group's baseline the median (and range) of the per-round ratios.

Results: <out>/<date>-<hardware>-suite.md and .json (-suite-quick for --quick; a --cases subset
adds -<case>+<case>; a rerun on the same day -2, -3, ...: no results file is ever replaced,
`write_kept`), plus PNG plots (matplotlib, Agg);
hardware is a short slug (cpu2 for a 2-core CPU, h200 for an H200), and the header of
each file gives the hardware, package versions and date every absolute number belongs to.

This module imports neither JAX nor purejaxppo at import time (its logic is unit-tested
without compiling anything), nor any case: `main` runs the cases it is given
(benchmarks/__main__.py gives it benchmarks/cases.py's list).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import glob
import json
import os
import platform
import queue
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
QUICK_MIN_ROUNDS = 2
MIN_ROUNDS = 3


# --------------------------------------------------------------------------------------
# what a case is
class Skip(Exception):
    """Raised by a contender's build(): it cannot run here (the message says why)."""


@dataclasses.dataclass
class Prepared:
    """A compiled contender: `run()` executes it once and blocks until it is done. When
    `run()` returns a number, that is the execution's time in seconds as the contender
    measured it (a process of its own, or a trainer that cannot leave its compile out);
    otherwise the suite's clock times the call."""

    run: Callable[[], Any]
    steps: float                     # env steps (or the work unit below) of one run()
    compile_s: float | None = None   # seconds spent compiling in build(), None if nothing compiled
    info: dict = dataclasses.field(default_factory=dict)  # anything to report (checks, shapes)
    close: Callable[[], None] | None = None  # called once the group is timed (ends a process, ...)


@dataclasses.dataclass
class Contender:
    name: str
    what: str                          # one line: what it runs
    build: Callable[[], Prepared]      # compiles; may raise Skip


@dataclasses.dataclass
class Comparison:
    """One comparison: contenders timed interleaved; ratios against `baseline`."""

    name: str
    contenders: list[Contender]
    baseline: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    params: dict = dataclasses.field(default_factory=dict)  # x values for plots etc.


@dataclasses.dataclass
class Case:
    name: str
    title: str
    sizes: dict                             # {"quick": {...}, "full": {...}, "gpu": {...} (optional)}
    groups: Callable[[dict], list[Comparison]]   # sizes -> groups
    ratio: str = "speed"                    # "speed": baseline time / time (>1 faster); "share": time / baseline time
    plot: Callable[[dict, Path], None] | None = None  # (case result, png path) -> writes the plot
    explain: str = ""
    summarize: Callable[[dict], str] | None = None  # case result -> a markdown paragraph (which bound, ...)


def by_name(cases) -> dict[str, Case]:
    """{name: case} in the list's order; two cases of one name are refused."""
    named: dict[str, Case] = {}
    for case in cases:
        if case.name in named:
            raise ValueError(f"two cases are named {case.name!r}")
        named[case.name] = case
    return named


# --------------------------------------------------------------------------------------
# statistics
def median_range(xs: list[float]) -> dict:
    """{"median", "min", "max", "n"} of xs; all None for an empty list."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def interleave(names: list[str], rounds: int) -> list[tuple[int, str]]:
    """The order cells are timed in: round 1: A B C, round 2: A B C, ... (1-based rounds)."""
    return [(r, n) for r in range(1, rounds + 1) for n in names]


def is_loaded(loads: list[float], cores: int) -> bool:
    """A cell is loaded when any load average recorded during it exceeded the core count."""
    return any(x > cores for x in loads)


def core_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _load() -> float:
    return os.getloadavg()[0]


# --------------------------------------------------------------------------------------
# the one timing helper
def compile_timed(fn, *args, ours: bool = True):
    """`jax.jit(fn).lower(*args).compile()` -> (compiled, seconds). Our code (`ours`) is
    compiled with `purejaxppo.compiler_options()`, as the package compiles its own programs;
    a peer's with XLA's defaults."""
    import jax

    options = None
    if ours:
        from purejaxppo import compiler_options

        options = compiler_options()
    start = time.perf_counter()
    compiled = jax.jit(fn, compiler_options=options).lower(*args).compile()
    return compiled, time.perf_counter() - start


class PeerProcess:
    """A contender in a process of its own (benchmarks/peer.py's protocol): started and
    compiled by `prepare()`, then executed once per `run()` on request, so that peers with
    their own interpreters and dependencies still run interleaved with ours, round by round.
    Every failure (missing interpreter, import error, a crash, a timeout) raises Skip with
    the reason, so that the peer is reported as skipped, never estimated."""

    def __init__(self, argv: list[str], env: dict | None = None, cwd: str | None = None, timeout_s: float = 1800):
        self.argv, self.env, self.cwd, self.timeout_s = argv, env, cwd, timeout_s
        self.proc = None
        self.lines: "queue.Queue[str | None]" = queue.Queue()
        self.stderr_tail: list[str] = []

    def prepare(self, steps: float, info: dict | None = None) -> Prepared:
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, env=self.env, cwd=self.cwd)
        except OSError as e:
            raise Skip(f"cannot start {self.argv[0]}: {e}") from e
        for stream, sink in ((self.proc.stdout, self.lines.put), (self.proc.stderr, self._keep_stderr)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()
        ready = self._wait("PEER_READY")
        extra = dict(info or {})
        extra.update(ready.get("info") or {})

        def run() -> float:
            self.proc.stdin.write("run\n")
            self.proc.stdin.flush()
            done = self._wait("PEER_DONE")
            extra["final_return"] = done.get("final_return")
            return float(done["seconds"])

        return Prepared(run, steps=steps, compile_s=ready.get("compile_s"), info=extra, close=self.close)

    def close(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()

    @staticmethod
    def _pump(stream, sink):
        for line in stream:
            sink(line)
        sink(None)

    def _keep_stderr(self, line):
        if line is not None:
            self.stderr_tail = (self.stderr_tail + [line.rstrip()])[-20:]

    def _wait(self, tag: str) -> dict:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.proc.kill()
                raise Skip(f"no {tag} within {self.timeout_s:.0f} s") from None
            if line is None:  # the process ended
                self.proc.wait()
                why = next((x for x in reversed(self.stderr_tail) if x.strip()), "no output")
                raise Skip(f"the process ended (exit {self.proc.returncode}) before {tag}: {why}")
            word, _, payload = line.strip().partition(" ")
            if word == tag:
                return json.loads(payload)
            if word == "PEER_ERROR":
                self.close()
                raise Skip(json.loads(payload)["reason"])


def run_group(group: Comparison, rounds: int, warmup: int = 0, cores: int | None = None,
              clock=time.perf_counter, load=_load, log=None) -> dict:
    """Build every contender (in order), then time them interleaved for `rounds` rounds.

    Returns {"name", "baseline", "notes", "params", "cells": [cell, ...]}; a cell is
    {"contender", "what", "status": "ok" | "skipped" | "error", "reason"?, "compile_s",
    "steps", "times_s", "loads", "rounds", "info", plus the summary of `summarize_cell`}.
    """
    cores = core_count() if cores is None else cores
    log = log or (lambda msg: None)
    cells, ready = [], {}
    for c in group.contenders:
        cell = {"contender": c.name, "what": c.what, "times_s": [], "loads": [], "rounds": []}
        cells.append(cell)
        log(f"  build {group.name} / {c.name} ...")
        try:
            prep = c.build()
        except Skip as e:
            cell.update(status="skipped", reason=str(e))
            log(f"    skipped: {e}")
            continue
        except Exception as e:  # a failing contender is reported, the rest still run
            cell.update(status="error", reason=f"{type(e).__name__}: {first_line(e)}")
            log(f"    error: {cell['reason']}")
            continue
        cell.update(status="ok", compile_s=prep.compile_s, steps=prep.steps, info=dict(prep.info))
        for _ in range(warmup):
            start = clock()
            prep.run()
            cell.setdefault("warmup_s", []).append(clock() - start)
        ready[c.name] = (prep, cell)
        log(f"    compile {prep.compile_s if prep.compile_s is not None else float('nan'):.1f} s")
    try:
        for rnd, name in interleave(list(ready), rounds):
            prep, cell = ready[name]
            if cell["status"] != "ok":
                continue
            before = load()
            start = clock()
            try:
                reported = prep.run()
            except Exception as e:  # a contender failing mid-way is reported with what it measured so far
                cell.update(status="error", reason=f"round {rnd}: {type(e).__name__}: {first_line(e)}")
                log(f"    error: {cell['reason']}")
                continue
            elapsed = clock() - start
            if isinstance(reported, (int, float)) and not isinstance(reported, bool):
                elapsed = float(reported)
            cell["times_s"].append(elapsed)
            cell["loads"].append(max(before, load()))
            cell["rounds"].append(rnd)
            log(f"  [round {rnd}/{rounds}] {group.name} / {name}: {elapsed:.3f} s, "
                f"{prep.steps / elapsed:,.0f} steps/s, load {cell['loads'][-1]:.1f}")
    finally:
        for prep, cell in ready.values():
            cell["info"] = dict(prep.info)  # what the runs added (a peer's final return, ...)
            if prep.close is not None:
                prep.close()
    base = next((c for c in cells if c["contender"] == group.baseline and c["status"] == "ok"), None)
    for cell in cells:
        if cell["status"] == "ok":
            cell.update(summarize_cell(cell, base, cores))
    return {"name": group.name, "baseline": group.baseline, "notes": list(group.notes),
            "params": dict(group.params), "cells": cells}


def first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else ""


def summarize_cell(cell: dict, base: dict | None, cores: int) -> dict:
    """Median/range of time and steps/s; per-round ratios against `base` (same round)."""
    times = cell["times_s"]
    out = {"time_s": median_range(times),
           "steps_per_s": median_range([cell["steps"] / t for t in times if t > 0]),
           "load": median_range(cell["loads"]),
           "loaded": is_loaded(cell["loads"], cores)}
    if base is not None and base is not cell:
        by_round = dict(zip(base["rounds"], base["times_s"]))
        # time ratio (this / baseline) per round; "speed" = its inverse, scaled by the work ratio
        shares = [t / by_round[r] for r, t in zip(cell["rounds"], times) if r in by_round]
        work = cell["steps"] / base["steps"] if base["steps"] else 1.0
        speeds = [work / s for s in shares if s > 0]
        out["time_vs_baseline"] = median_range(shares)
        out["speed_vs_baseline"] = median_range(speeds)
    return out


# --------------------------------------------------------------------------------------
# formatting
def fmt(x, spec=",.0f", none="—") -> str:
    return none if x is None else format(x, spec)


def fmt_mr(mr: dict, spec=",.0f", suffix="") -> str:
    if not mr or mr.get("median") is None:
        return "—"
    if mr["n"] == 1:
        return f"{format(mr['median'], spec)}{suffix}"
    return f"{format(mr['median'], spec)}{suffix} ({format(mr['min'], spec)}–{format(mr['max'], spec)})"


def group_table(group: dict, ratio: str = "speed") -> str:
    ratio_head = ("speed vs baseline (median of per-round ratios, range)" if ratio == "speed"
                  else "time / baseline's time (median of per-round ratios, range)")
    head = ["contender", "compile s", "time s (median, range)", "env steps/s (median, range)",
            ratio_head, "load avg (median, max)", "rounds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in group["cells"]:
        name = c["contender"] + (" (baseline)" if c["contender"] == group["baseline"] else "")
        if c["status"] != "ok":
            lines.append(f"| {name} | {c['status']}: {c.get('reason', '')} | | | | | |")
            continue
        key = "speed_vs_baseline" if ratio == "speed" else "time_vs_baseline"
        rat = fmt_mr(c.get(key), ".2f", "x") if key in c else ("1.00x" if c["contender"] == group["baseline"] else "—")
        loaded = " **loaded**" if c["loaded"] else ""
        ld = c["load"]
        shared = " (shared)" if c.get("info", {}).get("compiled_program_shared") else ""
        lines.append(f"| {name} | {fmt(c['compile_s'], '.1f')}{shared} | {fmt_mr(c['time_s'], '.3f')} "
                     f"| {fmt_mr(c['steps_per_s'])} | {rat} "
                     f"| {fmt(ld['median'], '.1f')}, {fmt(ld['max'], '.1f')}{loaded} | {ld['n']} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# environment of the run: hardware, versions
def package_versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in ("purejaxppo", "jax", "jaxlib", "flax", "optax", "gymnax", "brax", "chex", "numpy", "matplotlib"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


def hardware_slug(backend: str, device_kind: str = "", cores: int | None = None) -> str:
    """cpu2 for a 2-core CPU; the accelerator's model for others ("NVIDIA H200" -> h200)."""
    if backend == "cpu":
        return f"cpu{core_count() if cores is None else cores}"
    words = [w for w in re.split(r"[^a-z0-9]+", device_kind.lower()) if w and w not in ("nvidia", "tesla", "google")]
    return (words[0] if words else backend) or "device"


def git_state() -> str:
    """The checkout measured: commit, plus ' + uncommitted changes' when the tree is dirty."""
    try:
        rev = subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(HERE.parent), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (rev or "unknown") + (" + uncommitted changes" if dirty else "")


def machine_info() -> dict:
    info = {"cpu": cpu_model(), "cores": core_count(), "os": platform.platform()}
    try:
        import jax

        devs = jax.devices()
        info.update(backend=jax.default_backend(), devices=len(devs), device_kind=devs[0].device_kind)
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        info.update(backend="unknown", devices=0, device_kind=f"({e})")
    info["hardware"] = hardware_slug(info["backend"], info.get("device_kind", ""), info["cores"])
    return info


# --------------------------------------------------------------------------------------
# results: a measurement is never replaced. Every writer of benchmarks/ names its files with
# `new_stem` (a set of files: the suite's .md, .json and plots) or writes one with `write_kept`;
# a rerun with the same options on the same day adds <stem>-2, -3, ... beside the earlier files.
def _numbers(folder: Path, base: str, endings) -> set[int]:
    """The numbers taken among folder/<base><ending> (1) and <base>-<n><ending> (n) for the endings."""
    taken = set()
    for ending in endings:
        pattern = re.compile(re.escape(base) + r"(?:-(\d+))?" + re.escape(ending))
        for path in Path(folder).glob(glob.escape(base) + "*" + glob.escape(ending)):
            match = pattern.fullmatch(path.name)
            if match:
                taken.add(int(match.group(1) or 1))
    return taken


def new_stem(folder: Path, base: str, endings=(".md",)) -> str:
    """The stem of a new set of results files folder/<stem><ending>: `base` where none of its files
    exists, else base-<n>, n one past the highest taken (base-2 for a second run on one day)."""
    taken = _numbers(folder, base, endings)
    return base if not taken else f"{base}-{max(taken) + 1}"


def write_kept(path: Path, data: str | bytes) -> Path:
    """Write `data` as a new file: `path`, or where a file of that name exists (or appears in the
    meantime) the next of path's stem -2, -3, ... (new_stem). Replaces nothing; -> the path written."""
    from purejaxppo.experiments.paths import write_new

    path = Path(path)
    while True:
        kept = path.with_name(new_stem(path.parent, path.stem, [path.suffix]) + path.suffix)
        try:
            write_new(kept, data)
            return kept
        except FileExistsError:  # another writer took that number first: the next one
            continue


def newest(path: Path) -> Path | None:
    """The latest file `write_kept(path, ...)` wrote: the highest-numbered of path, its stem -2, -3, ...
    (None if there is none)."""
    path = Path(path)
    taken = _numbers(path.parent, path.stem, [path.suffix])
    if not taken:
        return None
    n = max(taken)
    return path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")


def write_results(run: dict, out_dir: Path, cases: list[Case], plots: bool = True) -> dict:
    """<out_dir>/<date>-<hardware>-suite[-quick][-<case>+<case> for a subset].{md,json} and
    <stem>-<case>.png; returns the paths. `cases`: the definitions (plots, explanations) of
    the cases in `run`. A results file is never replaced: when the name is taken (a second run
    on one day), the stem gets -2, -3, ... (new_stem)."""
    from purejaxppo.experiments.paths import write_new

    registry = by_name(cases)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = f"{run['date']}-{run['machine']['hardware']}-suite" + ("-quick" if run["quick"] else "")
    if run.get("subset"):
        base += "-" + "+".join(run["subset"])
    stem = new_stem(out_dir, base, [".md", ".json", *(f"-{case['name']}.png" for case in run["cases"])])
    paths = {"md": out_dir / f"{stem}.md", "json": out_dir / f"{stem}.json"}
    if plots:
        for case in run["cases"]:
            spec = registry.get(case["name"])
            png = out_dir / f"{stem}-{case['name']}.png"
            try:
                if spec is not None and spec.plot is not None:
                    spec.plot(case, png, run)
                else:
                    bar_plot(case, png, run)
                paths[f"png:{case['name']}"] = png
            except Exception as e:  # noqa: BLE001 - a missing matplotlib costs the plot only
                run.setdefault("notes", []).append(f"plot for {case['name']} not written: {type(e).__name__}: {e}")
    run["files"] = {k: p.name for k, p in paths.items()}
    write_new(paths["json"], json.dumps(run, indent=1, default=str))
    write_new(paths["md"], render_markdown(run, cases))
    return paths


def _refuse(line: str) -> int:
    print(f"python -m benchmarks: error: {line}", file=sys.stderr)
    return 2


def _out_problem(out: Path) -> str | None:
    """Why the results folder cannot take the results (None: it can): checked before anything is
    measured, by making it and writing a file into it."""
    from purejaxppo.errors import UsageError
    from purejaxppo.experiments.paths import check_path

    try:
        check_path("--out", out)
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except UsageError as error:
        return str(error)
    except OSError as error:
        return f"--out={str(out)!r}: cannot be written: {error.strerror}"
    return None


def _read_run(path: str, cases: list[Case]) -> dict | str:
    """An earlier run's JSON for --replot, or why it cannot be replotted (one line)."""
    from purejaxppo.errors import UsageError
    from purejaxppo.experiments.paths import check_path

    try:
        check_path("--replot", path)
        run = json.loads(Path(path).read_text(encoding="utf-8"))
    except UsageError as error:
        return str(error)
    except OSError as error:
        return f"--replot={path!r}: cannot be read: {error.strerror}"
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"--replot={path!r}: not a JSON file ({error})"
    try:
        render_markdown(run, cases)  # what the markdown needs is what a results file must hold
        if not isinstance(run["machine"]["hardware"], str):
            raise TypeError("machine.hardware must be a string")
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as error:
        return (f"--replot={path!r}: not a results file of the suite ({type(error).__name__}: "
                f"{first_line(error)})")
    return run


def label(run: dict) -> str:
    m, v = run["machine"], run["versions"]
    return (f"{m['hardware']} ({m['cpu']}, {m['cores']} cores; backend {m['backend']}, {m.get('devices')} x "
            f"{m.get('device_kind')}), jax {v.get('jax', '?')}, purejaxppo {v.get('purejaxppo', '?')}, {run['date']}")


def render_markdown(run: dict, cases: list[Case]) -> str:
    registry = by_name(cases)
    m = run["machine"]
    md = [f"# purejaxppo benchmark suite — {run['date']} — {m['hardware']}", "",
          f"- command: `{run['command']}` (cwd: repo root)",
          f"- started {run['started']}, finished {run['finished']} (UTC); wall {run['wall_s']:.0f} s",
          f"- hardware: {m['cpu']}, {m['cores']} cores, {m['os']}; JAX backend {m['backend']}, "
          f"{m.get('devices')} device(s) ({m.get('device_kind')})",
          f"- versions: {json.dumps(run['versions'])}; checkout: {run.get('git', 'not recorded')}",
          f"- mode: {run.get('mode', 'quick' if run['quick'] else 'full')}; {run['rounds']} interleaved rounds per group"
          f"{' (quick mode: fewer than 3 rounds)' if run['rounds'] < MIN_ROUNDS else ''}; "
          f"{run['warmup']} untimed warm-up run(s) per contender after compiling",
          "- timing: each contender is compiled first (`jax.jit(f).lower(...).compile()`; that is the compile "
          "column, never in the timed runs), then the group's contenders run interleaved (A B C A B C ...), "
          "one blocking execution per round. A compile marked (shared) is a program compiled earlier in "
          "this process for an identical cell of another case (same config, same runs), reused. Tables give the median and range over rounds; ratios are the "
          "median (range) of the per-round ratios against the group's baseline, in the same round.",
          f"- load: the 1-minute load average before and after each execution (the larger counts); a cell is "
          f"**loaded** when it exceeded the core count ({m['cores']}) in any round. Loaded cells are shown, "
          f"not averaged away: read their absolute numbers as lower bounds and their ratios as noisier.",
          f"- every absolute number below is for: {label(run)}."]
    md += [f"- NOTE: {n}" for n in run.get("notes", [])]
    for case in run["cases"]:
        spec = registry.get(case["name"])
        md += ["", f"## {case['name']}: {case['title']}", ""]
        if spec is not None and spec.explain:
            md += [spec.explain, ""]
        md += [f"sizes: `{json.dumps(case['sizes'])}`; case wall time {case['wall_s']:.0f} s", ""]
        if case.get("summary"):
            md += [case["summary"], ""]
        for g in case["groups"]:
            md += [f"### {case['name']} / {g['name']}", ""]
            md += [f"- {n}" for n in g["notes"]]
            if g["notes"]:
                md.append("")
            md += [group_table(g, case.get("ratio", "speed")), ""]
        png = run.get("files", {}).get(f"png:{case['name']}")
        if png:
            md += [f"![{case['name']}]({png})", ""]
    return "\n".join(md)


def bar_plot(case: dict, png: Path, run: dict) -> None:
    """Default plot: median env steps/s per contender and group, with the range as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import textwrap

    rows = [(textwrap.fill(f"{g['name']}: {c['contender']}", 22), c)
            for g in case["groups"] for c in g["cells"] if c["status"] == "ok"]
    if not rows:
        raise ValueError("nothing measured")
    fig, ax = plt.subplots(figsize=(max(6.0, 1.8 * len(rows)), 4.2))
    med = [c["steps_per_s"]["median"] for _, c in rows]
    lo = [m - c["steps_per_s"]["min"] for m, (_, c) in zip(med, rows)]
    hi = [c["steps_per_s"]["max"] - m for m, (_, c) in zip(med, rows)]
    colors = ["tab:red" if c["loaded"] else "tab:blue" for _, c in rows]
    ax.bar(range(len(rows)), med, yerr=[lo, hi], color=colors, capsize=3)
    ax.set_xticks(range(len(rows)), [r for r, _ in rows], fontsize=7)
    ax.set_ylabel("env steps/s (median, range)")
    ax.set_title(plot_title(case["name"], run, "red: loaded cell"), fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def plot_title(name: str, run: dict, legend: str) -> str:
    import textwrap

    return textwrap.fill(f"{name} — {label(run)}", 90) + f"\n({legend})"


# --------------------------------------------------------------------------------------
# running cases
def run_case(case: Case, mode: str, rounds: int, warmup: int, log, **timing) -> dict:
    """Every group of `case` at its sizes for `mode` ("quick", "full", "gpu"); `timing`:
    run_group's clock, load, cores."""
    sizes = case.sizes[mode]
    start = time.perf_counter()
    groups = []
    for g in case.groups(sizes):
        groups.append(run_group(g, rounds, warmup=warmup, log=log, **timing))
    result = {"name": case.name, "title": case.title, "sizes": sizes, "ratio": case.ratio,
              "groups": groups, "wall_s": time.perf_counter() - start}
    return result


def parse_args(argv, names: list[str]):
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="CPU-sized points (within 10 minutes on 2 cores)")
    size.add_argument("--gpu", action="store_true",
                      help="accelerator-sized points (one GPU, about 8 minutes; benchmarks/gpu.sh installs and runs it)")
    p.add_argument("--cases", default=None, help="comma-separated subset of: " + ",".join(names)
                   + " (and returns, which runs alone: --cases returns --help)")
    p.add_argument("--rounds", type=int, default=None,
                   help=f"interleaved rounds per group (default {MIN_ROUNDS}; at least {MIN_ROUNDS}, "
                        f"{QUICK_MIN_ROUNDS} allowed with --quick)")
    p.add_argument("--warmup", type=int, default=None, help="untimed runs after compiling (default: 0 quick, 1 full)")
    p.add_argument("--out", default=str(RESULTS), help="results folder (default benchmarks/results)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--replot", metavar="JSON", default=None,
                   help="measure nothing: rewrite the markdown and plots of an earlier run's JSON (into --out)")
    return p.parse_args(argv)


def main(argv: list[str], cases: list[Case]) -> int:
    """`python -m benchmarks` with options `argv`, choosing among `cases` (by default all, in order)."""
    registry = by_name(cases)
    a = parse_args(argv, list(registry))
    if a.replot:
        run = _read_run(a.replot, cases)
        if isinstance(run, str):
            return _refuse(run)
        problem = _out_problem(Path(a.out))
        if problem:
            return _refuse(problem)
        paths = write_results(run, Path(a.out), cases, plots=not a.no_plots)
        print("wrote " + ", ".join(str(p) for p in paths.values()), file=sys.stderr)
        return 0
    names = list(registry) if not a.cases else [c.strip() for c in a.cases.split(",") if c.strip()]
    unknown = [n for n in names if n not in registry]
    if unknown:
        return _refuse(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(registry)}")
    mode = "quick" if a.quick else "gpu" if a.gpu else "full"
    rounds = a.rounds if a.rounds is not None else MIN_ROUNDS
    floor = QUICK_MIN_ROUNDS if a.quick else MIN_ROUNDS
    if rounds < floor:
        return _refuse(f"--rounds must be at least {floor}{' with --quick' if a.quick else ''}")
    problem = _out_problem(Path(a.out))  # before measuring: no measurement is lost to a folder that cannot take it
    if problem:
        return _refuse(problem)
    warmup = a.warmup if a.warmup is not None else (0 if a.quick else 1)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.perf_counter()
    machine = machine_info()
    run = {"command": "python -m benchmarks" + (" " + shlex.join(argv) if argv else ""),
           "date": started.date().isoformat(), "started": started.strftime("%Y-%m-%d %H:%M:%S"),
           "machine": machine, "versions": package_versions(), "git": git_state(), "quick": a.quick, "mode": mode, "rounds": rounds,
           "warmup": warmup, "notes": [], "cases": [],
           "subset": names if set(names) != set(registry) else None}
    for name in names:
        log(f"== case {name}")
        case = registry[name]
        if mode not in case.sizes:
            run["notes"].append(f"case {name} has no {mode} sizes: not run")
            continue
        result = run_case(case, mode, rounds, warmup, log)
        result["summary"] = summary_for(case, result)
        run["cases"].append(result)
    run["finished"] = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    run["wall_s"] = time.perf_counter() - t0
    try:
        paths = write_results(run, Path(a.out), cases, plots=not a.no_plots)
    except OSError as error:  # the folder went away or filled up while measuring: keep the numbers elsewhere
        kept = Path(tempfile.mkdtemp(prefix="benchmarks-results-"))
        paths = write_results(run, kept, cases, plots=not a.no_plots)
        log(f"python -m benchmarks: error: could not write the results into {a.out} ({error.strerror or error}); "
            f"they are in {kept}")
        return 1
    print(paths["md"].read_text())
    log("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def summary_for(case: Case, result: dict) -> str:
    return case.summarize(result) if case.summarize else ""

