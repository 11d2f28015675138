"""A run or sweep folder, and its one owner, `RunFolder`.

    <folder>/.lock                       while a process writes the folder: its pid and host
    <folder>/config.yaml or sweep.yaml   the resolved config (a sweep's: base config and spec), at the start
    <folder>/checkpoints/                the checkpoints (checkpoint.Checkpoints: orbax storage)
    <folder>/progress.jsonl              live progress (live.LiveLog)
    <folder>/metrics.csv, summary.*, *.png   the results, at the end; summary.md last

A folder is claimed (created) before anything compiles, so that one that cannot be written
is refused before any work and two runs never share one; one process at a time writes it
(`lock`). Every file is written whole or not at all and never replaces another
(`write_new`); one result that cannot be written spares the others (`write_artefacts`), and
a checkpoint that cannot be saved leaves the run going. summary.md marks a finished run: it
is written only once everything else is (the final checkpoint, every other result), so a
folder whose results were cut short (a stop signal, a full disk) is finished by --resume,
which writes only what is missing. A resumed run must be the run the folder was started
with, and its config file must agree with its checkpoint. What the files hold comes from
purejaxppo.experiments.report (text and bytes, no I/O).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import jax
import numpy as np
import yaml

from purejaxppo.compiler import compiler_options
from purejaxppo.config import ConfigError, PPOConfig, make_config
from purejaxppo.errors import ImportFailed, ResourceError
from purejaxppo.experiments import compile_cache, report
from purejaxppo.experiments.checkpoint import RUN_SETTINGS, CheckpointError, Checkpoints
from purejaxppo.experiments.faults import Failures, lost_process, wait_ready
from purejaxppo.experiments.parallel import free_memory_bytes
from purejaxppo.train import Learner

FINISHED = "summary.md"  # a finished run's mark, written last


def write_new(path: Path, data: str | bytes) -> None:
    """Write a file that must not exist yet, atomically: the data goes to a temporary name
    in the same folder, which is then hard-linked to `path`. The link fails if `path`
    exists (FileExistsError: nothing is replaced), and a reader never sees half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "xb" if isinstance(data, bytes) else "x", **({} if isinstance(data, bytes) else
                                                                      {"encoding": "utf-8"})) as f:
            f.write(data)
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_artefacts(folder: Path, artefacts: list[tuple[str, Callable[[], str | bytes]]],
                    failures: Failures) -> bool:
    """Write each (file name, function making its contents) as a new file, one after the
    other; a failure (disk full, a plot that cannot be drawn, a file that appeared in the
    meantime) is reported to `failures` (one line naming the file and why) and leaves the
    others. Returns whether every file was written."""
    written = True
    for name, make in artefacts:
        try:
            write_new(Path(folder) / name, make())
        except Exception as error:  # noqa: BLE001 -- any failure of one artefact must spare the others
            failures.report(name, error, "the other results are written apart from it")
            written = False
    return written


def _settings(meta: Mapping[str, Any]) -> dict:
    """A run's settings as one flat mapping, to name each one that changed."""
    return {**meta["config"], **{f"sweep.{k}": v for k, v in meta["spec"].items()},
            **{k: v for k, v in meta.items() if k not in ("config", "spec")}}


def _alive(pid: int) -> bool:
    """Whether a process `pid` runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


class _Checkpoints(Checkpoints):
    """A run folder's checkpoints: a save that fails (a full disk, a folder made read-only)
    does not stop the run. It is said once, in one line; its partial files are removed (they
    would hold the space the results need); the folder remembers the step (`unsaved`)."""

    def __init__(self, run_folder: RunFolder, keep: int | None, create: bool, shared: bool = False):
        super().__init__(run_folder.path / "checkpoints", keep=keep, create=create, shared=shared)
        self._run_folder = run_folder

    def save(self, step: int, states: dict, metrics: dict, meta: dict) -> None:
        try:
            super().save(step, states, metrics, meta)
        except Exception as error:  # noqa: BLE001 -- orbax raises many kinds (tensorstore: ValueError)
            lost = lost_process(error) if self.shared else None
            if lost is not None:  # several processes: a peer gone mid-save, not a full disk
                raise lost from None
            for partial in self.folder.glob(f"{step}.orbax-checkpoint-tmp*"):
                shutil.rmtree(partial, ignore_errors=True)
            self._run_folder.unsaved.append(step)
            newest = self.latest()
            self._run_folder.failures.report(
                "checkpoints/", error, f"the checkpoint at update {step} is not saved and the run goes on; "
                + (f"the newest complete one is at update {newest}" if newest is not None else "none is complete"))


class RunFolder:
    """One run's (`command` "train") or one sweep's ("sweep") folder: claiming it, its config
    file, the resume check, its checkpoints, its results, and reading it back (load, evaluate)."""

    def __init__(self, path: str | Path, command: str | None = None):
        self.path = Path(path)
        self.command = command
        self.failures = Failures()       # the writes into the folder that failed
        self.unsaved: list[int] = []     # steps whose checkpoint could not be saved
        self._kept: set[str] = set()     # files a resumed folder held already: not written again
        self._locked = False
        self._claimed = None             # claim: whether it made the folder (True) or took an empty one (False)

    def __str__(self) -> str:
        return str(self.path)

    @classmethod
    def claim(cls, out: str | None, command: str, env: str) -> RunFolder:
        """Create the folder now: `out`, which must be new or empty, or else a new
        runs/<env>-<time> (runs/sweep-<env>-<time> for a sweep; an import path's ':' becomes '-')."""
        if out is not None:
            folder = Path(out)
            if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
                raise ConfigError("--out", out, "exists and is not an empty folder; "
                                  "choose another so no earlier results are overwritten")
            candidates = [folder]
        else:
            name = env.replace(":", "-")  # env: package.module:factory
            stem = Path("runs") / f"{'' if command == 'train' else 'sweep-'}{name}-{time.strftime('%Y%m%d-%H%M%S')}"
            candidates = [stem] + [stem.with_name(f"{stem.name}-{n}") for n in range(2, 1000)]
        for folder in candidates:
            existed = folder.is_dir()
            try:
                folder.mkdir(parents=True, exist_ok=out is not None)
            except FileExistsError:
                continue
            except OSError as error:
                raise ConfigError("--out", str(folder), f"cannot be created: {error.strerror}") from None
            claimed = cls(folder, command)
            claimed._claimed = not existed
            claimed.lock("--out")
            return claimed
        raise ConfigError("--out", str(candidates[0]), "no free folder name")

    def discard(self) -> bool:
        """A folder this process claimed, ended before its first complete checkpoint (a stop
        signal during compiling, a refusal after the claim): nothing in it can be resumed, and
        left behind it would block the same command (its --out is not empty) and --resume alike.
        Remove what the run wrote: the folder, or its contents where it was there, empty,
        before. -> whether it is gone; a folder not claimed here, or with a complete
        checkpoint, is kept."""
        if self._claimed is None or self.newest_checkpoint() is not None:
            return False
        self.unlock()
        try:
            if self._claimed:
                shutil.rmtree(self.path)
            else:
                for entry in self.path.iterdir():
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        except OSError:
            return False
        return True

    # ---------------------------------------------------------------- one writer
    @property
    def lock_file(self) -> Path:
        return self.path / ".lock"

    def lock(self, option: str) -> None:
        """Become the folder's one writer, or refuse (ConfigError on `option`, naming the
        holder): .lock is made with `write_new` (atomic, never replacing one: of two
        processes, one gets it) and holds this process's pid and host. A lock whose holder
        is gone (this host, no such process: a killed run) is taken over, with a line
        saying so. A file, not flock: it names its holder, and works on network file systems."""
        mine = {"pid": os.getpid(), "host": socket.gethostname()}
        for _ in range(2):  # a second try after taking over a stale lock
            try:
                write_new(self.lock_file, json.dumps(mine))
                self._locked = True
                return
            except FileExistsError:
                pass
            except OSError as error:
                raise ConfigError(option, str(self.path), f"cannot be written: {error.strerror}") from None
            try:
                holder = json.loads(self.lock_file.read_text())
                pid, host = int(holder["pid"]), str(holder["host"])
            except FileNotFoundError:
                continue  # released in the meantime
            except (OSError, ValueError, TypeError, KeyError):
                raise ConfigError(option, str(self.path), f"is locked by {self.lock_file}, which is unreadable; delete "
                                  "it if no run writes this folder any more") from None
            if host != mine["host"] or _alive(pid):
                where = "" if host == mine["host"] else f" on host {host}"
                raise ConfigError(option, str(self.path), f"is being written by process {pid}{where} (its "
                                  f"{self.lock_file.name}); one process at a time writes a folder: wait for it to end"
                                  + (f", or delete {self.lock_file} if that run is gone" if where else ""))
            print(f"purejaxppo: {self.path} was locked by process {pid}, which is gone: taking it over",
                  file=sys.stderr, flush=True)
            self.lock_file.unlink(missing_ok=True)
        raise ConfigError(option, str(self.path), "is being locked by another process at the same time")

    def unlock(self) -> None:
        """Release the lock, if this process holds it (at exit, however the command ends)."""
        if self._locked:
            self._locked = False
            try:
                self.lock_file.unlink()
            except OSError:
                pass  # a folder made read-only: the next writer finds its holder gone and takes it over

    @property
    def config_file(self) -> Path:
        return self.path / ("config.yaml" if self.command == "train" else "sweep.yaml")

    def write_config(self, config: PPOConfig, spec=None) -> None:
        """config.yaml (a run's resolved config) or sweep.yaml (a sweep's base config and `spec`;
        it reloads with sweep.load_sweep)."""
        values = config.to_dict()
        if self.command != "train":
            values["sweep"] = spec.to_dict()
        try:
            write_new(self.config_file, yaml.safe_dump(values, sort_keys=False))
        except OSError as error:
            raise ConfigError("--out", str(self.path), f"cannot write {self.config_file.name}: "
                              f"{error.strerror}") from None

    def checkpoints(self, keep: int | None = None, create: bool = True, shared: bool = False) -> Checkpoints:
        """`shared`: several processes' (each saves its shards; see `Checkpoints`)."""
        return _Checkpoints(self, keep, create, shared)

    def newest_checkpoint(self) -> int | None:
        """The step of the newest complete checkpoint; None if there is none."""
        try:
            return self.checkpoints(create=False).latest()
        except CheckpointError:
            return None

    # ---------------------------------------------------------------- resuming
    @classmethod
    def to_resume(cls, path: str, command: str) -> tuple[RunFolder, dict]:
        """-> (the folder, the settings its run was started with): a folder of a `command` run."""
        folder = cls(path, command)
        if not folder.path.is_dir():
            raise ConfigError("--resume", path, "is not a folder")
        saved = folder.checkpoints(create=False).meta()
        if "command" not in saved:  # check_meta: a checkpoint has every run setting or none
            raise CheckpointError(f"{path} was checkpointed from Python (sweep(..., checkpoints=...)), not by the "
                                  f"command line: it has no command line to resume; resume it from Python with "
                                  f"resume=True")
        saved = {k: saved[k] for k in RUN_SETTINGS}
        saved["config"] = {**PPOConfig().to_dict(), **saved["config"]}  # a key added since: the run had its default
        if saved["command"] != command:
            raise CheckpointError(f"{path} holds a {saved['command']} run: resume it with "
                                  f"purejaxppo {saved['command']} --resume {path}")
        folder._kept = {p.name for p in folder.path.iterdir()}
        return folder, saved

    def check_resume(self, saved: Mapping[str, Any], asked: Mapping[str, Any]) -> None:
        """A resumed run must be the run its folder claims (its config file agrees with its
        checkpoint) and the same run (what the command line restates is what it was started
        with), and not a finished one."""
        self._check_config_file(saved)
        before, now = _settings(saved), _settings(asked)
        changed = [f"{key} {before.get(key)!r} -> {now.get(key)!r}" for key in sorted(set(before) | set(now))
                   if before.get(key) != now.get(key)]
        if changed:
            raise ConfigError("--resume", str(self.path), "the run was started with other settings; a resumed run "
                              f"must be the same run: {'; '.join(changed)}")
        if (self.path / FINISHED).exists():
            raise ConfigError("--resume", str(self.path), f"is a finished run (it has {FINISHED}): nothing to "
                              f"resume; evaluate it with: purejaxppo eval {self.path}")

    def _check_config_file(self, saved: Mapping[str, Any]) -> None:
        """config.yaml (sweep.yaml) must hold the values of the checkpoint it is resumed from:
        an edited file, or checkpoints copied in from another run, would have the folder claim
        one run while another one runs. A missing file is written again from the checkpoint."""
        name = self.config_file.name
        if not self.config_file.exists():
            return
        try:
            written = yaml.safe_load(self.config_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            raise ConfigError("--resume", str(self.path), f"cannot read {name} ({type(error).__name__}); restore "
                              "it, or delete it to have it written again from the checkpoint") from None
        if not isinstance(written, dict):
            raise ConfigError("--resume", str(self.path), f"{name} is not a mapping; restore it, or delete it to "
                              "have it written again from the checkpoint")
        written = {**PPOConfig().to_dict(), **written}  # a key added since: the file had its default
        checkpoint = dict(saved["config"])
        if self.command != "train":
            section = written.pop("sweep", None)
            section = section if isinstance(section, dict) else {}
            written.update({f"sweep.{k}": v for k, v in section.items()})
            checkpoint.update({f"sweep.{k}": v for k, v in saved["spec"].items()})
        missing = "(absent)"
        differ = [f"{key} is {written.get(key, missing)!r} in {name} but {checkpoint.get(key, missing)!r} in the "
                  "checkpoint" for key in sorted(set(written) | set(checkpoint))
                  if written.get(key, missing) != checkpoint.get(key, missing)]
        if differ:
            raise ConfigError("--resume", str(self.path), f"{name} disagrees with the checkpoint it would resume "
                              f"from: {'; '.join(differ)}; restore {name} to the checkpoint's values (an edited "
                              "file, or checkpoints from another run?)")

    # ---------------------------------------------------------------- results
    def write_run_results(self, config: PPOConfig, metrics: Mapping[str, np.ndarray], summary: Mapping[str, Any],
                          seeds: list[int]) -> bool:
        """metrics.csv, summary.json, learning_curve.png, summary.md (`_write_results`)."""
        return self._write_results(report.run_artefacts(config, metrics, summary, seeds))

    def write_sweep_results(self, result, rows: list[dict], swept: list[str]) -> bool:
        """metrics.csv (a row per run per update), summary.csv (a row per point), the plots,
        summary.md (`_write_results`)."""
        return self._write_results(report.sweep_artefacts(result, rows, swept))

    def write_pbt_results(self, result, summary: Mapping[str, Any]) -> bool:
        """metrics.csv, pbt.csv (the lineage), summary.json / summary.csv (the final population),
        the plots, summary.md (`_write_results`); `summary`: `report.pbt_summary`."""
        return self._write_results(report.pbt_artefacts(result, summary))

    def _write_results(self, artefacts) -> bool:
        """Each result the folder does not hold yet (a resumed folder: only those missing),
        whole or not at all and apart from the others; a line per file that failed
        (`write_artefacts`). summary.md, the mark of a finished run, is written last: never
        while a checkpoint could not be saved (the final state included), and only if every
        other result was written, or else if no checkpoint is complete (nothing could write the
        rest later). -> False if it is not written: --resume then writes what is missing."""
        artefacts = [(name, make) for name, make in artefacts if name not in self._kept]
        rest = [(name, make) for name, make in artefacts if name != FINISHED]
        if not write_artefacts(self.path, rest, self.failures) and self.newest_checkpoint() is not None:
            return False
        if self.unsaved:
            return False
        write_artefacts(self.path, [a for a in artefacts if a[0] == FINISHED], self.failures)
        return True

    # ---------------------------------------------------------------- reading it back
    def _restore(self, step: int | None):
        """-> (meta, {set name: (config, learner, state with a leading run axis)})."""
        checkpoints = self.checkpoints(create=False)
        meta = checkpoints.meta(step)
        sets = {}
        for name, info in meta["sets"].items():
            cfg = _saved_config(info["config"], checkpoints.folder / str(meta["step"]), f"sets.{name}.config")
            learner = Learner(cfg)
            keys = np.zeros((len(info["runs"]), 2), np.uint32)
            sets[name] = (cfg, learner, jax.eval_shape(jax.vmap(learner.init), keys))
        states, _, _ = checkpoints.restore(meta["step"], {name: shape for name, (_, _, shape) in sets.items()})
        return meta, {name: (cfg, learner, states[name]) for name, (cfg, learner, _) in sets.items()}

    def load(self, step: int | None = None, run: int | None = 0):
        """See `load`."""
        _check_index("run", run), _check_index("step", step)
        meta, sets = self._restore(step)
        if run is None:
            if len(sets) != 1:
                raise CheckpointError(f"{self.path} holds {len(sets)} run sets with different configs: pass run=k")
            cfg, _, state = next(iter(sets.values()))
            return cfg, state
        name, j = self._find(meta, run)
        return self._run_config(meta, name, j), jax.tree.map(lambda x: x[j], sets[name][2])

    def run_config(self, step: int | None = None, run: int = 0) -> PPOConfig:
        """Run `run`'s config, as `load` gives it, without reading the state."""
        _check_index("run", run), _check_index("step", step)
        meta = self.checkpoints(create=False).meta(step)
        return self._run_config(meta, *self._find(meta, run))

    def _find(self, meta: dict, run: int) -> tuple[str, int]:
        """-> (the run set holding run `run`, its place on that set's run axis)."""
        for name, info in meta["sets"].items():
            if run in info["runs"]:
                return name, info["runs"].index(run)
        known = sorted(k for info in meta["sets"].values() for k in info["runs"])
        raise CheckpointError(f"{self.path} has no run {run}; its runs are {known}")

    def _run_config(self, meta: dict, name: str, j: int) -> PPOConfig:
        return _saved_config(meta["sets"][name]["run_configs"][j], self.path, f"sets.{name}.run_configs")

    def evaluate(self, *, episodes: int, seed: int = 0, deterministic: bool = True,
                 step: int | None = None) -> list[dict]:
        """Every run of the folder on `episodes` fresh episodes (the training rollout code),
        keys from `seed` (the same episodes for every run): one dict per run: run, seed
        (None for a checkpoint written without a run's settings), step, returns [episodes].
        Episodes that would not fit in memory raise ResourceError before they run."""
        _check_index("step", step)
        meta, sets = self._restore(step)
        out = []
        for name, (cfg, learner, state) in sets.items():
            evaluate = jax.jit(jax.vmap(lambda s: learner.evaluate(s, episodes, deterministic,
                                                                   jax.random.PRNGKey(seed))),
                               compiler_options=compiler_options())
            with compile_cache.quiet_cache_loads():
                program = evaluate.lower(state).compile()
            _check_fits(program, episodes)
            returns = wait_ready(program(state))  # polled: a stop signal lands at once
            for j, k in enumerate(meta["sets"][name]["runs"]):
                seed_of_run = meta["first_seed"] + k % meta["spec"]["seeds"] if "spec" in meta else None
                out.append({"run": k, "seed": seed_of_run, "step": meta["step"], "returns": returns[j]})
        return sorted(out, key=lambda r: r["run"])


def _check_index(name: str, value) -> None:
    """`run` and `step` of load/evaluate: an integer or None (a string would find nothing)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
        raise ConfigError(name, value, "must be an integer or None")


def _check_fits(program, episodes: int) -> None:
    """The evaluation of `episodes` episodes, compiled, must fit in the device's free memory."""
    memory, free = program.memory_analysis(), free_memory_bytes(jax.devices()[0])
    if memory is None or free is None:
        return
    need = memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes
    if need > free:
        fits = int(episodes * free / need)
        raise ResourceError("episodes", episodes, f"evaluating them needs {need / 2**30:.3g} GiB, more than the "
                            f"{free / 2**30:.3g} GiB free; about {fits} episodes fit")


def _saved_config(values: dict, where: Path, key: str) -> PPOConfig:
    """A config a checkpoint's meta holds, checked as any config: a broken one names the key."""
    try:
        return make_config(values)
    except ImportFailed:  # a healthy checkpoint of a run whose env or network module is not found here
        raise
    except ConfigError as error:
        raise CheckpointError(f"{where}: damaged metadata: {key}: {error}") from None


def load(run_dir, step: int | None = None, run: int | None = 0):
    """A run folder's checkpoint -> (config, state).

    `step`: the checkpoint at that many updates (default: the newest complete one).
    `run`: which run (a train folder's seed index, or a sweep's run index, as in its
    metrics.csv order), with that run's own config; `None` for all runs of a folder with
    one run set, with a leading run axis and the set's config (its static fields).
    The state is the full `LearnerState`: `make_policy(config, state)` acts with it,
    `Learner(config).run(state, ...)` trains on.
    """
    return RunFolder(run_dir).load(step, run)
