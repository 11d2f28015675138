"""TensorBoard events of a run or sweep folder's metrics.csv: a TensorBoard run per run of the
folder, in a directory of its own (`<folder>/tensorboard/seed<s>/` for a train folder's seeds,
`point<i>-seed<s>/` for a sweep's runs: a PBT member or a halving point is a point), its tags
the metric columns of metrics.csv as they are named there (episode_return, entropy, kl_k3_e1,
clip_fraction_e1, grad_norm, ...), its step the environment steps of the run (the env_steps
column; the step of --tensorboard's live progress too). The columns that label a run (point,
swept values, seed, diverged) name its directory or are left out; an empty cell (NaN, or an
epoch a run did not scan) is no event.

`purejaxppo tensorboard FOLDER` writes them for a finished folder (`cli.tensorboard_command`); `--tensorboard`
writes them when a run writes its results (`log_results`), beside the live progress that
`live.LiveLog` writes while it runs. Each run's directory is made whole (written under a
temporary name, then renamed) and never written into again: events are never mixed with
another run's."""

from __future__ import annotations

import csv
import io
import os
import shutil
import time
from pathlib import Path

from purejaxppo.errors import ConfigError
from purejaxppo.experiments.faults import Failures

__all__ = ["events_of_csv", "write_runs"]  # for scripts: metrics.csv text -> runs' scalars -> event directories

EVENTS = "tensorboard"  # a folder's events, live and converted alike
LABELS_END = "update"   # metrics.csv: the columns before it label a run; then update, env_steps, the metrics


class Events:
    """TensorBoard scalars in an event file of `folder` (made if missing), written in this thread
    (tensorboardX's own writer thread would die silently, then block a run on its full queue)."""

    def __init__(self, folder: Path):
        from tensorboardX.event_file_writer import EventsWriter

        folder.mkdir(exist_ok=True)
        self._writer = EventsWriter(str(folder / "events"))

    def write(self, scalars: dict[str, float], step: int, wall_time: float) -> None:
        """One event of every scalar at `step` (`flush` to make it readable)."""
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary

        values = [Summary.Value(tag=name, simple_value=float(value)) for name, value in scalars.items()]
        self._writer.write_event(Event(summary=Summary(value=values), step=step, wall_time=wall_time))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def events_of_csv(text: str) -> dict[str, list[tuple[int, dict[str, float]]]]:
    """metrics.csv's text -> {run name: [(env steps, {metric: value}) per update, in order]}
    (the run names and tags of the module's doc). ValueError, saying what, for a text that is
    not a metrics.csv."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise ValueError("is empty")
    header = rows[0]
    for needed in ("seed", LABELS_END, "env_steps"):
        if needed not in header:
            raise ValueError(f"has no {needed} column (its columns: {', '.join(header)})")
    labels, first = header[:header.index(LABELS_END)], header.index("env_steps") + 1
    metrics = header[first:]
    runs: dict[str, list[tuple[int, dict[str, float]]]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise ValueError(f"line {line} has {len(row)} cells, its header {len(header)}")
        label = dict(zip(labels, row))
        try:
            name = (f"point{int(label['point'])}-" if "point" in label else "") + f"seed{int(label['seed'])}"
            step = int(row[first - 1])
            scalars = {metric: float(cell) for metric, cell in zip(metrics, row[first:]) if cell != ""}
        except ValueError as error:
            raise ValueError(f"line {line} holds a cell that is not a number ({error})") from None
        runs.setdefault(name, []).append((step, scalars))
    if not runs:
        raise ValueError("has no rows")
    return runs


def write_runs(runs: dict[str, list[tuple[int, dict[str, float]]]], into: Path) -> None:
    """Each run of `events_of_csv` as a new directory `into`/<run name>/ of one event file (its
    events stamped with this moment's wall time): written under a temporary name, then renamed
    into place, so a run's directory is whole or absent. FileExistsError where one exists."""
    into.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for name, points in runs.items():
        target = into / name
        if target.exists():
            raise FileExistsError(f"{target} exists already")
        partial = into / f".{name}.tmp-{os.getpid()}"
        try:
            events = Events(partial)
            try:
                for step, scalars in points:
                    events.write(scalars, step, now)
            finally:
                events.close()
            partial.rename(target)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise


def read_runs(folder: str | Path, option: str) -> dict[str, list[tuple[int, dict[str, float]]]]:
    """`events_of_csv` of `folder`'s metrics.csv; a ConfigError on `option` where it has none or
    holds something else."""
    path = Path(folder) / "metrics.csv"
    if not Path(folder).is_dir():
        raise ConfigError(option, str(folder), "is not a folder")
    if not path.is_file():
        raise ConfigError(option, str(folder), "has no metrics.csv (a run or sweep writes it when it finishes; "
                          "one cut short writes it with --resume): there are no metrics to write events of")
    try:
        return events_of_csv(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ConfigError(option, str(folder), f"its metrics.csv {error}") from None


def log_results(folder: Path, failures: Failures) -> None:
    """--tensorboard when a run has written its results: its metrics.csv's runs into
    `folder`/tensorboard/ (those whose directory exists already, from an earlier try of a
    resumed run that got that far, kept as they are); nothing without metrics.csv (its failure
    is reported already). A failure is reported to `failures` and spares the other results."""
    if not (folder / "metrics.csv").is_file():
        return
    into = folder / EVENTS
    try:
        runs = read_runs(folder, "folder")
        write_runs({name: points for name, points in runs.items() if not (into / name).exists()}, into)
    except Exception as error:  # noqa: BLE001 -- events that cannot be written spare the other results
        failures.report(f"{EVENTS}/", error, "the other results are written apart from it")
