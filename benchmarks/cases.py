"""The timing suite's cases, in the order they run: `CASES` at the end lists them.

Each `Case(...)` below is one case: its sizes for --quick and for the full run, and a
function from those sizes to groups of contenders (see benchmarks/harness.py).
Everything runs in this process on JAX's default device (one CPU device here: no
--xla_force_host_platform_device_count), one program per contender.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import purejaxppo as ppo
from benchmarks.harness import Case, Contender, Comparison, PeerProcess, Prepared, Skip, compile_timed, plot_title
from purejaxppo.experiments.runs import progress_chunk
from purejaxppo.train import Learner

REPO = Path(__file__).resolve().parent.parent
CONFIGS = {"CartPole-v1": "configs/cartpole.yaml", "Breakout-MinAtar": "configs/minatar_breakout.yaml",
           "brax/fast": "configs/brax/fast.yaml"}


def load_cfg(env: str, updates: int, **overrides):
    """The env's config with total_timesteps = `updates` whole updates (a cell takes seconds)."""
    path = REPO / CONFIGS[env]
    try:
        base = ppo.load_config(str(path), overrides)
    except ppo.ConfigError as e:
        raise Skip(f"{env}: {e}") from e
    return ppo.load_config(str(path), {**overrides, "total_timesteps": updates * base.batch_size})


def env_available(env: str) -> str | None:
    """Why `env` cannot be built here, or None."""
    try:
        ppo.make_env(ppo.load_config(str(REPO / CONFIGS[env])))
    except Exception as e:  # noqa: BLE001 - e.g. brax not installed
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def keys_for(runs: int, seed: int = 0):
    return jax.random.split(jax.random.PRNGKey(seed), runs)


def final_return(out) -> float:
    return float(np.nanmean(np.asarray(out.metrics["episode_return"])[..., -1]))


_COMPILED: dict = {}  # (repr(cfg), runs) -> (compiled, compile_s): plain programs shared across cases


def vmapped_train(cfg, runs: int, **make_train_kwargs) -> Prepared:
    """`jax.jit(jax.vmap(make_train(cfg)))` on `runs` keys, compiled; steps = runs x updates x batch.
    Without make_train keywords the compiled program is shared by every cell of the same config and
    runs in this process (compiled once; each cell reports that one compile time, marked shared)."""
    keys = keys_for(runs)
    memo = None if make_train_kwargs else (repr(cfg), runs)
    shared = memo in _COMPILED
    if shared:
        compiled, compile_s = _COMPILED[memo]
    else:
        compiled, compile_s = compile_timed(jax.vmap(ppo.make_train(cfg, **make_train_kwargs)), keys)
        if memo is not None:
            _COMPILED[memo] = compiled, compile_s
    def run():
        jax.block_until_ready(compiled(keys))

    return Prepared(run, steps=runs * cfg.num_updates * cfg.batch_size, compile_s=compile_s,
                    info={"runs": runs, "num_updates": cfg.num_updates, "batch_size": cfg.batch_size,
                          "compiled_program_shared": shared})


# ======================================================================================
# a. scaling
def updates_for(budget_steps: int, runs: int, batch: int, min_updates: int) -> int:
    return max(min_updates, budget_steps // (runs * batch))


def scaling_groups(sizes):
    groups = []
    for env in sizes["envs"]:
        why = env_available(env)
        cap_hit = {}

        def build(env=env, runs=1, why=why, cap_hit=cap_hit):
            if why:
                raise Skip(f"{env} cannot be built here: {why}")
            overrides = sizes.get("overrides", {}).get(env, {})
            base = load_cfg(env, 1, **overrides)
            updates = updates_for(sizes["budget_steps"][env], runs, base.batch_size, sizes["min_updates"])
            steps = runs * updates * base.batch_size
            if cap_hit.get("over"):
                raise Skip(f"time cap: a run of {cap_hit['runs']} runs took {cap_hit['s']:.1f} s > {sizes['cap_s']} s")
            if cap_hit and sizes.get("cap_s"):
                # predicted at the previous point's steps/s (optimistic when throughput falls with runs)
                predicted = cap_hit["s"] * steps / cap_hit["steps"]
                if predicted > sizes["cap_s"]:
                    raise Skip(f"time cap: predicted {predicted:.0f} s per run (from {cap_hit['runs']} runs' "
                               f"{cap_hit['s']:.1f} s) > {sizes['cap_s']} s")
            prep = vmapped_train(load_cfg(env, updates, **overrides), runs)
            # the time cap: one untimed probe run for the larger points of the full suite
            if sizes.get("cap_s"):
                import time

                t = time.perf_counter()
                prep.run()
                took = time.perf_counter() - t
                prep.info["probe_s"] = took
                cap_hit.update(runs=runs, s=took, steps=prep.steps, over=took > sizes["cap_s"])
            return prep

        contenders = [Contender(f"{n} runs", f"jax.jit(jax.vmap(make_train(cfg))) on {n} keys",
                                functools.partial(build, runs=n)) for n in sizes["runs"]]
        overrides = sizes.get("overrides", {}).get(env, {})
        groups.append(Comparison(env, contenders, baseline=f"{sizes['runs'][0]} runs",
                            notes=[f"config {CONFIGS[env]}"
                                   + (f" with {overrides} (to fit the time budget)" if overrides else "")
                                   + ", total_timesteps per run cut to "
                                   f"max({sizes['min_updates']}, {sizes['budget_steps'][env]:,} / (runs x batch)) "
                                   "whole updates; steps/s counts all runs' env steps"],
                            params={"env": env, "runs": list(sizes["runs"])}))
    return groups


def scaling_plot(case, png, run):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401

    fig, ax = plt.subplots(figsize=(6, 4.2))
    drawn = False
    for g in case["groups"]:
        pts = [(c["info"]["runs"], c["steps_per_s"]) for c in g["cells"] if c["status"] == "ok"]
        if not pts:
            continue
        xs = [p[0] for p in pts]
        med = [p[1]["median"] for p in pts]
        err = [[m - p[1]["min"] for m, p in zip(med, pts)], [p[1]["max"] - m for m, p in zip(med, pts)]]
        ax.errorbar(xs, med, yerr=err, marker="o", capsize=3, label=g["name"])
        loaded = [(x, m) for x, m, c in zip(xs, med, [c for c in g["cells"] if c["status"] == "ok"]) if c["loaded"]]
        if loaded:
            ax.scatter(*zip(*loaded), s=120, facecolors="none", edgecolors="red")
        drawn = True
    if not drawn:
        raise ValueError("nothing measured")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("parallel runs (vmapped seeds)")
    ax.set_ylabel("env steps/s, compile excluded (median, range)")
    ax.set_title(plot_title("scaling", run, "red ring: loaded cell"), fontsize=7)
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def scaling_summary(result):
    lines = []
    for g in result["groups"]:
        ok = [c for c in g["cells"] if c["status"] == "ok"]
        if not ok:
            reasons = "; ".join(sorted({c.get("reason", "") for c in g["cells"]}))
            lines.append(f"- {g['name']}: not measured ({reasons})")
            continue
        pts = ", ".join(f"{c['info']['runs']}: {c['steps_per_s']['median']:,.0f}" for c in ok)
        first, last = ok[0], ok[-1]
        gain = last["steps_per_s"]["median"] / first["steps_per_s"]["median"]
        comp = ", ".join(f"{c['info']['runs']}: {c['compile_s']:.1f} s" for c in ok)
        lines.append(f"- {g['name']}: steps/s by runs {pts} ({gain:.1f}x from {first['info']['runs']} to "
                     f"{last['info']['runs']} runs); compile {comp}")
    return "\n".join(lines)


SCALING = Case(
    name="scaling",
    title="env steps/s against parallel runs (compile excluded)",
    sizes={"quick": {"envs": ["CartPole-v1", "Breakout-MinAtar", "brax/fast"], "runs": [1, 16],
                     "budget_steps": {"CartPole-v1": 65536, "Breakout-MinAtar": 16384, "brax/fast": 32768},
                     "overrides": {"Breakout-MinAtar": {"num_envs": 16}},
                     "min_updates": 1, "cap_s": None},
           "full": {"envs": ["CartPole-v1", "Breakout-MinAtar", "brax/fast"], "runs": [1, 4, 16, 64, 256, 1024],
                    "budget_steps": {"CartPole-v1": 1_048_576, "Breakout-MinAtar": 131_072, "brax/fast": 262_144},
                    "min_updates": 4, "cap_s": 60},
           "gpu": {"envs": ["CartPole-v1", "Breakout-MinAtar"], "runs": [1, 256, 2048, 8192],
                   "budget_steps": {"CartPole-v1": 2**25, "Breakout-MinAtar": 2**23},
                   "min_updates": 4, "cap_s": 30}},
    groups=scaling_groups, plot=scaling_plot, summarize=scaling_summary,
    explain="Each point: `jax.jit(jax.vmap(purejaxppo.make_train(cfg)))` on `jax.random.split(key, runs)`, "
            "one program; per-run timesteps shrink as runs grow (a cell takes seconds), steps/s counts every "
            "run's env steps. Ratios: speed against 1 run (steps/s ratio). Full mode stops adding points once "
            "one untimed probe run of a point exceeds the time cap (later points reported as skipped).")


# ======================================================================================
# b. limit: the environment alone and the networks alone against the full update
def env_alone(cfg, runs: int) -> Prepared:
    """num_updates x num_steps vmapped AutoReset steps of num_envs x runs envs, random actions."""
    env = ppo.make_env(cfg)
    space = env.action_space
    if space.kind != "discrete":
        raise Skip("random actions implemented for discrete action spaces only")
    n_envs, length = cfg.num_envs * runs, cfg.num_updates * cfg.num_steps

    def program(key):
        reset_key, key = jax.random.split(key)
        obs, state = jax.vmap(env.reset)(jax.random.split(reset_key, n_envs))

        def step(carry, key):
            state, total = carry
            act_key, step_key = jax.random.split(key)
            action = jax.random.randint(act_key, (n_envs,), 0, space.num_actions)
            obs, state, reward, *_ = jax.vmap(env.step)(jax.random.split(step_key, n_envs), state, action)
            return (state, total + reward.sum()), None

        (state, total), _ = jax.lax.scan(step, (state, jnp.float32(0)), jax.random.split(key, length))
        return total

    key = jax.random.PRNGKey(0)
    compiled, compile_s = compile_timed(program, key)
    return Prepared(lambda: jax.block_until_ready(compiled(key)), steps=n_envs * length, compile_s=compile_s,
                    info={"runs": runs})


def synthetic_batch(cfg, key, obs_shape, n_actions) -> dict:
    """A batch of single steps of the rollout's shape (batch_size), as `Learner._epoch` takes it:
    random observations, actions and advantages; no env, no rollout."""
    k_obs, k_act, k_adv = jax.random.split(key, 3)
    b = cfg.batch_size
    return {"obs": jax.random.normal(k_obs, (b, *obs_shape)), "action": jax.random.randint(k_act, (b,), 0, n_actions),
            "old_log_prob": jnp.full((b,), -math.log(n_actions)), "old_value": jnp.zeros((b,)),
            "advantage": jax.random.normal(k_adv, (b,)), "target": jnp.zeros((b,)),
            "done": jnp.zeros((b,), bool), "carry": ()}


def networks_alone(cfg, runs: int) -> Prepared:
    """The learner's own epochs (`Learner._epoch`: shuffle, minibatch forward+backward, Adam) on a
    fixed synthetic batch of the rollout's shape, update_epochs x num_updates times per run, vmapped
    over runs; no env, no rollout forward passes, no GAE."""
    learner = Learner(cfg)
    obs0, _ = learner.env.reset(jax.random.PRNGKey(0))
    obs_shape = obs0.shape
    hp = ppo.HParams.from_config(cfg)
    n_actions = learner.env.action_space.num_actions

    def one_run(key):
        k_init, k_batch, k_loop = jax.random.split(key, 3)
        params, agent_state = learner.agent.init(k_init, obs0)  # single steps: an MLP policy
        opt_state = ppo.train.make_optimizer(1.0, 1.0).init(params)
        batch = synthetic_batch(cfg, k_batch, obs_shape, n_actions)

        def epoch(carry, key):
            params, opt_state = carry
            params, opt_state, _ = learner._epoch(params, opt_state, key, batch, agent_state, hp, hp.lr)
            return (params, opt_state), None

        (params, _), _ = jax.lax.scan(epoch, (params, opt_state),
                                      jax.random.split(k_loop, cfg.num_updates * cfg.update_epochs))
        return jax.tree.reduce(lambda a, x: a + jnp.sum(x), params, jnp.float32(0))

    keys = keys_for(runs)
    compiled, compile_s = compile_timed(jax.vmap(one_run), keys)
    return Prepared(lambda: jax.block_until_ready(compiled(keys)),
                    steps=runs * cfg.num_updates * cfg.batch_size, compile_s=compile_s, info={"runs": runs})


def xla_flops(fn, *args) -> float:
    """XLA's cost analysis of `fn` compiled on `args`: floating-point operations of one call.
    XLA counts a loop's body once, whatever its trip count: call it on loop-free pieces."""
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost.get("flops", float("nan")))


def network_flops_per_update(cfg) -> dict:
    """The networks' floating-point work in one update (MLP policies), from XLA's cost analysis of
    the update's pieces, each loop-free, times how often the update runs it:
    num_steps rollout policy passes on num_envs observations, update_epochs epochs of the whole
    batch's forward + backward + Adam (an epoch in one minibatch: the same work per sample, Adam
    once rather than num_minibatches times), and 2 passes on the whole batch (bootstrap values,
    post-update clip diagnostics). The environment's own arithmetic is not counted."""
    learner = Learner(cfg)
    state = learner.init(jax.random.PRNGKey(0))
    agent, key = learner.agent, jax.random.PRNGKey(1)
    carry = agent.carry(state.agent_state)
    act = xla_flops(lambda p, o: agent.act(p, state.agent_state, carry, o, key)[1:], state.params, state.obs)
    batch_obs = jnp.broadcast_to(state.obs, (cfg.num_steps, *state.obs.shape))
    forward = xla_flops(lambda p, o: agent.step(p, state.agent_state, carry, o)[1:], state.params, batch_obs)
    one_minibatch = Learner(dataclasses.replace(cfg, num_minibatches=1))
    batch = synthetic_batch(cfg, key, state.obs.shape[1:], learner.env.action_space.num_actions)
    hp = ppo.HParams.from_config(cfg)
    epoch = xla_flops(lambda p, o: one_minibatch._epoch(p, o, key, batch, state.agent_state, hp, hp.lr)[:2],
                      state.params, state.opt_state)
    epochs = cfg.update_epochs * epoch
    return {"per_update": cfg.num_steps * act + epochs + 2 * forward, "epochs_per_update": epochs,
            "rollout_pass": act, "epoch": epoch, "batch_forward": forward}


def matmul_peak_flops(n: int = 2048, repeats: int = 5) -> float:
    """The machine's attainable f32 rate: the best of `repeats` n x n matmuls (2 n^3 flops)."""
    import time

    a = jax.random.normal(jax.random.PRNGKey(0), (n, n))
    mm = jax.jit(jnp.dot).lower(a, a).compile()
    jax.block_until_ready(mm(a, a))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(mm(a, a))
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best


def limit_groups(sizes):
    peak = matmul_peak_flops()
    groups = []
    for env in sizes.get("envs", ["CartPole-v1"]):
        overrides = sizes.get("overrides", {}).get(env, {})
        updates = sizes.get("env_updates", {}).get(env, sizes["updates"])
        for runs in sizes.get("env_runs", {}).get(env, sizes["runs"]):
            cfg = load_cfg(env, updates, **overrides)
            group = limit_group(env, cfg, runs, overrides)
            group.params.update(peak_flops=peak, network_flops=network_flops_per_update(cfg),
                                updates=cfg.num_updates)
            groups.append(group)
    return groups


def limit_group(env, cfg, runs, overrides):
    return Comparison(
        f"{env}{f' {overrides}' if overrides else ''}, {runs} run(s)",
        [Contender("full update", "jax.jit(jax.vmap(make_train(cfg))): rollout, GAE, epochs, diagnostics",
                   lambda: vmapped_train(cfg, runs)),
         Contender("env alone", "jitted lax.scan over vmapped AutoReset env.step, random actions, same "
                   "num_envs x runs envs and num_updates x num_steps steps", lambda: env_alone(cfg, runs)),
         Contender("networks alone", "the learner's epochs (Learner._epoch: shuffle, minibatch forward+"
                   "backward, Adam) on a synthetic batch of the same shape, update_epochs x num_updates per run",
                   lambda: networks_alone(cfg, runs))],
        baseline="full update",
        notes=[f"{cfg.num_updates} updates x {cfg.num_envs} envs x {cfg.num_steps} steps, "
               f"{cfg.update_epochs} epochs x {cfg.num_minibatches} minibatches of "
               f"{cfg.batch_size // cfg.num_minibatches}"],
        params={"runs": runs, "env": env})


def limit_summary(result):
    lines = []
    for g in result["groups"]:
        cells = {c["contender"]: c for c in g["cells"] if c["status"] == "ok"}
        if "full update" not in cells:
            lines.append(f"- {g['name']}: full update not measured")
            continue
        parts, shares = [], {}
        for name in ("env alone", "networks alone"):
            if name in cells:
                shares[name] = cells[name]["time_vs_baseline"]["median"]
                parts.append(f"{name} takes {shares[name]:.0%} of the full update's time")
        rest = 1 - sum(shares.values())
        bound = max(shares, key=shares.get) if shares else None
        lines.append(f"- {g['name']}: " + "; ".join(parts)
                     + (f"; the rest (rollout policy passes, GAE, shuffles, diagnostics, overlap) {rest:.0%}. "
                        f"Bound: **{bound.split()[0]}**" if bound else ""))
        p = g["params"]
        if "network_flops" in p:
            flops = p["network_flops"]
            work = {"full update": flops["per_update"], "networks alone": flops["epochs_per_update"]}
            rates = {n: work[n] * p["updates"] * p["runs"] / cells[n]["time_s"]["median"] for n in work if n in cells}
            lines.append(f"  - FLOPs (XLA's cost analysis): the networks do {flops['per_update'] / 1e6:,.1f} MFLOP per "
                         f"update and run, {flops['epochs_per_update'] / 1e6:,.1f} of them in the epochs; "
                         + ", ".join(f"{n} {r / 1e9:.2f} GFLOP/s = {r / p['peak_flops']:.1%}" for n, r in rates.items())
                         + f" of the machine's attainable f32 rate ({p['peak_flops'] / 1e9:.0f} GFLOP/s, "
                           "best 2048x2048 matmul)")
    return "\n".join(lines)


LIMIT = Case(
    name="limit",
    title="the environment alone and the networks alone against the full update (CartPole; full: + Breakout)",
    sizes={"quick": {"envs": ["CartPole-v1"], "runs": [4], "updates": 32},
           "full": {"envs": ["CartPole-v1", "Breakout-MinAtar"], "runs": [1, 16], "updates": 100,
                    "env_updates": {"Breakout-MinAtar": 2}, "env_runs": {"Breakout-MinAtar": [1, 4]}},
           "gpu": {"envs": ["CartPole-v1"], "runs": [2048], "updates": 100}},
    groups=limit_groups, ratio="share", summarize=limit_summary,
    explain="Same env steps in each contender of a group. The ratio column is each contender's time as a "
            "fraction of the full update's (per round, median). The larger of env / networks bounds the case.")


# ======================================================================================
# c. fusion: a Python loop over a jitted one-update function against the fused program
def fusion_group(sizes, runs):
    cfg = load_cfg("CartPole-v1", sizes["updates"])
    learner = Learner(cfg)
    keys = keys_for(runs)
    init = jax.jit(jax.vmap(learner.init))
    state0 = jax.block_until_ready(init(keys))
    results = {}

    def loop_build():
        one, compile_s = compile_timed(jax.vmap(lambda s: learner.run(s, None, 1)), state0)

        def run():
            s = state0
            for _ in range(cfg.num_updates):
                s, _ = one(s)
            results["loop"] = jax.block_until_ready(s)

        run()
        return Prepared(run, steps=runs * cfg.num_updates * cfg.batch_size, compile_s=compile_s,
                        info={"runs": runs, "dispatches_per_run": cfg.num_updates})

    def fused_build():
        fused, compile_s = compile_timed(jax.vmap(lambda s: learner.run(s, None, cfg.num_updates)), state0)

        def run():
            results["fused"] = jax.block_until_ready(fused(state0)[0])

        run()
        info = {"runs": runs}
        if "loop" in results:
            a = jax.tree.leaves(results["loop"].params)
            b = jax.tree.leaves(results["fused"].params)
            diff = max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(a, b))
            info["max_abs_param_diff"] = diff
            ok = all(np.allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-5) for x, y in zip(a, b))
            info["params_agree"] = ok
            assert ok, f"fused and looped final params differ (max abs diff {diff:.3g})"
        return Prepared(run, steps=runs * cfg.num_updates * cfg.batch_size, compile_s=compile_s, info=info)

    return Comparison(f"CartPole-v1, {runs} run(s)",
                 [Contender("python loop", f"jitted vmap(Learner.run(state, None, 1)) called {cfg.num_updates} "
                            "times from Python", loop_build),
                  Contender("fused", f"jitted vmap(Learner.run(state, None, {cfg.num_updates})): one program",
                            fused_build)],
                 baseline="python loop",
                 notes=[f"{cfg.num_updates} updates x {cfg.batch_size} steps per run, from the same initial state "
                        "(init compiled and run apart, untimed); final params compared after the first run of each "
                        "(rtol 1e-4, atol 1e-5)"], params={"runs": runs})


def fusion_summary(result):
    lines = []
    for g in result["groups"]:
        cells = {c["contender"]: c for c in g["cells"]}
        f = cells.get("fused", {})
        if f.get("status") != "ok":
            lines.append(f"- {g['name']}: fused {f.get('status')}: {f.get('reason', '')}")
            continue
        lines.append(f"- {g['name']}: fused is {f['speed_vs_baseline']['median']:.2f}x the loop's steps/s; "
                     f"params agree: {f['info'].get('params_agree')} (max abs diff "
                     f"{f['info'].get('max_abs_param_diff', float('nan')):.2g})")
    return "\n".join(lines)


FUSION = Case(
    name="fusion",
    title="what fusion buys: a Python loop of jitted one-update calls against the fused program",
    sizes={"quick": {"runs": [1], "updates": 100}, "full": {"runs": [1, 16], "updates": 200}},
    groups=lambda sizes: [fusion_group(sizes, r) for r in sizes["runs"]], summarize=fusion_summary)


# ======================================================================================
# e. overheads
def chunked_train(cfg, runs: int, chunk: int) -> Prepared:
    """What the CLI runs for live progress: `Learner.run` of `chunk` updates called from Python
    until the run is done (a shorter last chunk is a program of its own, as in runs.execute),
    the host reading every run's last return after each chunk."""
    learner = Learner(cfg)
    state0 = jax.block_until_ready(jax.jit(jax.vmap(learner.init))(keys_for(runs)))
    sizes = [chunk] * (cfg.num_updates // chunk) + ([cfg.num_updates % chunk] if cfg.num_updates % chunk else [])
    programs, compile_s = {}, 0.0
    for size in sorted(set(sizes)):
        programs[size], seconds = compile_timed(jax.vmap(lambda s, size=size: learner.run(s, None, size)), state0)
        compile_s += seconds

    def run():
        state = state0
        for size in sizes:
            state, _ = programs[size](state)
            np.asarray(state.last_episode_return)
        jax.block_until_ready(state)

    return Prepared(run, steps=runs * cfg.num_updates * cfg.batch_size, compile_s=compile_s,
                    info={"runs": runs, "chunks": len(sizes), "programs": len(programs)})


def overhead_groups(sizes):
    return [overhead_group(sizes, runs) for runs in sizes["runs"]]


def overhead_group(sizes, runs):
    plain = load_cfg("CartPole-v1", sizes["updates"])
    masked = load_cfg("CartPole-v1", sizes["updates"], max_epochs=10, update_epochs=4)
    chunk = progress_chunk(plain.num_updates)

    return Comparison(f"CartPole-v1, {runs} run(s)",
                 [Contender("plain (compiled for 4 epochs)", "make_train(cfg), update_epochs=4, max_epochs null",
                            lambda: vmapped_train(plain, runs)),
                  Contender("max_epochs=10 running 4", "make_train(cfg), max_epochs=10, update_epochs=4 "
                            "(6 masked epochs per update)", lambda: vmapped_train(masked, runs)),
                  Contender("progress from the host", f"the CLI's way: chunks of {chunk} updates "
                            "(runs.progress_chunk, a shorter last one if they do not divide the run), "
                            "the host reading the returns after each",
                            lambda: chunked_train(plain, runs, chunk))],
                 baseline="plain (compiled for 4 epochs)",
                 notes=[f"{plain.num_updates} updates x {plain.batch_size} steps per run; ratio < 1: slower "
                        "than plain"], params={"runs": runs})


def overhead_summary(result):
    lines = []
    for g in result["groups"]:
        for c in g["cells"]:
            if c["status"] == "ok" and "speed_vs_baseline" in c:
                s = c["speed_vs_baseline"]["median"]
                lines.append(f"- {g['name']}: {c['contender']}: {s:.2f}x plain's steps/s "
                             f"({(1 / s - 1):+.0%} time)")
    return "\n".join(lines)


OVERHEADS = Case(
    name="overheads",
    title="overheads: max_epochs 10 running 4 vs compiled for 4; progress from the host",
    sizes={"quick": {"runs": [4], "updates": 32}, "full": {"runs": [1, 16], "updates": 128}},
    groups=overhead_groups, summarize=overhead_summary)


# ======================================================================================
# d. peers: the same PPO on CartPole-v1 in PureJaxRL, rejax and Stable-Baselines3, side by side
PEER_SCRIPT = Path(__file__).resolve().parent / "peer.py"
# name -> (what, the venv variable and its default, the module its python must import, extra PYTHONPATH)
PEER_KINDS = {
    "ours": ("purejaxppo, jax.jit(jax.vmap(make_train(cfg))) on one device, compiled with "
             "purejaxppo.compiler_options() (the CLI's)", None, "purejaxppo", ()),
    "ours-cores": ("purejaxppo, the seed axis sharded over one host device per core (ShardedRuns: the CLI's path)",
                   None, "purejaxppo", ()),
    "pjrl": ("PureJaxRL's purejaxrl/ppo.py make_train, jax.jit(jax.vmap(train)) on one device, its own venv",
             ("PJRL_VENV", "/work/venv-pjrl"), "purejaxrl", ("PJRL_REPO", "/work/pjrl")),
    "rejax": ("rejax's PPO (constant lr: rejax has no annealing), jax.jit(jax.vmap(algo.train)), its own venv",
              ("REJAX_VENV", "/work/venv-rejax"), "rejax", None),
    "sb3": ("Stable-Baselines3 PPO (PyTorch, CPU) on gymnasium CartPole-v1, 4 DummyVecEnv envs, one run",
            ("SB3_VENV", "/work/venv-sb3"), "stable_baselines3", None),
    "ours-brax": ("purejaxppo on a Brax config, jax.jit(jax.vmap(make_train(cfg))), one seed", None, "brax", ()),
    "brax-trainer": ("Brax's own PPO trainer (brax.training.agents.ppo.train), the same settings, one seed; "
                     "time: 3 x its own compile-free epoch time", None, "brax", ()),
}


def peer_python(name: str) -> tuple[str, dict]:
    """The interpreter that runs peer `name` and its environment; Skip (saying how to set it up) if none."""
    import importlib.util
    import os
    import sys

    _, venv, module, path = PEER_KINDS[name]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if path:  # PureJaxRL: a checkout, not a package; its ppo.py does `from wrappers import ...`
        repo = os.environ.get(path[0], path[1])
        if not Path(repo, "purejaxrl", "ppo.py").is_file():
            raise Skip(f"no PureJaxRL checkout at {repo} (set {path[0]}; see benchmarks/README.md)")
        env["PYTHONPATH"] = os.pathsep.join([repo, str(Path(repo, "purejaxrl")), env["PYTHONPATH"]])
    if venv:
        root = os.environ.get(venv[0], venv[1])
        python = Path(root, "bin", "python")
        if python.is_file():
            return str(python), env
        if importlib.util.find_spec(module) is None:
            raise Skip(f"{module} is not installed here and there is no venv at {root} "
                       f"(set {venv[0]}; see benchmarks/README.md)")
    elif importlib.util.find_spec(module) is None:
        raise Skip(f"{module} is not installed here")
    return sys.executable, env


def peer_contender(name: str, seeds: int, timesteps: int, settings: dict | None = None) -> Contender:
    settings = {"total_timesteps": timesteps} if settings is None else settings

    def build():
        python, env = peer_python(name)
        proc = PeerProcess([python, str(PEER_SCRIPT), "--kind", name, "--seeds", str(seeds),
                            "--settings", json.dumps(settings)], env=env, cwd=str(REPO))
        return proc.prepare(steps=seeds * timesteps, info={"runs": seeds, "total_timesteps": timesteps,
                                                           "python": python})

    return Contender(name, PEER_KINDS[name][0], build)


def peer_groups(sizes):
    groups = []
    for seeds in sizes["seeds"]:
        names = [n for n in sizes["contenders"] if seeds > 1 or n != "ours-cores"]  # 1 seed: ours-cores is ours
        names = [n for n in names if seeds == 1 or n != "sb3"]  # SB3 trains one run per process
        steps = {n: sizes["sb3_timesteps"] if n == "sb3" else sizes["timesteps"][str(seeds)] for n in names}
        groups.append(Comparison(
            f"CartPole-v1, {seeds} seed(s)", [peer_contender(n, seeds, steps[n]) for n in names], baseline="pjrl",
            notes=[f"the classic CartPole setting for every peer (benchmarks/peer.py SETTINGS: 4 envs x 128 steps, "
                   f"4 epochs x 4 minibatches, tanh 64x64); {sizes['timesteps'][str(seeds)]:,} steps per seed"
                   + (f", SB3 {sizes['sb3_timesteps']:,} (its speed is steps/s over its own steps)"
                      if "sb3" in names else ""),
                   "each peer is its own process (benchmarks/peer.py), compiled once, then run on request in "
                   "interleaved rounds; times are measured inside the process; final return: the mean return of "
                   "the episodes that ended in the last update (rejax: its final evaluation; SB3: its last 100 "
                   "episodes)"],
            params={"runs": seeds}))
    if sizes.get("brax_updates"):
        from benchmarks.brax_side_by_side import EPOCHS

        base = load_cfg("brax/fast", 1)
        updates = sizes["brax_updates"] - sizes["brax_updates"] % EPOCHS
        settings = {"config": str(REPO / CONFIGS["brax/fast"]), "updates": updates}
        contenders = [peer_contender(n, 1, updates * base.batch_size, settings) for n in ("ours-brax", "brax-trainer")]
        groups.append(Comparison(
            "brax/fast, 1 seed", contenders, baseline="brax-trainer",
            notes=[f"configs/brax/fast.yaml, {updates} updates x {base.batch_size} steps, its settings mapped onto "
                   "Brax's trainer as benchmarks/brax_side_by_side.py maps them (there: what differs); Brax's time is "
                   "its own measurement of training without compile (it compiles on every call)"],
            params={"runs": 1}))
    return groups


def peer_summary(result):
    lines = []
    for g in result["groups"]:
        parts = []
        for c in g["cells"]:
            if c["status"] != "ok":
                parts.append(f"{c['contender']} {c['status']} ({c.get('reason', '')})")
            elif "speed_vs_baseline" in c:
                parts.append(f"{c['contender']} {c['speed_vs_baseline']['median']:.2f}x")
        rets = ", ".join(f"{c['contender']} {c['info'].get('final_return', float('nan')):.1f}"
                         for c in g["cells"] if c["status"] == "ok")
        lines.append(f"- {g['name']}: steps/s against {g['baseline']}: {'; '.join(parts)}. Final return: {rets}")
    return "\n".join(lines)


PEERS = Case(
    name="peers",
    title="peers side by side: PureJaxRL, rejax, Stable-Baselines3 on CartPole-v1; full: Brax's trainer on brax/fast",
    sizes={"quick": {"seeds": [1, 16], "timesteps": {"1": 65536, "16": 16384}, "sb3_timesteps": 8192,
                     "contenders": ["ours", "ours-cores", "pjrl", "rejax", "sb3"]},
           "full": {"seeds": [1, 64], "timesteps": {"1": 500_000, "64": 32768}, "sb3_timesteps": 65536,
                    "contenders": ["ours", "ours-cores", "pjrl", "rejax", "sb3"], "brax_updates": 96}},
    groups=peer_groups, summarize=peer_summary,
    explain="Ratios: each peer's steps/s against the group's baseline (PureJaxRL; Brax's trainer for brax/fast) in "
            "the same round (> 1: faster). "
            "A peer that is not installed here or fails is reported as skipped with the reason.")


# ======================================================================================
# the headline: many whole CartPole runs at once, wall time including compile
def headline_groups(sizes):
    cfg = load_cfg("CartPole-v1", ppo.load_config(str(REPO / CONFIGS["CartPole-v1"])).num_updates)
    runs = sizes["runs"]
    return [Comparison(f"CartPole-v1, {runs} seeds x {cfg.num_updates * cfg.batch_size:,} steps",
                  [Contender(f"{runs} runs", f"jax.jit(jax.vmap(make_train(cfg))) on {runs} keys, configs/cartpole.yaml",
                             lambda: vmapped_train(cfg, runs))],
                  notes=["whole runs at the shipped CartPole config (5e5 steps each); wall = compile + one run"],
                  params={"runs": runs, "target_s": sizes.get("target_s")})]


def headline_summary(result):
    lines = []
    for g in result["groups"]:
        c = g["cells"][0]
        if c["status"] != "ok":
            lines.append(f"- {g['name']}: {c['status']} ({c.get('reason', '')})")
            continue
        wall = c["compile_s"] + c["time_s"]["median"]
        target = g["params"].get("target_s")
        lines.append(f"- {g['name']}: compile {c['compile_s']:.1f} s + run {c['time_s']['median']:.1f} s = "
                     f"**{wall:.1f} s** ({c['steps_per_s']['median']:,.0f} env steps/s)"
                     + (f"; target under {target} s: {'met' if wall < target else 'NOT met'} (PureJaxRL reports "
                        "about 98 s for 2048 seeds on an A100)" if target else ""))
    return "\n".join(lines)


HEADLINE = Case(
    name="headline",
    title="many whole CartPole runs at once (GPU: 2048 seeds x 5e5 steps), wall time including compile",
    sizes={"full": {"runs": 8}, "gpu": {"runs": 2048, "target_s": 30}},
    groups=headline_groups, summarize=headline_summary)


# every case, in the order `python -m benchmarks` runs them (--cases picks some by name)
CASES = [SCALING, LIMIT, FUSION, OVERHEADS, PEERS, HEADLINE]
