"""purejaxppo against Brax's own PPO trainer on the same Brax environment, same settings.

    python -m benchmarks.brax_side_by_side [--quick] [--seeds 4] [--rounds 3] [--out FILE.md]

--quick (12 / 6 updates, 2 seeds, 1 round, inverted_pendulum resets only) takes ~5 minutes on 2
cores, mostly compiling; the full run ~25 minutes (--pendulum-rounds 2).

Cases (CPU-sized): `fast` (configs/brax/fast.yaml, episode_length 128),
`inverted_pendulum` (configs/brax/inverted_pendulum.yaml, spring backend), and
`cartpole_balance` (configs/playground/cartpole_balance.yaml: MuJoCo Playground's task on MJX,
impl jax; needs the [playground] extra; `--cases cartpole_balance`), read when run. For
Playground, Brax's trainer gets the task our adapter builds (`.playground_env`) with
Playground's own `wrapper.wrap_for_brax_training` as `wrap_env_fn` (what Playground's
training script passes).

Contenders, interleaved over --rounds rounds (ours x1, ours xN, Brax xN calls, then again):
- `ours x1` / `ours xN`: `jax.jit(jax.vmap(make_train(cfg)))` on 1 / N seeds (one program),
  compiled once with `.lower(keys).compile()` (that time is the compile time); each round
  times one run of the compiled program. The final deterministic evaluation (N episodes
  per seed, `Learner.evaluate`, the code `make_train(cfg, eval_episodes=N)` runs) is a
  second program, compiled and timed apart, so that the training columns count training
  only (as Brax's do).
- `Brax`: `brax.training.agents.ppo.train.train`, one call per seed (seeds 0..N-1), on
  the very Brax environment object our adapter builds (`make_raw_env(...).brax_env`),
  with `num_evals=4`: an evaluation at step 0, then three training epochs of a third of
  the updates each, each followed by an evaluation. Brax times each epoch itself (blocking)
  and hands it to `progress_fn` as `training/sps` / `training/walltime`. Its epoch-1 AND
  epoch-2 calls each compile its training program (seen with jax_log_compiles: the state
  handed back by epoch 1 does not hit the cache of the state it started from); epoch 3 is
  the first compile-free one. So: training time with compile = `training/walltime` at the
  end (all three epochs); training time without compile = 3 x epoch 3; compile ~ epoch 1 +
  epoch 2 - 2 x epoch 3. Brax compiles again on every call (its jitted functions are
  closures made inside `train`), so every call pays it. Its final
  return is the last `eval/episode_reward` (deterministic_eval=True, num_eval_envs = N).

Settings mapping (ours -> Brax): num_envs -> num_envs; num_steps -> unroll_length (so GAE
runs over the same horizon and each env steps the same number of times per update);
num_envs / num_minibatches -> batch_size (so batch_size x num_minibatches x unroll_length =
num_envs x num_steps steps per update and minibatches hold the same number of steps);
num_minibatches -> num_minibatches; update_epochs -> num_updates_per_batch; gamma ->
discounting; gae_lambda; ent_coef -> entropy_cost; lr -> learning_rate; clip_eps ->
clipping_epsilon; vf_clip_eps -> clipping_epsilon_value; vf_coef -> vf_loss_coefficient;
max_grad_norm; normalize_obs -> normalize_observations; reward_scale -> reward_scaling;
episode_length, action_repeat; hidden_sizes / activation -> both of Brax's networks
(policy and value). Total steps: both run the same number of updates (the config's
total_timesteps rounded down to a multiple of 3 updates, as Brax's three epochs need).
Not expressible in Brax: anneal_lr (Brax: constant lr), normalize_reward (fast.yaml), our
Gaussian head clipped to the action bounds (Brax: tanh-squashed Gaussian), our
time-limit bootstrapping (Brax default bootstrap_on_timeout=False: truncated steps are
masked out of the loss).

Also measured (`reset_share`): what resets cost in a Brax rollout. Our training rollout
(`purejaxppo.rollout.rollout`, trivial all-zero policy) with resets="per_rollout" (one
fresh reset per env per rollout: what training uses for Brax) against resets="per_step"
(a fresh reset per env per step, computed in one batch up front: what gymnax uses), and a
batched reset of num_envs envs alone; inverted_pendulum (spring) and ant (positional).

Everything runs on one XLA CPU device (no --xla_force_host_platform_device_count), for
both trainers. The 1-minute load average is recorded before each cell.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import io
import logging
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import purejaxppo as ppo
from benchmarks import harness
from purejaxppo.envs import make_env, make_raw_env
from purejaxppo.rollout import rollout
from purejaxppo.train import Learner

CASES = {"fast": "configs/brax/fast.yaml", "inverted_pendulum": "configs/brax/inverted_pendulum.yaml",
         "cartpole_balance": "configs/playground/cartpole_balance.yaml"}
QUICK_UPDATES = {"fast": 12, "inverted_pendulum": 6, "cartpole_balance": 6}
EPOCHS = 3  # Brax training epochs per call (num_evals = EPOCHS + 1); the third is the first compile-free one


# --------------------------------------------------------------------------------------
# helpers
def load() -> float:
    return os.getloadavg()[0]


def med(xs):
    return statistics.median(xs)


def fmt_range(xs, f="{:,.0f}"):
    return f"{f.format(min(xs))}–{f.format(max(xs))}"


def load_case(path, quick_updates=None):
    cfg = ppo.load_config(path, {})
    updates = quick_updates or cfg.num_updates
    updates -= updates % EPOCHS
    return ppo.load_config(path, {"total_timesteps": updates * cfg.batch_size})


# --------------------------------------------------------------------------------------
# ours
class Ours:
    def __init__(self, cfg, seeds, eval_episodes):
        self.cfg, self.seeds = cfg, seeds
        keys = jax.random.split(jax.random.PRNGKey(0), seeds)
        self.keys = keys
        t = time.perf_counter()
        self.train = jax.jit(jax.vmap(ppo.make_train(cfg)), compiler_options=ppo.compiler_options()).lower(keys).compile()
        self.compile_s = time.perf_counter() - t
        learner = Learner(cfg)
        evaluate = jax.jit(jax.vmap(lambda state: learner.evaluate(state, eval_episodes, True)),
                           compiler_options=ppo.compiler_options())
        self.evaluate = evaluate
        self.eval_compile_s = None
        self.returns = None

    def run(self):
        t = time.perf_counter()
        out = jax.block_until_ready(self.train(self.keys))
        train_s = time.perf_counter() - t
        if self.eval_compile_s is None:
            t = time.perf_counter()
            self.evaluate = self.evaluate.lower(out.state).compile()
            self.eval_compile_s = time.perf_counter() - t
        t = time.perf_counter()
        returns = np.asarray(jax.block_until_ready(self.evaluate(out.state)))
        eval_s = time.perf_counter() - t
        self.returns = returns.mean(axis=1)  # [seeds]
        self.train_return = np.asarray(out.metrics["episode_return"][:, -1])
        return {"train_s": train_s, "train_compile_s": train_s + self.compile_s,
                "wall_s": self.compile_s + train_s + self.eval_compile_s + eval_s, "eval_s": eval_s}


# --------------------------------------------------------------------------------------
# Brax
def _brax_train():
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from brax.training.agents.ppo import networks as ppo_networks
        from brax.training.agents.ppo import train as ppo_train
    return ppo_train.train, ppo_networks.make_ppo_networks


def brax_settings(cfg, eval_episodes):
    """Brax train's keyword arguments for one of our configs (see the module doc)."""
    import flax.linen as nn

    _, make_ppo_networks = _brax_train()
    if cfg.num_envs % cfg.num_minibatches:
        raise ValueError("num_envs must be a multiple of num_minibatches to map onto Brax's batch_size")
    activation = {"tanh": nn.tanh, "relu": nn.relu, "swish": nn.swish, "silu": nn.swish}[cfg.activation]
    params = cfg.env_params
    return {
        "num_timesteps": cfg.num_updates * cfg.batch_size,
        "num_envs": cfg.num_envs, "unroll_length": cfg.num_steps, "batch_size": cfg.num_envs // cfg.num_minibatches,
        "num_minibatches": cfg.num_minibatches, "num_updates_per_batch": cfg.update_epochs,
        "episode_length": params.get("episode_length", 1000), "action_repeat": params.get("action_repeat", 1),
        "learning_rate": cfg.lr, "entropy_cost": cfg.ent_coef, "discounting": cfg.gamma, "gae_lambda": cfg.gae_lambda,
        "clipping_epsilon": cfg.clip_eps, "clipping_epsilon_value": cfg.vf_clip_eps, "vf_loss_coefficient": cfg.vf_coef,
        "max_grad_norm": cfg.max_grad_norm, "normalize_observations": cfg.normalize_obs,
        "reward_scaling": cfg.reward_scale,
        "network_factory": functools.partial(make_ppo_networks, policy_hidden_layer_sizes=tuple(cfg.hidden_sizes),
                                          value_hidden_layer_sizes=tuple(cfg.hidden_sizes), activation=activation),
        "num_evals": EPOCHS + 1, "num_eval_envs": eval_episodes, "deterministic_eval": True}


def run_brax(cfg, seed, eval_episodes):
    train, _ = _brax_train()
    raw = make_raw_env(cfg.env, cfg.env_params)
    kwargs = brax_settings(cfg, eval_episodes)
    if cfg.env.startswith("playground/"):  # Playground's task, wrapped for Brax's trainer as Playground's own script does
        from mujoco_playground import wrapper

        env, kwargs["wrap_env_fn"] = raw.playground_env, wrapper.wrap_for_brax_training
    else:
        env = raw.brax_env
    records = []

    def progress(step, metrics):
        records.append((time.perf_counter(), int(step), dict(metrics)))

    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train(env, seed=seed, progress_fn=progress, **kwargs)
    wall = time.perf_counter() - t
    steps = [r[1] for r in records]
    last = records[-1][2]
    epoch_times = np.diff([0.0] + [r[2]["training/walltime"] for r in records[1:]])
    assert len(epoch_times) == EPOCHS and steps[-1] == kwargs["num_timesteps"], (steps, kwargs["num_timesteps"])
    clean = epoch_times[-1]  # epochs 1 and 2 each compile Brax's training program (see the module doc)
    return {"train_s": EPOCHS * clean, "train_compile_s": float(last["training/walltime"]), "wall_s": wall,
            "compile_s": float(np.sum(epoch_times[:-1] - clean)), "return": float(last["eval/episode_reward"]),
            "eval_s": float(last["eval/walltime"]), "epoch_s": [float(x) for x in epoch_times]}


# --------------------------------------------------------------------------------------
def side_by_side(name, cfg, seeds, rounds, eval_episodes, log):
    steps = cfg.num_updates * cfg.batch_size
    log(f"[{name}] {cfg.num_updates} updates x {cfg.batch_size} steps = {steps:,} steps per seed; compiling ours")
    ours = {"ours x1": Ours(cfg, 1, eval_episodes), f"ours x{seeds}": Ours(cfg, seeds, eval_episodes)}
    cells = {k: [] for k in (*ours, f"Brax x{seeds} calls")}
    loads = {k: [] for k in cells}
    brax_calls = []
    for r in range(rounds):
        for label, o in ours.items():
            loads[label].append(load())
            cells[label].append(o.run())
            log(f"[{name}] round {r + 1} {label}: {cells[label][-1]}")
        label = f"Brax x{seeds} calls"
        loads[label].append(load())
        calls = [run_brax(cfg, s, eval_episodes) for s in range(seeds)]
        brax_calls.append(calls)
        cells[label].append({k: sum(c[k] for c in calls) for k in ("train_s", "train_compile_s", "wall_s", "compile_s")})
        log(f"[{name}] round {r + 1} {label}: {cells[label][-1]} returns {[round(c['return'], 2) for c in calls]}")
    result = {"name": name, "cfg": cfg, "steps": steps, "seeds": seeds, "rounds": rounds, "cells": cells,
              "loads": loads, "brax_calls": brax_calls, "kwargs": brax_settings(cfg, eval_episodes)}
    result["returns"] = {label: o.returns for label, o in ours.items()}
    result["returns"][f"Brax x{seeds} calls"] = np.array([c["return"] for c in brax_calls[0]])
    result["compile"] = {label: (o.compile_s, o.eval_compile_s) for label, o in ours.items()}
    result["brax_per_call"] = [c for calls in brax_calls for c in calls]
    return result


# --------------------------------------------------------------------------------------
def reset_share(path, overrides, repeats, rounds, log):
    cfg = ppo.load_config(path, overrides)
    env = make_env(cfg)
    n, t_steps = cfg.num_envs, cfg.num_steps
    size = env.action_space.shape[0]

    def policy(carry, obs, key):
        action = jnp.zeros((obs.shape[0], size), jnp.float32)
        zero = jnp.zeros(obs.shape[0], jnp.float32)
        return carry, action, action, zero, zero

    key = jax.random.PRNGKey(0)
    obs, state = jax.jit(jax.vmap(env.reset))(jax.random.split(key, n))
    programs, compile_s = {}, {}
    for resets in ("per_rollout", "per_step"):
        # the whole output, as training uses it (a reward alone could let XLA drop the physics: inverted_pendulum's is 1)
        fn = jax.jit(lambda s, o, k, resets=resets: rollout(env, policy, s, o, k, t_steps, resets=resets))
        t = time.perf_counter()
        programs[resets] = fn.lower(state, obs, key).compile()
        compile_s[resets] = time.perf_counter() - t
    reset_keys = jax.random.split(key, n)
    t = time.perf_counter()
    programs["reset only"] = jax.jit(jax.vmap(env.reset)).lower(reset_keys).compile()
    compile_s["reset only"] = time.perf_counter() - t
    args = {"per_rollout": (state, obs, key), "per_step": (state, obs, key), "reset only": (reset_keys,)}
    times = {k: [] for k in programs}
    loads = []
    for _ in range(rounds):
        for k, prog in programs.items():
            loads.append(load())
            jax.block_until_ready(prog(*args[k]))  # warm
            t = time.perf_counter()
            for _ in range(repeats):
                jax.block_until_ready(prog(*args[k]))
            times[k].append((time.perf_counter() - t) / repeats)
    m = {k: med(v) for k, v in times.items()}
    res = {"env": cfg.env, "backend": cfg.env_params.get("backend"), "num_envs": n, "num_steps": t_steps,
           "times": times, "median": m, "compile_s": compile_s, "loads": loads,
           "per_step_share": (m["per_step"] - m["per_rollout"]) / m["per_step"],
           "per_step_ratio": m["per_step"] / m["per_rollout"],
           "per_rollout_share": m["reset only"] / m["per_rollout"]}
    log(f"[resets {cfg.env}] {res['median']} compile {compile_s}")
    return res


# --------------------------------------------------------------------------------------
def versions():
    out = {"python": platform.python_version(), "jax": jax.__version__}
    from importlib.metadata import version
    for p in ("jaxlib", "flax", "optax", "brax", "mujoco"):
        with contextlib.suppress(Exception):
            out[p] = version(p)
    out["purejaxppo"] = ppo.__version__
    with contextlib.suppress(Exception):
        out["purejaxppo commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, check=False,
                                                  text=True).stdout.strip() + " (+ uncommitted changes in the tree)"
    return out


def cpu_model():
    with contextlib.suppress(Exception):
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def report(results, resets, args, command, started, finished, vers):
    lines = [f"# purejaxppo vs Brax's PPO trainer, side by side (CPU, {datetime.date.today().isoformat()})", ""]
    lines.append(f"Command: `{command}` (from the repo root, in .venv); ran {started} – {finished}.")
    lines.append(f"Machine: {cpu_model()}, {os.cpu_count()} cores, no GPU; one XLA CPU device for both trainers; "
                 f"{', '.join(f'{k} {v}' for k, v in vers.items())}.")
    lines.append("")
    for res in results:
        cfg, seeds, steps = res["cfg"], res["seeds"], res["steps"]
        kw = {k: v for k, v in res["kwargs"].items() if k != "network_factory"}
        lines += [f"## {res['name']} ({cfg.env}, env_params {dict(cfg.env_params)})", "",
                  (f"{cfg.num_updates} updates x {cfg.num_envs} envs x {cfg.num_steps} steps = {steps:,} env steps "
                  f"per seed; {cfg.num_minibatches} minibatches x {cfg.update_epochs} epochs. Brax.train kwargs: "
                  f"`{kw}`, networks {tuple(cfg.hidden_sizes)} {cfg.activation} (policy and value). "
                  f"{res['rounds']} rounds, interleaved (ours x1, ours x{seeds}, Brax x{seeds} calls)."), "",
                  ("| contender | steps/s, compile excluded (median, range) | steps/s, compile included "
                  "(median, range) | end-to-end s incl. eval (median) | compile s | final deterministic return "
                  "(mean over seeds; per-seed range) | load avg per round |"),
                  "|---|---|---|---|---|---|---|"]
        for label, cells in res["cells"].items():
            n = 1 if label == "ours x1" else seeds
            excl = [n * steps / c["train_s"] for c in cells]
            incl = [n * steps / c["train_compile_s"] for c in cells]
            wall = med([c["wall_s"] for c in cells])
            if label.startswith("ours"):
                comp, ecomp = res["compile"][label]
                comp_txt = f"{comp:.1f} (+ eval {ecomp:.1f}), once"
            else:
                comp_txt = f"{med([c['compile_s'] for c in res['brax_per_call']]):.1f} per call (est.)"
            ret = res["returns"][label]
            lines.append(f"| {label} | {med(excl):,.0f} ({fmt_range(excl)}) | {med(incl):,.0f} ({fmt_range(incl)}) "
                         f"| {wall:.1f} | {comp_txt} | {np.mean(ret):.1f} ({np.min(ret):.1f}–{np.max(ret):.1f}) | "
                         f"{', '.join(f'{x:.1f}' for x in res['loads'][label])} |")
        per = res["brax_per_call"]
        lines += ["", (f"Brax per call (all {len(per)} calls): training steps/s compile excluded median "
                  f"{med([steps / c['train_s'] for c in per]):,.0f}, included "
                  f"{med([steps / c['train_compile_s'] for c in per]):,.0f}; whole call "
                  f"{med([c['wall_s'] for c in per]):.1f} s median (its {EPOCHS + 1} evaluations took "
                  f"{med([c['eval_s'] for c in per]):.1f} s of that, including their compile)."), ""]
    if resets:
        lines += ["## What resets cost in a Brax rollout", "",
                  ("Our training rollout with a trivial (all-zero) policy, jitted, compile excluded; each cell the mean "
                  f"of {args.reset_repeats} calls after a warm-up call; median over {args.reset_rounds} interleaved rounds."),
                  "", ("| env (backend) | envs x steps | per_rollout s | per_step s | per_step / per_rollout | "
                  "share of a per_step rollout spent on its extra resets | batched reset of num_envs, s (share of a "
                  "per_rollout rollout) | compile s (per_rollout, per_step) |"), "|---|---|---|---|---|---|---|---|"]
        for r in resets:
            m = r["median"]
            lines.append(f"| {r['env']} ({r['backend']}) | {r['num_envs']} x {r['num_steps']} | {m['per_rollout']:.4f} | "
                         f"{m['per_step']:.4f} | {r['per_step_ratio']:.2f} | {100 * r['per_step_share']:.0f}% | "
                         f"{m['reset only']:.5f} ({100 * r['per_rollout_share']:.1f}%) | "
                         f"{r['compile_s']['per_rollout']:.1f}, {r['compile_s']['per_step']:.1f} |")
        lines.append("")
        lines.append("load average before each reset cell: " + "; ".join(
            f"{r['env']}: {', '.join(f'{x:.1f}' for x in r['loads'])}" for r in resets) + ".")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few minutes: short runs, 2 seeds, 1 round")
    parser.add_argument("--cases", default="fast,inverted_pendulum")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="rounds for fast")
    parser.add_argument("--pendulum-rounds", type=int, default=None, help="rounds for inverted_pendulum (default --rounds)")
    parser.add_argument("--eval-episodes", type=int, default=16)
    parser.add_argument("--resets", default="inverted_pendulum,ant", help="envs for the reset-cost measurement ('' for none)")
    parser.add_argument("--reset-repeats", type=int, default=5)
    parser.add_argument("--reset-rounds", type=int, default=3)
    parser.add_argument("--out", default=None, help="write the markdown report here (always printed)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.rounds, args.pendulum_rounds, args.reset_repeats, args.reset_rounds = 2, 1, 1, 2, 1
        args.resets = "inverted_pendulum"
    logging.getLogger().setLevel(logging.WARNING)
    command = "python -m benchmarks.brax_side_by_side " + " ".join(sys.argv[1:])
    started = datetime.datetime.now().strftime("%H:%M")
    vers = versions()  # the commit the run starts from (commits may land while it runs)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    results = []
    for name in [c for c in args.cases.split(",") if c]:
        cfg = load_case(CASES[name], QUICK_UPDATES[name] if args.quick else None)
        rounds = args.pendulum_rounds if (name == "inverted_pendulum" and args.pendulum_rounds) else args.rounds
        results.append(side_by_side(name, cfg, args.seeds, rounds, args.eval_episodes, log))
    resets = []
    reset_cases = {"inverted_pendulum": ("configs/brax/inverted_pendulum.yaml", {}),
                   "ant": ("configs/brax/ant.yaml", {"num_envs": 64, "num_steps": 80})}
    out = None  # this run's own report file: a new one (harness.write_kept), rewritten as it goes

    def write():
        nonlocal out
        text = report(results, resets, args, command, started, datetime.datetime.now().strftime("%H:%M"), vers)
        if args.out and out is None:
            out = harness.write_kept(args.out, text)
            log(f"writing {out}")
        elif out is not None:
            out.write_text(text)
        return text

    write()  # the side-by-side alone first: the reset measurement of ant compiles for a while
    for name in [c for c in args.resets.split(",") if c]:
        path, overrides = reset_cases[name]
        resets.append(reset_share(path, overrides, args.reset_repeats, args.reset_rounds, log))
        write()
    print(write())


if __name__ == "__main__":
    main()
