"""pyproject.toml keeps its promises: one jax range everywhere, CI's oldest end at its floor, every
declared dependency imported by the package or its line saying why it is there."""

import ast
import importlib.metadata
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirement(name: str, requirements) -> Requirement:
    return next(r for r in map(Requirement, requirements) if r.name == name)


def test_the_accelerator_extras_are_jaxs_own_with_the_same_range():
    jax = _requirement("jax", PROJECT["dependencies"])
    assert jax.specifier.contains("0.9.2") and jax.specifier.contains("0.11.2")
    assert not jax.specifier.contains("0.12.0")  # gymnax 1.0.1 caps jax below 0.12
    for hangs in ("0.10.0", "0.10.1", "0.10.2", "0.11.0"):  # the CPU deadlock (pyproject.toml says why)
        assert not jax.specifier.contains(hangs)
    for extra in ("cuda12", "cuda13", "tpu"):
        req, *plugin = map(Requirement, PROJECT["optional-dependencies"][extra])
        assert req.name == "jax" and req.extras == {extra} and req.specifier == jax.specifier
        # the plugin's version is left to jax's extra, which pins it to jax's own
        assert [(p.name, p.extras, str(p.specifier)) for p in plugin] == (
            [(f"jax-{extra}-plugin", {"with-cuda"}, "")] if extra.startswith("cuda") else [])


def test_ci_oldest_end_pins_the_floor_of_each_range_it_names():
    pins = {}
    for line in (ROOT / ".ci" / "oldest.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            pins[req.name] = spec.version
    assert pins["jax"] == pins["jaxlib"] == "0.9.2"
    declared = PROJECT["dependencies"] + [r for extra in ("craftax", "xminigrid", "jumanji")
                                          for r in PROJECT["optional-dependencies"][extra]]
    for name, version in pins.items():
        if name == "jaxlib":  # comes with jax at jax's version
            continue
        floors = [s.version for s in _requirement(name, declared).specifier if s.operator == ">="]
        assert floors == [version], (name, floors, version)


def test_every_declared_dependency_is_imported_or_says_why():
    imported = set()
    for path in (ROOT / "purejaxppo").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    by_distribution = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            by_distribution.setdefault(re.sub(r"[-_.]+", "-", dist).lower(), set()).add(module)
    text = (ROOT / "pyproject.toml").read_text()
    block = text[text.index("dependencies = ["):text.index("]\n", text.index("dependencies = ["))]
    lines = [line for line in block.splitlines() if line.strip().startswith('"')]
    assert len(lines) == len(PROJECT["dependencies"])
    unexplained = []
    for line in lines:
        name = re.sub(r"[-_.]+", "-", Requirement(line.split('"')[1]).name).lower()
        if not by_distribution.get(name, set()) & imported and "#" not in line:
            unexplained.append(name)
    assert unexplained == []
