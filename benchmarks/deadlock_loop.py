"""The CPU deadlock check behind pyproject.toml's jax range: run vmapped CartPole programs in a loop.

jax 0.10.2 once hung intermittently on a CPU in `block_until_ready` on vmapped programs, which held
the jax pin at 0.9.2 for a while. This loop is how a jax version is checked for it:

    python -m benchmarks.deadlock_loop [--minutes 10] [--timeout 120] [--seeds 16] [--updates 8]

It alternates the two programs the package runs on a CPU, freshly compiled once each, then executed
again and again with `jax.block_until_ready`: `jax.jit(jax.vmap(make_train(cfg)))` on one device
(the notebook's path) and `ShardedRuns` over one host device per core (the command line's). An
execution that does not return within `--timeout` seconds is a hang: it prints `HANG` with the
executions so far and every Python thread's stack, and exits with code 1. Otherwise it prints the
count and the slowest execution and exits 0. Results so far: benchmarks/results/2026-12-01-jax-versions-cpu.md.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import threading
import time


def hang(name: str, counts: dict) -> None:
    print(f"HANG: {name} did not return; executions before it: {counts}", flush=True)
    faulthandler.dump_traceback(all_threads=True)
    os._exit(1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0, help="how long to loop (default 10)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds one execution may take (default 120)")
    p.add_argument("--seeds", type=int, default=16)
    p.add_argument("--updates", type=int, default=8, help="updates per run, each of the shipped CartPole batch (4 x 128)")
    a = p.parse_args(argv)

    from purejaxppo.experiments.parallel import ShardedRuns, use_all_cpu_cores

    use_all_cpu_cores()  # before JAX starts its CPU backend
    import jax

    import purejaxppo as ppo
    from purejaxppo import configs

    cfg = ppo.load_config(configs.find("cartpole"), overrides={"total_timesteps": a.updates * 4 * 128})
    keys = jax.random.split(jax.random.PRNGKey(0), a.seeds)
    train = ppo.make_train(cfg)
    programs = {
        "vmap, 1 device": jax.jit(jax.vmap(train), compiler_options=ppo.compiler_options()).lower(keys).compile(),
        f"sharded, {jax.device_count()} devices": ShardedRuns(train, keys),
    }
    print(f"jax {jax.__version__} on {jax.default_backend()} ({jax.device_count()} devices); "
          f"{a.seeds} seeds x {cfg.num_updates} updates; looping for {a.minutes} min, {a.timeout} s per execution",
          flush=True)
    counts = {name: 0 for name in programs}
    slowest = {name: 0.0 for name in programs}
    end = time.monotonic() + 60 * a.minutes
    while time.monotonic() < end:
        for name, program in programs.items():
            watchdog = threading.Timer(a.timeout, hang, (name, counts))
            watchdog.start()
            start = time.perf_counter()
            jax.block_until_ready(program(keys))
            seconds = time.perf_counter() - start
            watchdog.cancel()
            counts[name] += 1
            slowest[name] = max(slowest[name], seconds)
    for name in programs:
        print(f"{name}: {counts[name]} executions, none hung; slowest {slowest[name]:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
