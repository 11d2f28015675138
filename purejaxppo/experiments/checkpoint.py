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
only; reading a run folder back (load, evaluate) is purejaxppo.experiments.saved's.

Every reader gets `meta` through `Checkpoints.meta`, which checks it against one schema
(`check_meta`): a damaged or foreign one is one CheckpointError naming the key, and one
of another format is named by the format and the purejaxppo version that wrote it.
"""

from __future__ import annotations

import importlib.metadata
import logging
import shutil
import sys
import time
from pathlib import Path

import jax
import numpy as np

from purejaxppo.errors import UsageError
from purejaxppo.experiments.hosts import Cluster, alone

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


def _int(value, low: int = 0, high: int | None = None) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool) and value >= low
            and (high is None or value <= high))


def _run_set(info) -> bool:
    return (isinstance(info, dict) and isinstance(info.get("config"), dict)
            and isinstance(info.get("runs"), list) and all(_int(k) for k in info["runs"])
            and len(set(info["runs"])) == len(info["runs"])
            and isinstance(info.get("run_configs"), list) and len(info["run_configs"]) == len(info["runs"])
            and all(isinstance(c, dict) for c in info["run_configs"]))


# key: (its rule, what it must be); what the run was asked to be (experiment.Experiment: its own entry, or
# 0.4.0's keys at the top level) is read and checked by `Experiment.from_meta`
_SCHEMA = {
    "step": (_int, "a non-negative integer"),
    "versions": (lambda v: isinstance(v, dict), "a mapping of package to version"),
    "updates_done": (lambda v: isinstance(v, dict) and all(_int(n) for n in v.values()),
                     "a mapping of run set to the updates it has done"),
    "sets": (lambda v: isinstance(v, dict) and bool(v) and all(_run_set(i) for i in v.values()),
             "a mapping of run set to {config, runs, run_configs} (as many run configs as runs)"),
}


def check_meta(meta, step: int, where: Path) -> dict:
    """A checkpoint's meta (of the checkpoint at `step`, in `where`) checked against the one
    schema every reader relies on -> meta. Another format is named with the purejaxppo that
    wrote it; a missing key, or one of the wrong type or range, is a CheckpointError naming it."""
    if not isinstance(meta, dict):
        raise CheckpointError(f"{where}: not a {FORMAT} checkpoint")
    if meta.get("format") != FORMAT:
        recorded = meta.get("versions") if isinstance(meta.get("versions"), dict) else {}
        if "format" not in meta:  # a purejaxppo checkpoint records its format and versions
            raise CheckpointError(f"{where}: damaged metadata: it has no format" if "purejaxppo" in recorded
                                  else f"{where}: not a {FORMAT} checkpoint")
        written = recorded.get("purejaxppo", "an unknown version")
        raise CheckpointError(f"{where}: a checkpoint in format {meta.get('format')!r} written by purejaxppo "
                              f"{written}; this purejaxppo ({versions()['purejaxppo']}) reads {FORMAT}: read it with "
                              f"the purejaxppo that wrote it")
    for key, (rule, what) in _SCHEMA.items():
        if key not in meta:
            raise CheckpointError(f"{where}: damaged metadata: it has no {key}")
        if not rule(meta[key]):
            raise CheckpointError(f"{where}: damaged metadata: {key}={_short(meta[key])} must be {what}")
    if meta["step"] != step:
        raise CheckpointError(f"{where}: damaged metadata: step={meta['step']} is not its folder's step {step}")
    if set(meta["updates_done"]) != set(meta["sets"]):
        raise CheckpointError(f"{where}: damaged metadata: updates_done names run sets {sorted(meta['updates_done'])}"
                              f", sets names {sorted(meta['sets'])}")
    return meta


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def quiet_late_callbacks() -> None:
    """After a read or a save fails, tensorstore's other operations still in flight finish on
    orbax's event loop, closed by then, from background threads and at any time until the
    process ends: each prints 'RuntimeError: Event loop is closed' (as an unraisable exception,
    or through sys.excepthook), and asyncio logs each future whose exception nobody retrieved.
    They say no more than the one line that reports the failure: those, and only those, are
    dropped, from orbax's first use on (some fire while the failing call is still unwinding)."""
    if getattr(sys.unraisablehook, "drops_closed_loop", False):
        return

    def closed_loop(value) -> bool:
        return isinstance(value, RuntimeError) and str(value) == "Event loop is closed"

    previous_unraisable, previous_except = sys.unraisablehook, sys.excepthook

    def unraisable(info):
        if not closed_loop(info.exc_value):
            previous_unraisable(info)

    def excepthook(kind, value, traceback):
        if not closed_loop(value):
            previous_except(kind, value, traceback)

    def unretrieved(record: logging.LogRecord) -> bool:  # asyncio: "Future exception was never retrieved\n..."
        return not record.getMessage().startswith(("Future exception was never retrieved",
                                                   "Task exception was never retrieved"))

    unraisable.drops_closed_loop = True
    sys.unraisablehook, sys.excepthook = unraisable, excepthook
    logging.getLogger("asyncio").addFilter(unretrieved)


def _ocp():
    import orbax.checkpoint as ocp

    # orbax logs every save at INFO, a failed one (its threads' tracebacks) at ERROR: the caller says it in a line
    logging.getLogger("absl").setLevel(logging.CRITICAL)
    quiet_late_callbacks()
    return ocp


def _nbytes(tree) -> int:  # global arrays of several processes included (np.asarray cannot read those)
    return sum(int(np.prod(np.shape(x))) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def _sharded(tree) -> bool:
    return any(getattr(x, "sharding", None) is not None for x in jax.tree.leaves(tree))


def _rows(tree, rows: int):
    """numpy leaves, the first `rows` of their leading axis: a checkpoint of several processes
    holds the run axis padded as its layout was (devices x runs per device)."""
    return jax.tree.map(lambda x: np.asarray(x)[:rows], tree)


def _stored_part(tree):
    """`tree` with its zero-size leaves as None (an empty subtree), which orbax would refuse
    to write (e.g. MJX's `data.act` where a model has no activations): they hold nothing,
    and `_with_empty` rebuilds them from the run's shapes."""
    return jax.tree.map(lambda x: None if _size(x) == 0 else x, tree)


def _with_empty(stored, abstract):
    """What was stored of a tree (`_stored_part`), its zero-size leaves back as `abstract`
    (its shapes, sharded or not) has them."""
    kept = iter(jax.tree.leaves(stored))
    def leaf(want):
        if _size(want) != 0:
            return next(kept)
        empty = np.zeros(want.shape, want.dtype)
        sharding = getattr(want, "sharding", None)
        return jax.device_put(empty, sharding) if sharding is not None else empty
    return jax.tree.map(leaf, abstract)


def _size(x) -> int:
    return int(np.prod(np.shape(x)))


class Checkpoints:
    """The checkpoints of one run folder (`folder` = <run folder>/checkpoints).

    `keep`: keep only the newest `keep` (None: all). `cluster` (`hosts.join`'s; default this
    process alone): of several processes, on a filesystem all of them share, every process
    opens it at the same point and calls `save`
    with the same tree, global arrays sharded over the processes' devices (each writes the
    shards it holds, numpy leaves are written by process 0, and orbax's barrier finalises the
    checkpoint, renaming it into place, only once every process has finished its part); and
    `restore` reads each process's shards into the sharding asked for. Alone (one process; or
    one of several that reads a folder on its own), this process reads and writes it all.
    """

    def __init__(self, folder: str | Path, keep: int | None = None, create: bool = True,
                 cluster: Cluster | None = None, on_failed_save=None):
        ocp = _ocp()
        self.on_failed_save = on_failed_save
        self.folder = Path(folder).absolute()
        if not create and not self.folder.is_dir():
            raise CheckpointError(f"{self.folder.parent}: no checkpoints/ folder: not a purejaxppo run folder, "
                                  "or it was started before checkpoints existed")
        if create:
            self.folder.mkdir(parents=True, exist_ok=True)
        self.cluster = cluster or alone()
        me = self.cluster.index
        multiprocessing = (ocp.options.MultiprocessingOptions(primary_host=0) if self.cluster.several  # every process
                           else ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me}))
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=False, enable_async_checkpointing=False,
                                               multiprocessing_options=multiprocessing)
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
        """`states` / `metrics`: run set name -> pytree with a leading run axis. A save that fails
        (a full disk, a folder made read-only) raises; or, given `on_failed_save(step, error,
        newest complete step or None)`, has its partial files removed (they would hold the space
        the results need) and is handed to it: the run goes on. A peer process lost mid-save
        (several processes) raises `hosts.LostProcess` either way."""
        ocp = _ocp()
        start = time.perf_counter()
        try:
            self._manager.save(step, args=ocp.args.Composite(
                meta=ocp.args.JsonSave({**meta, "format": FORMAT, "step": step, "versions": versions()}),
                state=ocp.args.StandardSave(_stored_part(states)), history=ocp.args.StandardSave(metrics)))
            self._manager.wait_until_finished()
        except Exception as error:  # orbax raises many kinds (tensorstore: ValueError)
            lost = self.cluster.lost(error)
            if lost is not None:  # several processes: a peer gone mid-save, not a full disk
                raise lost from None
            if self.on_failed_save is None:
                raise
            for partial in self.folder.glob(f"{step}.orbax-checkpoint-tmp*"):
                shutil.rmtree(partial, ignore_errors=True)
            self.on_failed_save(step, error, self.latest())
            return
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
        return check_meta(meta, step, self.folder / str(step))

    def restore(self, step: int | None, abstract_states: dict,
                abstract_history: dict | None = None) -> tuple[dict, dict, dict]:
        """-> (states, metrics, meta) of a step (default: the newest complete one);
        `abstract_states`: run set name -> the state's shapes (`jax.eval_shape`), numpy leaves
        with as many runs as the sets have. Or, to resume over several processes, shapes with
        a `sharding` (and `abstract_history` so too): global arrays in that layout, its run axis
        padded or cut to its shape (zeros in the padding: rows a program computes and drops).
        A checkpoint written by several processes holds the run axis padded as their layout
        was; read into numpy (any number of processes), the padding is dropped."""
        ocp = _ocp()
        step = self._step(step)
        meta = self.meta(step)
        where = self.folder / str(step)
        runs = {name: len(info["runs"]) for name, info in meta["sets"].items()}
        stored = self._stored(step, "state")
        asked, abstract_states = abstract_states, _stored_part(abstract_states)
        sharded = _sharded(abstract_states)
        padded = sharded or any(getattr(x, "sharding", None) is not None for x in stored.values())
        if padded:  # a run axis padded as another layout was, or to be padded as this one is
            self._check_shapes(where, stored, abstract_states, runs)
            if not sharded:  # numpy: each array read whole on this process, its padding cut off
                here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
                abstract_states = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=here),
                                               abstract_states)
                history = self._stored(step, "history")
                abstract_history = {}
                for key, leaf in history.items():
                    name, _, metric = key.partition(".")
                    abstract_history.setdefault(name, {})[metric] = jax.ShapeDtypeStruct(
                        (runs.get(name, leaf.shape[0]), *leaf.shape[1:]), leaf.dtype, sharding=here)
        try:
            restored = self._manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_states, strict=not padded),
                history=(ocp.args.StandardRestore(abstract_history, strict=False) if padded and abstract_history
                         else ocp.args.StandardRestore())))
        except Exception as error:
            raise CheckpointError(f"{where}: unreadable or not matching this run's state "
                                  f"({type(error).__name__}: {str(error).splitlines()[0][:200]})") from None
        restored_states = {name: _with_empty(restored.state[name], abstract) for name, abstract in asked.items()}
        if sharded:
            return restored_states, dict(restored.history), meta
        states = jax.tree.map(np.asarray, restored_states)
        for name, abstract in asked.items():
            for got, want in zip(jax.tree.leaves(states[name]), jax.tree.leaves(abstract)):
                if got.shape != want.shape or got.dtype != want.dtype:
                    raise CheckpointError(f"{where}: run set {name} holds {got.shape} {got.dtype} "
                                          f"where this run has {want.shape} {want.dtype}")
        return states, jax.tree.map(np.asarray, dict(restored.history)), meta

    def _stored(self, step: int, item: str) -> dict:
        """The arrays an item of a checkpoint holds, as stored: dotted name -> orbax's metadata
        (shape, dtype, and the sharding it was saved from: None for numpy)."""
        ocp = _ocp()
        from etils import epath

        try:
            tree = ocp.StandardCheckpointHandler().metadata(epath.Path(self.folder / str(step) / item))
            tree = getattr(tree, "tree", tree)
        except Exception:  # noqa: BLE001 -- no metadata: orbax's read reports what is wrong
            return {}
        leaves = jax.tree_util.tree_leaves_with_path(tree, is_leaf=lambda x: hasattr(x, "shape"))
        return {jax.tree_util.keystr(path, simple=True, separator="."): leaf for path, leaf in leaves
                if hasattr(leaf, "shape")}

    @staticmethod
    def _check_shapes(where: Path, stored: dict, abstract_states: dict, runs: dict) -> None:
        """Before a read that pads or cuts the run axis (orbax's strict=False would pad or cut
        any axis): every other axis as stored, and at least as many rows as the set has runs."""
        for name, abstract in abstract_states.items():
            for path, want in jax.tree_util.tree_leaves_with_path(abstract):
                key = f"{name}.{jax.tree_util.keystr(path, simple=True, separator='.')}"
                got = stored.get(key)
                if got is None:
                    if stored:
                        raise CheckpointError(f"{where}: run set {name} holds no {key}: not this run's state")
                    continue
                shape = tuple(got.shape)
                if shape[1:] != tuple(want.shape[1:]) or not shape or shape[0] < runs.get(name, 0):
                    raise CheckpointError(f"{where}: run set {name} holds {shape} where this run has "
                                          f"{runs.get(name)} runs of {tuple(want.shape[1:])}")
