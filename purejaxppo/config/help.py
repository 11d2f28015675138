"""Reading the declaration: `purejaxppo train --help-config` and the table of
docs/configuration.md."""

from __future__ import annotations

from typing import Any, Mapping

from purejaxppo.config.fields import FIELDS

def _show(value: Any) -> str:
    """A default as it is written in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return f"[{', '.join(map(str, value))}]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    return str(value)


def _rows() -> list[tuple[str, ...]]:
    """(key, type, static/traced, default, rule, meaning) per field."""
    rows = []
    for name, f in FIELDS.items():
        rule = ", ".join(r.text for r in f.rules)
        if f.null is not None:
            rule += f"{'; ' if rule else ''}null: {f.null}"
        rows.append((name, f.type, "traced" if f.traced else "static", _show(f.default), rule, f.help))
    return rows


_HEADER = ("key", "type", "kind", "default", "rule", "meaning")


def markdown_table() -> str:
    """The configuration table (docs/configuration.md holds a copy; a test keeps them equal)."""
    def cells(row, code):
        return [f"`{c}`" if i in code and c else c.replace("|", "\\|") for i, c in enumerate(row)]

    lines = ["| " + " | ".join(_HEADER) + " |", "|" + "---|" * len(_HEADER)]
    lines += ["| " + " | ".join(cells(row, code={0, 3})) + " |" for row in _rows()]
    return "\n".join(lines)


def text_table() -> str:
    """The fields for a terminal (`--help-config`): aligned columns, meaning last."""
    rows = [_HEADER] + _rows()
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in rows)
