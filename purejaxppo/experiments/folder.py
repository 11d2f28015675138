"""A run or sweep folder, and its one owner, `RunFolder`.

    <folder>/config.yaml or sweep.yaml   the resolved config (a sweep's: base config and spec), at the start
    <folder>/checkpoints/                the checkpoints (checkpoint.Checkpoints: orbax storage)
    <folder>/progress.jsonl              live progress (live.LiveLog)
    <folder>/metrics.csv, summary.*, *.png   the results, at the end

A folder is claimed (created) before anything compiles, so that one that cannot be written
is refused before any work and two runs never share one. Every file is written whole or
not at all and never replaces another (`write_new`); one result that cannot be written
spares the others (`write_artefacts`). A resumed run must be the run the folder was started
with. What the files hold comes from purejaxppo.experiments.report (text and bytes, no I/O).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import jax
import numpy as np
import yaml

from purejaxppo.compiler import compiler_options
from purejaxppo.config import ConfigError, PPOConfig, make_config
from purejaxppo.errors import ResourceError
from purejaxppo.experiments import compile_cache, report
from purejaxppo.experiments.checkpoint import RUN_SETTINGS, CheckpointError, Checkpoints
from purejaxppo.experiments.parallel import free_memory_bytes
from purejaxppo.train import Learner


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


def write_artefacts(folder: Path, artefacts: list[tuple[str, Callable[[], str | bytes]]]) -> list[str]:
    """Write each (file name, function making its contents) as a new file, one after the
    other; a failure (disk full, a plot that cannot be drawn, a file that appeared in the
    meantime) leaves the others. Returns one line per file that failed, naming it and why."""
    failed = []
    for name, make in artefacts:
        try:
            write_new(Path(folder) / name, make())
        except Exception as error:  # noqa: BLE001 -- any failure of one artefact must spare the others
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            failed.append(f"{name}: {type(error).__name__}: {reason}")
    return failed


def _settings(meta: Mapping[str, Any]) -> dict:
    """A run's settings as one flat mapping, to name each one that changed."""
    return {**meta["config"], **{f"sweep.{k}": v for k, v in meta["spec"].items()},
            **{k: v for k, v in meta.items() if k not in ("config", "spec")}}


class RunFolder:
    """One run's (`command` "train") or one sweep's ("sweep") folder: claiming it, its config
    file, the resume check, its checkpoints, its results, and reading it back (load, evaluate)."""

    def __init__(self, path: str | Path, command: str | None = None):
        self.path = Path(path)
        self.command = command

    def __str__(self) -> str:
        return str(self.path)

    @classmethod
    def claim(cls, out: str | None, command: str, env: str) -> RunFolder:
        """Create the folder now: `out`, which must be new or empty, or else a new
        runs/<env>-<time> (runs/sweep-<env>-<time> for a sweep)."""
        if out is not None:
            folder = Path(out)
            if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
                raise ConfigError("--out", out, "exists and is not an empty folder; "
                                  "choose another so no earlier results are overwritten")
            candidates = [folder]
        else:
            stem = Path("runs") / f"{'' if command == 'train' else 'sweep-'}{env}-{time.strftime('%Y%m%d-%H%M%S')}"
            candidates = [stem] + [stem.with_name(f"{stem.name}-{n}") for n in range(2, 1000)]
        for folder in candidates:
            try:
                folder.mkdir(parents=True, exist_ok=out is not None)
                return cls(folder, command)
            except FileExistsError:
                continue
            except OSError as error:
                raise ConfigError("--out", str(folder), f"cannot be created: {error.strerror}") from None
        raise ConfigError("--out", str(candidates[0]), "no free folder name")

    @property
    def config_file(self) -> Path:
        return self.path / ("config.yaml" if self.command == "train" else "sweep.yaml")

    def write_config(self, config: PPOConfig, spec=None) -> None:
        """config.yaml (a run's resolved config) or sweep.yaml (a sweep's base config and `spec`;
        it reloads with sweep.load_sweep)."""
        values = config.to_dict()
        if self.command != "train":
            values["sweep"] = report.spec_dict(spec)
        try:
            write_new(self.config_file, yaml.safe_dump(values, sort_keys=False))
        except OSError as error:
            raise ConfigError("--out", str(self.path), f"cannot write {self.config_file.name}: "
                              f"{error.strerror}") from None

    def checkpoints(self, keep: int | None = None, create: bool = True) -> Checkpoints:
        return Checkpoints(self.path / "checkpoints", keep=keep, create=create)

    # ---------------------------------------------------------------- resuming
    @classmethod
    def to_resume(cls, path: str, command: str) -> tuple[RunFolder, dict]:
        """-> (the folder, the settings its run was started with): a folder of a `command` run."""
        folder = cls(path, command)
        if not folder.path.is_dir():
            raise ConfigError("--resume", path, "is not a folder")
        saved = folder.checkpoints(create=False).meta()
        saved = {k: saved[k] for k in RUN_SETTINGS}
        saved["config"] = {**PPOConfig().to_dict(), **saved["config"]}  # a key added since: the run had its default
        if saved["command"] != command:
            raise CheckpointError(f"{path} holds a {saved['command']} run: resume it with "
                                  f"purejaxppo {saved['command']} --resume {path}")
        return folder, saved

    def check_resume(self, saved: Mapping[str, Any], asked: Mapping[str, Any]) -> None:
        """A resumed run must be the same run (what the command line restates is what it was
        started with), and not a finished one."""
        before, now = _settings(saved), _settings(asked)
        changed = [f"{key} {before.get(key)!r} -> {now.get(key)!r}" for key in sorted(set(before) | set(now))
                   if before.get(key) != now.get(key)]
        if changed:
            raise ConfigError("--resume", str(self.path), "the run was started with other settings; a resumed run "
                              f"must be the same run: {'; '.join(changed)}")
        if (self.path / "summary.md").exists():
            raise ConfigError("--resume", str(self.path), "is a finished run (it has summary.md): nothing to "
                              f"resume; evaluate it with: purejaxppo eval {self.path}")

    # ---------------------------------------------------------------- results
    def write_run_results(self, config: PPOConfig, metrics: Mapping[str, np.ndarray], summary: Mapping[str, Any],
                          seeds: list[int]) -> list[str]:
        """metrics.csv, summary.json, summary.md, learning_curve.png, each whole or not at all and
        apart from the others; a line per file that could not be written (`write_artefacts`)."""
        return write_artefacts(self.path, report.run_artefacts(config, metrics, summary, seeds))

    def write_sweep_results(self, result, rows: list[dict], swept: list[str]) -> list[str]:
        """metrics.csv (a row per run per update), summary.md / summary.csv (a row per point), the
        plots; each whole or not at all and apart from the others; a line per file that failed."""
        return write_artefacts(self.path, report.sweep_artefacts(result, rows, swept))

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
            returns = np.asarray(program(state))
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
