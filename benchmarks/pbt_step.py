"""What PBT's exploit/explore step costs against the training it sits between.

    python -m benchmarks.pbt_step [--config configs/sweeps/pbt_cartpole.yaml] [--population 64]
                                  [--intervals 4] [--seeds 1]

A `ppo.pbt` run of --intervals intervals (the file's interval and hyperparameters, its
population replaced by --population), over every CPU core as the CLI runs it. The step's
time (its compile apart) is compared with the run's (compile excluded; the run's seconds
include the steps): the target is under 2% at 64 members. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform

from purejaxppo.experiments.parallel import use_all_cpu_cores

use_all_cpu_cores()

import jax  # noqa: E402

from purejaxppo.experiments.spec import load_sweep, make_spec  # noqa: E402
from purejaxppo import pbt  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/sweeps/pbt_cartpole.yaml")
    parser.add_argument("--population", type=int, default=64)
    parser.add_argument("--intervals", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args()
    base, spec = load_sweep(args.config)
    section = {k: v for k, v in spec.to_dict().items() if k not in ("grid", "rank_by")} | {"seeds": args.seeds}
    section["pbt"] = {**section["pbt"], "population": args.population}
    interval = section["pbt"]["interval"]
    base = dataclasses.replace(base, total_timesteps=args.intervals * interval * base.batch_size)  # plan checks it
    result = pbt(base, spec=make_spec({**section, "eval_episodes": 0}))
    population = result.between
    steps = sum(population.step_seconds)
    print(json.dumps({
        "config": args.config, "population": args.population, "seeds": args.seeds, "interval": interval,
        "intervals": args.intervals, "updates": base.num_updates, "batch": base.batch_size,
        "devices": f"{len(jax.devices())} x {jax.devices()[0].device_kind}", "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "run_seconds": round(result.run_seconds, 3), "step_seconds": [round(s, 5) for s in population.step_seconds],
        "step_compile_seconds": round(population.compile_seconds, 3),
        "step_share_of_run": round(steps / result.run_seconds, 5)}))


if __name__ == "__main__":
    main()
