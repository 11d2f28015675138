"""What the two passes PureJaxRL does not run cost inside our compiled update.

One update of ours runs two passes over the whole batch that PureJaxRL's `ppo.py` does not:
  bootstrap   the critic on every step's final observation, so that a time limit is
              bootstrapped from V(final observation) (PureJaxRL bootstraps every ended
              episode as terminated, and only the rollout's last step from the critic)
  clip cases  the updated policy's actor on the batch, for the clip-case table
              (`clip_cases`: advantage sign x inside / above / below the clip band)
This compiles the peers case's program (benchmarks/peer.py SETTINGS, `ppo.jit(jax.vmap(train))`)
three ways in one process and times them in interleaved rounds: as shipped, without the
clip-case pass (zeros), and without the bootstrap pass (zeros: the run learns wrongly;
only its time is read). The differences are what the passes cost where they run, in the
fused program, not timed alone.

    python -m benchmarks.extra_passes --seeds 64 --updates 32 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def variant(cfg, without: str | None):
    """The train function of `cfg` as shipped, or with one pass replaced by zeros."""
    import jax
    import jax.numpy as jnp

    from purejaxppo.train import Learner

    learner = Learner(cfg)
    if without == "clip cases":
        learner._clip_cases = lambda *args: jnp.zeros((2, 3), jnp.int32)
    elif without == "bootstrap":
        step = learner.agent.step
        learner.agent.step = lambda params, agent_state, carry, obs, mask=None: (  # [steps, envs] final obs
            None, jnp.zeros(obs.shape[:2]), carry) if obs.ndim == 3 else step(params, agent_state, carry, obs, mask)

    def train(key):  # every output kept, as make_train keeps them (nothing left for XLA to drop)
        return learner.run(learner.init(key))

    return jax.vmap(train)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=64)
    p.add_argument("--updates", type=int, default=32, help="updates per timed run")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args(argv)

    import jax

    import purejaxppo as ppo
    from benchmarks.peer import SETTINGS, ours_config

    settings = {**SETTINGS, "total_timesteps": a.updates * SETTINGS["num_envs"] * SETTINGS["num_steps"]}
    cfg = ours_config(settings)
    keys = jax.random.split(jax.random.PRNGKey(0), a.seeds)
    programs = {}
    for name, without in (("as shipped", None), ("without clip cases", "clip cases"),
                          ("without bootstrap", "bootstrap")):
        start = time.perf_counter()
        programs[name] = ppo.jit(variant(cfg, without)).lower(keys).compile()
        print(f"{name}: compiled in {time.perf_counter() - start:.1f} s", flush=True)
        jax.block_until_ready(programs[name](keys))  # one untimed run
    times = {name: [] for name in programs}
    for _ in range(a.rounds):
        for name, program in programs.items():
            start = time.perf_counter()
            jax.block_until_ready(program(keys))
            times[name].append((time.perf_counter() - start) * 1000 / a.updates)
    shipped = times["as shipped"]
    print(f"\n{a.seeds} seed(s), {a.updates} updates a run, {a.rounds} interleaved rounds, ms per update:\n")
    print("| program | median | rounds | the pass's share (median of per-round differences / as shipped) |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        share = "" if name == "as shipped" else \
            f"{statistics.median((s - t) / s for s, t in zip(shipped, ts)):.1%}"
        print(f"| {name} | {statistics.median(ts):.2f} | {' '.join(f'{t:.1f}' for t in ts)} | {share} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
