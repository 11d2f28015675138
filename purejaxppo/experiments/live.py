"""Live logging of runs in progress: the progress bar, `progress.jsonl`, TensorBoard and
(when installed and asked for) Weights & Biases.

`runs.execute` calls `LiveLog` on the host between chunks of updates, once per run (a
`make_train(progress=...)` learner would call it from inside its program, at most once
per update); when every run of the group in flight has reported an update, one record
is written: the mean, min and max over runs of the last finished episodes' return, and
the environment steps per second since the previous record. Nothing here blocks the
device: a call only appends to a list and writes a line.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import numpy as np

from purejaxppo.errors import UsageError


def check_wandb() -> None:
    """Before anything compiles: --wandb needs the wandb package."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise UsageError("--wandb needs the wandb package: pip install wandb") from None


class LiveLog:
    """`log(updates_done, episode_return)` from the learner; `group(...)` before each group."""

    def __init__(self, folder: Path | None, on_record=None, tensorboard: bool = False,
                 wandb_project: str | None = None, wandb_config: dict | None = None):
        self._lock = threading.Lock()
        self._on_record = on_record
        self._pending: dict[int, list[float]] = {}
        self._runs, self._batch_size, self._group = 1, 1, 0
        self._last = None  # (time, updates) of the previous record
        self._file = open(folder / "progress.jsonl", "a") if folder is not None else None
        self._tensorboard = None
        if tensorboard and folder is not None:
            from tensorboardX import SummaryWriter

            self._tensorboard = SummaryWriter(str(folder / "tensorboard"))
        self._wandb = None
        if wandb_project:
            import wandb

            self._wandb = wandb.init(project=wandb_project, config=wandb_config, dir=str(folder or "."))

    def group(self, index: int, runs: int, batch_size: int) -> None:
        with self._lock:
            self._group, self._runs, self._batch_size = index, runs, batch_size
            self._pending.clear()
            self._last = None

    def __call__(self, updates_done, episode_return) -> None:
        update = int(updates_done)
        with self._lock:
            values = self._pending.setdefault(update, [])
            values.append(float(episode_return))
            if len(values) < self._runs:
                return
            del self._pending[update]
            now = time.perf_counter()
            record = {"group": self._group, "update": update, "env_steps": update * self._batch_size,
                      "time": time.time()}
            finite = [v for v in values if math.isfinite(v)]
            if finite:
                record.update(episode_return=float(np.mean(finite)), episode_return_min=min(finite),
                              episode_return_max=max(finite))
            if self._last is not None and now > self._last[0]:
                steps = (update - self._last[1]) * self._batch_size * self._runs
                record["steps_per_second"] = steps / (now - self._last[0])
            self._last = (now, update)
            self._write(record)

    def _write(self, record: dict) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()
        scalars = {k: v for k, v in record.items() if k.startswith(("episode_return", "steps_per_second"))}
        if self._tensorboard is not None:
            for name, value in scalars.items():
                self._tensorboard.add_scalar(f"group{record['group']}/{name}", value, record["env_steps"])
        if self._wandb is not None:
            self._wandb.log({"env_steps": record["env_steps"],
                             **{f"group{record['group']}/{k}": v for k, v in scalars.items()}})
        if self._on_record is not None:
            self._on_record(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.finish()
