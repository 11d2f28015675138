"""Kinds of experiment, as plug-ins (`base.Kind` says what each answers):

    train   the train command: one config over seeds           kinds/train.py
    grid    a sweep's grid and random points over seeds         kinds/grid.py
    <key>   a sweep section's own kind (sweep: <key>:)          kinds/<key>.py, its KIND

A sweep section names its kind by the kind's own key (`KEYED`: the modules named there, each
giving its KIND); one with none is a grid (and random) sweep. `of(spec, command)` is the one
place a kind is picked.
"""

from __future__ import annotations

import importlib

from purejaxppo.experiments.kinds.base import Kind, Ran, Schedule
from purejaxppo.experiments.kinds.grid import Grid
from purejaxppo.experiments.kinds.train import Train


def _kind(module: str) -> Kind:
    return importlib.import_module(f"{__name__}.{module}").KIND


# a sweep section's key -> the kind it selects: the registry (a kind's module defines KIND)
KEYED: dict[str, Kind] = {kind.key: kind for kind in map(_kind, ("pbt", "halving"))}
GRID, TRAIN = Grid(), Train()

__all__ = ["GRID", "KEYED", "TRAIN", "Grid", "Kind", "Ran", "Schedule", "Train", "of"]


def of(spec, command: str = "sweep") -> Kind:
    """The kind of a run of `spec` by `command` (train: one config over seeds; its spec has no
    kind's section)."""
    if spec.kind is not None:
        return KEYED[spec.kind]
    return TRAIN if command == "train" else GRID
