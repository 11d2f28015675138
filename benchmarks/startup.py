"""Start-up: the time from `purejaxppo train CONFIG` starting to its first compile, and
how often it builds the environment, checks a config and checks the network on the way.

    python -m benchmarks.startup [--rounds 3] [configs ...]     (default: cartpole brax/ant sweeps/clip_epochs)

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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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

import purejaxppo.envs, purejaxppo.config.checks, purejaxppo.networks
from purejaxppo.experiments import cli, parallel
counted(purejaxppo.envs, "make_raw_env", "env builds")
counted(purejaxppo.config.checks, "_check", "config checks")
counted(purejaxppo.networks.Network, "check", "network checks")

def stop(*args, **kwargs):  # the first program about to be traced, lowered and compiled
    print(json.dumps({"seconds": time.time() - start, **counts}), flush=True)
    os._exit(0)

parallel.ShardedRunSets._setup = stop
cli.main(sys.argv[2:])
print(json.dumps({"seconds": None, **counts}), flush=True)
"""


def measure(config: str, rounds: int) -> dict:
    results = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.time()
            command = "sweep" if config.startswith("sweeps/") else "train"
            out = subprocess.run([sys.executable, "-c", _CHILD, str(start), command, config, "--out",
                                  str(Path(tmp) / "run"), "--no-cache"],
                                 capture_output=True, text=True, check=False)
            lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
            if not lines or json.loads(lines[-1])["seconds"] is None:
                raise RuntimeError(f"{config}: no measurement; stderr:\n{out.stderr[-2000:]}")
            results.append(json.loads(lines[-1]))
    seconds = [r["seconds"] for r in results]
    return {"config": config, "seconds": statistics.median(seconds), "rounds": seconds,
            **{k: v for k, v in results[-1].items() if k != "seconds"}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", default=["cartpole", "brax/ant", "sweeps/clip_epochs"])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    for config in args.configs:
        r = measure(config, args.rounds)
        rounds = ", ".join(f"{s:.2f}" for s in r["rounds"])
        print(f"{r['config']}: {r['seconds']:.2f} s to the first compile (rounds {rounds}); "
              f"env builds {r['env builds']}, config checks {r['config checks']}, "
              f"network checks {r['network checks']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
