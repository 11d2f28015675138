"""Several processes on one machine (issue 29): host memory per process and time per chunk
for 1, 2 and 4 processes joined over 127.0.0.1 (gloo), one CPU device each
(`--xla_force_host_platform_device_count=1`), at equal total runs.

    python -m benchmarks.hosts [--seeds 4] [--processes 1,2,4] [--out benchmarks/results/...md]

Each process's peak resident memory is its `ru_maxrss` (os.wait4); the time per chunk is
the writer's reported run time over the chunks (`--checkpoint-every`: a chunk includes the
agreement on a stop and its checkpoint, to which every process saves its shards).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

from benchmarks import harness

UPDATES, EVERY = 400, 20


def run(processes: int, seeds: int, folder: str) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [sys.executable, "-m", "purejaxppo.experiments.cli", "train", "cartpole", "--seeds", str(seeds),
            "--set", f"total_timesteps={UPDATES * 64}", "--set", "num_envs=4", "--set", "num_steps=16",
            "--checkpoint-every", str(EVERY), "--eval-episodes", "0", "--no-cache", "--out", folder]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    base["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    procs, logs = [], []
    for i in range(processes):
        env = dict(base) if processes == 1 else {**base, "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
                                                  "JAX_NUM_PROCESSES": str(processes), "JAX_PROCESS_ID": str(i)}
        log = tempfile.TemporaryFile(mode="w+")
        procs.append(subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, text=True))
        logs.append(log)
    start = time.perf_counter()
    peaks = {}
    for p in procs:
        _, status, usage = os.wait4(p.pid, 0)
        peaks[p.pid] = usage.ru_maxrss / 1024  # KiB -> MiB
        assert os.waitstatus_to_exitcode(status) == 0, f"process exited {status}"
    wall = time.perf_counter() - start
    logs[0].seek(0)
    text = logs[0].read()
    found = re.search(r"compile ([\d.]+) s .*?, run ([\d.]+) s", text.replace("\n", " "))
    compile_s, run_s = float(found.group(1)), float(found.group(2))
    return {"processes": processes, "runs": seeds, "peak_mib": [peaks[p.pid] for p in procs],
            "compile_s": compile_s, "run_s": run_s, "chunk_s": run_s / (UPDATES // EVERY), "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for n in map(int, args.processes.split(",")):
            rows.append(run(n, args.seeds, os.path.join(folder, f"p{n}")))
    lines = ["| processes | runs | peak host memory per process (MiB) | compile (s) | time per chunk of "
             f"{EVERY} updates (s) | wall (s) |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['processes']} | {r['runs']} | {', '.join(f'{m:.0f}' for m in r['peak_mib'])} | "
                     f"{r['compile_s']:.1f} | {r['chunk_s']:.3f} | {r['wall_s']:.1f} |")
    table = "\n".join(lines) + "\n"
    print(table, end="")
    if args.out:  # a new file: where the name is taken, its next number (never a measurement replaced)
        print(f"wrote {harness.write_kept(args.out, table)}", file=sys.stderr)


if __name__ == "__main__":
    main()
