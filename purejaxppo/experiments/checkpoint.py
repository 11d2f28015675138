"""Checkpoints of whole run folders with orbax-checkpoint.

A checkpoint holds, for every run set (runs sharing one compiled program; a run set's
arrays have a leading run axis), the **full** learner state (parameters, optimiser
state, agent state, environment state and observation, keys, update counter, episode
statistics) and the metrics so far, plus `meta`: the resolved configs, what the run was
asked to do (so it can be resumed), the updates done and the library versions.

    <run folder>/checkpoints/<step>/{meta, state, history}     (history: the metrics so far)

`step` is the number of updates done over all run sets. orbax writes a checkpoint into a
temporary folder and renames it when complete, so a checkpoint cut short (a killed
process) is never listed; the newest listed one is complete. This module is the storage
only; reading a run folder back (load, evaluate) is purejaxppo.experiments.folder's.
"""

from __future__ import annotations

import importlib.metadata
import logging
import time
from pathlib import Path

import jax
import numpy as np

from purejaxppo.errors import UsageError

FORMAT = "purejaxppo-checkpoint/1"
VERSIONED = ("purejaxppo", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "gymnax")


class CheckpointError(UsageError):
    """A checkpoint folder that cannot be used: missing, unreadable, foreign, or not matching."""


def versions() -> dict[str, str]:
    out = {}
    for name in VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _ocp():
    import orbax.checkpoint as ocp

    # orbax logs every save at INFO, a failed one (its threads' tracebacks) at ERROR: the caller says it in a line
    logging.getLogger("absl").setLevel(logging.CRITICAL)
    return ocp


def _nbytes(tree) -> int:
    return sum(np.asarray(x).nbytes for x in jax.tree.leaves(tree))


class Checkpoints:
    """The checkpoints of one run folder (`folder` = <run folder>/checkpoints).

    `keep`: keep only the newest `keep` (None: all). Only process 0 writes.
    """

    def __init__(self, folder: str | Path, keep: int | None = None, create: bool = True):
        ocp = _ocp()
        self.folder = Path(folder).absolute()
        if not create and not self.folder.is_dir():
            raise CheckpointError(f"{self.folder.parent}: no checkpoints/ folder: not a purejaxppo run folder, "
                                  "or it was started before checkpoints existed")
        if create:
            self.folder.mkdir(parents=True, exist_ok=True)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, create=False, enable_async_checkpointing=False,
            multiprocessing_options=ocp.options.MultiprocessingOptions(primary_host=0, active_processes={0}))
        self._manager = ocp.CheckpointManager(self.folder, options=options)
        self.last_save_seconds = 0.0
        self.last_save_bytes = 0

    def steps(self) -> list[int]:
        """Complete checkpoints, oldest first."""
        return sorted(self._manager.all_steps(read=True))

    def latest(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def save(self, step: int, states: dict, metrics: dict, meta: dict) -> None:
        """`states` / `metrics`: run set name -> pytree with a leading run axis."""
        ocp = _ocp()
        start = time.perf_counter()
        self._manager.save(step, args=ocp.args.Composite(
            meta=ocp.args.JsonSave({**meta, "format": FORMAT, "step": step, "versions": versions()}),
            state=ocp.args.StandardSave(states), history=ocp.args.StandardSave(metrics)))
        self._manager.wait_until_finished()
        self.last_save_seconds = time.perf_counter() - start
        self.last_save_bytes = _nbytes(states) + _nbytes(metrics)

    def _step(self, step: int | None) -> int:
        steps = self.steps()
        if not steps:
            raise CheckpointError(f"{self.folder}: holds no complete checkpoint")
        if step is None:
            return steps[-1]
        if step not in steps:
            raise CheckpointError(f"{self.folder}: no checkpoint at step {step}; there are {steps}")
        return step

    def meta(self, step: int | None = None) -> dict:
        ocp = _ocp()
        step = self._step(step)
        try:
            meta = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
        except Exception as error:  # orbax raises many kinds; the user needs one line
            raise CheckpointError(f"{self.folder / str(step)}: unreadable checkpoint "
                                  f"({type(error).__name__}: {str(error).splitlines()[0][:200]})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise CheckpointError(f"{self.folder / str(step)}: not a {FORMAT} checkpoint")
        return meta

    def restore(self, step: int | None, abstract_states: dict) -> tuple[dict, dict, dict]:
        """-> (states, metrics, meta) of a step (default: the newest complete one);
        `abstract_states`: run set name -> the state's shapes (`jax.eval_shape`)."""
        ocp = _ocp()
        step = self._step(step)
        meta = self.meta(step)
        try:
            restored = self._manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_states), history=ocp.args.StandardRestore()))
        except Exception as error:
            raise CheckpointError(f"{self.folder / str(step)}: unreadable or not matching this run's state "
                                  f"({type(error).__name__}: {str(error).splitlines()[0][:200]})") from None
        states = jax.tree.map(np.asarray, restored.state)
        for name, abstract in abstract_states.items():
            for got, want in zip(jax.tree.leaves(states[name]), jax.tree.leaves(abstract)):
                if got.shape != want.shape or got.dtype != want.dtype:
                    raise CheckpointError(f"{self.folder / str(step)}: run set {name} holds {got.shape} {got.dtype} "
                                          f"where this run has {want.shape} {want.dtype}")
        return states, jax.tree.map(np.asarray, dict(restored.history)), meta
