"""Text pieces every report shares: strict JSON, mean ± s.e. cells, the metrics table's rows
and CSV text (pure functions, host side)."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Mapping

import numpy as np

CLIP_CASE_NAMES = [f"clip_cases_{sign}_{region}" for sign in ("adv_pos", "adv_neg")
                   for region in ("inside", "above", "below")]


def json_text(value, indent: int | None = None) -> str:
    """Strict JSON (summary.json, `eval --json`): NaN and Inf, which JSON has no words for,
    become null."""
    return json.dumps(_finite(value), indent=indent, allow_nan=False)


def _finite(value):
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def format_mean_se(mean: float, se: float, digits: int = 3) -> str:
    if math.isnan(mean):
        return "n/a"
    text = f"{mean:.{digits}g}"
    return text if math.isnan(se) else f"{text} ± {se:.2g}"


def metric_rows(metrics: Mapping[str, np.ndarray], batch_size: int, labels: list[dict]):
    """(header, rows): one row per run per update, per-epoch metrics as name_e1..E.

    `metrics` has a leading run axis; `labels[r]` are run r's leading columns (seed, ...).
    """
    m = {k: np.asarray(v) for k, v in metrics.items()}
    num_updates = m["episode_return"].shape[1]
    columns: list[tuple[str, np.ndarray]] = []
    for name in sorted(m):
        value = m[name]
        if name == "clip_cases":
            flat = value.reshape(*value.shape[:2], 6)
            columns += [(case, flat[..., j]) for j, case in enumerate(CLIP_CASE_NAMES)]
        elif value.ndim == 3:
            columns += [(f"{name}_e{e + 1}", value[..., e]) for e in range(value.shape[-1])]
        else:
            columns.append((name, value))
    header = [*labels[0], "update", "env_steps"] + [c for c, _ in columns]
    rows = []
    for r, label in enumerate(labels):
        for u in range(num_updates):
            rows.append([*label.values(), u + 1, (u + 1) * batch_size] + [_cell(v[r, u]) for _, v in columns])
    return header, rows


def _cell(x):
    x = x.item()
    if isinstance(x, float):
        return "" if math.isnan(x) else f"{x:.6g}"
    return x


def csv_text(rows) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()
