"""One PPO update, ours against PureJaxRL's, by phase: kernels in the optimised HLO and time.

Run by each library's own interpreter (as benchmarks/peer.py is), on the classic CartPole
setting (peer.SETTINGS):

    PYTHONPATH=. python benchmarks/profile_update.py --kind ours --json /tmp/ours.json
    PYTHONPATH=.:$PJRL_REPO:$PJRL_REPO/purejaxrl $PJRL_VENV/bin/python benchmarks/profile_update.py \
        --kind pjrl --json /tmp/pjrl.json
    python benchmarks/profile_update.py --table /tmp/ours.json /tmp/pjrl.json

Kernels: every loop (`while`) of the compiled `jax.jit(jax.vmap(train))`, named by its trip
count and nesting (updates > rollout / GAE / epochs > minibatches), with the instructions its
body runs on each trip: fusions (one kernel each on a CPU), other ops that do work (dots,
copies, sorts, ...; not parameters, tuples, bitcasts, constants), and copies among them.
Time: T(epochs) = a + b * epochs per update, from runs at update_epochs 2 and 8 (interleaved,
median of rounds; not 1: a scan of one trip compiles into another program): b is one epoch
(shuffle + minibatch steps), a the rest (rollout, GAE,
diagnostics, bookkeeping). `--pieces` (ours) also times the rollout and GAE alone.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "partition-id",
        "replica-id", "opt-barrier", "add-dependency"}
OPCODE = re.compile(r"=\s.*?\s([a-z][a-z0-9\-]*)\(")


def computations(hlo: str) -> dict[str, list[str]]:
    """The HLO module's computations: name -> its instruction lines."""
    comps, name = {}, None
    for line in hlo.splitlines():
        if not line.startswith(" ") and line.rstrip().endswith("{") and "(" in line:
            name = line.split()[1 if line.startswith("ENTRY") else 0].lstrip("%")
            comps[name] = []
        elif name and line.startswith("  ") and " = " in line:
            comps[name].append(line.strip())
    return comps


def opcode(line: str) -> str:
    m = OPCODE.search(line)
    return m.group(1) if m else "?"


def called_computations(line: str) -> list[str]:
    """The computations a call or conditional runs (not a fusion's, which is one kernel)."""
    names = re.findall(r"(?:to_apply|true_computation|false_computation)=%?([\w.\-]+)", line)
    branches = re.search(r"branch_computations=\{([^}]*)\}", line)
    if branches:
        names += [b.strip().lstrip("%") for b in branches.group(1).split(",")]
    return names


def trip_count(line: str) -> int | None:
    m = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
    return int(m.group(1)) if m else None


def loop_table(hlo: str) -> list[dict]:
    """Every while loop: depth, trip count, per-trip fusions / working ops / copies of its body
    (with the conditionals and calls it makes, not the loops nested in it)."""
    comps = computations(hlo)
    entry = next(n for n in comps if n.startswith("main") or "ENTRY" in n) if comps else None
    for line in hlo.splitlines():
        if line.startswith("ENTRY"):
            entry = line.split()[1].lstrip("%")
    loops = []

    def visit(name: str, depth: int, counts: dict):
        for line in comps.get(name, []):
            op = opcode(line)
            if op == "while":
                body = re.search(r"body=%?([\w.\-]+)", line).group(1)
                sub = {"depth": depth + 1, "trips": trip_count(line), "fusions": 0, "ops": 0, "copies": 0,
                       "order": len(loops), "body": body}
                loops.append(sub)
                visit(body, depth + 1, sub)
                continue
            if op in FREE:
                continue
            counts["ops"] += 1
            counts["fusions"] += op == "fusion"
            counts["copies"] += op == "copy"
            if op in ("conditional", "call"):
                counts["ops"] -= 1
                for called in called_computations(line):
                    if called in comps:
                        visit(called, depth, counts)

    top = {"depth": 0, "trips": 1, "fusions": 0, "ops": 0, "copies": 0, "order": -1, "body": entry}
    visit(entry, 0, top)
    return [top] + loops


def name_loops(loops: list[dict], updates: int, num_steps: int, epochs: int, minibatches: int) -> list[dict]:
    """Names the loops of one PPO program: updates, rollout (the first loop of num_steps under
    it), GAE (the second), epochs, minibatches; others by their trip count (x5: threefry's
    rounds, drawing random bits)."""
    seen_steps = 0
    for lp in loops:
        if lp["depth"] == 0:
            lp["name"] = "program (outside every loop)"
        elif lp["depth"] == 1:
            lp["name"] = "updates" if lp["trips"] == updates else f"outside the updates: loop x{lp['trips']}"
        elif lp["trips"] == 5:  # threefry's five rounds: random bits
            lp["name"] = "random bits (threefry loops)"
        elif lp["depth"] == 2 and lp["trips"] == num_steps and not seen_steps:
            lp["name"] = "rollout step"
            seen_steps += 1
        elif lp["depth"] == 2 and lp["trips"] == epochs:
            lp["name"] = "epoch"
        elif lp["depth"] == 2:  # the reverse scan (PureJaxRL's is unrolled 16 steps a trip)
            lp["name"] = "GAE step" if lp["trips"] == num_steps else f"GAE, {num_steps // lp['trips']} steps a trip"
        elif lp["trips"] == minibatches and lp["depth"] == 3:
            lp["name"] = "minibatch step"
        else:
            lp["name"] = f"loop x{lp['trips']} (depth {lp['depth']})"
    return loops


def per_update(loops: list[dict]) -> int:
    """Working ops run per update: each loop's body x its trips x the trips of loops above it
    (within one update)."""
    total, stack = 0, []
    for lp in loops:
        if lp["depth"] < 2:
            if lp["name"] == "updates":
                total += lp["ops"]
            continue
        while stack and stack[-1]["depth"] >= lp["depth"]:
            stack.pop()
        mult = lp["trips"] or 1
        for above in stack:
            mult *= above["trips"] or 1
        total += lp["ops"] * mult
        stack.append(lp)
    return total


# --------------------------------------------------------------------------------------
def build(kind: str, settings: dict, seeds: int):
    """-> (train(key), compile options) for one library on `settings`."""
    if kind == "ours":
        import purejaxppo as ppo
        from benchmarks.peer import ours_config

        return ppo.make_train(ours_config(settings)), ppo.compiler_options()
    from purejaxrl.ppo import make_train  # PureJaxRL's checkout on PYTHONPATH

    config = {"LR": settings["lr"], "NUM_ENVS": settings["num_envs"], "NUM_STEPS": settings["num_steps"],
              "TOTAL_TIMESTEPS": settings["total_timesteps"], "UPDATE_EPOCHS": settings["update_epochs"],
              "NUM_MINIBATCHES": settings["num_minibatches"], "GAMMA": settings["gamma"],
              "GAE_LAMBDA": settings["gae_lambda"], "CLIP_EPS": settings["clip_eps"],
              "ENT_COEF": settings["ent_coef"], "VF_COEF": settings["vf_coef"],
              "MAX_GRAD_NORM": settings["max_grad_norm"], "ACTIVATION": settings["activation"],
              "ENV_NAME": settings["env"], "ANNEAL_LR": settings["anneal_lr"]}
    return make_train(config), None


def compiled_program(kind, settings, seeds):
    import jax

    train, options = build(kind, settings, seeds)
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    start = time.perf_counter()
    compiled = jax.jit(jax.vmap(train), compiler_options=options).lower(keys).compile()
    return compiled, keys, time.perf_counter() - start


def main(argv=None) -> int:
    from benchmarks.peer import SETTINGS

    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=["ours", "pjrl"])
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--updates", type=int, default=128, help="updates per timed run")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    p.add_argument("--hlo", help="write the optimised HLO of the program here")
    p.add_argument("--trace", default="/tmp/profile-update-trace", help="profiler folder (overwritten)")
    p.add_argument("--table", nargs="+", help="print the markdown tables of these --json results")
    a = p.parse_args(argv)
    if a.table:
        print(tables([json.loads(Path(f).read_text()) for f in a.table]))
        return 0
    import jax

    batch = SETTINGS["num_envs"] * SETTINGS["num_steps"]
    base = {**SETTINGS, "total_timesteps": a.updates * batch}
    compiled, keys, compile_s = compiled_program(a.kind, base, a.seeds)
    hlo = compiled.as_text()
    if a.hlo:
        Path(a.hlo).write_text(hlo)
    loops = name_loops(loop_table(hlo), a.updates, SETTINGS["num_steps"], SETTINGS["update_epochs"],
                       SETTINGS["num_minibatches"])
    fusions_total = sum(1 for ops in computations(hlo).values() for line in ops if opcode(line) == "fusion")

    programs = {e: compiled_program(a.kind, {**base, "update_epochs": e}, a.seeds)[:2] for e in (2, 4, 8)}
    for c, k in programs.values():  # warm-up
        jax.block_until_ready(c(k))
    times = {e: [] for e in programs}
    for _ in range(a.rounds):
        for e, (c, k) in programs.items():
            start = time.perf_counter()
            jax.block_until_ready(c(k))
            times[e].append((time.perf_counter() - start) / a.updates)
    t2, t4, t8 = (statistics.median(times[e]) for e in (2, 4, 8))
    b = (t8 - t2) / 6
    result = {"kind": a.kind, "seeds": a.seeds, "compile_s": compile_s, "fusions_in_module": fusions_total,
              "loops": loops, "ops_per_update": per_update(loops),
              "update_ms": {"epochs_4": t4 * 1e3, "epochs_2": t2 * 1e3, "epochs_8": t8 * 1e3,
                            "per_epoch": b * 1e3, "rest": (t2 - 2 * b) * 1e3,
                            "rounds": {e: [t * 1e3 for t in ts] for e, ts in times.items()}},
              "jax": jax.__version__}
    result["traced_per_update"] = traced(compiled, keys, hlo, loops, a.updates, a.trace)
    if a.kind == "ours":
        result["pieces_ms"] = pieces(base, a.seeds, a.rounds)
    text = json.dumps(result, indent=1)
    if a.json:
        Path(a.json).write_text(text)
    print(text)
    return 0


def traced(compiled, keys, hlo: str, loops: list[dict], updates: int, folder: str) -> dict:
    """One execution under JAX's profiler: per loop, the thunks (kernels) XLA's CPU runtime ran
    in its body per update (nested loops apart) and their time as traced (the tracer adds about
    a microsecond to each, so read the times as relative)."""
    import collections
    import glob
    import shutil

    import jax
    from jax.profiler import ProfileData

    shutil.rmtree(folder, ignore_errors=True)
    with jax.profiler.trace(folder):
        jax.block_until_ready(compiled(keys))
    data = ProfileData.from_file(glob.glob(f"{folder}/**/*.xplane.pb", recursive=True)[0])
    owner = {}
    for name, lines in computations(hlo).items():
        for line in lines:
            if opcode(line) not in ("while", "call", "conditional"):  # their time is their bodies'
                owner[line.split(" = ")[0].lstrip("%").strip()] = name
    count, ns = collections.Counter(), collections.Counter()
    for plane in data.planes:
        for line in plane.lines:
            if "XLAEigen" in line.name:
                for event in line.events:
                    if event.name in owner:
                        count[owner[event.name]] += 1
                        ns[owner[event.name]] += event.duration_ns
    out = collections.defaultdict(lambda: {"thunks": 0.0, "ms": 0.0})
    for lp in loops:
        if lp["name"].startswith(("outside", "program")):
            continue
        key = lp["name"]
        out[key]["thunks"] += count[lp["body"]] / updates
        out[key]["ms"] += ns[lp["body"]] / 1e6 / updates
    return dict(out)


def pieces(settings: dict, seeds: int, rounds: int) -> dict:
    """Ours only: the rollout, GAE and the update's extra passes timed alone (ms per update)."""
    import functools

    import jax

    import purejaxppo as ppo
    from benchmarks.peer import ours_config
    from purejaxppo.gae import gae
    from purejaxppo.rollout import rollout
    from purejaxppo.train import Learner

    cfg = ours_config(settings)
    learner = Learner(cfg)
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    states = jax.vmap(learner.init)(keys)
    hp = ppo.HParams.from_config(cfg)

    def do_rollout(state):
        policy = functools.partial(learner.agent.act, state.params, state.agent_state)
        return rollout(learner.env, policy, state.env_state, state.obs, state.key, cfg.num_steps,
                       resets=learner.env.reset_strategy, carry=learner.agent.carry(state.agent_state),
                       initial_carry=learner.agent.initial_carry(cfg.num_envs))[3]

    trajs = jax.jit(jax.vmap(do_rollout))(states)

    def do_gae(traj):
        return gae(traj.reward, traj.value, traj.value, traj.terminated, traj.truncated, hp.gamma, hp.gae_lambda)

    def do_bootstrap(state, traj):
        return learner.agent.step(state.params, state.agent_state, traj.hidden, traj.final_obs)[1]

    fns = {"rollout": (do_rollout, (states,)), "gae": (do_gae, (trajs,)),
           "bootstrap values (critic on final obs)": (do_bootstrap, (states, trajs))}
    compiled = {n: jax.jit(jax.vmap(f), compiler_options=ppo.compiler_options()).lower(*args).compile()
                for n, (f, args) in fns.items()}
    out = {n: [] for n in fns}
    for n, c in compiled.items():
        jax.block_until_ready(c(*fns[n][1]))
    for _ in range(rounds):
        for n, c in compiled.items():
            start = time.perf_counter()
            for _ in range(20):
                jax.block_until_ready(c(*fns[n][1]))
            out[n].append((time.perf_counter() - start) / 20 * 1e3)
    return {n: statistics.median(v) for n, v in out.items()}


def tables(results: list[dict]) -> str:
    names = ["program (outside every loop)", "updates", "rollout step", "GAE step", "GAE, 16 steps a trip", "epoch",
             "minibatch step"]
    head = "| loop (trips per update) | " + " | ".join(
        f"{r['kind']}: fusions / working ops / copies" for r in results) + " |"
    lines = [head, "|---|" + "---|" * len(results)]

    def cell(r, n):
        lp = [x for x in r["loops"] if x["name"] == n]
        if not lp:
            return "—"
        total = "{} / {} / {}".format(*(sum(x[k] for x in lp) for k in ("fusions", "ops", "copies")))
        return total if len(lp) == 1 else f"{len(lp)} loops: {total}"

    for n in names + sorted({x["name"] for r in results for x in r["loops"]} - set(names)):
        if any(x["name"] == n for r in results for x in r["loops"]):
            trips = next(x["trips"] for r in results for x in r["loops"] if x["name"] == n)
            lines.append(f"| {n} (x{trips}) | " + " | ".join(cell(r, n) for r in results) + " |")
    lines.append("| working ops per update (body x trips) | " + " | ".join(str(r["ops_per_update"]) for r in results)
                 + " |")
    lines.append("| fusions in the whole module | " + " | ".join(str(r["fusions_in_module"]) for r in results) + " |")
    lines += ["", "| ms per update | " + " | ".join(r["kind"] for r in results) + " |",
              "|---|" + "---|" * len(results)]
    for key, label in [("epochs_4", "one update at 4 epochs"), ("epochs_2", "one update at 2 epochs"),
                       ("epochs_8", "one update at 8 epochs"),
                       ("per_epoch", "b: one epoch (shuffle + 4 minibatch steps)"),
                       ("rest", "a: rollout, GAE, diagnostics, bookkeeping")]:
        lines.append(f"| {label} | " + " | ".join(f"{r['update_ms'][key]:.3f}" for r in results) + " |")
    lines.append("| compile s (update_epochs 4) | " + " | ".join(f"{r['compile_s']:.1f}" for r in results) + " |")
    phases = sorted({n for r in results for n in r.get("traced_per_update", {})})
    lines += ["", "| per update, under the profiler | " + " | ".join(f"{r['kind']}: thunks / traced ms" for r in results)
              + " |", "|---|" + "---|" * len(results)]
    for n in phases:
        lines.append(f"| {n} | " + " | ".join(
            "{thunks:.0f} / {ms:.3f}".format(**r["traced_per_update"][n]) if n in r.get("traced_per_update", {})
            else "—" for r in results) + " |")
    lines.append("| all | " + " | ".join("{:.0f} / {:.3f}".format(
        sum(v["thunks"] for v in r["traced_per_update"].values()), sum(v["ms"] for v in r["traced_per_update"].values()))
        for r in results) + " |")
    for r in results:
        if "pieces_ms" in r:
            lines += ["", f"{r['kind']}, pieces alone (ms per update): " + "; ".join(
                f"{n} {v:.3f}" for n, v in r["pieces_ms"].items())]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
