"""Path options (a config file, --out, --resume, a run folder, --render, the suite's --out
and --replot): a name the file system cannot hold, or a folder the checkpoint library cannot
name, is one line naming the option, before anything is read, created or compiled."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from purejaxppo.errors import ConfigError

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
