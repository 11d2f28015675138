"""Objects named by an import path in a config (`network:`, `env:`): package.module:name."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from purejaxppo.errors import ConfigError


def import_object(path: str, field: str) -> Any:
    """"package.module:name" -> that object; ConfigError naming `field` and the path when it
    cannot be imported or found. A module in the current folder is found as `python -m`
    finds it, also from the `purejaxppo` command (whose own folder is first on sys.path)."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(field, path, "must be an import path package.module:name")
    try:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as missing:
            here = os.getcwd()
            if missing.name != module_name.split(".")[0] or here in sys.path or "" in sys.path:
                raise
            sys.path.append(here)
            module = importlib.import_module(module_name)
    except Exception as error:  # ImportError, or the user's module failing as it is imported
        raise ConfigError(field, path, f"cannot be imported: {type(error).__name__}: {error}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(field, path, f"module {module_name} has no {attr}")
        obj = getattr(obj, part)
    return obj
