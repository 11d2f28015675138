"""Faults while a command runs: stop signals and writes that fail.

Stop signals. Ctrl-C (SIGINT), a job scheduler's SIGTERM and a closed terminal's SIGHUP are
handled alike at every phase, inside `stop_signals()`: the handler raises `Stopped` in the
main thread at once (a computing program is waited for by polling, `wait_ready`, so that
it lands within ~50 ms), except inside `deferred()`: a section a stop must not cut (a
checkpoint's save), where it is raised when the section ends. `Stopped` is a
KeyboardInterrupt, so library code that stops on Ctrl-C stops on it; the command line
turns it into one line and exit code 128 + the signal (130, 143, 129). A second signal
while the first is handled is ignored.

Several processes (`coordinate()`): a stop signal to any one process is only recorded, and
all the processes learn of it together at the next chunk boundary (`agreed_stop()`, one
small all-gather), so that they stop at the same point: a process cannot leave a program
the others are computing with it. SIGTERM included: the handler installed after
`jax.distributed.initialize` replaces the one of JAX's preemption notifier, which would
otherwise take the scheduler's notice and let the job run on. A call that blocks in C++
(`jax.distributed.initialize` waiting for the other processes) runs in a thread of its own
(`interruptible`), so that a stop signal lands while it waits.

Failed writes. `Failures` says, on one line each, which write failed and what happens
instead, once per file, and remembers it: the command then exits 1.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time

import jax
import numpy as np

from purejaxppo.errors import ConfigError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A stop signal (`signum`), raised in the main thread."""

    def __init__(self, signum: int, process: int | None = None):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.process = process  # several processes: the one that received it
        self.outcome: str | None = None  # what the stop left, for the line the command line prints

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _Handling:
    """The one installed handling (stop signals are process-wide): nested `stop_signals`
    share the outermost's."""

    def __init__(self):
        self.depth = 0          # nesting of stop_signals
        self.deferring = 0      # nesting of deferred()
        self.signum = None      # the signal received, once one is
        self.previous = {}      # signal -> the handler before ours
        self.coordinated = False  # several processes: stops are agreed on (`agreed_stop`)

    def handle(self, signum, frame):
        if self.signum is not None:
            return  # a stop is under way already
        self.signum = signum
        if not self.deferring and not self.coordinated:
            raise Stopped(signum)


_handling = _Handling()


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def stop_signals(signums=(signal.SIGINT,)):
    """While inside, each of `signums` raises `Stopped` (at once, or at the end of a
    `deferred()` section). Inside another `stop_signals`, the outer one's signals stay in
    force; outside the main thread (which alone receives signals), nothing is installed."""
    if not _main_thread():
        yield
        return
    if _handling.depth == 0:
        _handling.signum = None
        _handling.previous = {s: signal.signal(s, _handling.handle) for s in signums}
    _handling.depth += 1
    try:
        yield
    finally:
        _handling.depth -= 1
        if _handling.depth == 0:
            for s, previous in _handling.previous.items():
                signal.signal(s, previous)
            _handling.previous = {}


@contextlib.contextmanager
def deferred():
    """A section a stop signal must not cut: one received inside is raised as `Stopped`
    when the section ends (normally; an exception on its way out goes on instead)."""
    if not _main_thread():
        yield
        return
    _handling.deferring += 1
    try:
        yield
    finally:
        _handling.deferring -= 1
    if not _handling.deferring and _handling.signum is not None and _handling.depth and not _handling.coordinated:
        raise Stopped(_handling.signum)


def coordinate(on: bool = True) -> None:
    """Several processes (after `jax.distributed.initialize`): from now on a stop signal is
    recorded, and raised on every process together by `agreed_stop()`."""
    _handling.coordinated = on


def agreed_stop() -> Stopped | None:
    """At a point every process reaches (a chunk boundary): with `coordinate()`, the stop
    that one of the processes received (the lowest-numbered one's, if several did), the
    same on every process; else None (a single process stops where the signal lands)."""
    if not _handling.coordinated:
        return None
    from jax.experimental import multihost_utils

    received = np.asarray(multihost_utils.process_allgather(np.int32(_handling.signum or 0))).reshape(-1)
    process = next((i for i, signum in enumerate(received) if signum), None)
    return None if process is None else Stopped(int(received[process]), process)


def interruptible(fn, *args):
    """`fn(*args)` -> its result (or its exception), called in a daemon thread while the main
    thread waits, polling: a stop signal then lands within ~50 ms even while `fn` blocks in
    C++ without returning to Python (`jax.distributed.initialize` waiting for processes that
    never come). After a stop, `fn` goes on waiting in its thread: the process is to exit."""
    outcome = {}

    def run():
        try:
            outcome["value"] = fn(*args)
        except BaseException as error:  # noqa: BLE001 -- raised again in the waiting thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name="purejaxppo-interruptible", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.05)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def wait_ready(outs, numpy: bool = True):
    """`outs` computed, as numpy (`numpy=False`: as they are, e.g. global arrays of several
    processes): polled rather than blocked on, so that the main thread keeps running Python
    and a stop signal lands within ~50 ms, not when the program ends."""
    for leaf in jax.tree.leaves(outs):
        while isinstance(leaf, jax.Array) and not leaf.is_ready():
            time.sleep(0.05)
    return jax.tree.map(np.asarray, outs) if numpy else outs


HEARTBEAT_VARIABLE = "PUREJAXPPO_HEARTBEAT_SECONDS"  # a lost process is noticed within about this long
DEFAULT_HEARTBEAT_SECONDS = 60


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


def lost_process(error: BaseException) -> LostProcess | None:
    """`error` as a LostProcess, where in a job of several processes it is JAX's runtime
    error or names a collective or connection that failed; else None (a bug: not this).
    A LostProcess already (e.g. from a checkpoint save) is itself."""
    if isinstance(error, LostProcess):
        return error
    runtime = getattr(jax.errors, "JaxRuntimeError", ())
    if jax.process_count() < 2 or not (isinstance(error, runtime) or _PEER_GONE.search(str(error))):
        return None
    others = [i for i in range(jax.process_count()) if i != jax.process_index()]
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return LostProcess(others[0] if len(others) == 1 else unanswered(), text[:200])


_ROLL_CALL = "purejaxppo/answered/"


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
    try:
        from jax._src.distributed import global_state  # private: absent or changed, not told
    except ImportError:
        return None
    client = getattr(global_state, "client", None)
    if not all(hasattr(client, m) for m in ("key_value_set", "key_value_dir_get", "wait_at_barrier")):
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


def runtime_output_to(path) -> bool:
    """Several processes: from now on what this process's C++ runtime writes on stderr (file
    descriptor 2: XLA's, gloo's and the coordination service's logs, and JAX's fatal error
    with its stack trace when the coordinator is lost) is appended to the file `path`;
    Python's `sys.stderr` (purejaxppo's lines, a bug's traceback) stays on the terminal.
    -> False where `path` cannot be opened (nothing changes)."""
    try:
        log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return False
    sys.stderr.flush()
    terminal = os.dup(2)
    os.dup2(log, 2)
    os.close(log)
    sys.stderr = open(terminal, "w", buffering=1, encoding=sys.stderr.encoding, errors="backslashreplace")
    return True


# The watcher of `line_on_abort`: reads the signal numbers Python's C handler writes into the
# wake-up pipe until the pipe closes (its process is gone); if SIGABRT was among them, prints
# the line, its "{who}" naming process 0 where its coordination service takes no connections.
_watcher = None  # the watcher's Popen, kept while this process runs
_WATCHER = """
import os, signal, socket, sys
fd, line, host, port = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
aborted = False
while data := os.read(fd, 64):
    aborted = aborted or signal.SIGABRT in data
if aborted and "{who}" in line:
    try:
        socket.create_connection((host, port), timeout=2).close()
        line = line.replace("{who}", "another process")
    except OSError:
        line = line.replace("{who}", "process 0")
if aborted:
    print(line, file=sys.stderr, flush=True)
"""


def line_on_abort(line: str) -> bool:
    """Several processes: should JAX's runtime end this process by SIGABRT (its client aborts
    the process once process 0's coordination service is gone, a race with purejaxppo's own
    line; or when the service declares a silent process dead at the heartbeat timeout), `line`
    still reaches the terminal, a "{who}" in it replaced by "process 0" (the service takes no
    connections) or "another process". Nothing in the aborting process can print, so a small
    watcher process does it: it holds the read end of Python's signal wake-up pipe, into which
    Python's C-level handler writes SIGABRT before the abort goes on, and exits with the pipe,
    when this process ends either way (its own session: a Ctrl-C or a killed process group
    leaves it to see the end).
    -> False where it cannot be set up (no coordinator address, not the main thread)."""
    from jax._src.distributed import global_state  # private: where JAX keeps the coordinator's address

    host, _, port = (getattr(global_state, "coordinator_address", None) or "").rpartition(":")
    if not port.isdigit() or not _main_thread():
        return False
    read, write = os.pipe()
    os.set_blocking(write, False)
    import subprocess

    global _watcher
    _watcher = subprocess.Popen([sys.executable, "-c", _WATCHER, str(read), line, host.strip("[]"), port],
                                pass_fds=(read,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=sys.stderr, start_new_session=True)
    os.close(read)
    signal.signal(signal.SIGABRT, lambda signum, frame: None)  # installs Python's C handler, which writes the pipe
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    return True


# --------------------------------------------------------------------------------------
# failed writes
# --------------------------------------------------------------------------------------
def reason(error: BaseException) -> str:
    """Why a write failed, in a few words: an OSError's strerror ("No space left on device"),
    or the system's words for the error code a library's message carries (tensorstore's
    "[os_error_code='28']"), else the message's first line."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    code = re.search(r"os_error_code='?(\d+)", str(error))
    if code:
        return os.strerror(int(code.group(1)))
    text = str(error).splitlines()[0][:200] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class Failures:
    """The writes of one command that failed: `report(what, error, then)` prints
    "purejaxppo: error: could not write WHAT (why); THEN" on stderr, the first time for
    each `what`, and remembers it (`failed`: what -> line)."""

    def __init__(self):
        self.failed: dict[str, str] = {}

    def report(self, what: str, error: BaseException, then: str) -> None:
        if what in self.failed:
            return
        self.failed[what] = f"could not write {what} ({reason(error)}); {then}"
        print(f"purejaxppo: error: {self.failed[what]}", file=sys.stderr, flush=True)

    def __bool__(self) -> bool:
        return bool(self.failed)
