"""The shipped configs, found by name from any folder: `purejaxppo train cartpole`,
`purejaxppo train brax/inverted_pendulum`, `purejaxppo sweep sweeps/clip_epochs`
(`purejaxppo configs` lists them). Package data; the repository's `configs/` links here."""

from __future__ import annotations

import functools
from pathlib import Path

FOLDER = Path(__file__).parent
REFERENCES = FOLDER / "references.yaml"


def names() -> list[str]:
    """Every shipped config by name ("cartpole", "brax/ant", "sweeps/clip_epochs", ...)."""
    return sorted(str(p.relative_to(FOLDER).with_suffix("")) for p in FOLDER.rglob("*.yaml") if p != REFERENCES)


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


def name_of(path: str | Path) -> str | None:
    """The shipped config's name if `path` is one of its files (however reached: the repository's
    configs/ link, a relative path), else None."""
    try:
        relative = Path(path).resolve().relative_to(FOLDER.resolve())
    except (OSError, ValueError):
        return None
    name = str(relative.with_suffix(""))
    return name if relative.suffix == ".yaml" and name in names() else None


@functools.cache
def references() -> dict[str, dict]:
    """references.yaml: for each shipped train config by name, the published return it should
    reach (`return`, None where nothing is published for its setting), at what budget
    (`steps`), by which `method`, from which source (`cite`, short; `source`, in full), the
    returns case's `size` (cpu or gpu), its measured `cpu_minutes` and a `note`."""
    import yaml

    return yaml.safe_load(REFERENCES.read_text())


@functools.cache
def references_by_env() -> dict[str, tuple[float, str, str]]:
    """env -> (return, config name, method): the highest published return over the shipped
    configs of each environment (the diagnosis's reference, or its cap where marked `cap: true`)."""
    import yaml

    best: dict[str, tuple[float, str, str]] = {}
    for name, ref in references().items():
        path = find(name)
        if not isinstance(ref, dict) or ref.get("return") is None or path is None:
            continue
        env = (yaml.safe_load(path.read_text()) or {}).get("env")
        if env is not None and (env not in best or ref["return"] > best[env][0]):
            best[env] = (float(ref["return"]), name, str(ref.get("method")))
    return best


def steps_text(steps: float) -> str:
    """A step count as budgets are written: 10000000 -> 1e7, 250000 -> 2.5e5, 976 -> 976."""
    steps = float(steps)
    if steps < 10_000:
        return f"{steps:g}"
    mantissa, exponent = f"{steps:.2e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def reference_line(name: str) -> str | None:
    """What a run of shipped config `name` should reach, as the train command prints it under
    its table, e.g. "reference: 131 at 1e7 steps (PPO, gymnax README)"; None for a config
    without a reference entry (a sweep)."""
    ref = references().get(name)
    if ref is None:
        return None
    if ref["return"] is None:  # its cite says so: "none published for a 6x6 board"
        return f"reference: {ref['cite']}"
    budget = f" at {steps_text(ref['steps'])} steps" if ref["steps"] is not None else ""
    return f"reference: {ref['return']:g}{budget} ({ref['method']}, {ref['cite']})"


def listing() -> str:
    """`purejaxppo configs`: each shipped config, the return it should reach (references.yaml),
    its time for 4 seeds on 2 CPU cores as the returns case measured it, and its description."""
    refs = references()
    shown = {name: (reference_line(name) or "").removeprefix("reference: ") for name in names()}
    width, ref_width = max(map(len, shown)), min(max(map(len, shown.values())), 52)
    lines = [f"{'config':<{width}}  {'reference (configs/references.yaml)':<{ref_width}}  {'4 seeds, 2 CPU cores':<20}  "
             "description"]
    lines += [f"{name:<{width}}  {line[:ref_width]:<{ref_width}}  {_expected_time(refs.get(name)):<20}  "
              f"{summary(name)[:70]}" for name, line in shown.items()]
    return "\n".join(lines) + f"\n\n(in {FOLDER}; e.g. purejaxppo train cartpole --seeds 8)"


def _expected_time(ref: dict | None) -> str:
    if ref is None:
        return ""
    if ref["size"] == "gpu":
        return "GPU-sized"
    minutes = ref["cpu_minutes"]
    return "not measured yet" if minutes is None else f"{minutes:.2g} min" if minutes < 10 else f"{minutes:.0f} min"
