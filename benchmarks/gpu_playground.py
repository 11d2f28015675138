"""MuJoCo Playground on an accelerator: CartpoleBalance and CheetahRun at Playground's own Brax
PPO settings (configs/playground/gpu/), steps/s and return, beside Brax's trainer on the same task.

    python benchmarks/gpu_playground.py [--tasks cartpole_balance,cheetah_run] [--updates N]
                                        [--results benchmarks/results]

Ours: `purejaxppo train playground/gpu/<task> --seeds 1` as a user runs it (its summary.json:
steps/s with and without compile, the greedy evaluation return over 8 episodes). `--updates N`
cuts a config to N updates (983,040 env steps each) where the device time is short; the table
says which budget ran. Brax's trainer: `brax.training.agents.ppo.train` on the task our adapter
builds, wrapped by Playground's `wrapper.wrap_for_brax_training`, with the same settings mapped
as benchmarks/brax_side_by_side.py maps them, for the same number of steps; where it cannot run
(brax 0.14.2 calls `jax.device_put_replicated`, which jax 0.11 removed), the table says why;
`--shim` gives it a stand-in for that one function (a pmap returning its input on every device).
Writes <date>-playground-<hardware>.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import harness  # noqa: E402


def ours(task: str, updates: int | None, folder: Path) -> dict:
    cmd = [sys.executable, "-m", "purejaxppo.experiments.cli", "train", f"playground/gpu/{task}", "--seeds", "1",
           "--eval-episodes", "8", "--out", str(folder), "--no-cache"]
    if updates:
        cmd += ["--set", f"total_timesteps={updates * 983040}"]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    summary = json.loads((folder / "summary.json").read_text())
    run, compile_s = summary["run_seconds"], summary["compile_seconds"]
    steps = summary["steps_per_second"] * run
    return {"steps": steps, "steps_per_s": summary["steps_per_second"], "with_compile": steps / (run + compile_s),
            "compile_s": compile_s, "return": summary["eval_return"]["mean"], "wall_s": time.perf_counter() - start}


def brax(task: str, updates: int | None, shim: bool = False) -> dict:
    import functools
    import warnings

    import flax.linen as nn
    import jax
    import numpy as np

    import purejaxppo as ppo
    from purejaxppo import configs
    from purejaxppo.envs import make_raw_env

    if shim and not hasattr(jax, "device_put_replicated"):  # removed in jax 0.11; brax 0.14.2 still calls it
        def device_put_replicated(x, devices):
            return jax.pmap(lambda _: x, devices=devices)(np.arange(len(devices)))

        jax.device_put_replicated = device_put_replicated
    try:
        from brax.training.agents.ppo import networks as ppo_networks
        from brax.training.agents.ppo import train as ppo_train
        from mujoco_playground import wrapper
    except Exception as error:  # noqa: BLE001
        return {"error": f"{type(error).__name__}: {error}"}
    cfg = ppo.load_config(configs.find(f"playground/gpu/{task}"),
                          {"total_timesteps": updates * 983040} if updates else {})
    env = make_raw_env(cfg.env, cfg.env_params).playground_env
    network = functools.partial(ppo_networks.make_ppo_networks, policy_hidden_layer_sizes=tuple(cfg.hidden_sizes),
                                value_hidden_layer_sizes=tuple(cfg.hidden_sizes), activation=nn.swish)
    records = []
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ppo_train.train(env, num_timesteps=cfg.num_updates * cfg.batch_size, num_envs=cfg.num_envs,
                            unroll_length=30, batch_size=1024, num_minibatches=cfg.num_minibatches,
                            num_updates_per_batch=cfg.update_epochs, episode_length=1000, action_repeat=1,
                            learning_rate=cfg.lr, entropy_cost=cfg.ent_coef, discounting=cfg.gamma,
                            normalize_observations=True, reward_scaling=cfg.reward_scale, network_factory=network,
                            num_evals=2, num_eval_envs=8, deterministic_eval=True,
                            wrap_env_fn=wrapper.wrap_for_brax_training, seed=0,
                            progress_fn=lambda step, metrics: records.append((int(step), dict(metrics))))
    except Exception as error:  # noqa: BLE001 -- reported in the table
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"}
    last = records[-1][1]
    return {"steps": records[-1][0], "steps_per_s": float(last.get("training/sps", float("nan"))),
            "with_compile": records[-1][0] / float(last["training/walltime"]),
            "return": float(last["eval/episode_reward"]), "wall_s": time.perf_counter() - start}


def row(task, who, cell) -> str:
    if "error" in cell:
        return f"| {task} | {who} | - | - | - | - | did not run: {cell['error']} |"
    return (f"| {task} | {who} | {cell['steps']:,.0f} | {cell['steps_per_s']:,.0f} | {cell['with_compile']:,.0f} | "
            f"{cell['return']:.1f} | wall {cell['wall_s']:.0f} s |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="cartpole_balance,cheetah_run")
    parser.add_argument("--updates", type=int, default=None, help="cut each config to this many updates")
    parser.add_argument("--results", default=str(REPO / "benchmarks" / "results"))
    parser.add_argument("--only", choices=("ours", "brax"), default=None, help="run one trainer only")
    parser.add_argument("--shim", action="store_true", help="under jax >= 0.11, give Brax's trainer a stand-in for "
                        "the removed jax.device_put_replicated (a pmap that returns its input on every device)")
    args = parser.parse_args()
    import importlib.metadata as m

    import jax

    device = jax.devices()[0]
    hardware = device.device_kind.replace(" ", "-").lower() if device.platform == "gpu" else device.platform
    lines = [f"# MuJoCo Playground at Playground's PPO settings on {device.device_kind} ({datetime.date.today()})", "",
             "Versions: " + ", ".join(f"{p} {m.version(p)}" for p in ("jax", "mujoco", "mujoco-mjx", "playground",
                                                                     "brax")),
             f"Command: `python benchmarks/gpu_playground.py {' '.join(sys.argv[1:])}`; one seed each; "
             f"{'the configs cut to ' + str(args.updates) + ' updates' if args.updates else 'full budgets'}.", "",
             "| task | trainer | env steps | steps/s, compile excluded | steps/s, compile included | greedy return "
             "| notes |", "|---|---|---|---|---|---|---|"]
    # a new file (never an earlier measurement replaced), rewritten as each task's rows come in
    out = harness.write_kept(Path(args.results) / f"{datetime.date.today()}-playground-{hardware}.md",
                             "\n".join(lines) + "\n")
    for task in args.tasks.split(","):
        if args.only != "brax":
            with tempfile.TemporaryDirectory() as tmp:
                cell = ours(task, args.updates, Path(tmp) / "run")
            print(task, "ours", cell, flush=True)
            lines.append(row(task, "purejaxppo", cell))
        if args.only != "ours":
            cell = brax(task, args.updates, args.shim)
            print(task, "brax", cell, flush=True)
            lines.append(row(task, "Brax's ppo.train" + (" (device_put_replicated stand-in)" if args.shim else ""),
                             cell))
        out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
