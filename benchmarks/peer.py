"""One contender of the `peers` case, in its own process: build and compile once, then run on request.

Executed as a plain script (never imported by the suite) by the contender's own interpreter:
ours by our venv's python (PYTHONPATH = this checkout first), PureJaxRL, rejax and
Stable-Baselines3 each by the venv they are installed in (see benchmarks/README.md). So a
peer's dependencies (distrax, PyTorch, other jax versions) never enter our venv.

    python benchmarks/peer.py --kind ours --seeds 4 --settings '{"total_timesteps": 65536, ...}'

Protocol (one JSON object per tagged line on stdout; the libraries' own output is left alone):
  after building, compiling and one untimed warm-up execution:  PEER_READY {"compile_s", "info"}
  then, for every line "run" read on stdin, one execution of the compiled program, blocking,
  timed; then (untimed) the final return of its output:
                                 PEER_DONE {"seconds", "final_return"}
  a line "quit" or the end of stdin ends the process. Any failure: PEER_ERROR {"reason"}.

Every kind is timed the same way: `compile_s` is the time of `.lower(keys).compile()` of
`jax.jit(jax.vmap(train))` (ours with `purejaxppo.compiler_options()`, as the package compiles
its programs; ours-cores: `ShardedRuns` over one host device per core; SB3 and
Brax's trainer: None), and `seconds` is the wall time of one execution ended by
`jax.block_until_ready` (SB3: one `model.learn` of a fresh model; Brax's trainer, which
compiles on every call: its own compile-free training time).

Settings arrive in the suite's own names (`SETTINGS` below, the classic CartPole setting
of CleanRL's and PureJaxRL's ppo.py) and are mapped here to each library's config.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

# The classic CartPole reference setting (CleanRL / PureJaxRL ppo.py defaults), for every peer.
SETTINGS = {
    "env": "CartPole-v1", "num_envs": 4, "num_steps": 128, "update_epochs": 4, "num_minibatches": 4,
    "lr": 2.5e-4, "anneal_lr": True, "clip_eps": 0.2, "ent_coef": 0.01, "vf_coef": 0.5, "max_grad_norm": 0.5,
    "gamma": 0.99, "gae_lambda": 0.95, "total_timesteps": 500_000, "hidden_sizes": [64, 64], "activation": "tanh",
}


def emit(tag: str, payload: dict) -> None:
    sys.stdout.write(f"{tag} {json.dumps(payload)}\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------------------
# builders: settings, seeds -> (execute() -> output, final_return(output), compile seconds, info)
def jitted(train, seeds: int, ours: bool = True):
    """`jax.jit(jax.vmap(train))` on `seeds` keys, compiled (timed; ours with purejaxppo's compiler
    options, a peer's with XLA's defaults); execute() runs it, blocking."""
    import jax

    from benchmarks.harness import compile_timed  # the suite's one timing helper (PYTHONPATH has this repo)

    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    compiled, compile_s = compile_timed(jax.vmap(train), keys, ours=ours)
    return (lambda: jax.block_until_ready(compiled(keys))), compile_s


def ours_config(s: dict):
    import purejaxppo as ppo

    names = ("env", "num_envs", "num_steps", "num_minibatches", "update_epochs", "total_timesteps", "hidden_sizes",
             "activation", "lr", "anneal_lr", "clip_eps", "ent_coef", "vf_coef", "max_grad_norm", "gamma",
             "gae_lambda")
    # PureJaxRL clips the value loss with CLIP_EPS too
    return ppo.load_config(None, {**{n: s[n] for n in names}, "vf_clip_eps": s["clip_eps"]})


def ours_return(out) -> float:
    from benchmarks.cases import final_return  # the suite's one reading of a run's final return

    return final_return(out)


def build_ours(s: dict, seeds: int):
    import purejaxppo as ppo

    execute, compile_s = jitted(ppo.make_train(ours_config(s)), seeds)
    return execute, ours_return, compile_s, {"purejaxppo": ppo.__version__, "file": ppo.__file__}


def build_ours_cores(s: dict, seeds: int):
    """The seed axis sharded over one host device per CPU core (the CLI's path for several seeds)."""
    from purejaxppo.experiments.parallel import use_all_cpu_cores

    use_all_cpu_cores()  # before JAX starts its backend
    import jax

    import purejaxppo as ppo
    from purejaxppo.experiments.parallel import ShardedRuns

    runs = ShardedRuns(ppo.make_train(ours_config(s)), jax.random.split(jax.random.PRNGKey(0), seeds))
    return (lambda: jax.block_until_ready(runs())), ours_return, runs.compile_seconds, {
        "devices": runs.num_devices, "purejaxppo": ppo.__version__}


def build_pjrl(s: dict, seeds: int):
    import numpy as np
    from purejaxrl.ppo import make_train

    config = {"LR": s["lr"], "NUM_ENVS": s["num_envs"], "NUM_STEPS": s["num_steps"],
              "TOTAL_TIMESTEPS": s["total_timesteps"], "UPDATE_EPOCHS": s["update_epochs"],
              "NUM_MINIBATCHES": s["num_minibatches"], "GAMMA": s["gamma"], "GAE_LAMBDA": s["gae_lambda"],
              "CLIP_EPS": s["clip_eps"], "ENT_COEF": s["ent_coef"], "VF_COEF": s["vf_coef"],
              "MAX_GRAD_NORM": s["max_grad_norm"], "ACTIVATION": s["activation"], "ENV_NAME": s["env"],
              "ANNEAL_LR": s["anneal_lr"]}
    if s["hidden_sizes"] != [64, 64]:
        raise ValueError("PureJaxRL's ppo.py has 64x64 networks only")
    execute, compile_s = jitted(make_train(config), seeds, ours=False)

    def final_return(out):
        # the episodes that finished in the last update, as ours; none finished: that update's mean
        ret = np.asarray(out["metrics"]["returned_episode_returns"])[:, -1]
        done = np.asarray(out["metrics"]["returned_episode"])[:, -1]
        return float(np.mean([r[d].mean() if d.any() else r.mean() for r, d in zip(ret, done)]))

    return execute, final_return, compile_s, {}


def build_rejax(s: dict, seeds: int):
    import jax
    import numpy as np
    from rejax import PPO
    from rejax.evaluate import evaluate

    # rejax anneals nothing (constant learning rate). Its train() evaluates every eval_freq
    # steps through eval_callback: here never inside the timed run (as the others); the final
    # return is its own evaluation (128 episodes, stochastic policy) of the final state, untimed.
    algo = PPO.create(env=s["env"], num_envs=s["num_envs"], num_steps=s["num_steps"],
                      num_epochs=s["update_epochs"], num_minibatches=s["num_minibatches"],
                      learning_rate=s["lr"], max_grad_norm=s["max_grad_norm"],
                      total_timesteps=s["total_timesteps"], eval_freq=s["total_timesteps"],
                      gamma=s["gamma"], gae_lambda=s["gae_lambda"], clip_eps=s["clip_eps"],
                      ent_coef=s["ent_coef"], vf_coef=s["vf_coef"],
                      skip_initial_evaluation=True,
                      agent_kwargs={"activation": s["activation"], "hidden_layer_sizes": tuple(s["hidden_sizes"])})
    algo = algo.replace(eval_callback=lambda algo, ts, rng: ())
    execute, compile_s = jitted(lambda key: algo.train(key)[0], seeds, ours=False)

    @jax.jit
    @jax.vmap
    def evaluation(ts):
        lengths, returns = evaluate(algo.make_act(ts), ts.rng, algo.env, algo.env_params, 128,
                                    algo.env_params.max_steps_in_episode)
        return returns.mean()

    return execute, lambda ts: float(np.mean(evaluation(ts))), compile_s, {
        "note": "constant learning rate (rejax has no annealing)"}


def build_sb3(s: dict, seeds: int):
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    if seeds != 1:
        raise ValueError("Stable-Baselines3 trains one run per process")
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    kwargs = dict(n_steps=s["num_steps"], batch_size=s["num_envs"] * s["num_steps"] // s["num_minibatches"],
                  n_epochs=s["update_epochs"], gamma=s["gamma"], gae_lambda=s["gae_lambda"],
                  clip_range=s["clip_eps"], clip_range_vf=s["clip_eps"], ent_coef=s["ent_coef"],
                  vf_coef=s["vf_coef"], max_grad_norm=s["max_grad_norm"], device="cpu",
                  learning_rate=(lambda left: left * s["lr"]) if s["anneal_lr"] else s["lr"],
                  policy_kwargs={"net_arch": {"pi": s["hidden_sizes"], "vf": s["hidden_sizes"]},
                                 "activation_fn": {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[s["activation"]]})

    def execute():
        model = PPO("MlpPolicy", make_vec_env(s["env"], n_envs=s["num_envs"], seed=0), seed=0, **kwargs)
        return model.learn(total_timesteps=s["total_timesteps"])

    def final_return(model):
        return float(np.mean([e["r"] for e in model.ep_info_buffer])) if model.ep_info_buffer else float("nan")

    return execute, final_return, None, {"torch": torch.__version__, "torch_threads": torch.get_num_threads()}


@dataclasses.dataclass
class Timed:
    """An execution that measured itself (a trainer that cannot leave its compile out)."""

    seconds: float
    out: object


def brax_case(s: dict):
    """A Brax config (settings "config", "updates"), its updates rounded down to a multiple of
    Brax's three training epochs (benchmarks/brax_side_by_side.py)."""
    from benchmarks.brax_side_by_side import load_case

    return load_case(s["config"], s["updates"])


def build_ours_brax(s: dict, seeds: int):
    import purejaxppo as ppo

    execute, compile_s = jitted(ppo.make_train(brax_case(s)), seeds)
    return execute, ours_return, compile_s, {"purejaxppo": ppo.__version__}


def build_brax_trainer(s: dict, seeds: int):
    """Brax's own PPO trainer (brax.training.agents.ppo.train) on the environment our adapter builds,
    the settings mapped as benchmarks/brax_side_by_side.py maps them. Every call compiles again
    (its jitted functions are made inside train): its time is what Brax measures itself for
    training without compile, 3 x its third (first compile-free) training epoch."""
    from benchmarks.brax_side_by_side import run_brax

    if seeds != 1:
        raise ValueError("Brax's trainer trains one seed per call")
    cfg = brax_case(s)

    def execute():
        result = run_brax(cfg, 0, eval_episodes=16)
        return Timed(result["train_s"], result)

    return execute, lambda result: result["return"], None, {
        "note": "time: 3 x Brax's own compile-free epoch time; return: its deterministic evaluation (16 episodes)"}


BUILDERS = {"ours": build_ours, "ours-cores": build_ours_cores, "pjrl": build_pjrl, "rejax": build_rejax,
            "sb3": build_sb3, "ours-brax": build_ours_brax, "brax-trainer": build_brax_trainer}


def serve(execute, final_return, compile_s, info, lines=sys.stdin) -> None:
    start = time.perf_counter()
    execute()  # one untimed warm-up execution: first-run allocations and thread start-up
    info = {**info, "warmup_s": time.perf_counter() - start}
    emit("PEER_READY", {"compile_s": compile_s, "info": info})
    for line in lines:
        command = line.strip()
        if command == "quit":
            break
        if command == "run":
            start = time.perf_counter()
            out = execute()
            seconds = time.perf_counter() - start
            if isinstance(out, Timed):
                seconds, out = out.seconds, out.out
            emit("PEER_DONE", {"seconds": seconds, "final_return": final_return(out)})
            del out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=sorted(BUILDERS), required=True)
    p.add_argument("--seeds", type=int, required=True)
    p.add_argument("--settings", default="{}", help="JSON: changes to SETTINGS")
    a = p.parse_args(argv)
    try:
        serve(*BUILDERS[a.kind]({**SETTINGS, **json.loads(a.settings)}, a.seeds))
    except Exception as e:  # reported to the suite, which marks the contender skipped with this reason
        emit("PEER_ERROR", {"reason": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
