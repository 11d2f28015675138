"""What two CPU cores can give a seed sweep: the ceiling the "over both cores" speed-up is measured against.

One device's program is not one core's: XLA's CPU runtime runs independent kernels and large
operations on a thread pool, so a run on one device already uses part of the second core. The
speed-up of sharding the seeds over one device per core is therefore bounded by what is left,
not by 2. This measures that bound with our own program (benchmarks/peer.py, the peers case's
setting), every contender its own process, in interleaved rounds:

  one-device        all seeds on one device, free to use both cores (the peers case's "ours")
  one-device-1core  the same pinned to one core (taskset): what one device gets from one core
  both-cores        the seeds sharded over one device per core (the CLI's path, "ours-cores")
  two-processes     two independent processes, half the seeds each, each pinned to its own
                    core, run at the same time: perfect parallelism, nothing shared but the
                    machine (its memory bandwidth and caches); the ceiling

    python -m benchmarks.cores_ceiling --seeds 64 --timesteps 32768 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import harness

ROOT = Path(__file__).resolve().parents[1]


class Peer:
    """One benchmarks/peer.py process: compiled on start, one timed execution per run()."""

    def __init__(self, kind: str, seeds: int, timesteps: int, core: int | None = None):
        command = [sys.executable, str(ROOT / "benchmarks" / "peer.py"), "--kind", kind, "--seeds", str(seeds),
                   "--settings", json.dumps({"total_timesteps": timesteps})]
        if core is not None:
            command = ["taskset", "-c", str(core), *command]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.ready = self._read("PEER_READY")

    def _read(self, tag: str) -> dict:
        for line in self.process.stdout:
            if line.startswith("PEER_ERROR"):
                raise RuntimeError(line)
            if line.startswith(tag + " "):
                return json.loads(line[len(tag) + 1:])
        raise RuntimeError(f"peer ended before {tag}")

    def start(self) -> None:
        self.process.stdin.write("run\n")
        self.process.stdin.flush()

    def finish(self) -> dict:
        return self._read("PEER_DONE")

    def close(self) -> None:
        self.process.stdin.write("quit\n")
        self.process.stdin.flush()
        self.process.wait(timeout=60)


def timed(peers: list[Peer]) -> float:
    """Wall seconds for all of `peers` to run once, started together."""
    start = time.perf_counter()
    for peer in peers:
        peer.start()
    for peer in peers:
        peer.finish()
    return time.perf_counter() - start


def load() -> float:
    return os.getloadavg()[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=64, help="seeds in all (two-processes: half each)")
    p.add_argument("--timesteps", type=int, default=32768, help="environment steps per seed")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path, help="write the rounds here")
    a = p.parse_args(argv)
    if a.seeds < 2 or a.seeds % 2:
        p.error(f"--seeds {a.seeds}: an even number of at least 2 (two-processes takes half each)")
    if (os.cpu_count() or 1) < 2:
        p.error("this machine has one core: there is no second core to measure")
    contenders = {
        "one-device": [Peer("ours", a.seeds, a.timesteps)],
        "one-device-1core": [Peer("ours", a.seeds, a.timesteps, core=0)],
        "both-cores": [Peer("ours-cores", a.seeds, a.timesteps)],
        "two-processes": [Peer("ours", a.seeds // 2, a.timesteps, core=0),
                          Peer("ours", a.seeds // 2, a.timesteps, core=1)],
    }
    rounds = []
    for _ in range(a.rounds):
        before = load()
        row = {name: timed(peers) for name, peers in contenders.items()}
        rounds.append({**row, "load": max(before, load())})
    for peers in contenders.values():
        for peer in peers:
            peer.close()
    steps = a.seeds * a.timesteps
    print(f"{a.seeds} seeds x {a.timesteps} steps, {a.rounds} interleaved rounds, {os.cpu_count()} cores; "
          f"loads {[round(r['load'], 2) for r in rounds]}")
    print("| contender | time s (median) | env steps/s | vs one-device (median of per-round ratios, range) |")
    print("|---|---|---|---|")
    for name in contenders:
        ratios = [r["one-device"] / r[name] for r in rounds]
        seconds = statistics.median(r[name] for r in rounds)
        print(f"| {name} | {seconds:.3f} | {steps / seconds:,.0f} | "
              f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")
    if a.json:
        written = harness.write_kept(a.json, json.dumps({"seeds": a.seeds, "timesteps": a.timesteps, "rounds": rounds},
                                                        indent=1))
        print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
