"""What a gymnax-blines checkpoint logged while it trained: its evaluation returns over the run.

    git -C <gymnax-blines clone> show <commit>:agents/Breakout-MinAtar/ppo.pkl > /tmp/ppo-<commit>.pkl
    python -m benchmarks.reference_logs /tmp/ppo-*.pkl

gymnax-blines saves each agent as a pickle of {log_steps, log_return, network, train_config}
(log_return: the mean return of num_test_rollouts sampled episodes at each evaluation). The
pickle names `dotmap.DotMap` (its configs); a stand-in is put in its place, so neither dotmap
nor gymnax-blines is needed. Prints, per file, the last evaluation, the last five, the best,
the seed and the settings that differ between the files given.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import types


class _DotMap(dict):
    """Stands in for dotmap.DotMap: keeps its state as a plain dict."""

    def __setstate__(self, state):
        self.update(state if isinstance(state, dict) else {})


def read(path: str) -> dict:
    sys.modules.setdefault("dotmap", types.SimpleNamespace(DotMap=_DotMap))
    with open(path, "rb") as f:
        saved = pickle.load(f)
    config = {k: v for k, v in saved["train_config"].items() if not k.startswith("_") and not isinstance(v, dict)}
    returns = [float(r) for r in saved["log_return"]]
    return {"file": path, "steps": int(saved["log_steps"][-1]), "last": returns[-1], "last_five": returns[-5:],
            "best": max(returns), "evaluations": len(returns), "config": config}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    logs = [read(path) for path in parser.parse_args().files]
    keys = sorted({k for log in logs for k in log["config"]})
    differ = [k for k in keys if len({repr(log["config"].get(k)) for log in logs}) > 1]
    for log in logs:
        print(f"{log['file']}: seed_id {log['config'].get('seed_id')}, {log['evaluations']} evaluations, last at "
              f"{log['steps']:,} steps: {log['last']:.2f}; last five {', '.join(f'{r:.2f}' for r in log['last_five'])}; "
              f"best {log['best']:.2f}; " + ", ".join(f"{k}={log['config'].get(k)}" for k in differ))


if __name__ == "__main__":
    main()
