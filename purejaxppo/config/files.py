"""Config files: strict YAML reading, `load_config`, and `key=value` overrides."""

from __future__ import annotations

import difflib
import shlex
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from purejaxppo import configs
from purejaxppo.config.checks import _coerce, _unknown_key, make_config
from purejaxppo.config.fields import FIELDS, PPOConfig
from purejaxppo.errors import NO_VALUE, ConfigError


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value` from the command line; the value is read as YAML (3, 0.1, true, [64, 64])."""
    if "=" not in text:
        raise ConfigError("--set", text, "must look like key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key, value


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """The command line's `--set key=value` options (`parse_override`) as overrides, each key a
    config key and each value of its key's type: an error blames the option as given
    (`--set key=value`), not the config or sweep file the overrides are applied to."""
    overrides: dict[str, Any] = {}
    for text in items:
        key, value = parse_override(text)
        given = f"--set {shlex.quote(text)}"
        if key not in FIELDS:
            raise _unknown_key(key, given)
        try:
            _coerce(FIELDS[key], value)
        except ConfigError as error:
            raise ConfigError(error.field, error.value, f"{error.rule} (given by {given})") from None
        overrides[key] = value
    return overrides


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing what it would accept silently: a key given twice
    (PyYAML keeps the last) and a key that is not a string (`1: x`, `null: x`, `[a]: x`)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)  # merge keys (<<: *anchor) first, as SafeLoader does
            seen: dict[str, Any] = {}
            for key_node, _ in node.value:
                line, column = key_node.start_mark.line + 1, key_node.start_mark.column + 1
                if not (isinstance(key_node, yaml.ScalarNode) and key_node.tag == "tag:yaml.org,2002:str"):
                    text = key_node.value if isinstance(key_node, yaml.ScalarNode) else f"a {key_node.id}"
                    raise _KeyProblem(str(text), f"line {line}: a key must be a string (quote it if it is "
                                                 f"meant as one)")
                if key_node.value in seen:
                    first_line, first_column = seen[key_node.value]
                    where = (f"line {line}, columns {first_column} and {column}" if first_line == line
                             else f"lines {first_line} and {line}")
                    raise _KeyProblem(key_node.value, f"given twice ({where}); give each key once")
                seen[key_node.value] = line, column
        return super().construct_mapping(node, deep)


class _KeyProblem(Exception):
    def __init__(self, key: str, rule: str):
        super().__init__(key, rule)
        self.key, self.rule = key, rule


def _yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error on one line: where, then what."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    what = " ".join(part for part in (getattr(error, "context", None), getattr(error, "problem", None)) if part)
    what = what or str(error)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return " ".join(f"not valid YAML: {where}{what}".split())


def read_yaml(path: str | Path, field: str = "config") -> dict[str, Any]:
    """A YAML file's top-level mapping, strictly read (UTF-8, no repeated or non-string
    keys), holding at least one key: a file with none (empty, only comments, `{}`) would run
    the defaults of every key, which nobody asks for by writing nothing. Every problem is a
    ConfigError: `field`=path for the file, the key's name for a repeated or non-string key."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(field, str(path), "is a folder; give a YAML file")
    if not path.is_file():
        raise ConfigError(field, str(path), "file not found")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(field, str(path), f"is not UTF-8 text (byte {error.object[error.start]:#04x} at "
                                            f"offset {error.start}); a config is a YAML text file") from None
    except OSError as error:
        raise ConfigError(field, str(path), f"cannot be read: {error.strerror}") from None
    try:
        loaded = yaml.load(text, Loader=_StrictLoader)
    except _KeyProblem as problem:
        raise ConfigError(problem.key, NO_VALUE, f"in {path}, {problem.rule}") from None
    except yaml.YAMLError as error:
        raise ConfigError(field, str(path), _yaml_problem(error)) from None
    if not isinstance(loaded, (dict, type(None))):
        raise ConfigError(field, str(path), f"must be a YAML mapping of key: value, not a {type(loaded).__name__}")
    if not loaded:
        raise ConfigError(field, str(path), "is empty (no key): name at least env, e.g. env: CartPole-v1")
    return loaded


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> PPOConfig:
    """Read a YAML config (flat keys of `PPOConfig`): a path, or a shipped config by name
    ("cartpole", "brax/ant": `find_config`); apply overrides, check everything."""
    path = find_config(str(path), "config") if path is not None else None
    return make_config(config_values(path, overrides), where=str(path) if path else "config")


def find_config(text: str, field: str) -> str:
    """A config argument: a path that exists (a file, or a pipe: /dev/fd/N, `<(...)`), else a
    shipped config of that name; else a ConfigError naming the nearest shipped one."""
    if Path(text).exists():
        return text
    shipped = configs.find(text)
    if shipped is not None:
        return str(shipped)
    nearest = difflib.get_close_matches(text.removesuffix(".yaml"), configs.names(), n=1)
    hint = f"; did you mean {nearest[0]}?" if nearest else ""
    raise ConfigError(field, text, f"file not found, nor a shipped config{hint} (purejaxppo configs lists them)")


def config_values(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A YAML config's values with overrides applied, every key known; the values are not
    yet checked (`make_config` checks them)."""
    values: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        loaded = read_yaml(path, "config")
        for key in loaded:
            if key not in FIELDS:
                raise _unknown_key(key, str(path))
        values.update(loaded)
    for key in overrides or {}:
        if key not in FIELDS:
            raise _unknown_key(key, "overrides")
    values.update(overrides or {})
    return values
