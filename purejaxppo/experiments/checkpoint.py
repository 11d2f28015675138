"""Checkpoints of whole run folders with orbax-checkpoint.

A checkpoint holds, for every run set (runs sharing one compiled program; a run set's
arrays have a leading run axis), the **full** learner state (parameters, optimiser
state, agent state, environment state and observation, keys, update counter, episode
statistics) and the metrics so far, plus `meta`: the resolved configs, what the run was
asked to do (so it can be resumed), the updates done and the library versions.

    <run folder>/checkpoints/<step>/{meta, state, history}     (history: the metrics so far)

`step` is the number of updates done over all run sets. orbax writes a checkpoint into a
temporary folder and renames it when complete, so a checkpoint cut short (a killed
process) is never listed; the newest listed one is complete.
"""

from __future__ import annotations

import importlib.metadata
import logging
import time
from pathlib import Path

import jax
import numpy as np

from purejaxppo.compiler import compiler_options
from purejaxppo.config import make_config
from purejaxppo.errors import UsageError
from purejaxppo.train import Learner

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

    logging.getLogger("absl").setLevel(logging.ERROR)  # orbax logs every save at INFO
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


# --------------------------------------------------------------------------------------
# Reading a run folder back
# --------------------------------------------------------------------------------------
def _restore_folder(run_dir, step):
    """-> (meta, {set name: (config, learner, state with a leading run axis)})."""
    checkpoints = Checkpoints(Path(run_dir) / "checkpoints", create=False)
    meta = checkpoints.meta(step)
    sets = {}
    for name, info in meta["sets"].items():
        cfg = make_config(info["config"])
        learner = Learner(cfg)
        keys = np.zeros((len(info["runs"]), 2), np.uint32)
        sets[name] = (cfg, learner, jax.eval_shape(jax.vmap(learner.init), keys))
    states, _, _ = checkpoints.restore(meta["step"], {name: shape for name, (_, _, shape) in sets.items()})
    return meta, {name: (cfg, learner, states[name]) for name, (cfg, learner, _) in sets.items()}


def load(run_dir, step: int | None = None, run: int | None = 0):
    """A run folder's checkpoint -> (config, state).

    `step`: the checkpoint at that many updates (default: the newest complete one).
    `run`: which run (a train folder's seed index, or a sweep's run index, as in its
    metrics.csv order), with that run's own config; `None` for all runs of a folder with
    one run set, with a leading run axis and the set's config (its static fields).
    The state is the full `LearnerState`: `make_policy(config, state)` acts with it,
    `Learner(config).run(state, ...)` trains on.
    """
    meta, sets = _restore_folder(run_dir, step)
    if run is None:
        if len(sets) != 1:
            raise CheckpointError(f"{run_dir} holds {len(sets)} run sets with different configs: pass run=k")
        cfg, _, state = next(iter(sets.values()))
        return cfg, state
    for name, (_, _, state) in sets.items():
        runs = meta["sets"][name]["runs"]
        if run in runs:
            j = runs.index(run)
            return make_config(meta["sets"][name]["run_configs"][j]), jax.tree.map(lambda x: x[j], state)
    known = sorted(k for info in meta["sets"].values() for k in info["runs"])
    raise CheckpointError(f"{run_dir} has no run {run}; its runs are {known}")


def evaluate_folder(run_dir, *, episodes: int, seed: int = 0, deterministic: bool = True,
                    step: int | None = None) -> list[dict]:
    """Every run of a folder on `episodes` fresh episodes (the training rollout code),
    keys from `seed` (the same episodes for every run): one dict per run: run, seed,
    step, returns [episodes]."""
    meta, sets = _restore_folder(run_dir, step)
    first_seed, seeds = meta["first_seed"], meta["spec"]["seeds"]
    out = []
    for name, (cfg, learner, state) in sets.items():
        evaluate = jax.jit(jax.vmap(lambda s: learner.evaluate(s, episodes, deterministic, jax.random.PRNGKey(seed))),
                           compiler_options=compiler_options())
        returns = np.asarray(evaluate(state))
        for j, k in enumerate(meta["sets"][name]["runs"]):
            out.append({"run": k, "seed": first_seed + k % seeds, "step": meta["step"], "returns": returns[j]})
    return sorted(out, key=lambda r: r["run"])
