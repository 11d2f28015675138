"""MuJoCo Playground on a CPU: MJX's two implementations side by side, impl jax (purejaxppo's
default) against impl warp (Playground's), in environment steps per second.

    python -m benchmarks.playground_impl [--tasks CartpoleBalance,PendulumSwingup] [--envs 64,256]
                                         [--steps 200] [--rounds 3] [--out FILE.md]

Each cell: Playground's own task (`registry.load(task, config_overrides={"impl": ...})`; our
adapter takes impl jax only, see docs/environments.md), `num_envs` envs reset, then `steps`
steps under uniformly random actions in [-1, 1], as one `jax.jit(jax.vmap(...))` program with a
`lax.scan` over the steps (no learner, no resets within the scan: what an MJX rollout costs).
Tasks without contacts only: with contacts (CheetahRun), impl warp's data holds one contact pool
for all envs (its leading axis `naconmax`, not the env), and a per-env vmap of it is refused by
MJX ("Leaf node leading dim (64) does not match naconmax (100000)"). Compiled once (timed apart); each round times one call,
blocking; rounds interleave the implementations so that the machine's load hits both alike.
Reported: the median steps/s and the range over rounds, the compile time, and the ratio.
Needs the [playground] extra (Python >= 3.12).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

import jax

from benchmarks import harness

IMPLS = ("jax", "warp")


def rollout_program(task: str, impl: str, num_envs: int, steps: int):
    """-> (compiled program of a key, seconds to compile it)."""
    from mujoco_playground import registry

    env = registry.load(task, config_overrides={"impl": impl})

    def one(key):
        state = env.reset(key)

        def step(state, key):
            action = jax.random.uniform(key, (env.action_size,), minval=-1.0, maxval=1.0)
            state = env.step(state, action)
            return state, state.reward

        return jax.lax.scan(step, state, jax.random.split(key, steps))[1].sum()

    keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
    start = time.perf_counter()
    program = jax.jit(jax.vmap(one)).lower(keys).compile()
    return program, keys, time.perf_counter() - start


def measure(task, num_envs, steps, rounds, log):
    programs = {}
    for impl in IMPLS:
        programs[impl] = rollout_program(task, impl, num_envs, steps)
        log(f"[{task} x{num_envs}] {impl}: compiled in {programs[impl][2]:.1f} s")
    rates = {impl: [] for impl in IMPLS}
    for r in range(rounds):
        for impl in IMPLS:
            program, keys, _ = programs[impl]
            start = time.perf_counter()
            jax.block_until_ready(program(keys))
            rates[impl].append(num_envs * steps / (time.perf_counter() - start))
            log(f"[{task} x{num_envs}] round {r + 1} {impl}: {rates[impl][-1]:,.0f} steps/s "
                f"(load {os.getloadavg()[0]:.1f})")
    return {impl: {"median": statistics.median(rates[impl]), "min": min(rates[impl]), "max": max(rates[impl]),
                   "compile_s": programs[impl][2]} for impl in IMPLS}


def report(cells, args, started, finished) -> str:
    import importlib.metadata as m

    versions = ", ".join(f"{p} {m.version(p)}" for p in ("jax", "mujoco", "mujoco-mjx", "playground", "warp-lang"))
    lines = [f"# MuJoCo Playground on a CPU: MJX impl jax against impl warp ({datetime.date.today()})", "",
             f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, no GPU; "
             f"python {platform.python_version()}, {versions}; {started}-{finished}.",
             f"Command: `python -m benchmarks.playground_impl {' '.join(sys.argv[1:])}`", "",
             f"Random actions, {args.steps} steps per env in one jitted, vmapped program (no learner); the median of "
             f"{args.rounds} rounds (range in brackets), rounds interleaved.", "",
             "| task | envs | jax steps/s | warp steps/s | jax / warp | compile jax | compile warp |",
             "|---|---|---|---|---|---|---|"]
    for (task, num_envs), cell in cells.items():
        j, w = cell["jax"], cell["warp"]
        lines.append(f"| {task} | {num_envs} | {j['median']:,.0f} [{j['min']:,.0f}–{j['max']:,.0f}] | "
                     f"{w['median']:,.0f} [{w['min']:,.0f}–{w['max']:,.0f}] | {j['median'] / w['median']:.0f}x | "
                     f"{j['compile_s']:.1f} s | {w['compile_s']:.1f} s |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="CartpoleBalance,PendulumSwingup")
    parser.add_argument("--envs", default="64,256")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    started = datetime.datetime.now().strftime("%H:%M")

    def log(message):
        print(message, file=sys.stderr, flush=True)

    cells = {}
    for task in args.tasks.split(","):
        for num_envs in (int(n) for n in args.envs.split(",")):
            cells[(task, num_envs)] = measure(task, num_envs, args.steps, args.rounds, log)
    text = report(cells, args, started, datetime.datetime.now().strftime("%H:%M"))
    if args.out:  # a new file: where the name is taken, its next number (never a measurement replaced)
        log(f"wrote {harness.write_kept(args.out, text)}")
    print(text)


if __name__ == "__main__":
    main()
