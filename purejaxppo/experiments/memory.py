"""Memory, counted before anything runs: what the machine has, and what a sweep needs.

What a device or the host can still allocate (`free_memory_bytes`, `host_memory_bytes`); the
bytes of a tree (`tree_bytes`); whether a number of runs could fit, counted from below before
anything is compiled (`memory_shortfall`, on the layout `ShardedRunSets` uses,
`runs_per_device`); and a sweep's size against it before any point is drawn (`run_size`,
`check_memory`): a sweep too big is refused with the option to lower and the largest value
that could fit, rather than an out-of-memory crash (on a CPU: the kernel killing the
process). Once compiled, XLA's own account of a program is checked by `parallel.ShardedRunSets`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Callable, NamedTuple

import jax
import numpy as np

from purejaxppo.config import HPARAM_FIELDS
from purejaxppo.errors import ResourceError
from purejaxppo.gate import Bundle
from purejaxppo.train import EVAL_MODES, Learner


def host_memory_bytes() -> int | None:
    """Bytes the host can still allocate (its available memory), None if unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None


def free_memory_bytes(device) -> int | None:
    """Bytes one device can still allocate: the accelerator's own count, or on a CPU the
    host's available memory shared by this process's CPU devices. None if unknown."""
    stats = device.memory_stats()
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    available = host_memory_bytes()
    if available is None:
        return None
    return available // max(1, len(jax.local_devices(backend=device.platform)))


def bytes_text(n: float) -> str:
    """`n` bytes for a reader: 1.5 GiB, 300 MiB, 12 KiB."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n / 2**10:.3g} KiB"


def tree_bytes(tree) -> int:
    """The bytes of a tree's arrays (or of their shapes: `jax.ShapeDtypeStruct`s)."""
    return sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


class RunBytes(NamedTuple):
    """One run's memory as `memory_shortfall` counts it."""

    state: int        # its learner state: on its device while it runs, on the host at the end
    kept: int = 0     # its results (metrics, evaluation returns): on the host until the end
    working: int = 0  # the least it needs beside its state while it computes


def memory_shortfall(need: RunBytes, runs: int, devices=None) -> str | None:
    """Whether `runs` runs of `need` bytes each could fit this machine, counted from below before
    anything is compiled: None if they could; else what does not fit, a phrase. The runs are laid
    out as `ShardedRunSets` lays them out (`runs_per_device`, over `devices`: default all): each
    device holds the states of its runs and computes at least one at a time (`working`); the host
    keeps every run's state and results until the end. A CPU device's memory is the host's
    (`free_memory_bytes`): there each device's share of the results counts against it too. A
    sweep that passes is checked again once compiled, by XLA's own account (`ShardedRunSets`)."""
    devices = list(jax.devices() if devices is None else devices)
    if runs < 1:
        return None
    used = min(len(devices), runs)
    per_device = runs_per_device(runs, used, None)
    here = jax.local_devices()
    mine = [d for d in devices if d in here] or devices  # this host's: its memory is what is asked
    on_host = mine[0].platform == "cpu"
    each = (f"{bytes_text(need.state)} of learner state"
            + (f" and {bytes_text(need.kept)} of results" if need.kept else ""))
    working = f", and {bytes_text(need.working)} to compute one" if need.working else ""
    device_need = per_device * (need.state + (need.kept if on_host else 0)) + need.working
    free = free_memory_bytes(mine[0])
    if free is not None and device_need > free:
        return (f"{_runs(runs)}: at least {bytes_text(device_need)} on each of {used} device(s) ({_runs(per_device)} "
                f"there, {each} each{working}), more than the {bytes_text(free)} free per device")
    states_here = -(-runs * len(mine) // len(devices))  # several processes: each keeps its devices' own
    host_need = runs * need.kept + states_here * need.state
    available = None if on_host else host_memory_bytes()
    if available is not None and host_need > available:
        return (f"{_runs(runs)}: at least {bytes_text(host_need)} kept on the host until the end ({each} each), more "
                f"than its {bytes_text(available)} available")
    return None


def _runs(n: int) -> str:
    return f"{n} run{'s' * (n != 1)}"


def runs_per_device(num_runs: int, devices: int, chunk: int | None) -> int:
    """Runs on each device, padded so that chunks divide them (lax.map would otherwise
    compile the remainder as a second copy of the program, with memory of its own)."""
    per_device = -(-num_runs // devices)
    if chunk is not None and chunk < per_device:
        per_device = -(-per_device // chunk) * chunk
    return per_device


# a sweep's size, before anything is drawn or compiled
# what a run holds whatever its config: its key (two uint32) and its hyperparameters (32 bits each)
KEY_AND_HPARAMS = 8 + 4 * len(HPARAM_FIELDS)
EVAL_EPISODES_OPTION = "--eval-episodes, sweep.eval_episodes"  # where the evaluation's episodes are set


# what an evaluation episode keeps of each of its steps, at least: whether the episode ended there,
# its return and how it ended (bool, float32, two bools: `evaluate.evaluate_episodes` reads them over
# every step of its rollout, of env.max_episode_steps steps)
EVAL_STEP_BYTES = 1 + 4 + 1 + 1
# what an update's batch keeps of each step beside its observation, at least: the old log-probability
# and value, the advantage and the target (float32 each)
BATCH_STEP_BYTES = 4 * 4


class RunSize(NamedTuple):
    """One run's bytes as the memory check counts them (`run_size`)."""

    state: int        # its key, hyperparameters and learner state
    metrics: int      # its metrics of every update
    environment: int  # an evaluation episode's while it runs: its environment's state and observation and
                      # what its rollout keeps of each step
    batch: int = 0    # an update's batch of num_envs x num_steps steps, while it is computed

    def need(self, episodes: int) -> RunBytes:
        """With `episodes` evaluation episodes: their returns kept (at least a float32 per mode);
        computing, an update's batch or the episodes' rollouts at once, whichever is larger."""
        return RunBytes(self.state, self.metrics + episodes * 4 * len(EVAL_MODES),
                        max(self.batch, episodes * self.environment))


def run_size(bundle: Bundle) -> RunSize:
    """A run of the bundle's program traced by `jax.eval_shape` (nothing compiles): its learner
    state, one update's metrics times its updates, their epochs counted once (a bound from
    below whatever epochs it runs: every run of a group has the same size), an evaluation
    episode's rollout and an update's batch (their observations, and the least kept per step)."""
    cfg = bundle.config
    learner = Learner(bundle.for_config(dataclasses.replace(cfg, max_epochs=1, update_epochs=1)))
    state = jax.eval_shape(learner.init, jax.ShapeDtypeStruct((2,), np.uint32))
    update = jax.eval_shape(lambda s: learner.run(s, None, 1)[1], state)
    obs = tree_bytes(state.obs) // cfg.num_envs  # one environment's observation
    episode = (tree_bytes(state.env_state) // cfg.num_envs + obs
               + bundle.env.max_episode_steps * EVAL_STEP_BYTES)
    return RunSize(KEY_AND_HPARAMS + tree_bytes(state), cfg.num_updates * tree_bytes(update), episode,
                   cfg.batch_size * (obs + BATCH_STEP_BYTES))


def check_memory(factors: dict[str, tuple[int, str]], eval_episodes: int, size: RunSize) -> None:
    """Refuse a sweep whose runs, each of `size` at least, cannot fit in memory however they are
    chunked (`memory_shortfall`): a ResourceError naming the option to lower and the largest value
    of it that could fit; "runs" where one run alone does not fit. `factors` (a kind's: name ->
    (value, where it is set)) multiply to the number of runs; of them and the evaluation's
    episodes, the option named is the one that needs the smallest cut."""
    sizes = {name: value for name, (value, _) in factors.items()}
    short = memory_shortfall(size.need(eval_episodes), math.prod(sizes.values()))
    if short is None:
        return
    if memory_shortfall(size.need(0), 1) is not None:
        raise ResourceError("runs", math.prod(sizes.values()), f"{short}; one run alone does not fit: use fewer "
                            f"environments (num_envs), steps (num_steps) or updates, or a smaller network")
    options = {**sizes, "eval_episodes": eval_episodes}
    where = {**{name: text for name, (_, text) in factors.items()}, "eval_episodes": EVAL_EPISODES_OPTION}

    def fits(name: str, value: int) -> bool:
        changed = {**options, name: value}
        return memory_shortfall(size.need(changed.pop("eval_episodes")), math.prod(changed.values())) is None

    most = {name: _largest(lambda n, name=name: fits(name, n), value)
            for name, value in options.items() if value > (0 if name == "eval_episodes" else 1)}
    name = max(most, key=lambda name: most[name] / options[name])
    raise ResourceError(name, options[name], f"{short}; at most {most[name]} could fit ({where[name]})")


def _largest(fits: Callable[[int], bool], above: int) -> int:
    """The largest n below `above` that `fits` (true up to some n, false beyond it; 0 if none)."""
    low, high = 0, above
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
