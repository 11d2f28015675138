"""The core (environments, agent, rollout, GAE, losses, distributions, networks, the
learner, config) imports nothing from the experiment side (runs, checkpoints, sweeps,
sharding, statistics, reports, live logging, the CLI), and no module imports another
that imports it back."""

import ast
from pathlib import Path

import purejaxppo

PACKAGE = Path(purejaxppo.__file__).parent
CORE = {"config", "errors", "envs", "agent", "networks", "distributions", "gae", "losses", "rollout", "evaluate",
        "train"}
EXPERIMENT = {"parallel", "runs", "checkpoint", "sweep", "stats", "diagnosis", "report", "live", "cli"}


def modules():
    """module name (first component below purejaxppo) -> its files."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts == ("__init__",):
            continue
        out.setdefault(parts[0], []).append(path)
    return out


def imported(path):
    """The purejaxppo modules a file imports (anywhere in it, local imports too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("purejaxppo"):
            parts = node.module.split(".")
            if len(parts) > 1:
                names.add(parts[1])
            else:  # from purejaxppo import report
                names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[1] for a in node.names if a.name.startswith("purejaxppo."))
    return names


def test_every_module_is_placed_in_a_layer():
    assert set(modules()) == CORE | EXPERIMENT


def test_the_core_never_imports_the_experiment_side():
    for name in CORE:
        for path in modules()[name]:
            wrong = imported(path) & EXPERIMENT
            assert not wrong, f"{path.relative_to(PACKAGE)} (core) imports {sorted(wrong)} (experiment side)"


def test_no_import_cycles():
    graph = {name: set().union(*(imported(p) for p in paths)) - {name} for name, paths in modules().items()}

    def visit(name, path):
        assert name not in path, f"import cycle: {' -> '.join([*path, name])}"
        for other in graph.get(name, ()):
            visit(other, [*path, name])

    for name in graph:
        visit(name, [])
