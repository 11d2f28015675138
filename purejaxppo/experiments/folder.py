"""A run or sweep folder, and its one owner, `RunFolder`, for the run's whole life (`running`).

    <folder>/.lock                       while a process writes the folder: its pid and host
    <folder>/config.yaml or sweep.yaml   the resolved config (a sweep's: base config and spec), at the start
    <folder>/checkpoints/                the checkpoints (checkpoint.Checkpoints: orbax storage)
    <folder>/progress.jsonl, tensorboard/  live progress (live.LiveLog); lost-process.log, process-<i>.log
    <folder>/metrics.csv, summary.*, *.png   the results, at the end; summary.md last

A folder is claimed (created) before anything compiles, so that one that cannot be written
is refused before any work and two runs never share one; one process at a time writes it
(`lock`). Every file is written whole or not at all and never replaces another
(`write_new`); one result that cannot be written spares the others (`write_artefacts`), and
a checkpoint that cannot be saved leaves the run going. summary.md marks a finished run: it
is written only once everything else is (the final checkpoint, every other result), so a
folder whose results were cut short (a stop signal, a full disk) is finished by --resume,
which writes only what is missing. A resumed run must be the run the folder was started
with, and its config file must agree with its checkpoint. What the files hold comes from its
kind (`Kind.write_results`: text and bytes from the report); reading a folder back: saved.SavedRun."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Iterator

from purejaxppo.config import ConfigError
from purejaxppo.errors import UsageError
from purejaxppo.experiments.checkpoint import CheckpointError, Checkpoints
from purejaxppo.experiments.experiment import FOLDERS, Experiment
from purejaxppo.experiments.faults import Failures, Stopped
from purejaxppo.experiments.live import LiveLog
from purejaxppo.experiments.paths import write_artefacts, write_new
from purejaxppo.experiments.saved import SavedRun

FINISHED = "summary.md"  # a finished run's mark, written last


def _alive(pid: int) -> bool:
    """Whether a process `pid` runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


class RunFolder:
    """One run's (`command` "train") or one sweep's ("sweep") folder, written: claiming it, its
    config file, the resume check, its checkpoints, its results. Reading a folder back is not
    this class's: `saved.SavedRun` (restore, then evaluate)."""

    def __init__(self, path: str | Path, command: str | None = None):
        self.path = Path(path)
        self.command = command
        self.cluster = None              # the processes that run in it (`running`'s `hosts.Cluster`)
        self.asked: str | Path | None = None  # ... and then the folder as the command line gave it
        self.run_checkpoints: Checkpoints | None = None  # what the run saves into (`running`)
        self.failures = Failures()       # the writes into the folder that failed
        self.unsaved: list[int] = []     # steps whose checkpoint could not be saved
        self._kept: set[str] = set()     # files a resumed folder held already: not written again
        self._locked = False
        self._claimed = None             # claim: whether it made the folder (True) or took an empty one (False)

    def __str__(self) -> str:
        return str(self.path)

    @property
    def writer(self) -> bool:
        """Whether this process writes the folder's files (False: another process of several does)."""
        return self.cluster is None or self.cluster.writer

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
            stem = Path("runs") / f"{FOLDERS[command].prefix}{name}-{time.strftime('%Y%m%d-%H%M%S')}"
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

    @classmethod
    @contextlib.contextmanager
    def running(cls, experiment: Experiment, *, out: str | None, resume: RunFolder | None,
                lines, cluster) -> Iterator[RunFolder]:
        """The run's folder for the run's whole life: claimed (`out`, or runs/...) or locked (to
        continue `resume`), by process 0 of several (`cluster`: the job's processes,
        `hosts.join`'s; `Cluster.share_folder`); its config file written, its checkpoints opened
        (`run_checkpoints`), then handed to the run (`writer`: whether this process writes its files). However the run ends: a stop's or a lost process's line
        (`lines`: the command line's wording, `outcome`) names the newest complete checkpoint and
        the command to resume; a new folder with no complete
        checkpoint after a stop or a refusal is removed (`discard`); the lock is released."""
        command, env = experiment.command, experiment.config.env
        if cluster.several:  # (the folder on a filesystem every host shares)
            folder = cls._shared(command, out, resume, env, lines, cluster)
        elif resume is not None:
            folder = resume
            folder.lock("--resume")
        else:
            folder = cls.claim(out, command, env)
        folder.cluster = cluster
        discardable = resume is None and not cluster.several  # a new folder, ended before a checkpoint: removed
        try:
            if folder.writer and not folder.config_file.exists():  # a new folder's, or a resumed one's deleted
                folder.write_config(experiment)
            folder.run_checkpoints = folder.checkpoints(keep=experiment.keep, create=not cluster.several)
            yield folder
        except Stopped as stop:
            stop.outcome = lines.stopped(folder, removed=discardable and folder.discard())
            raise
        except UsageError as error:  # a refusal that comes after the claim: the folder must not block the next try
            if not (discardable and folder.discard()):
                raise
            removed = f"; {folder} was removed (it held nothing to resume)"
            if isinstance(error, ConfigError):
                raise type(error)(error.field, error.value, error.rule + removed) from None
            raise UsageError(f"{error}{removed}") from None
        except Exception as error:
            lost = cluster.lost(error)
            if lost is None:
                raise
            lost.outcome = lines.lost(folder, folder.lost_log(lost) if folder.writer else None)
            raise lost from None
        finally:
            folder.unlock()

    @classmethod
    def _shared(cls, command: str, out: str | None, resume: RunFolder | None, env: str, lines,
                cluster) -> RunFolder:
        """Several processes: process 0 claims (or locks) the folder and makes its checkpoints/;
        every other process learns its path -> the folder (`writer` False on the others)."""
        def claim():  # process 0's; a folder whose checkpoints/ cannot be made is unlocked
            if resume is not None:
                resume.lock("--resume")
            claimed = resume if resume is not None else cls.claim(out, command, env)
            try:
                (claimed.path / "checkpoints").mkdir(exist_ok=True)
            except OSError:
                claimed.unlock()
                raise
            return claimed

        given = resume.path if resume is not None else out
        claimed, path = cluster.share_folder(claim, "--resume" if resume is not None else "--out", given or "runs/")
        folder = claimed if claimed is not None else cls(path, command)
        folder.cluster, folder.asked = cluster, given
        cluster.log_runtime(path, lines.left_if_lost(folder, path))
        return folder

    def live_log(self, on_record, tensorboard: bool, wandb: str | None, experiment: Experiment) -> LiveLog:
        """The run's logs: progress.jsonl, TensorBoard (`tensorboard`), W&B (`wandb`: the project),
        written by the writer; `on_record(record)` on every process (a progress bar)."""
        return LiveLog(self.path if self.writer else None, on_record=on_record, tensorboard=tensorboard,
                       wandb_project=wandb if self.writer else None, wandb_config=experiment.to_dict(),
                       failures=self.failures if self.writer else None)

    def lost_log(self, lost) -> Path | None:
        """What a lost process left, with the traceback being handled, in lost-process.log -> its
        path (None: not written)."""
        log = self.path / "lost-process.log"
        try:
            log.write_text(f"{lost.who} was lost; this process (0) saw:\n{traceback.format_exc()}")
        except OSError:
            return None
        return log

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
        return self.path / FOLDERS[self.command].config_file

    def write_config(self, experiment: Experiment) -> None:
        """config.yaml or sweep.yaml: `Experiment.file_text`."""
        try:
            write_new(self.config_file, experiment.file_text())
        except OSError as error:
            raise ConfigError("--out", str(self.path), f"cannot write {self.config_file.name}: "
                              f"{error.strerror}") from None

    def checkpoints(self, keep: int | None = None, create: bool = True) -> Checkpoints:
        """The run's checkpoints, saved by its processes (`cluster`: each saves its shards; see
        `Checkpoints`). A save that fails does not stop the run (`save_failed`)."""
        return Checkpoints(self.path / "checkpoints", keep=keep, create=create, cluster=self.cluster,
                           on_failed_save=self.save_failed)

    def save_failed(self, step: int, error: Exception, newest: int | None) -> None:
        """A checkpoint not saved: said once, in one line; the folder remembers the step (`unsaved`:
        its results are then not marked finished)."""
        self.unsaved.append(step)
        self.failures.report("checkpoints/", error, f"the checkpoint at update {step} is not saved and the run goes "
                             "on; " + (f"the newest complete one is at update {newest}" if newest is not None
                                       else "none is complete"))

    def newest_checkpoint(self) -> int | None:
        """The step of the newest complete checkpoint; None if there is none."""
        try:
            return Checkpoints(self.path / "checkpoints", create=False).latest()  # read by this process alone
        except CheckpointError:
            return None

    # ---------------------------------------------------------------- resuming
    @classmethod
    def to_resume(cls, path: str, command: str) -> tuple[RunFolder, Experiment]:
        """-> (the folder, the experiment its run was started with): a folder of a `command` run."""
        folder = cls(path, command)
        if not folder.path.is_dir():
            raise ConfigError("--resume", path, "is not a folder")
        _, saved = SavedRun(folder.path).read_meta()
        if saved is None:
            raise CheckpointError(f"{path} was checkpointed from Python (sweep(..., checkpoints=...)), not by the "
                                  f"command line: it has no command line to resume; resume it from Python with "
                                  f"resume=True")
        if saved.command != command:
            raise CheckpointError(f"{path} holds a {saved.command} run: resume it with "
                                  f"purejaxppo {saved.command} --resume {path}")
        folder._kept = {p.name for p in folder.path.iterdir()}
        return folder, saved

    def check_resume(self, saved: Experiment, asked: Experiment) -> None:
        """A resumed run must be the run its folder claims (its config file agrees with its
        checkpoint) and the same run (what the command line restates is what it was started
        with: `Experiment.diff`), and not a finished one."""
        self._check_config_file(saved)
        changed = saved.diff(asked)
        if changed:
            raise ConfigError("--resume", str(self.path), "the run was started with other settings; a resumed run "
                              f"must be the same run: {'; '.join(changed)}")
        if (self.path / FINISHED).exists():
            raise ConfigError("--resume", str(self.path), f"is a finished run (it has {FINISHED}): nothing to "
                              f"resume; evaluate it with: purejaxppo eval {self.path}")

    def _check_config_file(self, saved: Experiment) -> None:
        """config.yaml (sweep.yaml) must hold the values of the checkpoint it is resumed from:
        an edited file, or checkpoints copied in from another run, would have the folder claim
        one run while another one runs. A missing file is written again from the checkpoint."""
        name = self.config_file.name
        if not self.config_file.exists():
            return
        try:
            written = saved.read_file_settings(self.config_file)
        except ValueError as error:
            raise ConfigError("--resume", str(self.path), f"{error}; restore it, or delete it to have it written "
                              "again from the checkpoint") from None
        checkpoint = saved.file_settings()
        missing = "(absent)"
        differ = [f"{key} is {written.get(key, missing)!r} in {name} but {checkpoint.get(key, missing)!r} in the "
                  "checkpoint" for key in sorted(set(written) | set(checkpoint))
                  if written.get(key, missing) != checkpoint.get(key, missing)]
        if differ:
            raise ConfigError("--resume", str(self.path), f"{name} disagrees with the checkpoint it would resume "
                              f"from: {'; '.join(differ)}; restore {name} to the checkpoint's values (an edited "
                              "file, or checkpoints from another run?)")

    # ---------------------------------------------------------------- results
    def write_results(self, artefacts) -> bool:
        """The results (`artefacts`: [(file name, a function making its text or bytes)], a kind's:
        `Kind.write_results`): each the folder does not hold yet (a resumed folder: only those missing),
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
