"""Several processes (hosts): joining them, agreeing between them, and losing one.

Whatever asks which process this is, or talks to the others, is here; the sharded placement
and its gathers are `parallel`'s. `join` gives the job's processes as one object, a `Cluster`
(index, count, writer; agree, share the folder, an agreed stop, a lost process, leave), which
what runs, saves and writes is handed; a process alone has the trivial one (`alone()`).

Joining (`join`): explicit JAX_* variables or a cluster JAX detects (SLURM, Open MPI, a TPU
pod), bad or half-set variables refused before anything joins; the processes check they run
the same command (`Cluster.agree_on_command`), process 0 claims the folder and the others
learn its path (`Cluster.share_folder`); only the writer (process 0) writes. Stops: once
joined, a stop signal to one process is only recorded (`faults`); all learn of it together at
the next chunk boundary (`Cluster.agreed_stop`, one small all-gather), so that none leaves a
program the others compute with it (SIGTERM too: the handler replaces JAX's preemption
notifier's). A lost process: a failed collective names it (`Cluster.lost`; of more than two,
by a roll call, `unanswered`), a silent one JAX's heartbeat (`heartbeat_seconds`); the C++
runtime's output goes to the folder, and an abort still prints its line (`Cluster.log_runtime`).
"""

from __future__ import annotations

import errno
import hashlib
import inspect
import os
import re
import socket
import time
from pathlib import Path

import jax
import numpy as np

from purejaxppo import __version__
from purejaxppo.errors import NO_VALUE, ConfigError, UsageError
from purejaxppo.experiments.faults import (STOP_SIGNALS, Stopped, held_stop, hold_stops, interruptible,
                                           line_on_abort, runtime_output_to, stop_signals)

CLUSTER_VARIABLE = "PUREJAXPPO_CLUSTER"  # off: run alone, whatever the JAX_* or a scheduler's variables say
_ON, _OFF = ("on", "1", "yes", "true"), ("off", "0", "no", "false")
_EXPLICIT = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")
# a scheduler's variables: (the job's, if any; its number of processes; what each process needs with
# it for JAX to detect the job; the launcher that sets them)
_SCHEDULERS = (("SLURM_JOB_ID", "SLURM_NTASKS", ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NODELIST"), "srun"),
               (None, "OMPI_COMM_WORLD_SIZE", ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"), "mpirun"))
_JOIN_TIMEOUT_SECONDS = 300  # JAX's default initialization timeout
HEARTBEAT_VARIABLE = "PUREJAXPPO_HEARTBEAT_SECONDS"  # a lost process is noticed within about this long
DEFAULT_HEARTBEAT_SECONDS = 60


# joining
def integer_variable(name: str, at_least: int) -> int | None:
    """The environment variable `name` as an integer of at least `at_least`; None where it is
    unset or empty; else a ConfigError naming it."""
    text = os.environ.get(name)
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < at_least:
        raise ConfigError(name, text, f"must be an integer of at least {at_least}")
    return value


def heartbeat_seconds() -> int:
    """$PUREJAXPPO_HEARTBEAT_SECONDS (default 60): how long the processes wait for a silent one."""
    value = integer_variable(HEARTBEAT_VARIABLE, 1)
    return DEFAULT_HEARTBEAT_SECONDS if value is None else value


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


class Cluster:
    """The processes of one job, as this process sees them: its `index`, their `count`, and what
    they do together. Handed to what runs, saves or writes (`runs.execute`, `RunFolder`,
    `Checkpoints`), which ask it rather than JAX. One process's is trivial (`alone()`): writer,
    nothing to agree on, to share or to wait for, and no stop but its own."""

    def __init__(self, index: int = 0, count: int = 1, how: str | None = None):
        self.index, self.count = index, count
        self.how = how  # how they were found (`join`), None alone

    def __repr__(self) -> str:
        return f"Cluster(index={self.index}, count={self.count})"

    @property
    def several(self) -> bool:
        return self.count > 1

    @property
    def writer(self) -> bool:
        """Whether this process writes the folder's files (process 0)."""
        return self.index == 0

    def joined_line(self) -> str:
        """The first line of a run over several processes: who joined, and who writes."""
        return (f"purejaxppo: process {self.index} of {self.count} joined (via {self.how}); {jax.device_count()} "
                f"device(s) in all, {jax.local_device_count()} here; process 0 writes the folder")

    def agree(self, name: str, text: str) -> None:
        """Every process's `text` compared by a hash (one small all-gather): where one differs,
        a ConfigError on every process, naming which processes differ from process 0."""
        if not self.several:
            return
        digest = np.frombuffer(hashlib.sha256(text.encode()).digest()[:8], dtype=np.uint8).astype(np.int32)
        from jax.experimental import multihost_utils

        every = np.asarray(multihost_utils.process_allgather(digest))  # [processes, 8]
        differ = [i for i in range(every.shape[0]) if not np.array_equal(every[i], every[0])]
        if differ:
            raise ConfigError(name, NO_VALUE, f"process(es) {', '.join(map(str, differ))} differ from process 0 "
                              f"(compared by a hash before compiling): start every process with the same command, "
                              f"config files and versions")

    def agree_on_command(self, argv, named) -> None:
        """Several processes: their first line (`joined_line`), then what every process of the job
        must share, compared (`agree`): the versions, the command line `argv` and the file it names
        (`named()` -> its path, or None), as read here: a host may hold another copy."""
        if not self.several:
            return
        print(self.joined_line(), flush=True)
        parts = [__version__, jax.__version__, *argv]
        try:
            path = named()
            if path is not None and Path(path).is_file():
                parts.append(Path(path).read_text(errors="replace"))
        except (UsageError, OSError) as error:  # each process says so itself, after this comparison
            parts.append(str(error))
        self.agree("the command", "\0".join(parts))

    def share_folder(self, claim, field: str, given: str) -> tuple:
        """Process 0 claims the run folder (`claim()` -> it, claimed and locked; its error is
        raised after the broadcast, so that no process is left waiting), and every process learns
        its path (one broadcast) -> (the folder claimed, or None on the others; its path). Process
        0 refused: a ConfigError on the others, naming `field` (`given`). Alone: `claim()`'s."""
        if not self.several:
            claimed = claim()
            return claimed, str(claimed.path.absolute())
        from jax.experimental import multihost_utils

        claimed, error = None, None
        if self.writer:
            try:
                claimed = claim()
            except (ConfigError, OSError) as failed:
                error = failed
        text = str(claimed.path.absolute()).encode() if claimed is not None else b""
        size = 4096
        if len(text) > size:
            raise ConfigError("--out", str(claimed.path), f"a path of more than {size} bytes")
        buffer = np.frombuffer(text.ljust(size, b"\0"), np.uint8)
        path = bytes(np.asarray(multihost_utils.broadcast_one_to_all(buffer))).rstrip(b"\0").decode()
        if error is not None:
            raise error
        if not path:
            raise ConfigError(field, given, "process 0 could not claim the folder (its own line says why)")
        return claimed, path

    def log_runtime(self, folder, left: str) -> None:
        """Several processes: this process's C++ runtime output goes to `folder`/process-<i>.log
        (`runtime_output_to`), and should the runtime end it, a line naming the lost process and
        what is `left` still reaches the terminal (`line_on_abort`)."""
        if not self.several:
            return
        log = Path(folder) / f"process-{self.index}.log"
        runtime_output_to(log)  # JAX's fatal error, if it comes, too
        from jax._src.distributed import global_state  # private: where JAX keeps the coordinator's address

        line_on_abort(f"purejaxppo: error: {'{who}' if self.index else 'another process'} was lost (JAX's runtime "
                      f"ended process {self.index}; its log: {log}): {left}",
                      getattr(global_state, "coordinator_address", None) or "")

    def agreed_stop(self) -> Stopped | None:
        """At a point every process reaches (a chunk boundary): the stop that one of the processes
        received (the lowest-numbered one's, if several did), the same on every process; else
        None. Alone, a stop is raised where the signal lands: None here."""
        held = held_stop()
        if held is None or not self.several:
            return None
        from jax.experimental import multihost_utils

        received = np.asarray(multihost_utils.process_allgather(np.int32(held))).reshape(-1)
        process = next((i for i, signum in enumerate(received) if signum), None)
        return None if process is None else Stopped(int(received[process]), process)

    def lost(self, error: BaseException) -> LostProcess | None:
        """`error` as a LostProcess, where in a job of several processes it is JAX's runtime
        error or names a collective or connection that failed; else None (a bug: not this).
        A LostProcess already (e.g. from a checkpoint save) is itself."""
        if isinstance(error, LostProcess):
            return error
        runtime = getattr(jax.errors, "JaxRuntimeError", ())
        if not self.several or not (isinstance(error, runtime) or _PEER_GONE.search(str(error))):
            return None
        others = [i for i in range(self.count) if i != self.index]
        text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return LostProcess(others[0] if len(others) == 1 else unanswered(), text[:200])

    def leave(self, lost: LostProcess | None = None, seconds: float = 5.0) -> None:
        """Several processes ending at once (`os._exit`), after an agreed stop or a lost process:
        process 0, whose coordination service the others' JAX clients hold (one that sees it go
        aborts its process, taking its line and exit code), leaves last. The others say so in the
        key-value store; process 0 waits up to `seconds` for every survivor (all but `lost`'s
        process, or all but one). A lost process 0 leaves no store to wait on."""
        client = _client() if self.several and held_stop() is not None else None
        if client is None or (lost is not None and lost.process == 0):
            return
        try:
            if self.index != 0:
                client.key_value_set(f"{_LEAVING}{self.index}", "")
                return
            needed = self.count - 1 - (lost is not None)
            deadline = time.monotonic() + seconds
            while len(client.key_value_dir_get(_LEAVING)) < needed and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.1)  # the last one's os._exit, just after its key
        except Exception:  # noqa: BLE001 -- the store went away meanwhile: nothing more to wait for
            pass


def current() -> Cluster:
    """The processes JAX runs with (after `join`, or a script's own `jax.distributed.initialize`):
    one process's trivial cluster where it was started alone."""
    return Cluster(jax.process_index(), jax.process_count())


def alone() -> Cluster:
    """This process on its own, whatever the job (a reader of a folder): the trivial cluster,
    with this process's index (orbax's reads of one process need it)."""
    return Cluster(jax.process_index(), 1)


def join(detect: bool = True) -> Cluster:
    """`init_distributed(detect)` -> the job's processes; where it joined others, stops are
    agreed on from now on (a stop signal is only recorded, and raised on every process together
    by `Cluster.agreed_stop()`). Not joined: one process's trivial cluster."""
    how = init_distributed(detect)
    hold_stops(how is not None)
    cluster = current()
    cluster.how = how
    return cluster


# a lost process
class LostProcess(Exception):
    """Several processes: a collective failed, so another process is gone (killed, out of
    memory, its node down). `process`: the lost one where it can be told (of two processes,
    the other; of more, the one that missed the roll call, `unanswered`), else None;
    `detail`: the error's first line; `outcome` as `Stopped`'s."""

    def __init__(self, process: int | None, detail: str):
        super().__init__(detail)
        self.process, self.detail = process, detail
        self.outcome: str | None = None

    @property
    def who(self) -> str:
        return f"process {self.process}" if self.process is not None else "another process"


# what a collective whose peer went away raises (JaxRuntimeError, or a ValueError from the dispatch)
_PEER_GONE = re.compile(r"Gloo|NCCL|heartbeat|Connection (reset|closed|refused)|DEADLINE_EXCEEDED|UNAVAILABLE")


_ROLL_CALL = "purejaxppo/answered/"
_LEAVING = "purejaxppo/leaving/"


def _client():
    """JAX's distributed client where it has the key-value store and barriers this module uses,
    else None (alone, or a JAX without them: what needs it is then not told or not waited for)."""
    try:
        from jax._src.distributed import global_state  # private: absent or changed, not told
    except ImportError:
        return None
    client = getattr(global_state, "client", None)
    return client if all(hasattr(client, m) for m in ("key_value_set", "key_value_dir_get", "wait_at_barrier")) \
        else None


def unanswered(seconds: float | None = None) -> int | None:
    """Of more than two processes, after a collective failed: which one is lost. Every survivor
    answers a roll call in JAX's key-value store (held by process 0's coordination service)
    -> the one process that has not answered within `seconds` (default: half the heartbeat
    timeout, up to 10 s; at once where all the others have), or 0 where the store itself is
    gone; None where it cannot be told (several did not answer, or a JAX without the store).

    The collective fails on every survivor at once (each holds a connection to the lost
    process), so the answers come within milliseconds. (JAX's own `get_live_nodes` is no
    help: it waits for the heartbeat timeout, when JAX ends every process with its C++
    fatal error anyway.) The survivors then meet at a barrier, so that process 0, which
    holds the store, does not leave before the others have read it."""
    client = _client()
    if client is None:
        return None
    count = jax.process_count()
    seconds = min(10.0, heartbeat_seconds() / 2) if seconds is None else seconds
    try:
        client.key_value_set(f"{_ROLL_CALL}{jax.process_index()}", "")
    except Exception:  # noqa: BLE001 -- the coordination service (process 0) cannot be reached
        return 0
    deadline, answered = time.monotonic() + seconds, set()
    try:
        while len(answered) < count - 1 and time.monotonic() < deadline:
            time.sleep(0.05 if answered else 0)
            answered = {int(key.rsplit("/", 1)[-1]) for key, _ in client.key_value_dir_get(_ROLL_CALL)}
        client.wait_at_barrier("purejaxppo/roll-call", int(seconds * 1000), sorted(answered))
    except Exception:  # noqa: BLE001 -- the store went away meanwhile: what was read stands
        pass
    missing = sorted(set(range(count)) - answered)
    return missing[0] if len(missing) == 1 else None
