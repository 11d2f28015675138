"""What the command line says a run left in its folder (`folder.RunFolder`): after a stop, a
lost process, on a process that does not write, and when results could not all be written;
each names the newest complete checkpoint and the command that resumes it. The folder's
`running` takes these as its `lines` (it words nothing itself)."""

from __future__ import annotations

import shlex

from purejaxppo.experiments.folder import FINISHED


def resume_command(folder, path=None) -> str:
    return f"purejaxppo {folder.command} --resume {shlex.quote(str(path or folder.path))}"


def stopped(folder, removed: bool = False) -> str:
    """What a stop left: the newest complete checkpoint and the command to resume; `removed`:
    the folder, claimed by this command and stopped before its first checkpoint, was removed."""
    if not folder.writer:
        return f"process {folder.cluster.index}: process 0 keeps the checkpoints"
    if removed:
        return (f"before the first checkpoint: nothing to resume, and {folder} was removed; the same command "
                f"starts afresh (--checkpoint-every K saves every K updates)")
    newest = folder.newest_checkpoint()
    if newest is None:
        return "before the first checkpoint: nothing to resume (--checkpoint-every K saves every K updates)"
    return f"the newest complete checkpoint is at update {newest}; resume with: {resume_command(folder)}"


def elsewhere(folder, where) -> str:
    """A process that does not write: where process 0 keeps the checkpoints, and the resume command."""
    return (f"process {folder.cluster.index}: the checkpoints are process 0's"
            + (f", in {where}; resume with: {resume_command(folder, where)}" if where else ""))


def left_if_lost(folder, path) -> str:
    """Several processes, should JAX's runtime end this one: what is left (`Cluster.log_runtime`)."""
    if not folder.writer:
        return elsewhere(folder, path)
    return (f"the newest complete checkpoint, untouched, is in {path}/checkpoints; resume with: "
            f"{resume_command(folder, path)}")


def lost(folder, log) -> str:
    """What a lost process left (`log`: the file with the detail and its traceback, or None)."""
    if not folder.writer:
        return elsewhere(folder, folder.asked)
    return (stopped(folder).replace("the newest complete checkpoint", "the newest complete checkpoint, untouched,", 1)
            + (f" (details: {log})" if log is not None else ""))


def unfinished(folder, finished: bool) -> str | None:
    """Where the results could not all be written: what is missing, and how to write it."""
    if finished:
        return None
    newest = folder.newest_checkpoint()
    if newest is not None:  # a complete checkpoint can write the rest
        return (f"purejaxppo: {folder} is not finished ({FINISHED}, its mark, waits for what could not be "
                f"written); the newest complete checkpoint is at update {newest}; once the fault is fixed, "
                f"write what is missing with: {resume_command(folder)}")
    return (f"purejaxppo: {folder} is not finished ({FINISHED}, its mark, is not written): no checkpoint could "
            f"be saved, so nothing can resume it; the results written beside it are this run's")
