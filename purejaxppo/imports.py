"""Objects named by an import path in a config (`network:`, `env:`): package.module:name."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Callable, Mapping

from purejaxppo.errors import ConfigError, ImportFailed


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
    except (Exception, SystemExit) as error:  # ImportError, or the user's module failing (or exiting) as imported
        hint = (f" (run from the folder that holds {module_name.split('.')[0]}, or add that folder to PYTHONPATH)"
                if isinstance(error, ModuleNotFoundError) else "")
        raise ImportFailed(field, path, f"cannot be imported: {failure(error)}{hint}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ImportFailed(field, path, f"module {module_name} has no {attr} (imported from "
                               f"{getattr(module, '__file__', None) or module_name})")
        obj = getattr(obj, part)
    return obj


def failure(error: BaseException) -> str:
    """An exception of the user's code in one line: its kind and its message's first line."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def call_factory(factory: Callable[..., Any], args: tuple, kwargs: Mapping[str, Any], field: str, name: str,
                 kwargs_field: str, call: str) -> Any:
    """A user's `factory(*args, **kwargs)` (`call` shows it: "name's factory(**env_params)").
    Whatever it raises, any exception or SystemExit (sys.exit), is one ConfigError naming the
    call and the error: a TypeError names `kwargs_field` (arguments it does not take), anything
    else `field`=`name`. KeyboardInterrupt (a stop) is not caught."""
    try:
        return factory(*args, **kwargs)
    except TypeError as error:
        raise ConfigError(kwargs_field, dict(kwargs), f"{call} failed: {failure(error)}") from None
    except (Exception, SystemExit) as error:
        raise ConfigError(field, name, f"{call} failed: {failure(error)}") from None
