"""One timed measurement in a fresh process: build, compile, execute R times, report JSON.

Executed as a plain script (never imported by the harness), by two different interpreters:

* ``ours`` and ``ours-cores``: our venv's python, cwd = this repo's root, PYTHONPATH = repo
  root first (so the checkout the harness lives in is measured, not an editable install
  elsewhere; the result records ``purejaxppo.__file__``).
* ``pjrl``: the PureJaxRL venv's python, PYTHONPATH = <pjrl>:<pjrl>/purejaxrl (its ppo.py
  does ``from wrappers import ...``). This is our own driver: it only imports
  ``purejaxrl.ppo.make_train`` and calls it with a config dict.

``ours`` and ``pjrl`` are timed by the same code: ``jax.jit(jax.vmap(train)).lower(keys).compile()``
on the single default device is timed as compile; then the compiled executable is run
``repeats`` times on the same keys, each run ended by ``jax.block_until_ready``.

``ours-cores`` first calls ``purejaxppo.experiments.parallel.use_all_cpu_cores()`` (before JAX starts its
backend: one host device per CPU core), builds the same train function as ``ours``, and uses
``purejaxppo.experiments.parallel.ShardedRuns(train, keys)``: its ``compile_seconds`` is the compile time,
and each timed run is ``jax.block_until_ready(runs())`` (the seed axis sharded over
``runs.num_devices`` devices, padded to a multiple of them).

The result is printed as one line ``BENCH_RESULT {json}`` on stdout (other output of the
libraries is left alone).

Settings arrive as JSON in the harness's own names (see ``benchmarks.__main__.SETTINGS``) and are
mapped here to each library's config.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time


def build_ours(settings: dict, config_path: str):
    import purejaxppo as ppo

    overrides = {
        "env": settings["env"],
        "num_envs": settings["num_envs"],
        "num_steps": settings["num_steps"],
        "num_minibatches": settings["num_minibatches"],
        "update_epochs": settings["update_epochs"],
        "total_timesteps": settings["total_timesteps"],
        "hidden_sizes": [64, 64],
        "activation": settings["activation"],
        "lr": settings["lr"],
        "anneal_lr": settings["anneal_lr"],
        "clip_eps": settings["clip_eps"],
        "vf_clip_eps": settings["clip_eps"],  # PureJaxRL clips the value loss with CLIP_EPS
        "ent_coef": settings["ent_coef"],
        "vf_coef": settings["vf_coef"],
        "max_grad_norm": settings["max_grad_norm"],
        "gamma": settings["gamma"],
        "gae_lambda": settings["gae_lambda"],
    }
    cfg = ppo.load_config(config_path, overrides=overrides)
    train = ppo.make_train(cfg)

    def final_return(out):
        import numpy as np

        r = np.asarray(out.metrics["episode_return"])[:, -1]  # [seeds]
        return float(np.nanmean(r))

    return train, final_return, {"purejaxppo": getattr(ppo, "__version__", "?"),
                                 "purejaxppo_file": ppo.__file__}


def build_pjrl(settings: dict, config_path: str):
    from purejaxrl.ppo import make_train

    config = {
        "LR": settings["lr"],
        "NUM_ENVS": settings["num_envs"],
        "NUM_STEPS": settings["num_steps"],
        "TOTAL_TIMESTEPS": settings["total_timesteps"],
        "UPDATE_EPOCHS": settings["update_epochs"],
        "NUM_MINIBATCHES": settings["num_minibatches"],
        "GAMMA": settings["gamma"],
        "GAE_LAMBDA": settings["gae_lambda"],
        "CLIP_EPS": settings["clip_eps"],
        "ENT_COEF": settings["ent_coef"],
        "VF_COEF": settings["vf_coef"],
        "MAX_GRAD_NORM": settings["max_grad_norm"],
        "ACTIVATION": settings["activation"],
        "ENV_NAME": settings["env"],
        "ANNEAL_LR": settings["anneal_lr"],
    }
    train = make_train(config)

    def final_return(out):
        # Mean return of the episodes that finished during the last update (the same
        # quantity as our metrics["episode_return"][-1]); a seed with none finishing falls
        # back to its last-update mean of returned_episode_returns, as PureJaxRL's plots use.
        import numpy as np

        m = out["metrics"]
        ret = np.asarray(m["returned_episode_returns"])[:, -1]  # [seeds, steps, envs]
        done = np.asarray(m["returned_episode"])[:, -1]
        per_seed = [
            ret[i][done[i]].mean() if done[i].any() else ret[i].mean() for i in range(ret.shape[0])
        ]
        return float(np.mean(per_seed))

    return train, final_return, {}


def package_versions() -> dict:
    from importlib import metadata

    out = {}
    for name in ("jax", "jaxlib", "flax", "optax", "gymnax", "distrax", "chex", "numpy"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--contender", choices=("ours", "ours-cores", "pjrl"), required=True)
    p.add_argument("--n-seeds", type=int, required=True)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--settings", required=True, help="JSON dict of PPO settings")
    p.add_argument("--config", default="configs/cartpole.yaml", help="ours: base YAML")
    a = p.parse_args()
    settings = json.loads(a.settings)

    t0 = time.perf_counter()
    if a.contender == "ours-cores":
        # Must happen before JAX initialises its CPU backend (sets XLA_FLAGS).
        from purejaxppo.experiments.parallel import use_all_cpu_cores

        use_all_cpu_cores()
    import jax

    build = build_pjrl if a.contender == "pjrl" else build_ours
    train, final_return, versions = build(settings, a.config)
    keys = jax.random.split(jax.random.PRNGKey(a.seed), a.n_seeds)

    if a.contender == "ours-cores":
        from purejaxppo.experiments.parallel import ShardedRuns

        t1 = time.perf_counter()
        runs = ShardedRuns(train, keys)  # places the (padded) keys, then compiles
        t2 = time.perf_counter()
        compile_s = runs.compile_seconds
        num_devices = runs.num_devices
        execute = runs
    else:
        fn = jax.jit(jax.vmap(train))
        t1 = time.perf_counter()
        compiled = fn.lower(keys).compile()
        t2 = time.perf_counter()
        compile_s = t2 - t1
        num_devices = 1

        def execute():
            return compiled(keys)

    times, out = [], None
    for _ in range(a.repeats):
        del out  # free the previous result's buffers before the next run
        s = time.perf_counter()
        out = jax.block_until_ready(execute())
        times.append(time.perf_counter() - s)

    versions.update(package_versions(), python=platform.python_version())
    steps = a.n_seeds * settings["total_timesteps"]
    best = min(times)
    result = {
        "contender": a.contender,
        "n_seeds": a.n_seeds,
        "total_timesteps": settings["total_timesteps"],
        "num_devices": num_devices,
        "build_s": t1 - t0,
        "compile_s": compile_s,
        "setup_s": t2 - t1,  # compile plus, for ours-cores, placing the keys
        "times_s": times,
        "best_s": best,
        "median_s": statistics.median(times),
        "steps_per_s": steps / best,
        "final_return": final_return(out),
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "versions": versions,
    }
    sys.stdout.write("BENCH_RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
