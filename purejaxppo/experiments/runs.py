"""Executing runs in chunks: compile, start (or restore), run K updates at a time with a
checkpoint after each chunk, evaluate the final policies.

The runs to execute come as groups (one compile each: runs whose static fields agree),
each a list of run sets (runs scanning the same number of epochs; all run sets of a group
share its one program). A run set's runs are a leading axis over keys and
hyperparameters, sharded over every device by `ShardedRunSets`.

Per group, three compiled programs: `init` (keys -> states; not for runs that continue
from where they stand, `execute`'s `start`, or from a checkpoint), a chunk of K updates
(states, hparams -> states, metrics; one program reused for every chunk; a shorter last
chunk compiles one more) and `evaluate` (states, deterministic -> returns on fresh
episodes; called twice, greedy then sampled: one program, half the size of two). Without
`chunk_updates` the chunk is the whole run. Because the learner state carries the random
streams and the update counter, a run in chunks equals the run in one piece, and a
resumed run equals the run never interrupted (same device layout), bit for bit.

Live progress is reported from the host, between chunks: `progress(updates_done,
episode_return)` is called per run after each chunk. With `chunk_updates` the chunks are
the checkpoints'; without it, a run with `progress` is cut into `progress_chunk` chunks,
between PROGRESS_POINTS / 2 and 2 x PROGRESS_POINTS of them (a divisor of the updates where
one fits: one program; else a shorter last chunk, a program of its own). No program holds
a host callback, so each is written to JAX's persistent compilation cache and a second run
of the same config skips XLA's compile.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.experiments.checkpoint import CheckpointError, Checkpoints
from purejaxppo.experiments.faults import deferred, stop_signals, wait_ready
from purejaxppo.config import HParams, PPOConfig
from purejaxppo.errors import ResourceError
from purejaxppo.experiments.hosts import Cluster, current
from purejaxppo.experiments.parallel import ShardedRunSets, gather_small
from purejaxppo.gate import Bundle
from purejaxppo.train import EVAL_MODES, Learner, TrainResult, evaluation_record

PROGRESS_POINTS = 25  # progress reports per run, from the host (measured: benchmarks/logging_overhead.py)

# what scripts may use (the benchmarks mirror the CLI's progress chunks; runs run through sweep.run_plan)
__all__ = ["progress_chunk"]


@dataclasses.dataclass
class RunSet:
    """Runs sharing one program: a leading run axis over `keys` [n, 2] and `hparams`."""

    name: str            # stable across processes and resumes: the checkpoint's key
    config: PPOConfig    # static fields of every run in the set (max_epochs = its epoch scan)
    runs: list[int]      # each run's index in the caller's list of runs
    keys: np.ndarray
    hparams: HParams
    run_configs: list[PPOConfig]  # each run's own config (its hyperparameters), for the record
    bundle: Bundle | None = None  # the set's program, checked (`gate`; default: its learner passes the gate)
    group: int = 0       # the static group it belongs to (the plan's index; `on_group` names it)


@dataclasses.dataclass
class Timings:
    compiles: int = 0
    compile_seconds: float = 0.0
    run_seconds: float = 0.0         # executing init, chunks and evaluation
    checkpoint_seconds: float = 0.0  # saving checkpoints
    checkpoints: int = 0
    checkpoint_bytes: int = 0        # arrays in the last checkpoint


def _join(parts: list, held: bool):
    """Chunks' metrics joined along the updates (axis 1): numpy parts with numpy; parts left
    where they lie (`held`, several processes: global arrays) on their devices, each device
    joining its own runs' rows, nothing moving between processes."""
    concatenate = jnp.concatenate if held else np.concatenate
    return parts[0] if len(parts) == 1 else jax.tree.map(lambda *xs: concatenate(xs, axis=1), *parts)


def _finite_per_run(params, xp=jnp):
    """Per run (the leading axis), whether every parameter is finite; `xp`: numpy or jax.numpy."""
    return xp.all(xp.stack([xp.all(xp.isfinite(x.reshape(x.shape[0], -1)), axis=1)
                            for x in jax.tree.leaves(params)]), axis=0)


def finite_runs(state, num_runs: int) -> np.ndarray:
    """Per run, whether every parameter is finite: numpy states checked as they are (no
    compile); states left where they lie (several processes' global arrays) checked there, the
    per-run flags gathered (every process takes part)."""
    if all(isinstance(x, np.ndarray) for x in jax.tree.leaves(state.params)):
        return _finite_per_run(state.params, np)
    return gather_small(jax.jit(_finite_per_run)(state.params), num_runs)


def progress_chunk(num_updates: int, points: int = PROGRESS_POINTS) -> int:
    """The chunk of updates between progress reports: the largest divisor of `num_updates`
    (the fewest chunks, each one dispatch from the host, all one program) giving between
    min(num_updates, points / 2) and 2 x points chunks; where none does (a prime number of
    updates above 2 x points), ceil(num_updates / points): at most `points` chunks and at
    least points / 2, the last one shorter (a program of its own)."""
    low, high = min(num_updates, points / 2), 2 * points
    fitting = [k for k in range(1, num_updates + 1) if num_updates % k == 0 and low <= num_updates // k <= high]
    return max(fitting, default=math.ceil(num_updates / points))


class _Programs:
    """A group's compiled programs and its progress."""

    def __init__(self, sets: list[RunSet], chunk_updates, eval_episodes, max_parallel, progress, cluster: Cluster,
                 holds_all: bool = False, until: int | None = None, done: int = 0):
        self.sets = sets
        self.cluster = cluster
        self.num_updates = sets[0].config.num_updates
        self.until = min(until or self.num_updates, self.num_updates)  # where this execution stops
        span = self.until - done  # the updates it runs (`done`: where its runs start)
        # progress is reported from the host after each chunk: the checkpoints' chunks, or progress_chunk's
        if chunk_updates is None and progress is not None:
            chunk_updates = progress_chunk(span)
        self.chunk = max(1, min(chunk_updates or span, span))
        self.progress = progress
        self.learners = [Learner(s.config if s.bundle is None else s.bundle) for s in sets]
        self.max_parallel = max_parallel
        self._init = None  # compiled when first asked for (`init`): runs that continue never need it
        self.shapes = [jax.eval_shape(jax.vmap(learner.init), s.keys) for learner, s in zip(self.learners, sets)]
        self._chunks: dict[int, ShardedRunSets] = {}
        self.chunk_program(self.chunk)
        self.evaluate = None
        if eval_episodes:
            self.evaluate = evaluation_program(self.learners, self.shapes, eval_episodes, max_parallel,
                                               option=("eval_episodes", "the final evaluation of",
                                                       "--eval-episodes, sweep.eval_episodes"))
        # several processes (and no caller reading every run: `gather`, `between`): the states stay where
        # they lie, global arrays padded to the layout, each process holding its devices' runs
        self.held = cluster.several and not holds_all
        self.states = None                       # per set, numpy (held: global arrays), once started
        self.metrics: list[list[dict]] = [[] for _ in sets]
        self.updates_done = 0

    @property
    def init(self) -> ShardedRunSets:
        """keys -> states, every set's."""
        if self._init is None:
            self._init = ShardedRunSets([(learner.init, (s.keys,)) for learner, s in zip(self.learners, self.sets)],
                                        chunk=self.max_parallel)
        return self._init

    @property
    def programs(self) -> list[ShardedRunSets]:
        return [program for program in (self._init, *self._chunks.values(), self.evaluate) if program is not None]

    def evaluation(self) -> list[dict]:
        """Every set's final policies on fresh episodes, greedy and sampled, per set:
        {"deterministic": returns [n, episodes] (NaN: an episode that did not end),
        "deterministic_<field>": [n, episodes] for each of `train.EVAL_FIELDS`, and so for
        "stochastic"} (`train.evaluation_record`)."""
        modes = {name: wait_ready(self.evaluate([(state, np.full(len(s.runs), deterministic))
                                                 for s, state in zip(self.sets, self.states)], held=self.held),
                                  numpy=not self.held)
                 for name, deterministic in EVAL_MODES.items()}
        if self.held:  # the returns to the writer alone ({} elsewhere)
            modes = {name: [self.to_writer(out, len(s.runs)) for out, s in zip(outs, self.sets)]
                     for name, outs in modes.items()}
        per_set = []
        for i in range(len(self.sets)):
            found = {name: outs[i] for name, outs in modes.items() if outs[i] is not None}
            per_set.append({key: value for name, out in found.items()
                            for key, value in evaluation_record(name, out).items()})
        return per_set

    def to_writer(self, tree, num_runs: int):
        """Small outputs left where they lie (`held`) -> numpy on the writer, None on the other
        processes (every one takes part in the gather)."""
        gathered = gather_small(tree, num_runs)
        return gathered if self.cluster.writer else None

    def metrics_so_far(self) -> list:
        """Per set, the metrics of every chunk done, joined along the updates. Each set's list
        of chunks (`self.metrics`, this group's own) is replaced by its join, so that a later
        call (the next checkpoint's save, the end) joins only the chunks that came since, not
        the whole run again. The arrays it hands out are never changed afterwards: a join is
        a new array."""
        for parts in self.metrics:
            parts[:] = [_join(parts, self.held)]
        return [parts[0] for parts in self.metrics]

    def chunk_program(self, updates: int) -> ShardedRunSets:
        if updates not in self._chunks:
            self._chunks[updates] = ShardedRunSets(
                [(lambda state, hp, learner=learner: learner.run(state, hp, updates), (shape, s.hparams))
                 for learner, shape, s in zip(self.learners, self.shapes, self.sets)], chunk=self.max_parallel)
        return self._chunks[updates]


def evaluation_program(learners: list[Learner], shapes: list, episodes: int, max_parallel: int | None = None,
                       keyed: bool = False, option: tuple[str, str, str] = ("episodes", "evaluating",
                                                                            "--episodes")) -> ShardedRunSets:
    """The one evaluation program, compiled: every run's policy on `episodes` fresh episodes,
    for sets of runs (`learners`, and `shapes`: their states, a leading run axis), sharded over
    the devices (`max_parallel` at a time) -> called with, per set, (states, deterministic [n]),
    and with `keyed` a key per run [n, 2] (default: each state's own evaluation key), it gives
    per set `Learner.evaluate_episodes`'s record ([n, episodes] each). Training's final evaluation
    (`execute`), `eval` and `SavedRun.evaluate` (the Python API) run it. Episodes that do not fit in
    memory are a ResourceError naming `option` (name, what evaluates, where it is set)."""
    def fn(learner):
        if keyed:
            return lambda state, deterministic, key: learner.evaluate_episodes(state, episodes, deterministic, key)
        return lambda state, deterministic: learner.evaluate_episodes(state, episodes, deterministic)

    def args(shape):
        n = jax.tree.leaves(shape)[0].shape[0]
        flags = jax.ShapeDtypeStruct((n,), np.bool_)
        return (shape, flags, jax.ShapeDtypeStruct((n, 2), np.uint32)) if keyed else (shape, flags)

    name, what, where = option
    try:
        return ShardedRunSets([(fn(learner), args(shape)) for learner, shape in zip(learners, shapes)],
                              chunk=max_parallel)
    except ResourceError as error:  # the episodes are what does not fit: name them
        raise ResourceError(name, episodes, f"{what} {episodes} episodes per run does not fit ({error.rule}); "
                            f"evaluate fewer episodes ({where})") from None


def execute(groups: list[list[RunSet]], *, eval_episodes: int = 0, chunk_updates: int | None = None,
            max_parallel: int | None = None, progress=None, checkpoints: Checkpoints | None = None,
            meta: dict | None = None, resume: bool = False, checkpoint_chunks: int = 1,
            on_group: Callable[[int, int], None] | None = None, between=None,
            restore_from: Checkpoints | None = None, until: int | None = None,
            start: dict[str, TrainResult] | None = None, gather: bool = False,
            cluster: Cluster | None = None) -> tuple[dict[str, TrainResult], Timings]:
    """Run every group to the end -> ({run set name: its runs' TrainResult}, Timings): the final
    states, the metrics ([n, num_updates, ...]) and the final policies' evaluation ([n, episodes];
    {} without evaluation), each with the set's leading run axis and numpy leaves.

    `until`: stop every group after that many updates instead (its configs, and so their
    schedules, stay as they are: a run stopped there and continued is the run never stopped);
    `start`: run set name -> where its runs stand (a TrainResult's state and metrics, [n, updates
    done, ...]), from which they continue instead of starting (a resume still restores the
    newest checkpoint over it). `gather`: every process ends holding every run's state, as with
    `between` (a caller that reads them all).

    Every group is compiled (and its memory checked) before any runs. With `checkpoints`,
    a checkpoint (every run set started so far: state and metrics; `meta` with the updates
    done added) is saved after every `checkpoint_chunks` chunks of `chunk_updates` and at
    the end, or without it after each group; with `resume`, the newest one is restored
    first (from `restore_from` where given: several processes, of which only one writes,
    all read the newest checkpoint). A Ctrl-C while a chunk computes stops within ~50 ms (`faults.Stopped`, a
    KeyboardInterrupt; the command line's SIGTERM and SIGHUP too): the chunk is dropped,
    the newest checkpoint stays as it was; one during a checkpoint's save stops right after it.
    Several processes (`cluster`: `hosts.join`'s; default `hosts.current()`): each computes its
    devices' runs, the states stay where they lie (unless `gather`) and the metrics and returns
    go to the writer (None elsewhere). A stop any of them received is agreed on after
    each chunk; then they save a checkpoint of that chunk together, and all stop. One
    received during the final evaluation is agreed on after it: the checkpoint of the end is
    saved already, and they all stop (a resume evaluates again).
    `on_group(g, runs)` is called before group g (its sets' `group`) compiles.

    `between` (a kind's step between chunks: `kinds.Schedule`) runs after each chunk: `between(sets, states, metrics
    of the chunk, updates_done) -> states`; it may replace each set's `hparams` and
    `run_configs` (the next chunk runs with them, checkpoints save them); `between.meta()`
    is saved with every checkpoint, and on resume `between.restore(meta, sets)` reads it.
    """
    cluster = cluster or current()
    timings = Timings()
    compiled = []
    for sets in groups:
        if on_group is not None:
            on_group(sets[0].group, sum(len(s.runs) for s in sets))
        started = start is not None and sets[0].name in start
        done = next(iter(start[sets[0].name].metrics.values())).shape[1] if started else 0
        group = _Programs(sets, chunk_updates, eval_episodes, max_parallel, progress, cluster,
                          holds_all=gather or between is not None, until=until, done=done)
        if started:
            group.states = [start[s.name].state for s in sets]
            group.metrics = [[start[s.name].metrics] for s in sets]
            group.updates_done = done
        compiled.append(group)

    if resume:
        _restore(compiled, restore_from or checkpoints, between)
    for group in compiled:  # a group that starts: its init compiled too, before any runs
        if group.states is None:
            group.init  # noqa: B018 (compiles it)

    def save():
        started = [group for group in compiled if group.states is not None]
        step = sum(group.updates_done for group in started)
        states = {s.name: state for group in started for s, state in zip(group.sets, group.states)}
        metrics = {s.name: joined for group in started for s, joined in zip(group.sets, group.metrics_so_far())}
        done = {s.name: group.updates_done for group in started for s in group.sets}
        configs = {s.name: {"config": s.config.to_dict(), "runs": s.runs,
                            "run_configs": [c.to_dict() for c in s.run_configs]}
                   for group in started for s in group.sets}
        extra = between.meta() if between is not None else {}
        checkpoints.save(step, states, metrics, {**(meta or {}), **extra, "updates_done": done, "sets": configs})
        timings.checkpoint_seconds += checkpoints.last_save_seconds
        timings.checkpoints += 1
        timings.checkpoint_bytes = checkpoints.last_save_bytes

    results: dict[str, TrainResult] = {}
    with stop_signals():
        for group in compiled:
            start = time.perf_counter()
            if group.states is None:
                group.states = wait_ready(group.init(held=group.held), numpy=not group.held)
            while group.updates_done < group.until:
                updates = min(group.chunk, group.until - group.updates_done)
                outs = wait_ready(group.chunk_program(updates)([(state, s.hparams)
                                                                 for state, s in zip(group.states, group.sets)],
                                                                held=group.held), numpy=not group.held)
                group.states = [state for state, _ in outs]
                for parts, (_, metrics) in zip(group.metrics, outs):
                    parts.append(metrics)
                group.updates_done += updates
                if between is not None:
                    group.states = between(group.sets, group.states, [metrics for _, metrics in outs],
                                           group.updates_done)
                if group.progress is not None:
                    for state, s in zip(group.states, group.sets):
                        returns = (group.to_writer(state.last_episode_return, len(s.runs)) if group.held
                                   else state.last_episode_return)
                        for ret in np.asarray([] if returns is None else returns).reshape(-1):
                            group.progress(group.updates_done, ret)
                timings.run_seconds += time.perf_counter() - start
                chunks_done = group.updates_done // group.chunk
                stop = cluster.agreed_stop()  # several processes: a stop one received, all at this boundary
                if checkpoints is not None and (stop is not None or chunk_updates and chunks_done % checkpoint_chunks == 0
                                                or group.updates_done == group.until):
                    with deferred():  # a stop signal during the save is raised after it
                        save()
                if stop is not None:
                    raise stop
                start = time.perf_counter()
            evaluation = [{} for _ in group.sets]
            if group.evaluate is not None:
                evaluation = group.evaluation()
                stop = cluster.agreed_stop()  # several processes: a stop received during it (the end's checkpoint stands)
                if stop is not None:
                    raise stop
            timings.run_seconds += time.perf_counter() - start
            for s, state, metrics, ev in zip(group.sets, group.states, group.metrics_so_far(), evaluation):
                if group.held:  # the metrics to the writer alone (None elsewhere); the states stay where they lie
                    metrics = group.to_writer(metrics, len(s.runs))
                results[s.name] = TrainResult(state, metrics, ev)
    timings.compiles = sum(len(group.programs) for group in compiled)
    timings.compile_seconds = sum(p.compile_seconds for group in compiled for p in group.programs)
    return results, timings


def _added_since(saved: dict, shapes: dict) -> dict:
    """A checkpoint's metrics, with each metric the program has and the checkpoint does not (a
    count added to the library since it was written: nothing was counted then) as zeros over
    the updates it holds, so that the chunks still to run join it."""
    updates = next(iter(saved.values())).shape[1]
    return {**{name: np.zeros((x.shape[0], updates, *x.shape[2:]), x.dtype) for name, x in shapes.items()
               if name not in saved}, **saved}


def _restore(compiled: list[_Programs], checkpoints: Checkpoints, between=None) -> None:
    """Each run set's state and metrics from the newest complete checkpoint (and what
    `between` keeps: see `execute`)."""
    meta = checkpoints.meta()
    done = meta.get("updates_done", {})
    by_name = {s.name: (group, i) for group in compiled for i, s in enumerate(group.sets)}
    unknown = sorted(set(done) - set(by_name))
    if unknown:
        raise CheckpointError(f"{checkpoints.folder}: run sets {unknown} are not part of this run")
    held = any(group.held for group in compiled)
    if held:  # several processes: into the layout of this run, each process reading its shards
        abstract = {name: by_name[name][0].init.held_shapes[by_name[name][1]] for name in done}
        history = {}
        for name in done:
            group, i = by_name[name]
            _, chunk_metrics = group.chunk_program(group.chunk).held_shapes[i]
            history[name] = jax.tree.map(lambda x: jax.ShapeDtypeStruct((x.shape[0], done[name], *x.shape[2:]),
                                                                        x.dtype, sharding=x.sharding), chunk_metrics)
        states, metrics, _ = checkpoints.restore(None, abstract, history)
    else:
        abstract = {name: by_name[name][0].shapes[by_name[name][1]] for name in done}
        states, metrics, _ = checkpoints.restore(None, abstract)
    for group in compiled:
        names = [s.name for s in group.sets]
        present = [name in done for name in names]
        if not any(present):
            continue
        if not all(present):
            raise CheckpointError(f"{checkpoints.folder}: holds only some run sets of a group: {names}")
        group.states = [states[name] for name in names]
        if not group.held:
            chunk_metrics = [out[1] for out in group.chunk_program(group.chunk).out_shapes]
            metrics.update({name: _added_since(metrics[name], m) for name, m in zip(names, chunk_metrics)})
        group.metrics = [[metrics[name]] for name in names]
        group.updates_done = done[names[0]]
        if between is not None:
            between.restore(meta, group.sets)
