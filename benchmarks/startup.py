"""Start-up: the time from `purejaxppo train CONFIG` starting to its first compile, and
how often it builds the environment, checks a config and checks the network on the way.

    python -m benchmarks.startup [--rounds 3] [--against DIR] [configs ...]
                                        (default: cartpole brax/ant sweeps/clip_epochs)

A name under sweeps/ runs `purejaxppo sweep`. Each round runs the command in a fresh process (imports included) into a temporary
folder, and stops it where the first program is lowered: what comes before that is
start-up. Counts are of `envs.make_raw_env` (an environment built), `config.checks._check` (a
config checked, by make_config or check_config) and `networks.Network.check` (a network's
shapes checked with jax.eval_shape). Prints one line per config: the median seconds and
the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# runs in the child: count the calls, stop at the first lowering, print one JSON line
_CHILD = r"""
import json, os, sys, time
start = float(sys.argv[1])
counts = {"env builds": 0, "config checks": 0, "network checks": 0}

def counted(owner, name, label):
    original = getattr(owner, name)
    def wrapper(*args, **kwargs):
        counts[label] += 1
        return original(*args, **kwargs)
    setattr(owner, name, wrapper)

import purejaxppo.envs, purejaxppo.config, purejaxppo.networks
from purejaxppo.experiments import cli, parallel
counted(purejaxppo.envs, "make_raw_env", "env builds")
counted(getattr(purejaxppo.config, "checks", purejaxppo.config), "_check", "config checks")  # (0.4: one module)
counted(purejaxppo.networks.Network, "check", "network checks")

def stop(*args, **kwargs):  # the first program about to be traced, lowered and compiled
    print(json.dumps({"seconds": time.time() - start, **counts}), flush=True)
    os._exit(0)

getattr(parallel, "ShardedRunSets", getattr(parallel, "ShardedBuckets", None))._setup = stop  # (0.4's name)
cli.main(sys.argv[2:])
print(json.dumps({"seconds": None, **counts}), flush=True)
"""


def _once(config: str, checkout: Path) -> dict:
    """One fresh process of `checkout`'s package (on PYTHONPATH), stopped at the first lowering."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.time()
        command = "sweep" if config.startswith("sweeps/") else "train"
        out = subprocess.run([sys.executable, "-c", _CHILD, str(start), command, config, "--out",
                              str(Path(tmp) / "run"), "--no-cache"], capture_output=True, text=True, check=False,
                             cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout)})
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines or json.loads(lines[-1])["seconds"] is None:
        raise RuntimeError(f"{config} ({checkout}): no measurement; stderr:\n{out.stderr[-2000:]}")
    return json.loads(lines[-1])


def measure(config: str, rounds: int, checkouts: list[Path]) -> list[dict]:
    """Per checkout: the median seconds over `rounds` (the checkouts interleaved, A B A B ...),
    each round's seconds, and the counts of the last round."""
    results = {checkout: [] for checkout in checkouts}
    for _ in range(rounds):
        for checkout in checkouts:
            results[checkout].append(_once(config, checkout))
    return [{"checkout": checkout, "seconds": statistics.median(r["seconds"] for r in runs),
             "rounds": [r["seconds"] for r in runs], **{k: v for k, v in runs[-1].items() if k != "seconds"}}
            for checkout, runs in results.items()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", default=["cartpole", "brax/ant", "sweeps/clip_epochs"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", type=Path, metavar="DIR",
                        help="another checkout (e.g. a git worktree of an older commit), measured interleaved")
    args = parser.parse_args(argv)
    checkouts = [REPO, *([args.against.resolve()] if args.against else [])]
    for config in args.configs:
        for r in measure(config, args.rounds, checkouts):
            rounds = ", ".join(f"{s:.2f}" for s in r["rounds"])
            print(f"{config} ({r['checkout']}): {r['seconds']:.2f} s to the first compile (rounds {rounds}); "
                  f"env builds {r['env builds']}, config checks {r['config checks']}, "
                  f"network checks {r['network checks']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
