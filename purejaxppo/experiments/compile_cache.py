"""JAX's persistent compilation cache, on by default for the command line.

A run compiles the same programs as the last run of the same config (and the same
purejaxppo, jax and machine): with the cache, XLA's result is read from disk instead of
compiled again. The executable is the same, so are the numbers.

Where: $PUREJAXPPO_CACHE_DIR, else $XDG_CACHE_HOME/purejaxppo/jax, else
~/.cache/purejaxppo/jax. `--no-cache` turns it off for one command. The cache is bounded
(oldest entries evicted first) and every read and write holds a file lock in the cache
folder, so processes that share it (several runs, a multi-process run) wait for each
other instead of reading half-written entries.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

import jax

# what scripts may use (benchmarks/ keeps to it: tests/test_bench_suite.py)
__all__ = ["default_folder", "enable"]

MAX_BYTES = 4 * 2**30  # evict the least recently used entries beyond this
MIN_COMPILE_SECONDS = 0.2  # programs that compile faster than this are not worth a file
# nor are tiny ones (a seed, a conversion: a few KiB, where a learner's program is 100 KiB and
# more), which a loaded machine may take longer than MIN_COMPILE_SECONDS to compile: each read
# back would print the FALSE_ALARMS below outside any quiet_cache_loads
MIN_ENTRY_BYTES = 16 * 2**10


def default_folder() -> Path:
    if os.environ.get("PUREJAXPPO_CACHE_DIR"):
        return Path(os.environ["PUREJAXPPO_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "purejaxppo" / "jax"


def enable(folder: str | Path | None = None) -> Path:
    """Compile through the persistent cache in `folder` (default: `default_folder()`), from
    now on in this process. Call it before the first compile: JAX sets its cache up once."""
    folder = Path(folder) if folder is not None else default_folder()
    folder.mkdir(parents=True, exist_ok=True)  # OSError if it cannot be: the caller decides
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", MIN_ENTRY_BYTES)
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)  # bounded: JAX then locks every access
    return folder


# What jaxlib 0.9.2 writes to stderr for every program it loads from the cache on a CPU:
# a warning that it cannot check the executable's version, and two errors that take tuning
# flags of the compiling machine (+prefer-no-gather, +prefer-no-scatter) for features this
# machine lacks ("could lead to SIGILL"), although it is the machine that compiled them.
FALSE_ALARMS = ("Assume version compatibility", "Target machine feature +prefer-no-")


@contextlib.contextmanager
def quiet_cache_loads():
    """While compiling (every program the package compiles: a run's, eval's, a replay's, an export's): XLA's
    messages on stderr (file descriptor 2, where its C++ code writes) are held back and written out afterwards,
    to file descriptor 2, less the FALSE_ALARMS of a cached load. Without the cache on, nothing is held back."""
    if not jax.config.jax_compilation_cache_dir:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode(errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not any(alarm in line for alarm in FALSE_ALARMS))
            if kept:  # where they were going (several processes: the runtime log, faults.runtime_output_to)
                os.write(2, kept.encode())
