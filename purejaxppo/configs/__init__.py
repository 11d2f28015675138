"""The shipped configs, found by name from any folder: `purejaxppo train cartpole`,
`purejaxppo train brax/inverted_pendulum`, `purejaxppo sweep sweeps/clip_epochs`
(`purejaxppo configs` lists them). Package data; the repository's `configs/` links here."""

from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).parent


def names() -> list[str]:
    """Every shipped config by name ("cartpole", "brax/ant", "sweeps/clip_epochs", ...)."""
    return sorted(str(p.relative_to(FOLDER).with_suffix("")) for p in FOLDER.rglob("*.yaml"))


def find(name: str | Path) -> Path | None:
    """The shipped config of that name (with or without .yaml), or None."""
    path = FOLDER / Path(name)
    for candidate in (path, path.with_name(path.name + ".yaml")):
        if candidate.suffix == ".yaml" and candidate.is_file() and FOLDER in candidate.resolve().parents:
            return candidate
    return None


def summary(name: str) -> str:
    """The first line of a shipped config's header comment (its description), or ""."""
    for line in find(name).read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
        if line.strip():
            break
    return ""
