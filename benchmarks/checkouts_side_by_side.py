"""Contenders as benchmarks/peer.py processes, interleaved round by round: purejaxppo at any
checkouts (each with its own peer.py), optionally compiled with XLA's defaults (a plain
`jax.jit`, the notebook path), and PureJaxRL; per-contender settings. For A/B checks and for
the a + b x epochs fit of benchmarks/results/2026-12-02-profile-cpu.md.

    python benchmarks/checkouts_side_by_side.py SEEDS STEPS ROUNDS NAME=SPEC ...
    SPEC: a checkout path (ours, the CLI's compiler options), path+xla-defaults, or pjrl;
          then optionally @{json settings}, e.g. main=/work/main 'e1=.@{"update_epochs":1}'
    PJRL_VENV, PJRL_REPO as for the peers case (benchmarks/README.md); OURS_PYTHON: our interpreter.

The first contender is the baseline of the printed ratios (median and every round's).
"""
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import PeerProcess  # noqa: E402

# a sitecustomize that empties purejaxppo's compiler options: XLA's defaults, as a plain jax.jit
XLA_DEFAULTS = "import purejaxppo.compiler as c\nc.CPU_OPTIONS = {}\n"


def main(argv):
    seeds, steps, rounds = int(argv[0]), int(argv[1]), int(argv[2])
    shim = tempfile.mkdtemp()
    Path(shim, "sitecustomize.py").write_text(XLA_DEFAULTS)
    here = str(Path(__file__).resolve().parents[1])
    procs = {}
    for arg in argv[3:]:
        name, spec = arg.split("=", 1)
        spec, _, extra = spec.partition("@")
        settings = json.dumps({"total_timesteps": steps, **(json.loads(extra) if extra else {})})
        env = dict(os.environ)
        if spec == "pjrl":
            repo = os.environ.get("PJRL_REPO", "/work/pjrl")
            env["PYTHONPATH"] = os.pathsep.join([here, repo, f"{repo}/purejaxrl"])
            cmd = [f"{os.environ.get('PJRL_VENV', '/work/venv-pjrl')}/bin/python", f"{here}/benchmarks/peer.py",
                   "--kind", "pjrl"]
            cwd = here
        else:
            tree, _, mode = spec.partition("+")
            tree = str(Path(tree).resolve())
            env["PYTHONPATH"] = tree + (os.pathsep + shim if mode == "xla-defaults" else "")
            cmd = [os.environ.get("OURS_PYTHON", sys.executable), f"{tree}/benchmarks/peer.py", "--kind", "ours"]
            cwd = tree
        procs[name] = PeerProcess(cmd + ["--seeds", str(seeds), "--settings", settings], env=env,
                                  cwd=cwd).prepare(steps=seeds * steps)
        print(name, "compile s", procs[name].compile_s, flush=True)
    times = {n: [] for n in procs}
    for r in range(rounds):
        for n, p in procs.items():
            times[n].append(p.run())
        print("round", r, {n: round(t[-1], 3) for n, t in times.items()}, "load", os.getloadavg()[0], flush=True)
    base = next(iter(procs))
    for n in procs:
        ratios = [times[base][i] / times[n][i] for i in range(rounds)]
        print(f"{n}: median {statistics.median(times[n]):.3f} s; speed vs {base}: {statistics.median(ratios):.3f} "
              f"{[round(x, 3) for x in ratios]}")
    for p in procs.values():
        p.close()


if __name__ == "__main__":
    main(sys.argv[1:])
