"""Two or more settings of one problem at the same budget: final return and speed, over seeds.

    python -m benchmarks.same_budget --seeds 4 \
        --case masked=jumanji/snake --case "unmasked=jumanji/snake mask_actions=false"

A case is `label=config [key=value ...]` (a shipped config's name or a YAML path, then
overrides). Each case runs its seeds vmapped in one program (compiled first, then timed)
and evaluates the final policies greedily on fresh episodes. Prints a Markdown table:
final training return and greedy return, mean ± standard error over seeds, and steps per
second of the timed run (compile excluded).
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

import purejaxppo as ppo
from purejaxppo import configs
from purejaxppo.config import parse_override
from purejaxppo.experiments.stats import mean_se


def run_case(spec: str, seeds: int, eval_episodes: int) -> dict:
    label, _, rest = spec.partition("=")
    name, *assignments = rest.split()
    cfg = ppo.load_config(configs.find(name) or name, dict(parse_override(a) for a in assignments))
    train = jax.jit(jax.vmap(ppo.make_train(cfg, eval_episodes=eval_episodes)))
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    start = time.perf_counter()
    compiled = train.lower(keys).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(compiled(keys))
    run_s = time.perf_counter() - start
    final = np.asarray(out.metrics["episode_return"])[:, -1]
    greedy = np.nanmean(np.asarray(out.evaluation["deterministic"]), axis=1)
    return {"label": label, "config": rest, "final": mean_se(final), "greedy": mean_se(greedy),
            "per_seed_greedy": greedy.tolist(), "steps_per_s": seeds * cfg.num_updates * cfg.batch_size / run_s,
            "compile_s": compile_s, "run_s": run_s}


def table(rows: list[dict], seeds: int) -> str:
    lines = [f"| case | config | final training return | greedy return ({seeds} seeds) | steps/s | compile s |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['label']} | `{r['config']}` | {r['final'][0]:.2f} ± {r['final'][1]:.2f} | "
                     f"{r['greedy'][0]:.2f} ± {r['greedy'][1]:.2f} | {r['steps_per_s']:,.0f} | {r['compile_s']:.0f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", action="append", required=True, help="label=config [key=value ...]")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--eval-episodes", type=int, default=16)
    args = parser.parse_args(argv)
    rows = []
    for spec in args.case:
        rows.append(run_case(spec, args.seeds, args.eval_episodes))
        print(rows[-1], flush=True)
    print(f"\njax {jax.__version__}, {jax.devices()[0].platform}: {len(jax.devices())} device(s)\n")
    print(table(rows, args.seeds))


if __name__ == "__main__":
    main()
