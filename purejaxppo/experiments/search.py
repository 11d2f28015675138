"""Distributions of a random search (`sweep: random:`) and of a kind's own draws (its initial
points: kinds/): one syntax, checked and drawn here.

    lr: {loguniform: [1.0e-4, 1.0e-3]}      # low > 0, low < high
    ent_coef: {uniform: [0.0, 0.02]}        # low < high
    activation: {choice: [tanh, relu]}      # a non-empty list
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from purejaxppo.config import ConfigError
from purejaxppo.config.checks import _number

DISTRIBUTIONS = ("uniform", "loguniform", "choice")


def is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def check_distribution(field: str, dist: Any) -> dict:
    """A distribution as written -> {kind: args}, the numbers read as a config reads them
    (YAML reads 1e-4 as a string); else a ConfigError naming `field`."""
    if not isinstance(dist, Mapping) or len(dist) != 1 or next(iter(dist)) not in DISTRIBUTIONS:
        raise ConfigError(field, dist, f"must be one of {{{', '.join(DISTRIBUTIONS)}: ...}}")
    kind, args = next(iter(dist.items()))
    if kind == "choice":
        if not isinstance(args, (list, tuple)) or not args:
            raise ConfigError(field, dist, "choice needs a non-empty list")
        return {kind: list(args)}
    if isinstance(args, (list, tuple)) and all(_number(a) is not None for a in args):
        args = [_number(a) for a in args]
    if (not isinstance(args, (list, tuple)) or len(args) != 2
            or not all(is_number(a) and math.isfinite(a) for a in args)
            or not args[0] < args[1] or (kind == "loguniform" and args[0] <= 0)):
        raise ConfigError(field, dist, f"{kind} needs [low, high] with low < high" +
                          (" and low > 0" if kind == "loguniform" else ""))
    return {kind: list(args)}


def draw(distributions: Mapping[str, dict], trials: int, seed: int) -> list[dict]:
    """`trials` points, each a value of every key drawn from its (checked) distribution."""
    rng = np.random.default_rng(seed)
    points = []
    for _ in range(trials):
        point = {}
        for key, dist in distributions.items():
            kind, args = next(iter(dist.items()))
            if kind == "choice":
                point[key] = args[int(rng.integers(len(args)))]
            elif kind == "uniform":
                point[key] = float(rng.uniform(*args))
            else:
                point[key] = float(math.exp(rng.uniform(math.log(args[0]), math.log(args[1]))))
            if isinstance(point[key], np.generic):
                point[key] = point[key].item()
        points.append(point)
    return points
