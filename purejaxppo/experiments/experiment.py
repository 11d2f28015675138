"""What a train or sweep command runs, as one typed, versioned record: `Experiment`.

    command            train | sweep
    config             the base config (`PPOConfig`)
    spec               the sweep section (`SweepSpec`; a train run's: its seeds and evaluation episodes)
    first_seed         seed s of every point uses PRNGKey(first_seed + s)
    checkpoint_every   a checkpoint after every K updates (None: at the end)
    max_parallel       runs in flight per device (None: all)
    keep               the newest checkpoints kept (None: all)

It is built once (`request.plan_command` from a command line, or `Experiment(...)` from
Python), written as the folder's config file (`file_name`, `file_text`) and stored as one
entry of every checkpoint's meta (`meta_entry`). Reading it back is `from_meta` alone: it
reads the layout of purejaxppo 0.4.0 (the settings at the top of the meta) as well as its
own, and it alone fills in what a folder written before a key existed lacks (the run had that
key's default), so adding a setting never makes an old folder unreadable. `diff` of two
records is the resume message.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, NamedTuple

import yaml

from purejaxppo.config import ConfigError, PPOConfig, check_fields
from purejaxppo.experiments.spec import SweepSpec, make_spec

VERSION = 1          # of the record as `to_dict` writes it
META_KEY = "experiment"  # its entry in a checkpoint's meta
class CommandFolder(NamedTuple):
    """What a command's run folder is called and holds."""

    config_file: str     # its config file
    with_section: bool   # ... whether that holds the sweep: section
    prefix: str          # the default folder's name: runs/<prefix><env>-<time>


FOLDERS = {"train": CommandFolder("config.yaml", False, ""), "sweep": CommandFolder("sweep.yaml", True, "sweep-")}
COMMANDS = tuple(FOLDERS)
# the settings beside the config and the spec: their defaults, and their rules (name -> rule, what it must be)
OPTIONS = {"first_seed": 0, "checkpoint_every": None, "max_parallel": None, "keep": None}
# purejaxppo 0.4.0 wrote the record's fields at the top level of a checkpoint's meta, without a version
FIELDS_0_4 = ("command", "config", "spec", *OPTIONS)


class DamagedRecord(ValueError):
    """A stored record that cannot be read: the message names the key (`from_meta`'s callers
    make it a CheckpointError naming the checkpoint)."""


def _int(value, low: int = 0, high: int | None = None) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool) and value >= low
            and (high is None or value <= high))


def _count_or_none(value) -> bool:
    return value is None or _int(value, 1)


_RULES = {
    "command": (lambda v: v in COMMANDS, "train or sweep"),
    "config": (lambda v: isinstance(v, Mapping), "a mapping (the config)"),
    "spec": (lambda v: isinstance(v, Mapping) and _int(v.get("seeds", 1), 1) and _int(v.get("eval_episodes", 0)),
             "a mapping with seeds (an integer of at least 1)"),
    "first_seed": (lambda v: _int(v, 0, 2**32 - 1), "an integer in [0, 2**32 - 1]"),
    "checkpoint_every": (_count_or_none, "null or an integer of at least 1"),
    "max_parallel": (_count_or_none, "null or an integer of at least 1"),
    "keep": (_count_or_none, "null or an integer of at least 1"),
}


@dataclasses.dataclass(frozen=True)
class Experiment:
    command: str
    config: PPOConfig
    spec: SweepSpec
    first_seed: int = 0
    checkpoint_every: int | None = None
    max_parallel: int | None = None
    keep: int | None = None

    # ---------------------------------------------------------------- stored
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML values, with the record's version (`from_dict` reads it back)."""
        return {"version": VERSION, "command": self.command, "config": self.config.to_dict(),
                "spec": self.spec.to_dict(), **{name: getattr(self, name) for name in OPTIONS}}

    def meta_entry(self) -> dict[str, Any]:
        """What a checkpoint's meta holds of it: one entry."""
        return {META_KEY: self.to_dict()}

    @classmethod
    def from_dict(cls, saved: Mapping[str, Any], prefix: str = "") -> Experiment:
        """A stored record -> the record; every key it lacks at its default (where it may have
        one: the command, config and spec it must have). A value of the wrong type or range is
        a DamagedRecord naming `prefix` + its key."""
        version = saved.get("version", 0)
        if not _int(version):
            raise DamagedRecord(f"{prefix}version={_short(version)} must be a non-negative integer")
        if version > VERSION:
            raise DamagedRecord(f"{prefix}version={version}: written by a newer purejaxppo (this one reads "
                                f"records up to version {VERSION}): read it with the purejaxppo that wrote it")
        values = {**OPTIONS, **{k: v for k, v in saved.items() if k != "version"}}
        for key, (rule, what) in _RULES.items():
            if key not in values:
                raise DamagedRecord(f"it has no {prefix}{key}")
            if not rule(values[key]):
                raise DamagedRecord(f"{prefix}{key}={_short(values[key])} must be {what}")
        try:  # a config key added since: the run had its default
            config = check_fields({**PPOConfig().to_dict(), **values["config"]})
        except ConfigError as error:
            raise DamagedRecord(f"{prefix}config: {error}") from None
        section = SweepSpec.with_defaults(values["spec"])
        try:  # (a train run's grid is {}: no grid)
            spec = make_spec({k: v for k, v in section.items() if k != "grid" or v})
        except ConfigError as error:
            raise DamagedRecord(f"{prefix}spec: {error}") from None
        return cls(values["command"], config, spec, **{name: values[name] for name in OPTIONS})

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> Experiment | None:
        """The record a checkpoint's meta holds (of this version or an older one: 0.4.0's at the
        top level), None where it holds none (saved through the Python API). DamagedRecord
        where it cannot be read."""
        if META_KEY in meta:
            if not isinstance(meta[META_KEY], Mapping):
                raise DamagedRecord(f"{META_KEY}={_short(meta[META_KEY])} must be a mapping")
            return cls.from_dict(meta[META_KEY], f"{META_KEY}.")
        if not any(key in meta for key in FIELDS_0_4):
            return None
        return cls.from_dict({key: meta[key] for key in FIELDS_0_4 if key in meta})

    # ---------------------------------------------------------------- compared
    def settings(self) -> dict[str, Any]:
        """Every setting as one flat mapping: config keys, sweep.<key> (a train run, which has no
        sweep section: its seeds and eval_episodes), and the options."""
        own = {} if self._with_section else {"seeds": self.spec.seeds, "eval_episodes": self.spec.eval_episodes}
        return {**self.file_settings(), **own, **{name: getattr(self, name) for name in OPTIONS}}

    def file_settings(self) -> dict[str, Any]:
        """What the folder's config file holds, as `settings` names it (`read_file_settings`)."""
        section = self.spec.to_dict() if self._with_section else {}
        return {**self.config.to_dict(), **{f"sweep.{k}": v for k, v in section.items()}}

    def diff(self, other: Experiment) -> list[str]:
        """`key before -> after` for each setting that differs from `other`'s (this one: before)."""
        before, now = self.settings(), other.settings()
        return [f"{key} {before.get(key)!r} -> {now.get(key)!r}" for key in sorted(set(before) | set(now))
                if before.get(key) != now.get(key)]

    # ---------------------------------------------------------------- the folder's config file
    @property
    def _with_section(self) -> bool:
        return FOLDERS[self.command].with_section

    def file_text(self) -> str:
        """config.yaml (a run's resolved config) or sweep.yaml (a sweep's base config and its
        sweep: section; it reloads with spec.load_sweep)."""
        values = self.config.to_dict()
        if self._with_section:
            values["sweep"] = self.spec.to_dict()
        return yaml.safe_dump(values, sort_keys=False)

    def read_file_settings(self, path: Path) -> dict[str, Any]:
        """The folder's config file as `file_settings` names it, every key it lacks at its
        default. ValueError (a line for the user) where it is not a readable mapping."""
        try:
            written = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            raise ValueError(f"cannot read {path.name} ({type(error).__name__})") from None
        if not isinstance(written, dict):
            raise ValueError(f"{path.name} is not a mapping")
        section = written.pop("sweep", None) if self._with_section else None
        values = {**PPOConfig().to_dict(), **written}
        if self._with_section:
            section = section if isinstance(section, dict) else {}
            values.update({f"sweep.{k}": v for k, v in SweepSpec.with_defaults(section).items()})
        return values


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
