"""Live logging of runs in progress: the progress bar, `progress.jsonl`, TensorBoard and
(when installed and asked for) Weights & Biases.

`runs.execute` calls `LiveLog` on the host between chunks of updates, once per run (no
compiled program calls back into Python); when every run of the group in flight has reported an update, one record
is written: the mean, min and max over runs of the last finished episodes' return, and
the environment steps per second since the previous record. Nothing here blocks the
device: a call only appends to a list and writes a line. TensorBoard gets the returns of each
record (`tensorboard/`'s own run: progress/group<g>/episode_return, _min, _max at the
environment steps of the update), not the steps per second, which would count the compile
of a shorter last chunk; a run's own metrics, per update, reach the host only with its
results: `tensorboard.log_results` writes them then, a TensorBoard run per run.

Live logging never stops a run: a sink that cannot be opened or written (a full disk, a
folder made read-only, a W&B failure) is named once in one line (`faults.Failures`) and
left out from then on; training goes on. TensorBoard events are written in this thread
(`tensorboard.Events`).
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import jax
import numpy as np

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from purejaxppo.errors import UsageError
from purejaxppo.experiments.faults import Failures
from purejaxppo.experiments.tensorboard import EVENTS, Events

__all__ = ["LiveLog"]  # for scripts (docs/python-api.md#live-progress); ProgressBar and check_wandb are the CLI's


class ProgressBar:
    """The terminal's progress bar of a planned run (`with ProgressBar(console, planned, what) as bar`):
    its first line says what runs (`what`, `resuming`: the folder); then "compiling" per group
    (`bar.group`), then each record's return and steps per second (`bar.record`, a LiveLog's
    on_record)."""

    def __init__(self, console, planned, what: str, resuming=None):
        self.console, self.planned, self.what, self.resuming = console, planned, what, resuming
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console)

    def __enter__(self) -> ProgressBar:
        self.progress.__enter__()
        self.task = self.progress.add_task("compiling", total=None)
        planned, groups = self.planned, self.planned.groups
        self.console.print(f"[bold]{planned.base.env}[/]: {self.what} = {planned.runs} "
                           f"run{'s' if planned.runs != 1 else ''}, {len(groups)} compile(s) of "
                           f"{groups[0].config.num_updates} updates x {groups[0].config.batch_size} steps, on "
                           f"{len(jax.devices())} device(s)" + (f"; resuming {self.resuming}" if self.resuming else ""))
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def group(self, g: int, n_groups: int, group) -> None:
        self.progress.update(self.task, description=f"compiling group {g + 1}/{n_groups}" if n_groups > 1
                             else "compiling", total=group.config.num_updates, completed=0)

    def record(self, record: dict) -> None:
        n_groups = len(self.planned.groups)
        text = f"group {record['group'] + 1}/{n_groups} " if n_groups > 1 else ""
        if "episode_return" in record:
            text += f"return {record['episode_return']:.4g}"
        if "steps_per_second" in record:
            text += f" · {record['steps_per_second']:,.0f} steps/s"
        self.progress.update(self.task, completed=record["update"], description=text or "training")


def check_wandb() -> None:
    """Before anything compiles: --wandb needs the wandb package."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise UsageError("--wandb needs the wandb package: pip install wandb") from None


class LiveLog:
    """Live progress of a sweep's runs, as the command line writes it: `progress.jsonl` in `folder`
    (an existing folder; None: no file), with `tensorboard` also the records' returns as
    TensorBoard events in `tensorboard/` there (see the module's doc), with
    `wandb_project` a W&B run. It is `ppo.sweep`'s (`run_plan`'s) `progress` callback: `log(updates_done,
    episode_return)` per run after each chunk; `log.group(g, runs, batch_size)` before each group (the
    sweep's `on_group`) makes a record the mean, min and max over that group's runs; `on_record(record)`
    sees each record as it is written; `close()` at the end. `failures`: where a sink that fails is
    reported (default: a `Failures` of its own)."""

    def __init__(self, folder: Path | None, on_record=None, tensorboard: bool = False,
                 wandb_project: str | None = None, wandb_config: dict | None = None,
                 failures: Failures | None = None):
        self._lock = threading.Lock()
        self._on_record = on_record
        self._pending: dict[int, list[float]] = {}
        self._runs, self._batch_size, self._group = 1, 1, 0
        self._last = None  # (time, updates) of the previous record
        self.failures = failures if failures is not None else Failures()
        self._sinks: dict[str, object] = {}  # name (as reported) -> open sink
        if folder is not None:
            self._open("progress.jsonl", lambda: open(folder / "progress.jsonl", "a", encoding="utf-8"))
            if tensorboard:
                self._open(f"{EVENTS}/", lambda: Events(folder / EVENTS))
        if wandb_project:
            import wandb

            self._open("wandb", lambda: wandb.init(project=wandb_project, config=wandb_config,
                                                   dir=str(folder or ".")))

    def _open(self, name: str, make) -> None:
        self._use(name, lambda: self._sinks.__setitem__(name, make()))

    def _use(self, name: str, write) -> None:
        """`write()`, unless it fails: then the sink is named once and left out."""
        try:
            write()
        except Exception as error:  # noqa: BLE001 -- live logging never stops a run
            self._sinks.pop(name, None)
            self.failures.report(name, error, "live logging to it stops; training goes on")

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
        scalars = {f"group{record['group']}/{k}": v for k, v in record.items()
                   if k.startswith(("episode_return", "steps_per_second"))}
        # TensorBoard: the returns alone (steps per second would count a shorter last chunk's compile)
        progress = {f"progress/{k}": v for k, v in scalars.items() if "/episode_return" in k}

        def events(sink):
            if progress:  # (none before any run has finished an episode)
                sink.write(progress, record["env_steps"], record["time"])
                sink.flush()

        writes = {"progress.jsonl": lambda f: (f.write(json.dumps(record) + "\n"), f.flush()),
                  f"{EVENTS}/": events,
                  "wandb": lambda run: run.log({"env_steps": record["env_steps"], **scalars})}
        for name, sink in list(self._sinks.items()):
            self._use(name, lambda: writes[name](sink))
        if self._on_record is not None:
            self._on_record(record)

    def close(self) -> None:
        for name, sink in list(self._sinks.items()):
            self._use(name, sink.finish if name == "wandb" else sink.close)
        self._sinks.clear()
