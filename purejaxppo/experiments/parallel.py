"""Many runs as one program: vmap over a leading run axis, sharded over every device.

The run axis is split over `jax.devices()` with a 1-D `Mesh` and `NamedSharding`; it is
padded (by repeating the last run) to a multiple of the device count, and the padding is
dropped from the outputs. On a CPU, `use_all_cpu_cores()` (called before JAX starts its
backend) makes each core a host device, so runs spread over the cores.

Several processes (hosts): after `init_distributed()` (explicit JAX_* variables, or a
cluster JAX detects: SLURM, Open MPI, a TPU pod) every process builds the
same inputs and computes the shard on its own devices. A call gathers the outputs to every
process; `held=True` leaves them where they lie (global `jax.Array`s, padded, each process
holding its own shards: the learner states), and `small_to_writer` gathers the small ones
(metrics, returns) for the writer alone. Only `is_writer()` (process 0) writes.

Memory is checked before anything runs, so a sweep too big for the device fails with a
clear error instead of an out-of-memory crash (on a CPU: the kernel killing the process).
Before compiling, the shapes of the results are traced: if the results alone do not fit,
no chunking can help. After compiling, XLA's own account of the program's memory per
device (arguments + results + temporaries) is compared with what the device has free;
temporaries grow with the runs in flight, so the error says how many would fit.
"""

from __future__ import annotations

import errno
import hashlib
import inspect
import math
import os
import socket
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from purejaxppo.compiler import compiler_options
from purejaxppo.errors import NO_VALUE, ConfigError, ResourceError
from purejaxppo.experiments import compile_cache
from purejaxppo.experiments.faults import (STOP_SIGNALS, Stopped, heartbeat_seconds, integer_variable, interruptible,
                                           stop_signals)

CPU_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def use_all_cpu_cores() -> None:
    """Expose one host device per CPU core, unless XLA_FLAGS already says how many.

    Only effective before JAX initialises its CPU backend (first computation).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if CPU_DEVICES_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {CPU_DEVICES_FLAG}={os.cpu_count() or 1}".strip()


CLUSTER_VARIABLE = "PUREJAXPPO_CLUSTER"  # off: run alone, whatever the JAX_* or a scheduler's variables say
_ON, _OFF = ("on", "1", "yes", "true"), ("off", "0", "no", "false")
_EXPLICIT = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")
# a scheduler's variables: (the job's, if any; its number of processes; what each process needs with
# it for JAX to detect the job; the launcher that sets them)
_SCHEDULERS = (("SLURM_JOB_ID", "SLURM_NTASKS", ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NODELIST"), "srun"),
               (None, "OMPI_COMM_WORLD_SIZE", ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"), "mpirun"))
_JOIN_TIMEOUT_SECONDS = 300  # JAX's default initialization timeout


def cluster_setting() -> bool:
    """$PUREJAXPPO_CLUSTER: on (the default; also 1, yes, true) or off (0, no, false: run alone);
    another value is a ConfigError."""
    text = os.environ.get(CLUSTER_VARIABLE, "")
    value = text.strip().lower()
    if value in ("", *_ON):
        return True
    if value in _OFF:
        return False
    raise ConfigError(CLUSTER_VARIABLE, text, "must be on or off (also 1 or 0, yes or no, true or false)")


def _detected():
    """JAX's detection class of the cluster that `detected_cluster` names, or None."""
    try:
        from jax._src import clusters  # JAX's detection (private; absent or changed: no detection)

        kinds = [kind for kind in clusters.ClusterEnv._cluster_types if not getattr(kind, "opt_in_only_method", False)]
    except (ImportError, AttributeError):
        return None
    for kind in kinds:
        try:
            if kind.is_env_present() and kind.get_process_count() > 1:
                return kind
        except Exception:  # an environment half present (a variable that is no number, no metadata server)
            continue
    return None


def detected_cluster() -> str | None:
    """The cluster JAX's own detection finds (`slurm`, `ompi`, a Cloud TPU pod's `gce_tpu` or
    `gke_tpu`, ...) when it runs more than one process of this job; None on a workstation, or
    under a scheduler that started one process (e.g. SLURM with one task): then nothing waits
    for a coordinator."""
    kind = _detected()
    return None if kind is None else getattr(kind, "name", kind.__name__)


def _check_scheduler_variables() -> None:
    """No cluster detected, but a scheduler's variables say there are several processes (e.g.
    SLURM_JOB_ID and SLURM_NTASKS=2, outside srun): a ConfigError naming the one missing, rather
    than a process alone that the others would wait for."""
    for job, count_name, needed, launcher in _SCHEDULERS:
        if job is not None and not os.environ.get(job):
            continue
        count = integer_variable(count_name, 1)
        missing = [name for name in needed if not os.environ.get(name)]
        if count is not None and count > 1 and missing:
            given = f"{job} and {count_name}={count}" if job else f"{count_name}={count}"
            raise ConfigError(missing[0], NO_VALUE, f"must be set with {given} (a job of {count} processes; "
                              f"{launcher} sets it for each): start every process with {launcher}, or run "
                              f"alone with --no-cluster ({CLUSTER_VARIABLE}=off)")


def check_address(address: str) -> str:
    """A coordinator address `host:port` (`[v6]:port` for IPv6), else a ConfigError naming JAX_COORDINATOR_ADDRESS."""
    host, _, port = address.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    if not host or any(c.isspace() or c in "/[]" for c in host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError("JAX_COORDINATOR_ADDRESS", address,
                          "must be host:port, the coordinator (process 0) and a free port on it, e.g. 10.0.0.1:12345")
    if ":" in host and not bracketed:  # "::1:1234": which colon ends the address?
        raise ConfigError("JAX_COORDINATOR_ADDRESS", address,
                          "an IPv6 address must be in brackets: [address]:port, e.g. [fe80::1]:12345")
    return address


def _port_in_use(port: int) -> bool:
    """Whether another program listens on `port` of this host, on an address that JAX's
    coordination service (binding every address, IPv4 and IPv6) would take too."""
    for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            with socket.socket(family) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC: old closed connections do not count
                s.bind((host, port))
        except OSError as error:  # EADDRINUSE, or a family this host lacks
            if error.errno == errno.EADDRINUSE:
                return True
    return False


def _join(options: dict, kind) -> None:
    """`jax.distributed.initialize(**options)`, the coordinator's address and this process's index
    found as JAX's detection (`kind`) finds them. Process 0 first checks that its coordinator's
    port is free: where it is taken, JAX's service fails with a C++ log line and a crash (SIGSEGV)."""
    address, index = options["coordinator_address"], options["process_id"]
    if kind is not None:
        port = os.environ.get("JAX_COORDINATOR_PORT") or None
        address = address or kind.get_coordinator_address(timeout_secs=_JOIN_TIMEOUT_SECONDS,
                                                           override_coordinator_port=port)
        index = kind.get_process_id() if index is None else index
    port = int(address.rpartition(":")[2])
    if index == 0 and not os.environ.get("JAX_COORDINATOR_BIND_ADDRESS") and _port_in_use(port):
        taken = f"port {port} is in use on this host (process 0's): another program or another run holds it"
        if options["coordinator_address"] is not None:
            raise ConfigError("JAX_COORDINATOR_ADDRESS", address,
                              f"{taken}; give every process an address with another free port")
        raise ConfigError("JAX_COORDINATOR_PORT", os.environ.get("JAX_COORDINATOR_PORT") or NO_VALUE,
                          f"the {kind.name} coordinator's {taken}; set JAX_COORDINATOR_PORT to another free port, "
                          f"the same for every process")
    jax.distributed.initialize(**{**options, "coordinator_address": address})


def init_distributed(detect: bool = True) -> str | None:
    """Join the job's other processes, before JAX starts a backend -> how they were found
    ("JAX_* variables", or the cluster's name), or None: a single process, nothing joined.

    Off (`detect` False: --no-cluster, or $PUREJAXPPO_CLUSTER off): None, whatever the
    variables say. Else explicit variables first: JAX_COORDINATOR_ADDRESS (host:port),
    JAX_NUM_PROCESSES and JAX_PROCESS_ID, all three; else a cluster that JAX detects
    (`detected_cluster`). Bad or half-set variables are a ConfigError, before anything joins.
    The wait for the other processes can be stopped by a stop signal (`Stopped`, with its
    outcome). CPU collectives use gloo; the heartbeat timeout is `heartbeat_seconds()`."""
    if not cluster_setting() or not detect:
        return None  # alone: no JAX_* or scheduler variable is read
    address = os.environ.get("JAX_COORDINATOR_ADDRESS") or None
    count, index = integer_variable("JAX_NUM_PROCESSES", 1), integer_variable("JAX_PROCESS_ID", 0)
    if address is not None:
        check_address(address)
    if count is not None and index is not None and index >= count:
        raise ConfigError("JAX_PROCESS_ID", index, f"must be below JAX_NUM_PROCESSES={count} (processes count from 0)")
    kind = _detected()
    cluster = None if kind is None else getattr(kind, "name", kind.__name__)
    given = [name for name, value in zip(_EXPLICIT, (address, count, index)) if value is not None]
    if cluster is None and len(given) < 3:
        _check_scheduler_variables()
        if not given:
            return None
        missing = next(name for name in _EXPLICIT if name not in given)
        raise ConfigError(missing, NO_VALUE, f"must be set with {given[0]} (no cluster detected to tell it): set "
                          "all three, JAX_COORDINATOR_ADDRESS (process 0's host:port), JAX_NUM_PROCESSES and "
                          "JAX_PROCESS_ID (this process's, from 0), or none, or run alone with --no-cluster")
    heartbeat = heartbeat_seconds()
    options = {"coordinator_address": address, "num_processes": count, "process_id": index}
    accepted = inspect.signature(jax.distributed.initialize).parameters
    if "heartbeat_timeout_seconds" in accepted:  # (jax 0.9.2 and 0.11.2 both take it)
        options["heartbeat_timeout_seconds"] = heartbeat
    if cluster is not None and "cluster_detection_method" in accepted:
        options["cluster_detection_method"] = cluster  # the one detected here, should another be present too
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    where = address or f"the {cluster} cluster's coordinator"
    with stop_signals(STOP_SIGNALS):  # JAX waits in C++, in a thread of its own: a stop lands while it waits
        try:
            interruptible(_join, options, kind)
        except Stopped as stop:
            stop.outcome = f"while waiting for the other processes to join ({where}): nothing was written"
            raise
        except ConfigError:
            raise
        except Exception as error:  # no coordinator within the timeout, a cluster half set up
            text = str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__
            raise ConfigError("JAX_COORDINATOR_ADDRESS" if address else "cluster", where,
                              f"could not join the other processes ({text}); {CLUSTER_VARIABLE}=off runs "
                              f"alone") from None
    return "JAX_* variables" if address is not None else cluster


def joined_line(how: str) -> str:
    """The first line of a run over several processes: who joined, and who writes."""
    processes, devices = jax.process_count(), jax.device_count()
    return (f"purejaxppo: process {jax.process_index()} of {processes} joined (via {how}); {devices} device(s) in "
            f"all, {jax.local_device_count()} here; process 0 writes the folder")


def agree(name: str, text: str) -> None:
    """Every process's `text` compared by a hash (one small all-gather): where one differs,
    a ConfigError on every process, naming which processes differ from process 0."""
    digest = np.frombuffer(hashlib.sha256(text.encode()).digest()[:8], dtype=np.uint8).astype(np.int32)
    from jax.experimental import multihost_utils

    every = np.asarray(multihost_utils.process_allgather(digest))  # [processes, 8]
    differ = [i for i in range(every.shape[0]) if not np.array_equal(every[i], every[0])]
    if differ:
        raise ConfigError(name, NO_VALUE, f"process(es) {', '.join(map(str, differ))} differ from process 0 "
                          f"(compared by a hash before compiling): start every process with the same command, "
                          f"config files and versions")


def is_writer() -> bool:
    """Whether this process writes results (process 0)."""
    return jax.process_index() == 0


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


def _size(n: float) -> str:
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
    out as `ShardedRunSets` lays them out (`_runs_per_device`, over `devices`: default all): each
    device holds the states of its runs and computes at least one at a time (`working`); the host
    keeps every run's state and results until the end. A CPU device's memory is the host's
    (`free_memory_bytes`): there each device's share of the results counts against it too. A
    sweep that passes is checked again once compiled, by XLA's own account (`ShardedRunSets`)."""
    devices = list(jax.devices() if devices is None else devices)
    if runs < 1:
        return None
    used = min(len(devices), runs)
    per_device = _runs_per_device(runs, used, None)
    mine = [d for d in devices if d.process_index == jax.process_index()] or devices
    on_host = mine[0].platform == "cpu"
    each = f"{_size(need.state)} of learner state" + (f" and {_size(need.kept)} of results" if need.kept else "")
    working = f", and {_size(need.working)} to compute one" if need.working else ""
    device_need = per_device * (need.state + (need.kept if on_host else 0)) + need.working
    free = free_memory_bytes(mine[0])
    if free is not None and device_need > free:
        return (f"{_runs(runs)}: at least {_size(device_need)} on each of {used} device(s) ({_runs(per_device)} "
                f"there, {each} each{working}), more than the {_size(free)} free per device")
    states_here = -(-runs * len(mine) // len(devices))  # several processes: each keeps its devices' own
    host_need = runs * need.kept + states_here * need.state
    available = None if on_host else host_memory_bytes()
    if available is not None and host_need > available:
        return (f"{_runs(runs)}: at least {_size(host_need)} kept on the host until the end ({each} each), more "
                f"than its {_size(available)} available")
    return None


def _runs(n: int) -> str:
    return f"{n} run{'s' * (n != 1)}"


def _runs_per_device(num_runs: int, devices: int, chunk: int | None) -> int:
    """Runs on each device, padded so that chunks divide them (lax.map would otherwise
    compile the remainder as a second copy of the program, with memory of its own)."""
    per_device = -(-num_runs // devices)
    if chunk is not None and chunk < per_device:
        per_device = -(-per_device // chunk) * chunk
    return per_device


class _Layout(NamedTuple):
    """One run set on the devices: `devices` x `per_device` slots, the first `num_runs` real."""

    num_runs: int
    devices: int
    per_device: int

    @property
    def padded(self) -> int:
        return self.devices * self.per_device


def _pad(tree, size: int):
    def pad(x):
        extra = size - x.shape[0]
        return x if extra == 0 else jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)])

    return jax.tree.map(pad, tree)


def _empty_constants_inside(fn, *args):
    """`fn(*args)`, traced, with its zero-size constants made in the body (`jnp.zeros`) rather than
    captured: the same program otherwise, traced once and replayed, the same numbers.

    `jax.shard_map` passes the constants its body captures in as operands, and XLA's Shardy (jax
    0.11.2) segfaults compiling a shard_map over 2 or more devices that has a zero-size operand
    (in sdy's ManualComputationUnusedInputsPattern, in the ShardyXLA pass; one device is spared).
    gymnax's SpaceInvaders-MinAtar captures ten (`x.at[:].set(...)` indexes with an empty array).
    An empty array holds no data: made in the body it is no operand. Keys and other extended
    dtypes are left as they are (none seen)."""
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
    consts = [jnp.zeros(np.shape(c), c.dtype)
              if np.size(c) == 0 and not jnp.issubdtype(c.dtype, jax.dtypes.extended) else c
              for c in closed.consts]
    outs = jax.core.eval_jaxpr(closed.jaxpr, consts, *jax.tree.leaves(args))
    return jax.tree.unflatten(jax.tree.structure(out_shape), outs)


class ShardedRunSets:
    """Several run sets (each its own function, e.g. programs of different shapes) as one program over
    all devices: `pairs` = [(fn_a, args_a), (fn_b, args_b), ...], each `fn` over args whose
    leaves have a leading run axis.

        runs = ShardedRunSets([(fn_a, args_a), (fn_b, args_b)])   # compiles (.compile_seconds)
        out_a, out_b = runs()                  # executes; each output's leading axis: its runs
        out_a, out_b = runs([args_a2, args_b2])   # the same program on other inputs
        runs.out_shapes                        # [outputs' shapes per run set], known before it runs

    The args given to build it may be shapes only (`jax.ShapeDtypeStruct` leaves, e.g. from
    `jax.eval_shape`): the program is compiled for them and called with data later.

    Each run set's run axis (padded to devices x runs per device) is split over the devices
    by `jax.shard_map`: each device traces and runs the plain single-device program on its
    own runs (no second vmap to trace, nothing for the partitioner to propagate), vmapped,
    or, with `chunk=N`, N at a time
    (`jax.lax.map(..., batch_size=N)`, runs per device padded to a multiple of N) to bound
    memory: same numbers either way. `memory_bytes` is the memory per device to plan for
    (default: what it has free); a program that does not fit raises ResourceError before it
    runs (see the module doc).
    """

    def __init__(self, pairs, devices=None, chunk: int | None = None, memory_bytes: int | None = None):
        self._setup(list(pairs), devices, chunk, memory_bytes)

    def _setup(self, pairs, devices, chunk, memory_bytes):
        devices = list(devices if devices is not None else jax.devices())
        self._layouts, self._shardings, shapes, programs = [], [], [], []
        for fn, args in pairs:
            num_runs = int(jax.tree.leaves(args)[0].shape[0])
            # no more devices than runs: a lone run is not copied onto every device
            used = devices[: min(len(devices), num_runs)]
            layout = _Layout(num_runs, len(used), _runs_per_device(num_runs, len(used), chunk))
            self._layouts.append(layout)
            per_device = layout.per_device

            def runs_here(*device_args, fn=fn, per_device=per_device):  # [per_device, ...]: this device's runs
                if chunk is None or chunk >= per_device:
                    return jax.vmap(fn)(*device_args)
                return jax.lax.map(lambda a: fn(*a), device_args, batch_size=chunk)

            def on_device(*device_args, runs_here=runs_here):
                return _empty_constants_inside(runs_here, *device_args)

            mesh = Mesh(np.array(used), ("runs",))
            programs.append(jax.shard_map(on_device, mesh=mesh, in_specs=PartitionSpec("runs"),
                                          out_specs=PartitionSpec("runs"), check_vma=False))
            self._shardings.append(NamedSharding(mesh, PartitionSpec("runs")))
            shapes.append(jax.tree.map(lambda x, sharding=self._shardings[-1]: jax.ShapeDtypeStruct(
                (layout.padded, *x.shape[1:]), x.dtype, sharding=sharding), args))
        concrete = not any(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves([a for _, a in pairs]))
        self._args = self._lay_out([a for _, a in pairs]) if concrete else None
        # runs computed at once on a device (the largest run set's)
        self.in_flight = max(min(chunk or layout.per_device, layout.per_device) for layout in self._layouts)
        if memory_bytes is None:  # this process's devices: another process's cannot be asked
            local = [d for d in devices if d.process_index == jax.process_index()]
            memory_bytes = free_memory_bytes(local[0]) if local else None
        self.memory_bytes = memory_bytes
        jitted = jax.jit(lambda all_args: [program(*a) for program, a in zip(programs, all_args)],
                         compiler_options=compiler_options(devices[0].platform))
        start = time.perf_counter()
        lowered = jitted.lower(shapes)
        # each run set's outputs, leading axis its runs (the padding dropped, as `__call__` does)
        self.out_shapes = [jax.tree.map(lambda x, n=layout.num_runs: jax.ShapeDtypeStruct((n, *x.shape[1:]), x.dtype), out)
                           for out, layout in zip(lowered.out_info, self._layouts)]
        # ... and as `held=True` leaves them: padded, sharded over the devices
        self.held_shapes = [jax.tree.map(lambda x, sharding=sharding: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                                                           sharding=sharding), out)
                            for out, sharding in zip(lowered.out_info, self._shardings)]
        self.num_runs_per_set = [layout.num_runs for layout in self._layouts]
        if memory_bytes is not None:  # before compiling: the results alone must fit
            results = sum(tree_bytes(out) // layout.devices for out, layout in zip(lowered.out_info, self._layouts))
            if results > memory_bytes:
                raise ResourceError("runs", sum(layout.num_runs for layout in self._layouts),
                                    f"their results alone need {_size(results)} per device, more than the "
                                    f"{_size(memory_bytes)} it has free; run fewer runs or updates at a time")
        with compile_cache.quiet_cache_loads():
            self._compiled = lowered.compile()
        self.compile_seconds = time.perf_counter() - start
        self.memory = self._compiled.memory_analysis()  # per device; None where XLA does not say
        if memory_bytes is not None and self.memory is not None:
            self._check_memory(memory_bytes)

    def _check_memory(self, memory_bytes: int) -> None:
        memory = self.memory
        need = memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes
        if need <= memory_bytes:
            return
        # Model, measured on CPU: k runs in flight per device need k x (working memory + results)
        # of one run, plus one run's results staged; the results of all (padded) runs are held.
        results = memory.output_size_in_bytes / sum(layout.per_device for layout in self._layouts)
        chunked = self.in_flight < max(layout.per_device for layout in self._layouts)
        per_run = ((memory.temp_size_in_bytes - results) / self.in_flight if chunked
                   else memory.temp_size_in_bytes / self.in_flight + results)

        def need_with(k):
            held = sum(_runs_per_device(layout.num_runs, layout.devices, k) for layout in self._layouts) * results
            return memory.argument_size_in_bytes + held + results + k * per_run

        fits = next((k for k in range(self.in_flight - 1, 0, -1) if need_with(k) <= memory_bytes), 0)
        advice = (f"about {fits} at once should fit: set max_parallel (--max-parallel) to {fits}" if fits
                  else "even one run at a time does not fit: use fewer runs, environments or steps")
        raise ResourceError("runs in flight", self.in_flight,
                            f"the compiled program needs {_size(need)} per device ({_size(memory.temp_size_in_bytes)} "
                            f"working memory for {self.in_flight} runs at once), more than the "
                            f"{_size(memory_bytes)} free; {advice}")

    def _lay_out(self, all_args):
        """Each run set's args, padded to devices x runs per device and placed on the
        devices: every process holds the same inputs and places the slices of its own.
        Several processes: an arg that is already a global array laid out so (an output
        `held=True` left where it lies) stays where it is."""
        placed = []
        for args, layout, sharding in zip(all_args, self._layouts, self._shardings):
            def place(x, layout=layout, sharding=sharding):
                if (isinstance(x, jax.Array) and jax.process_count() > 1 and x.shape[0] == layout.padded
                        and x.sharding.is_equivalent_to(sharding, x.ndim)):
                    return x  # held where it lies
                x = np.asarray(_pad(x, layout.padded))
                return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

            placed.append(jax.tree.map(place, args))
        return placed

    def __call__(self, all_args=None, held: bool = False) -> list:
        """Run on the args it was built with, or on new args of the same shapes (one args
        tuple per run set) -> one output per run set. `held`: the outputs as they lie, padded
        global arrays (`held_shapes`), gathered nowhere (several processes: each holds its shards)."""
        if all_args is not None:
            placed = self._lay_out(list(all_args))
        elif self._args is None:
            raise TypeError("built from shapes only: call it with inputs")
        else:
            placed = self._args
        outs = self._compiled(placed)
        if held:
            return list(outs)
        if jax.process_count() > 1:  # every process gets every run's results (as numpy)
            from jax.experimental import multihost_utils

            outs = multihost_utils.process_allgather(outs, tiled=True)
        return [jax.tree.map(lambda x, layout=layout: x[:layout.num_runs], out)
                for out, layout in zip(outs, self._layouts)]


def small_to_writer(tree, num_runs: int):
    """Small outputs left where they lie (metrics, returns: global arrays with a padded
    leading run axis) -> on the writer (process 0), numpy with the first `num_runs` rows;
    on every other process None. One all-gather of these small parts only: the learner
    states never go through it. One process: numpy, the padding dropped."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        tree = multihost_utils.process_allgather(tree, tiled=True)
        if not is_writer():
            return None
    return jax.tree.map(lambda x: np.asarray(x)[:num_runs], tree)


class ShardedRuns(ShardedRunSets):
    """`fn` over args whose leaves have a leading run axis, as one program over all devices
    (one run set of `ShardedRunSets`, whose doc says how runs are laid out).

        runs = ShardedRuns(train, keys, hparams)   # compiles (timed in .compile_seconds)
        out = runs()                               # executes; leading axis = number of runs
        out = runs(other_keys, other_hparams)      # the same program on other inputs
    """

    def __init__(self, fn, *args, devices=None, chunk: int | None = None, memory_bytes: int | None = None):
        super().__init__([(fn, args)], devices, chunk, memory_bytes)
        layout = self._layouts[0]
        self.num_runs, self.num_devices, self.padded_runs = layout.num_runs, layout.devices, layout.padded

    def __call__(self, *args):
        return super().__call__([args] if args else None)[0]
