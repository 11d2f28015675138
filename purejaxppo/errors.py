"""Errors by kind. Everything here is something the user can fix: the CLI prints it on
one line and exits 2. Anything else that escapes is a bug and keeps its traceback.

    UsageError                      anything the user can fix
    └── ConfigError                 a value that breaks a rule: names field, value and rule
        ├── ImportFailed            an import path (env:, network:) whose module is not found here
        └── ResourceError           the configured work does not fit the machine (memory)

This module imports nothing from the package, so every module may raise these.
"""

from __future__ import annotations

import numbers
from typing import Any


class UsageError(Exception):
    """Something the user can fix (a value, a file, a size); the message says what."""


class _NoValue:
    """The value of a ConfigError about a field as such (an unknown or duplicate key), not about a value."""

    def __repr__(self) -> str:
        return "NO_VALUE"


NO_VALUE: Any = _NoValue()


class ConfigError(UsageError, ValueError):
    """A configuration value that breaks a rule; the message names field, value and rule:
    "field=value: rule", or "field: rule" when the value is `NO_VALUE` (the error is about
    the field itself, e.g. an unknown key). The message is always one line."""

    def __init__(self, field: str, value: Any, rule: str):
        self.field, self.value, self.rule = field, value, rule
        shown = str(field) if value is NO_VALUE else f"{field}={value!r}"
        super().__init__(" ".join(f"{shown}: {rule}".split("\n")))


class ImportFailed(ConfigError):
    """An import path of a config (`env:`, `network:` package.module:name) that cannot be
    imported here: a fault of where the command runs, not of the config (nor of a checkpoint
    that names it)."""


class ResourceError(ConfigError):
    """The configured work does not fit the machine, e.g. a program that needs more device
    memory than is free. `field` names the quantity that is too large ("runs", "runs in
    flight"), `rule` says what would fit. Raised before anything runs."""


def integer(field: str, value: Any, at_least: int = 0, why: str = "") -> int:
    """`value` as an int if it is an integer (Python's or numpy's; a bool is not one) of at
    least `at_least`; else a ConfigError naming `field`: "must be an integer of at least N"
    ("a non-negative integer" for 0), then `why` (e.g. " (it is static)")."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):  # numpy bools are not Integral
        if value >= at_least:
            return int(value)
    wanted = "a non-negative integer" if at_least == 0 else f"an integer of at least {at_least}"
    raise ConfigError(field, value, f"must be {wanted}{why}")
