"""`python -m benchmarks --cases returns`: the returns case. Every shipped config is trained at
its full budget over several seeds, through the command line a user runs
(`purejaxppo train <name> --seeds N`), and the table puts each final return beside the
published return of configs/references.yaml.

It is hours of CPU, so it is resumable at two levels:
- one committed result per config, benchmarks/results/returns/<name>.json: a config whose
  result is current (same config text, at least the seeds asked for) is not run again (one
  that is not is measured again into <name>-2.json, -3, ...: a result is never replaced, and
  the highest number is the one read);
- the run folders, runs/returns/<name>/ (not committed), checkpoint as they go: a run that
  was stopped is resumed (`purejaxppo train --resume`), not restarted.
The table, <date>-returns-<hardware>.md, and its figure, with a panel per environment, are
assembled from every result that exists, whichever session measured it (`--table`: only that).

    python -m benchmarks --cases returns                      # the CPU-sized configs, 4 seeds
    python -m benchmarks --cases returns --configs cartpole,acrobot --seeds 8
    python -m benchmarks --cases returns --gpu                # the GPU-sized ones too (benchmarks/gpu.sh)
    python -m benchmarks --cases returns --table              # rewrite the table and figure only
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import hashlib
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from benchmarks import harness
from purejaxppo import configs
from purejaxppo.experiments import report, stats

REPO = Path(__file__).resolve().parent.parent
PER_CONFIG = harness.RESULTS / "returns"
RUNS = REPO / "runs" / "returns"
MIN_SEEDS = 4
CHUNKS = 10  # checkpoints per run: a stop loses at most a tenth of it


def asked(argv: list[str]) -> bool:
    """Whether `python -m benchmarks` was asked for this case (`--cases returns`)."""
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--cases=") else argv[i + 1] if arg == "--cases" and \
            i + 1 < len(argv) else None
        if value is not None and "returns" in [c.strip() for c in value.split(",")]:
            return True
    return False


def parse_args(argv: list[str]):
    p = argparse.ArgumentParser(prog="python -m benchmarks --cases returns",
                                description="the returns case: every shipped config at its full budget, against "
                                            "its published return (configs/references.yaml)")
    p.add_argument("--cases", required=True, help="returns (this case runs alone: it takes hours, not seconds)")
    p.add_argument("--gpu", action="store_true", help="also the GPU-sized configs (references.yaml: size: gpu)")
    p.add_argument("--seeds", type=int, default=MIN_SEEDS, help=f"seeds per config (default {MIN_SEEDS})")
    p.add_argument("--configs", default=None, help="comma-separated subset of the configs (default: every one of "
                                                   "the size asked for)")
    p.add_argument("--table", action="store_true", help="run nothing: write the table and figure from the results")
    p.add_argument("--runs", default=str(RUNS), help=f"the run folders (default {RUNS.relative_to(REPO)})")
    p.add_argument("--results", default=str(PER_CONFIG),
                   help=f"one result per config (default {PER_CONFIG.relative_to(REPO)})")
    p.add_argument("--out", default=str(harness.RESULTS), help="where the table and figure go (default "
                                                                "benchmarks/results)")
    return p.parse_args(argv)


# --------------------------------------------------------------------------------------
# which configs, and whether their result is current
def config_sha(name: str) -> str:
    """The config file's text, hashed: a result measured on other settings is not current."""
    return hashlib.sha256(configs.find(name).read_bytes()).hexdigest()[:16]


def result_path(results: Path, name: str) -> Path:
    """Where a result of `name` is written: <name>.json, or its next number where taken (harness.write_kept)."""
    return results / f"{name}.json"


def read_result(results: Path, name: str) -> dict | None:
    """The latest result of `name` (harness.newest), or None."""
    path = harness.newest(result_path(results, name))
    return json.loads(path.read_text()) if path is not None else None


def is_current(result: dict | None, name: str, seeds: int = 0) -> bool:
    """Measured with the config file as it is now, with at least `seeds` seeds."""
    return result is not None and result["config_sha"] == config_sha(name) and result["seeds"] >= seeds


def chosen(refs: dict, gpu: bool, subset: str | None) -> list[str] | str:
    """The configs to measure, in references.yaml's order, or a line saying what is wrong."""
    sized = [n for n, r in refs.items() if gpu or r["size"] == "cpu"]
    if subset is None:
        return sized
    names = [n.strip() for n in subset.split(",") if n.strip()]
    unknown = [n for n in names if n not in refs]
    if unknown:
        return f"--configs: {', '.join(unknown)} has no reference (configs/references.yaml names {', '.join(refs)})"
    too_big = [n for n in names if n not in sized]
    if too_big:
        return f"--configs: {', '.join(too_big)} is GPU-sized (references.yaml: size: gpu): add --gpu"
    return names


# --------------------------------------------------------------------------------------
# running one config: a run folder, started or resumed, through the command line
def run_config(name: str, seeds: int, runs: Path, log) -> Path:
    """Train `name` over `seeds` seeds into runs/<name> (resuming the run there if it was
    stopped); -> the finished folder. Each leg's wall seconds go to runs/<name>.legs.json."""
    folder = runs / name
    legs_file = runs / f"{name}.legs.json"
    if (folder / "summary.json").is_file():
        return folder
    has_checkpoint = (folder / "checkpoints").is_dir() and any((folder / "checkpoints").iterdir())
    purejaxppo = [sys.executable, "-m", "purejaxppo", "train"]
    if has_checkpoint:
        command = purejaxppo + ["--resume", str(folder)]
    else:
        if folder.exists():  # started, but no checkpoint yet: nothing in it to keep
            shutil.rmtree(folder)
        legs_file.unlink(missing_ok=True)
        every = max(1, math.ceil(_updates(name) / CHUNKS))
        folder.parent.mkdir(parents=True, exist_ok=True)
        command = purejaxppo + [name, "--seeds", str(seeds), "--out", str(folder), "--checkpoint-every", str(every),
                                "--keep", "2"]
    log(f"== {name}: {' '.join(command[2:])}")
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO)
    legs = json.loads(legs_file.read_text()) if legs_file.is_file() else []
    legs_file.write_text(json.dumps(legs + [time.perf_counter() - start]))
    if done.returncode != 0 or not (folder / "summary.json").is_file():
        raise RuntimeError(f"{name}: purejaxppo train exited {done.returncode}; rerun the case to resume it")
    return folder


def _shipped(name: str) -> dict:
    """The shipped config's file as written (its env and budget, without building anything)."""
    return yaml.safe_load(configs.find(name).read_text())


def _updates(name: str) -> int:
    values = _shipped(name)
    return int(values["total_timesteps"]) // (int(values["num_envs"]) * int(values["num_steps"]))


def collect(name: str, folder: Path, runs: Path) -> dict:
    """A finished run folder -> the result committed for `name`: per seed, the final return
    (training, the last update's), the final policy's on fresh episodes (sampled and greedy)
    and the raw learning curve; the wall time over its legs; where and on what it ran."""
    summary = json.loads((folder / "summary.json").read_text())
    ran = yaml.safe_load((folder / "config.yaml").read_text())  # the config as run, every field resolved
    batch_size = int(ran["num_envs"]) * int(ran["num_steps"])
    seeds = summary["seed_values"]
    curves = {s: [] for s in seeds}
    with (folder / "metrics.csv").open() as f:
        for line in csv.DictReader(f):  # a row per seed per update, in update order; no episode ended: empty
            curves[int(line["seed"])].append(float(line["episode_return"] or "nan"))
    legs_file = runs / f"{name}.legs.json"
    legs = json.loads(legs_file.read_text()) if legs_file.is_file() else []
    machine = harness.machine_info()
    return {
        "config": name, "env": ran["env"], "config_sha": config_sha(name), "seeds": len(seeds),
        "seed_values": seeds, "total_timesteps": len(curves[seeds[0]]) * batch_size, "batch_size": batch_size,
        "final_return": summary["final_return"]["per_seed"],
        "eval_return_sampled": summary["eval_return_stochastic"]["per_seed"],
        "eval_return_greedy": summary["eval_return"]["per_seed"],
        "diverged": summary["diverged"],
        # the runner's clock over every leg; for a folder it did not start, the run's own compile + run seconds
        "wall_s": sum(legs) if legs else summary["compile_seconds"] + summary["run_seconds"], "legs": len(legs),
        "compile_s": summary["compile_seconds"], "steps_per_second": summary["steps_per_second"],
        "episode_return": [[_rounded(x) for x in curves[s]] for s in seeds],
        "date": _dt.date.today().isoformat(), "machine": machine, "versions": harness.package_versions(),
        "git": harness.git_state(), "command": f"purejaxppo train {name} --seeds {len(seeds)}",
    }


def _rounded(x: float):
    return None if not math.isfinite(x) else float(f"{x:.5g}")


# --------------------------------------------------------------------------------------
# the table and the figure, from every result there is
def verdict(mean: float, se: float, reference) -> str:
    """The row's verdict against its reference: 'met' when the mean reaches it (mean >=
    reference, or a float32 rounding short of it: an optimum of 0.955 is 0.95499998 in
    float32); 'within noise' when the mean is below it but within 2 s.e. (mean + 2 s.e. >=
    reference: the seeds do not show it short); 'short' when it is below by more; '—'
    without a reference. A standard error that is not finite (one seed) counts as 0."""
    if reference is None or not math.isfinite(mean):
        return "—"
    if mean >= reference or math.isclose(mean, reference, rel_tol=1e-6):
        return "met"
    reach = mean + 2.0 * (se if math.isfinite(se) else 0.0)
    return "within noise" if reach >= reference or math.isclose(reach, reference, rel_tol=1e-6) else "short"


def row(name: str, ref: dict, result: dict | None) -> dict:
    """One line of the table: the measured numbers (None where not measured) and the reference."""
    out = {"config": name, "reference": ref, "result": result, "current": is_current(result, name)}
    if result is not None:
        out["mean"], out["se"] = stats.mean_se(result["eval_return_sampled"])
        out["iqm"] = stats.interquartile_mean(result["eval_return_sampled"])
        out["train"] = stats.mean_se(result["final_return"])
        out["verdict"] = verdict(out["mean"], out["se"], ref["return"])
    return out


def _num(x, digits: int = 3) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.{digits}g}" if abs(x) < 1000 else f"{x:,.0f}"


def reference_cell(name: str) -> str:
    return configs.reference_line(name).removeprefix("reference: ")


def render(rows: list[dict], hardware: str, command: str) -> str:
    measured = [r for r in rows if r["result"] is not None]
    lines = [f"# Returns of the shipped configs against their published references ({_dt.date.today()})", "",
             f"Each config trained at its full budget through `purejaxppo train <config> --seeds N` "
             f"(`{command}`), on {hardware}. The return is the final policy's on fresh episodes, "
             "**sampled** from the policy as in training (64 episodes per seed, the train command's default), "
             "as gymnax-blines evaluates its PPO checkpoints: mean ± s.e. over seeds, and the IQM over seeds with "
             "its 95% bootstrap interval. **met**: the mean reaches the reference; **within noise**: the mean is "
             "below it, by at most 2 s.e.; **short**: below it by more than 2 s.e. "
             "References, their sources and the notes: `purejaxppo/configs/references.yaml`. Per-config results "
             "(per-seed numbers, raw curves, versions, machine): `benchmarks/results/returns/<config>.json`.", "",
             "| config | env | seeds | steps | final policy (sampled) | IQM [95% CI] | training return (last update) "
             "| reference | verdict | minutes | machine |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ref = r["reference"]
        if r["result"] is None:
            shipped = _shipped(r["config"])
            lines.append(f"| {r['config']} | {shipped['env']} | — | {configs.steps_text(shipped['total_timesteps'])} | "
                         f"not measured yet | | | {reference_cell(r['config'])} | | | |")
            continue
        res = r["result"]
        iqm, low, high = r["iqm"]
        stale = "" if r["current"] else " (config changed since)"
        lines.append(
            f"| {r['config']} | {res['env']} | {res['seeds']} | {configs.steps_text(res['total_timesteps'])} | "
            f"{report.format_mean_se(r['mean'], r['se'])}{stale} | {_num(iqm)} [{_num(low)}, {_num(high)}] | "
            f"{report.format_mean_se(*r['train'])} | {reference_cell(r['config'])} | {r['verdict']} | "
            f"{_minutes(res['wall_s'] / 60 if res['wall_s'] else None)} | {machine_cell(res['machine'])} |")
    lines += ["", "minutes: wall time of the training command on the row's machine, all seeds at once, compile "
              "included (summed over its legs when a run was stopped and resumed; for a run folder the case did "
              "not start itself, its own compile and run seconds).", "", "## Notes", ""]
    for r in rows:
        if r["reference"].get("note"):
            lines.append(f"- **{r['config']}**: {' '.join(r['reference']['note'].split())}")
    per_seed = ["", "## Per seed (final policy, sampled)", ""]
    for r in measured:
        per_seed.append(f"- {r['config']}: " + ", ".join(_num(x, 4) for x in r["result"]["eval_return_sampled"]))
    versions = {k: v for res in (r["result"] for r in measured) for k, v in res["versions"].items()}
    dates = sorted({r["result"]["date"] for r in measured})
    return "\n".join(lines + per_seed + ["", f"Measured {', '.join(dates) or '—'}; versions: "
                                          + ", ".join(f"{k} {v}" for k, v in versions.items()), ""])


def machine_cell(machine: dict) -> str:
    """Where a result was measured: its minutes are that machine's (results of several machines mix in one table)."""
    if machine.get("backend") == "cpu":
        return f"{machine.get('cpu', 'CPU')}, {machine.get('cores', '?')} cores"
    return f"{machine.get('devices', 1)} x {machine.get('device_kind', machine.get('backend', '?'))}"


def _minutes(m) -> str:
    return "—" if m is None else f"{m:.1f}" if m < 10 else f"{m:.0f}"


def figure(rows: list[dict], png: Path) -> None:
    """A panel per measured config: the training curve, raw mean faint and smoothed mean with
    its band over seeds (report.curve_with_band), and the reference as a dashed line."""
    measured = [r for r in rows if r["result"] is not None]
    if not measured:
        return
    plt = report.pyplot()
    cols = min(4, len(measured))
    rows_n = math.ceil(len(measured) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.2 * rows_n), squeeze=False)
    for ax, r in zip(axes.flat, measured):
        res, ref = r["result"], r["reference"]
        curves = np.array([[np.nan if x is None else x for x in c] for c in res["episode_return"]], np.float64)
        steps = np.arange(1, curves.shape[1] + 1) * res["batch_size"]
        window = stats.smoothing_window(steps[-1])
        report.curve_with_band(ax, steps, curves, f"{res['seeds']} seeds, centred window {configs.steps_text(window)} steps",
                               window)
        if ref["return"] is not None:
            ax.axhline(ref["return"], ls="--", color="k", lw=1, label=f"reference ({ref['method']})")
        ax.set_title(r["config"], fontsize=10)
        ax.set_xlabel("environment steps", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(measured):]:
        ax.axis("off")
    fig.suptitle("Training return (faint: raw mean per update; line: smoothed, band: ± 1 s.e. over seeds)",
                 fontsize=10)
    fig.tight_layout()
    png.write_bytes(report.figure_bytes(fig, 110))


def write_table(refs: dict, names: list[str], results: Path, out: Path, hardware: str, command: str) -> list[Path]:
    from purejaxppo.experiments.paths import write_new

    rows = [row(n, refs[n], read_result(results, n)) for n in names]
    out.mkdir(parents=True, exist_ok=True)
    stem = harness.new_stem(out, f"{_dt.date.today()}-returns-{hardware}", [".md", ".png"])
    md, png = out / f"{stem}.md", out / f"{stem}.png"
    figure(rows, png)
    text = render(rows, hardware, command)
    if png.exists():
        text += f"\n![learning curves]({png.name})\n"
    write_new(md, text)
    return [md] + ([png] if png.exists() else [])


# --------------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    a = parse_args(argv)
    if [c.strip() for c in a.cases.split(",") if c.strip()] != ["returns"]:
        return harness._refuse("the returns case runs alone (--cases returns): it takes hours, the others seconds")
    if a.seeds < 2:
        return harness._refuse(f"--seeds must be at least 2 (a standard error needs two), got {a.seeds}")
    refs = configs.references()
    names = chosen(refs, a.gpu, a.configs)
    if isinstance(names, str):
        return harness._refuse(names)
    runs, results = Path(a.runs), Path(a.results)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    failed = []
    if not a.table:
        for name in names:
            if is_current(read_result(results, name), name, a.seeds):
                log(f"== {name}: measured already ({harness.newest(result_path(results, name))})")
                continue
            try:
                folder = run_config(name, a.seeds, runs, log)
            except RuntimeError as error:  # the next config still runs; this one resumes next time
                log(f"   {error}")
                failed.append(name)
                continue
            path = result_path(results, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            written = harness.write_kept(path, json.dumps(collect(name, folder, runs), indent=1) + "\n")
            log(f"   wrote {written}")
    command = "python -m benchmarks --cases returns" + (" --gpu" if a.gpu else "") + \
        (f" --seeds {a.seeds}" if a.seeds != MIN_SEEDS else "")
    machine = harness.machine_info()
    hardware = "cpu" if machine["backend"] == "cpu" else machine["hardware"]
    paths = write_table(refs, chosen(refs, a.gpu, None), results, Path(a.out), hardware, command)
    print(paths[0].read_text())
    log("wrote " + ", ".join(str(p) for p in paths))
    if failed:
        log(f"python -m benchmarks: not finished: {', '.join(failed)} (the same command resumes them)")
        return 1
    return 0
