"""Path options (a config file, --out, --resume, a run folder, --render, the suite's --out
and --replot): a name the file system cannot hold, or a folder the checkpoint library cannot
name, is one line naming the option, before anything is read, created or compiled. And the
one way files are written: whole, never replacing another (`write_new`, `write_artefacts`)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Callable

from purejaxppo.errors import ConfigError

__all__ = ["check_path", "write_new"]  # for scripts too (benchmarks: results never replaced, path options checked)

NAME_MAX = 255  # bytes in one name of a path, on every common file system
PATH_MAX = 4096  # bytes in a whole path, on Linux


def check_path(option: str, path: str | Path) -> None:
    """Refuse (ConfigError naming `option`) a path with a name too long (ENAMETOOLONG)."""
    text = str(path)
    shown = text if len(text) <= 60 else f"{text[:40]}...({len(text)} characters)"
    longest = max((len(os.fsencode(part)) for part in Path(text).parts), default=0)
    if longest > NAME_MAX or len(os.fsencode(text)) >= PATH_MAX:
        raise ConfigError(option, shown, f"is too long for the file system (a name holds at most {NAME_MAX} "
                                         f"bytes, a whole path {PATH_MAX - 1})")
    try:
        os.stat(text)
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:  # a file system with shorter names
            raise ConfigError(option, shown, f"is too long for the file system here ({error.strerror})") from None


def check_utf8(option: str, path: str | Path) -> None:
    """Refuse a folder whose absolute path holds bytes that are not UTF-8 (a name made of raw
    bytes; Python holds them as surrogates): the checkpoint library names its files in UTF-8,
    so a run there would train and then lose its state."""
    text = str(Path(path).absolute())
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(text).decode("utf-8", "backslashreplace")
        raise ConfigError(option, shown, "holds bytes that are not UTF-8, which the checkpoint library cannot name "
                                         "its files under; choose a folder whose path is UTF-8") from None


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


def write_artefacts(folder: Path, artefacts: list[tuple[str, Callable[[], str | bytes]]],
                    failures) -> bool:
    """Write each (file name, function making its contents) as a new file, one after the
    other; a failure (disk full, a plot that cannot be drawn, a file that appeared in the
    meantime) is reported to `failures` (one line naming the file and why) and leaves the
    others. Returns whether every file was written."""
    written = True
    for name, make in artefacts:
        try:
            write_new(Path(folder) / name, make())
        except Exception as error:  # noqa: BLE001 -- any failure of one artefact must spare the others
            failures.report(name, error, "the other results are written apart from it")
            written = False
    return written
