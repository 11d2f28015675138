"""A run or sweep folder read back (`SavedRun`; `folder.RunFolder` is the writer's side):
restore a checkpoint once (`SavedRun.restore`: each run set's config passes the gate once, its
environment built and its network checked; the states read), then pick one run's config and
state out of it (`Restored.run`; `load`, `load_bundle`) or evaluate every run on fresh
episodes (`Restored.evaluate`), as often as needed, without reading or building anything again."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from purejaxppo.config import ConfigError, PPOConfig, check_fields
from purejaxppo.errors import ImportFailed
from purejaxppo.experiments.checkpoint import CheckpointError, Checkpoints
from purejaxppo.experiments.experiment import DamagedRecord, Experiment
from purejaxppo.experiments.faults import wait_ready
from purejaxppo.experiments.runs import evaluation_program
from purejaxppo.gate import Bundle, gate
from purejaxppo.train import Learner


class SavedRun:
    """A folder of checkpoints, read back."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __str__(self) -> str:
        return str(self.path)

    def checkpoints(self, create: bool = True) -> Checkpoints:
        """Its checkpoints, read by this process alone."""
        return Checkpoints(self.path / "checkpoints", create=create)

    def read_meta(self, step: int | None = None) -> tuple[dict, Experiment | None]:
        """-> (the meta of the checkpoint at `step`, default the newest; the experiment it
        records, None for one saved through the Python API): both checked, whatever reads them."""
        checkpoints = self.checkpoints(create=False)
        meta = checkpoints.meta(step)
        try:
            return meta, Experiment.from_meta(meta)
        except DamagedRecord as error:
            raise CheckpointError(f"{checkpoints.folder / str(meta['step'])}: damaged metadata: {error}") from None

    def restore(self, step: int | None = None) -> Restored:
        """The checkpoint at `step` (default: the newest complete one), read once: each run
        set's config through the gate once (its environment built, its network checked), every
        state restored. `Restored.run` and `Restored.evaluate` use it without reading it again."""
        _check_index("step", step)
        checkpoints = self.checkpoints(create=False)
        meta, experiment = self.read_meta(step)
        bundles = {name: _saved(gate, info["config"], checkpoints.folder / str(meta["step"]), f"sets.{name}.config")
                   for name, info in meta["sets"].items()}
        keys = {name: np.zeros((len(info["runs"]), 2), np.uint32) for name, info in meta["sets"].items()}
        shapes = {name: jax.eval_shape(jax.vmap(Learner(bundle).init), keys[name]) for name, bundle in bundles.items()}
        states, _, _ = checkpoints.restore(meta["step"], shapes)
        return Restored(self.path, meta, experiment, {name: (bundle, states[name]) for name, bundle in bundles.items()})

    def load(self, step: int | None = None, run: int | None = 0):
        """See `load`."""
        bundle, state = self.load_bundle(step, run)
        return bundle.config, state

    def load_bundle(self, step: int | None = None, run: int | None = 0) -> tuple[Bundle, Any]:
        """`load`, with the run's config as the gate's bundle (its environment and agent built
        once): what `make_policy` and a replay take without building them again."""
        _check_index("run", run)
        return self.restore(step).run(run)

    def evaluate(self, *, episodes: int, seed: int = 0, deterministic: bool = True,
                 step: int | None = None) -> list[dict]:
        """`Restored.evaluate` of the checkpoint at `step` (default: the newest)."""
        return self.restore(step).evaluate(episodes=episodes, seed=seed, deterministic=deterministic)


class Restored(NamedTuple):
    """A folder's checkpoint, read back once (`SavedRun.restore`)."""

    path: Path
    meta: dict
    experiment: Experiment | None   # what the run was asked to be; None: saved through the Python API
    sets: dict                      # run set name -> (its bundle, its states with a leading run axis)

    def run(self, run: int | None = 0) -> tuple[Bundle, Any]:
        """Run `run`'s bundle (its own config on its set's program) and state; `run=None`: every
        run of a folder with one run set, with its leading run axis and the set's bundle."""
        _check_index("run", run)
        if run is None:
            if len(self.sets) != 1:
                raise CheckpointError(f"{self.path} holds {len(self.sets)} run sets with different configs: "
                                      "pass run=k")
            return next(iter(self.sets.values()))
        name, j = _find(self.path, self.meta, run)
        bundle, states = self.sets[name]
        try:  # the run's own hyperparameters, on its set's program
            bundle = bundle.for_config(_run_config(self.path, self.meta, name, j))
        except ConfigError as error:
            raise CheckpointError(f"{self.path}: damaged metadata: sets.{name}.run_configs: {error}") from None
        return bundle, jax.tree.map(lambda x: x[j], states)

    def evaluate(self, *, episodes: int, seed: int = 0, deterministic: bool = True) -> list[dict]:
        """Every run on `episodes` fresh episodes (the training rollout code), keys from `seed`
        (the same episodes for every run): one dict per run: run, seed (None for a checkpoint
        written without a run's settings), step, returns, lengths and time_limit (ended by the
        environment's time limit) [episodes] each. It runs the one evaluation program
        (`runs.evaluation_program`, sharded over the devices): episodes that would not fit in
        memory raise ResourceError before they run."""
        sets = list(self.sets.items())
        shapes = [jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state) for _, (_, state) in sets]
        program = evaluation_program([Learner(bundle) for _, (bundle, _) in sets], shapes, episodes, keyed=True)
        key = np.asarray(jax.random.PRNGKey(seed))  # the same episodes for every run
        args = []
        for name, (_, state) in sets:
            n = len(self.meta["sets"][name]["runs"])
            args.append((state, np.full(n, deterministic), np.tile(key, (n, 1))))
        experiment, out = self.experiment, []
        for (name, _), done in zip(sets, wait_ready(program(args))):  # polled: a stop signal lands at once
            for j, k in enumerate(self.meta["sets"][name]["runs"]):
                seed_of_run = None if experiment is None else experiment.first_seed + k % experiment.spec.seeds
                out.append({"run": k, "seed": seed_of_run, "step": self.meta["step"], "returns": done["return"][j],
                            "lengths": done["length"][j], "time_limit": done["time_limit"][j]})
        return sorted(out, key=lambda r: r["run"])


def _find(path: Path, meta: dict, run: int) -> tuple[str, int]:
    """-> (the run set holding run `run`, its place on that set's run axis)."""
    for name, info in meta["sets"].items():
        if run in info["runs"]:
            return name, info["runs"].index(run)
    known = sorted(k for info in meta["sets"].values() for k in info["runs"])
    raise CheckpointError(f"{path} has no run {run}; its runs are {known}")


def _run_config(path: Path, meta: dict, name: str, j: int) -> PPOConfig:
    return _saved(check_fields, meta["sets"][name]["run_configs"][j], path, f"sets.{name}.run_configs")


def _check_index(name: str, value) -> None:
    """`run` and `step` of load/evaluate: an integer or None (a string would find nothing)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
        raise ConfigError(name, value, "must be an integer or None")


def _saved(check: Callable, values: dict, where: Path, key: str):
    """`check(values)` (the gate, or check_fields) of a config a checkpoint's meta holds, checked
    as any config: a broken one names the key."""
    try:
        return check(values)
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
    return SavedRun(run_dir).load(step, run)
