"""Throughput benchmark: purejaxppo against PureJaxRL's purejaxrl/ppo.py ("pjrl").

Contenders: "ours" (jax.jit(jax.vmap(train)) on one device, exactly as pjrl is run),
"ours-cores" (the same train function, seed axis sharded over one host device per CPU core
with purejaxppo.experiments.parallel.ShardedRuns) and "pjrl".

Usage (from the repo root, with our venv's python):

    python -m benchmarks                       # 1 and 64 seeds, 3 rounds, writes results/
    python -m benchmarks --seeds 1,64 --rounds 3 --repeats 2 --seed-timesteps 64=100000

Every measurement runs in a fresh subprocess (benchmarks/runner.py) so compile caches and
allocator state never carry over. Rounds interleave the contenders (ours, ours-cores, pjrl,
ours, ...) at each seed count, so slow drift of the machine (thermal, other load) hits all.
PureJaxRL is run from outside this repo, by its own venv; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RUNNER = HERE / "runner.py"

# The classic CartPole reference setting (CleanRL / PureJaxRL ppo.py defaults), used for both.
SETTINGS = {
    "env": "CartPole-v1",
    "num_envs": 4,
    "num_steps": 128,
    "update_epochs": 4,
    "num_minibatches": 4,
    "lr": 2.5e-4,
    "anneal_lr": True,
    "clip_eps": 0.2,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "total_timesteps": 500_000,
    "activation": "tanh",
}

CONTENDERS = ("ours", "ours-cores", "pjrl")
OURS = ("ours", "ours-cores")  # run from this checkout by our interpreter

DEFAULT_PJRL_VENV = "/work/venv-pjrl"
DEFAULT_PJRL_REPO = "/work/pjrl"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="1,64", help="comma-separated vmapped seed counts (default 1,64)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved A/B rounds (default 3)")
    p.add_argument("--repeats", type=int, default=2,
                   help="timed executions of the compiled fn per process; the best counts (default 2)")
    p.add_argument("--total-timesteps", type=int, default=SETTINGS["total_timesteps"],
                   help="timesteps per seed (default 500000)")
    p.add_argument("--seed-timesteps", action="append", default=[], metavar="N=T",
                   help="use T timesteps per seed for the N-seed case (repeatable), e.g. 64=100000")
    p.add_argument("--contenders", default=",".join(CONTENDERS),
                   help="subset/order of " + ",".join(CONTENDERS) + " (default: all, in that order)")
    p.add_argument("--ours-python", default=os.environ.get("PUREJAXPPO_PYTHON", sys.executable),
                   help="interpreter for our side (env PUREJAXPPO_PYTHON; default: this python)")
    p.add_argument("--config", default=str(REPO / "configs" / "cartpole.yaml"),
                   help="our base YAML; every compared setting is overridden from SETTINGS anyway")
    p.add_argument("--pjrl-venv", default=os.environ.get("PJRL_VENV", DEFAULT_PJRL_VENV),
                   help=f"PureJaxRL venv (env PJRL_VENV; default {DEFAULT_PJRL_VENV})")
    p.add_argument("--pjrl-repo", default=os.environ.get("PJRL_REPO", DEFAULT_PJRL_REPO),
                   help=f"PureJaxRL checkout (env PJRL_REPO; default {DEFAULT_PJRL_REPO})")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per subprocess (default 1800)")
    p.add_argument("--out", default=None,
                   help="results markdown path (default benchmarks/results/<date>-cpu.md)")
    p.add_argument("--no-write", action="store_true", help="print only, write no results file")
    return p.parse_args(argv)


def pjrl_problem(venv: Path, repo: Path) -> str | None:
    """Why the PureJaxRL side can't run, or None."""
    if not (venv / "bin" / "python").exists():
        return f"no PureJaxRL venv at {venv} (set --pjrl-venv or PJRL_VENV)"
    if not (repo / "purejaxrl" / "ppo.py").exists():
        return f"no PureJaxRL checkout at {repo} (expected purejaxrl/ppo.py; set --pjrl-repo or PJRL_REPO)"
    return None


def run_one(contender: str, n_seeds: int, timesteps: int, a: argparse.Namespace) -> dict:
    settings = dict(SETTINGS, total_timesteps=timesteps)
    env = dict(os.environ)
    if contender in OURS:
        python = a.ours_python
        # Repo root first: it must win over an editable install pointing at another checkout.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    else:
        python = str(Path(a.pjrl_venv) / "bin" / "python")
        repo = Path(a.pjrl_repo)
        # ppo.py does `from wrappers import ...`, so its own folder must be importable too.
        env["PYTHONPATH"] = os.pathsep.join([str(repo), str(repo / "purejaxrl")])
    cmd = [python, str(RUNNER), "--contender", contender, "--n-seeds", str(n_seeds),
           "--repeats", str(a.repeats), "--settings", json.dumps(settings), "--config", a.config]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return {"contender": contender, "n_seeds": n_seeds, "error": f"timed out after {a.timeout:.0f}s"}
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH_RESULT "):
            return json.loads(line[len("BENCH_RESULT "):])
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
    return {"contender": contender, "n_seeds": n_seeds, "error": f"exit {proc.returncode}:\n{tail}"}


def _median(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if key in r]
    return statistics.median(vals) if vals else None


def _fmt(x: float | None, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def summary_table(results: list[dict], seeds: list[int], timesteps: dict[int, int],
                  contenders: list[str]) -> str:
    """One row per (seed count, contender); each of ours gets its speed relative to pjrl."""
    head = ("| seeds | contender | devices | steps/seed | median time (s) | steps/s "
            "| speed vs pjrl | paired vs pjrl | compile (s) | final return |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for n in seeds:
        ok = {c: [r for r in results if r["n_seeds"] == n and r["contender"] == c and "error" not in r]
              for c in contenders}
        t = {c: _median(ok[c], "best_s") for c in contenders}
        pjrl_by_round = {r["round"]: r["best_s"] for r in ok.get("pjrl", [])}
        for c in contenders:
            sps = n * timesteps[n] / t[c] if t[c] else None
            ratio = paired = None
            if c != "pjrl" and t[c] and t.get("pjrl"):
                ratio = t["pjrl"] / t[c]  # = our steps/s over pjrl's (same steps)
                # Paired: within each round (same machine state), then the median over rounds.
                pairs = [pjrl_by_round[r["round"]] / r["best_s"] for r in ok[c]
                         if r["round"] in pjrl_by_round]
                paired = statistics.median(pairs) if pairs else None
            devs = sorted({r.get("num_devices", 1) for r in ok[c]})
            lines.append(
                f"| {n} | {c} | {'/'.join(map(str, devs)) or '—'} | {timesteps[n]:,} "
                f"| {_fmt(t[c], '.2f')} | {_fmt(sps, ',.0f')} "
                f"| {_fmt(ratio, '.2f')}{'x' if ratio else ''} | {_fmt(paired, '.2f')}{'x' if paired else ''} "
                f"| {_fmt(_median(ok[c], 'compile_s'), '.1f')} | {_fmt(_median(ok[c], 'final_return'), '.1f')} |")
    return "\n".join(lines)


def raw_table(results: list[dict]) -> str:
    lines = ["| round | seeds | contender | devices | compile (s) | runs (s) | best steps/s | final return |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            err = r["error"].splitlines()[0]
            lines.append(f"| {r['round']} | {r['n_seeds']} | {r['contender']} | | error: {err} | | | |")
        else:
            runs = ", ".join(f"{x:.2f}" for x in r["times_s"])
            lines.append(f"| {r['round']} | {r['n_seeds']} | {r['contender']} | {r.get('num_devices', 1)} "
                         f"| {r['compile_s']:.1f} "
                         f"| {runs} | {r['steps_per_s']:,.0f} | {r['final_return']:.1f} |")
    return "\n".join(lines)


def machine_info() -> dict:
    model = platform.processor() or "?"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
                break
    except (OSError, subprocess.SubprocessError):
        pass
    return {"cpu": model, "cores": os.cpu_count(), "os": platform.platform()}


def git_rev(path: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "unknown (not a git checkout)"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    timesteps = {n: a.total_timesteps for n in seeds}
    for item in a.seed_timesteps:
        n, t = item.split("=")
        timesteps[int(n)] = int(float(t))
    contenders = [c.strip() for c in a.contenders.split(",") if c.strip()]
    unknown = [c for c in contenders if c not in CONTENDERS]
    if unknown:
        print(f"unknown contender(s) {','.join(unknown)}; choose from {','.join(CONTENDERS)}",
              file=sys.stderr)
        return 2
    notes = []
    if "pjrl" in contenders:
        why = pjrl_problem(Path(a.pjrl_venv), Path(a.pjrl_repo))
        if why:
            msg = f"Skipping PureJaxRL: {why}. See benchmarks/README.md to set it up."
            print(msg, file=sys.stderr)
            notes.append(msg)
            contenders.remove("pjrl")
    if not contenders:
        print("nothing to run", file=sys.stderr)
        return 1

    results = []
    for rnd in range(1, a.rounds + 1):
        for n in seeds:
            for c in contenders:
                print(f"[round {rnd}/{a.rounds}] {c:10s} seeds={n} steps/seed={timesteps[n]} ...",
                      end=" ", flush=True, file=sys.stderr)
                r = run_one(c, n, timesteps[n], a)
                r["round"] = rnd
                results.append(r)
                if "error" in r:
                    print("ERROR\n" + r["error"], file=sys.stderr)
                else:
                    print(f"devices {r['num_devices']}, compile {r['compile_s']:.1f}s, best {r['best_s']:.2f}s, "
                          f"{r['steps_per_s']:,.0f} steps/s, return {r['final_return']:.1f}",
                          file=sys.stderr, flush=True)

    ok = [r for r in results if "error" not in r]
    versions = {c: next((r["versions"] for r in ok if r["contender"] == c), None) for c in CONTENDERS}
    ours_versions = versions["ours"] or versions["ours-cores"]
    cores_devs = sorted({r["num_devices"] for r in ok if r["contender"] == "ours-cores"})
    cores_flags = sorted({r.get("xla_flags", "") for r in ok if r["contender"] == "ours-cores"})
    info = machine_info()
    command = "python -m benchmarks" + ("" if not argv else " " + shlex.join(argv))
    today = _dt.date.today().isoformat()
    summary = summary_table(results, seeds, timesteps, contenders)
    reduced = [n for n in seeds if timesteps[n] != SETTINGS["total_timesteps"]]

    md = [f"# purejaxppo vs PureJaxRL throughput — {today} (CPU)", "",
          f"- command: `{command}` (cwd: repo root, python: `{a.ours_python}`)",
          f"- machine: {info['cpu']}, {info['cores']} cores, {info['os']}",
          f"- backend: {ok[0]['backend'] if ok else '?'}",
          f"- ours / ours-cores: {json.dumps(ours_versions)}",
          f"- pjrl: {json.dumps(versions['pjrl'])}, PureJaxRL commit {git_rev(Path(a.pjrl_repo))}, "
          f"venv `{a.pjrl_venv}`",
          f"- settings (all): `{json.dumps({k: v for k, v in SETTINGS.items() if k != 'total_timesteps'})}`",
          f"- timing: each cell is a fresh process. ours, pjrl: `jax.jit(jax.vmap(train)).lower(keys).compile()` "
          f"on one device timed as compile; the compiled fn then runs {a.repeats}x on the same keys "
          f"(block_until_ready). ours-cores: `use_all_cpu_cores()` before JAX starts "
          f"(XLA_FLAGS `{' / '.join(cores_flags) or '?'}`), then `ShardedRuns(train, keys)` (compile = its "
          f"compile_seconds; seed axis sharded over {'/'.join(map(str, cores_devs)) or '?'} devices, "
          f"at most one per seed), then `block_until_ready(runs())` {a.repeats}x. Best run counts; table = median "
          f"over {a.rounds} interleaved rounds ({', '.join(contenders)}, {contenders[0]}, ...). "
          f"steps/s = seeds x steps/seed / time; speed vs pjrl > 1 means that contender is faster "
          f"(ratio of the medians; paired = median over rounds of that round's pjrl time / contender time).",
          "- return: mean over seeds of the mean return of episodes finished in the last update."]
    if reduced:
        md.append(f"- NOTE: steps/seed reduced from {SETTINGS['total_timesteps']:,} for seeds="
                  f"{','.join(map(str, reduced))} to keep a round short; returns there are not final-training returns.")
    md += [f"- {n}" for n in notes]
    md += ["", "## Summary (medians)", "", summary, "", "## All runs", "", raw_table(results), ""]
    text = "\n".join(md)
    print(text)
    if not a.no_write:
        out = Path(a.out) if a.out else HERE / "results" / f"{today}-cpu.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        out.with_suffix(".json").write_text(json.dumps(
            {"command": command, "machine": info, "settings": SETTINGS, "timesteps": timesteps,
             "results": results}, indent=1))
        print(f"wrote {out} and {out.with_suffix('.json').name}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
