"""Brax ant on a GPU: final return and env steps per second of configs/brax/ant.yaml.

Meant for an offline GPU host whose image has jax, flax, optax, chex and orbax but not
gymnax, brax or mujoco. On this (CPU) machine, first fetch the wheels and copy them with
the repo to the host:

    benchmarks/fetch_wheels.sh .whl          # ~36 MB; keep .whl/ out of git

then on the host, from the repo root:

    python3 benchmarks/gpu_brax.py --wheels .whl --results results-gpu
    python3 benchmarks/gpu_brax.py --wheels .whl --results results-gpu --steps 2000000   # smoke run

The script (1) installs the carried wheels (`pip install --no-index --no-deps
--find-links DIR DIR/*.whl`; if site-packages is not writable, into --site with
`--target` and puts that on sys.path) and purejaxppo itself (`pip install --no-deps
--no-build-isolation -e .`; the repo root is also put on sys.path, so a failed editable
install does not stop it), skipped with --no-install; (2) checks that JAX sees a GPU
(--allow-cpu to go on without one: a CPU check of the script); (3) builds
`jax.jit(jax.vmap(make_train(cfg)))` over --seeds seeds, compiles it apart
(`.lower(keys).compile()`), runs it once, then evaluates the final policy
deterministically on --eval-episodes fresh episodes per seed (`Learner.evaluate`, what
`make_train(cfg, eval_episodes=N)` runs; its own program, so the training time counts
training only); (4) prints and writes `<results>/<date>-brax-<env>-gpu.md` (and `.json`):
env steps/s with and without compile, compile time, the final deterministic return,
beside the targets: return >= 5000 at 50M steps (Brax's published ant result with these
settings is ~6000 at 50M steps on an accelerator), >= 1M env steps/s.

`--steps N` overrides total_timesteps (a short smoke run; the return target then does not
apply). `--set key=value` overrides any other config field (YAML values), e.g.
`--set num_envs=64 --set num_steps=16` for a tiny CPU run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import glob
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RETURN_TARGET = 5000.0
RETURN_TARGET_STEPS = 50_000_000
SPS_TARGET = 1_000_000


def log(msg):
    print(msg, flush=True)


def pip(*args) -> bool:
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-cache-dir", *args]
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd, check=False).returncode == 0


def install(wheels: str, site: str) -> None:
    files = sorted(glob.glob(os.path.join(wheels, "*.whl")))
    if not files:
        raise SystemExit(f"no wheels in {wheels!r}: run benchmarks/fetch_wheels.sh {wheels} on a machine "
                         "with internet access and copy the folder here")
    base = ["--no-index", "--no-deps", "--no-compile", "--find-links", wheels]
    if not pip(*base, *files):
        log(f"installing into site-packages failed; installing into {site} instead")
        if not pip(*base, "--target", site, *files):
            raise SystemExit("could not install the wheels")
        sys.path.insert(0, site)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")]))
    if not pip("--no-index", "--no-deps", "--no-build-isolation", "-e", str(REPO)):
        log("editable install of purejaxppo failed; importing it from the repo root instead")
    importlib.invalidate_caches()


def parse_value(text):
    import yaml

    return yaml.safe_load(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--wheels", help="folder of wheels from benchmarks/fetch_wheels.sh (needed unless --no-install)")
    parser.add_argument("--results", default="benchmarks/results", help="folder for the markdown (and json) result")
    parser.add_argument("--config", default=str(REPO / "configs/brax/ant.yaml"))
    parser.add_argument("--steps", type=int, default=None, help="override total_timesteps (smoke run)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    parser.add_argument("--seeds", type=int, default=1, help="seeds, vmapped in one program")
    parser.add_argument("--eval-episodes", type=int, default=128)
    parser.add_argument("--no-install", action="store_true", help="the packages are already importable")
    parser.add_argument("--site", default="/tmp/site", help="fallback install target when site-packages is read-only")
    parser.add_argument("--allow-cpu", action="store_true", help="go on without a GPU (to check the script)")
    args = parser.parse_args()

    if not args.no_install:
        if not args.wheels:
            parser.error("--wheels DIR is needed (or --no-install)")
        install(args.wheels, args.site)
    sys.path.insert(0, str(REPO))

    import jax
    import numpy as np

    import purejaxppo as ppo
    from benchmarks import harness
    from purejaxppo.experiments.paths import write_new
    from purejaxppo.train import Learner

    devices = jax.devices()
    platform_name = devices[0].platform
    log(f"jax {jax.__version__}: {len(devices)} device(s), {devices[0].platform}: {devices[0].device_kind}")
    if platform_name != "gpu" and not args.allow_cpu:
        raise SystemExit(f"JAX sees no GPU (backend {platform_name}); --allow-cpu to run anyway")

    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set {item!r}: expected KEY=VALUE")
        overrides[key] = parse_value(value)
    if args.steps is not None:
        overrides["total_timesteps"] = args.steps
    cfg = ppo.load_config(args.config, overrides)
    steps_per_seed = cfg.num_updates * cfg.batch_size
    total_steps = args.seeds * steps_per_seed
    log(f"{args.config}{f' with {overrides}' if overrides else ''}: {cfg.env} {dict(cfg.env_params)}, "
        f"{cfg.num_updates} updates x {cfg.num_envs} envs x {cfg.num_steps} steps = {steps_per_seed:,} env steps "
        f"per seed, {args.seeds} seed(s)")

    keys = jax.random.split(jax.random.PRNGKey(0), args.seeds)
    t = time.perf_counter()
    train = jax.jit(jax.vmap(ppo.make_train(cfg))).lower(keys).compile()
    compile_s = time.perf_counter() - t
    log(f"compiled in {compile_s:.1f} s; training")
    t = time.perf_counter()
    out = jax.block_until_ready(train(keys))
    train_s = time.perf_counter() - t
    learner = Learner(cfg)
    t = time.perf_counter()
    evaluate = jax.jit(jax.vmap(lambda s: learner.evaluate(s, args.eval_episodes, True))).lower(out.state).compile()
    eval_compile_s = time.perf_counter() - t
    t = time.perf_counter()
    returns = np.asarray(jax.block_until_ready(evaluate(out.state)))  # [seeds, episodes]
    eval_s = time.perf_counter() - t

    per_seed = returns.mean(axis=1)
    final_return = float(per_seed.mean())
    train_return = np.asarray(out.metrics["episode_return"][:, -1])
    sps = total_steps / train_s
    sps_incl = total_steps / (compile_s + train_s)
    full = steps_per_seed >= RETURN_TARGET_STEPS
    ret_mark = ("met" if final_return >= RETURN_TARGET else "NOT met") if full else \
        f"not applicable: {steps_per_seed:,} < {RETURN_TARGET_STEPS:,} steps"
    sps_mark = "met" if sps >= SPS_TARGET else "NOT met"
    if platform_name != "gpu":
        sps_mark += " (no GPU: not a test of the target)"

    versions = {"python": platform.python_version(), "jax": jax.__version__}
    from importlib.metadata import version
    for p in ("jaxlib", "jax-cuda12-plugin", "jax-cuda13-plugin", "flax", "optax", "brax", "mujoco"):
        with contextlib.suppress(Exception):
            versions[p] = version(p)
    versions["purejaxppo"] = ppo.__version__
    with contextlib.suppress(Exception):
        versions["commit"] = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                            capture_output=True, text=True, check=False).stdout.strip()
    device = f"{len(devices)} x {devices[0].device_kind} ({platform_name})"
    result = {
        "date": datetime.date.today().isoformat(), "device": device, "versions": versions,
        "command": "python3 " + " ".join([os.path.relpath(__file__, os.getcwd())] + sys.argv[1:]),
        "config": args.config, "overrides": overrides, "seeds": args.seeds, "steps_per_seed": steps_per_seed,
        "compile_s": compile_s, "train_s": train_s, "eval_compile_s": eval_compile_s, "eval_s": eval_s,
        "sps_compile_excluded": sps, "sps_compile_included": sps_incl,
        "final_deterministic_return": final_return, "per_seed_return": per_seed.tolist(),
        "last_training_return": train_return.tolist(), "eval_episodes": args.eval_episodes,
        "return_target": {"value": RETURN_TARGET, "at_steps": RETURN_TARGET_STEPS, "status": ret_mark},
        "sps_target": {"value": SPS_TARGET, "status": sps_mark},
    }
    env_name = cfg.env.split("/")[-1]
    md = "\n".join([
        f"# {cfg.env} on {device} ({result['date']})", "",
        f"Command: `{result['command']}`", "",
        (f"Config: {args.config}{f', overrides {overrides}' if overrides else ''}: {cfg.env} {dict(cfg.env_params)}, "
        f"{cfg.num_updates} updates x {cfg.num_envs} envs x {cfg.num_steps} steps = {steps_per_seed:,} env steps per "
        f"seed; {args.seeds} seed(s) vmapped in one program."), "",
        f"Versions: {', '.join(f'{k} {v}' for k, v in versions.items())}.", "",
        "| measure | value | target |", "|---|---|---|",
        (f"| final return, deterministic ({args.eval_episodes} episodes per seed; mean over seeds) | {final_return:,.1f} "
        f"(per seed: {', '.join(f'{x:,.1f}' for x in per_seed)}) | >= {RETURN_TARGET:,.0f} at "
        f"{RETURN_TARGET_STEPS // 1_000_000}M steps: {ret_mark} |"),
        f"| env steps/s, compile excluded | {sps:,.0f} | >= {SPS_TARGET:,}: {sps_mark} |",
        f"| env steps/s, compile included | {sps_incl:,.0f} | |",
        f"| compile s (training program) | {compile_s:.1f} | |",
        f"| training s (compiled program, one run) | {train_s:.1f} | |",
        f"| evaluation: compile s, run s | {eval_compile_s:.1f}, {eval_s:.1f} | |",
        (f"| last training return (episodes finished in the last update) | "
        f"{', '.join(f'{x:,.1f}' for x in train_return)} | |"), ""])
    print(md)
    folder = Path(args.results)
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / harness.new_stem(folder, f"{result['date']}-brax-{env_name}-{platform_name}", [".md", ".json"])
    write_new(stem.with_suffix(".md"), md)  # a new file, never an earlier measurement replaced
    write_new(stem.with_suffix(".json"), json.dumps(result, indent=1))
    log(f"wrote {stem}.md and .json")


if __name__ == "__main__":
    main()
