"""Faults while a command runs: stop signals and writes that fail.

Stop signals. Ctrl-C (SIGINT), a job scheduler's SIGTERM and a closed terminal's SIGHUP are
handled alike at every phase, inside `stop_signals()`: the handler raises `Stopped` in the
main thread at once (a computing program is waited for by polling, `wait_ready`, so that
it lands within ~50 ms), except inside `deferred()`: a section a stop must not cut (a
checkpoint's save), where it is raised when the section ends. `Stopped` is a
KeyboardInterrupt, so library code that stops on Ctrl-C stops on it; the command line
turns it into one line and exit code 128 + the signal (130, 143, 129). A second signal
while the first is handled is ignored.

Several processes (`hosts.coordinate`): a stop signal is only recorded (`hold_stops`), and
the processes agree on it at the next chunk boundary (`hosts.agreed_stop`). A call that
blocks in C++ (JAX waiting for the other processes to join) runs in a thread of its own
(`interruptible`), so that a stop signal lands while it waits.

A process's own output when it ends badly: its C++ runtime's stderr goes to a file
(`runtime_output_to`), and should the runtime abort it, its line still reaches the terminal
(`line_on_abort`).

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


def hold_stops(on: bool = True) -> None:
    """From now on (`on`), a stop signal is only recorded, not raised: several processes agree on
    it at a point they all reach (`hosts.coordinate`, `hosts.agreed_stop`)."""
    _handling.coordinated = on


def held_stop() -> int | None:
    """With `hold_stops`: the stop signal received so far, 0 if none; else None (a stop is raised
    where it lands)."""
    return (_handling.signum or 0) if _handling.coordinated else None


def interruptible(fn, *args):
    """`fn(*args)` -> its result (or its exception), called in a daemon thread while the main
    thread waits, polling: a stop signal then lands within ~50 ms even while `fn` blocks in
    C++ without returning to Python (JAX waiting for processes that never come to join,
    `hosts.init_distributed`). After a stop, `fn` goes on waiting in its thread: the process is to exit."""
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


def line_on_abort(line: str, coordinator: str) -> bool:
    """Several processes: should JAX's runtime end this process by SIGABRT (its client aborts
    the process once process 0's coordination service is gone, a race with purejaxppo's own
    line; or when the service declares a silent process dead at the heartbeat timeout), `line`
    still reaches the terminal, a "{who}" in it replaced by "process 0" (the service takes no
    connections) or "another process". Nothing in the aborting process can print, so a small
    watcher process does it: it holds the read end of Python's signal wake-up pipe, into which
    Python's C-level handler writes SIGABRT before the abort goes on, and exits with the pipe,
    when this process ends either way (its own session: a Ctrl-C or a killed process group
    leaves it to see the end). `coordinator`: process 0's service, host:port.
    -> False where it cannot be set up (no coordinator address, not the main thread)."""
    host, _, port = (coordinator or "").rpartition(":")
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
