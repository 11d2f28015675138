"""The core (purejaxppo/*: environments, agent, rollout, GAE, losses, distributions,
networks, the learner, config) imports nothing from the experiment side
(purejaxppo/experiments/: runs, checkpoints, sweeps, sharding, statistics, reports,
live logging, the CLI), and no module imports another that imports it back. The package
face (purejaxppo/__init__.py) is core too: the experiment-side names it offers (`load`,
`sweep`, `SweepResult`) are imported when first asked for."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import purejaxppo
from conftest import assert_acyclic

PACKAGE = Path(purejaxppo.__file__).parent


def modules() -> dict[str, Path]:
    """Dotted name below purejaxppo (`train`, `envs.gymnax`, `experiments.sweep`) -> file."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and parts != ("__main__",):
            out[".".join(parts)] = path
    return out


def imported(path: Path) -> set[str]:
    """The purejaxppo modules a file imports, anywhere in it (local imports too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "purejaxppo":
            base = node.module.split(".")[1:]
            for alias in node.names:  # `from purejaxppo.experiments import report` imports a module
                names.add(".".join([*base, alias.name]) if ".".join([*base, alias.name]) in modules()
                          else ".".join(base))
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".", 1)[1] for a in node.names if a.name.startswith("purejaxppo."))
    return names - {""}


def is_experiment(name: str) -> bool:
    return name == "experiments" or name.startswith("experiments.")


def test_the_core_never_imports_the_experiment_side():
    core = {name: path for name, path in modules().items() if not is_experiment(name)}
    assert {"config", "agent", "train", "rollout", "gae", "losses", "envs"} <= set(core)
    assert {"experiments.cli", "experiments.sweep", "experiments.checkpoint"} <= set(modules())
    for name, path in core.items():
        wrong = {m for m in imported(path) if is_experiment(m)}
        assert not wrong, f"{name} (core) imports {sorted(wrong)} (experiment side)"


def test_no_import_cycles():
    graph = {name: imported(path) - {name} for name, path in modules().items()}
    assert_acyclic(graph)


FACE_PROBE = r"""
import json, sys
import purejaxppo.gae, purejaxppo.train
import purejaxppo

def experiment_modules():
    return sorted(m for m in sys.modules if m.startswith("purejaxppo.experiments"))

loaded_by_core = experiment_modules()
listed = sorted(set(purejaxppo.__all__) - set(dir(purejaxppo)))
loaded_by_dir = experiment_modules()
from purejaxppo import load
import purejaxppo.experiments.saved, purejaxppo.experiments.sweep
print(json.dumps({"loaded_by_core": loaded_by_core, "all_not_in_dir": listed, "loaded_by_dir": loaded_by_dir,
                  "face_is_the_module's": [load is purejaxppo.experiments.saved.load,
                                           purejaxppo.load is purejaxppo.experiments.saved.load,
                                           purejaxppo.sweep is purejaxppo.experiments.sweep.sweep,
                                           purejaxppo.SweepResult is purejaxppo.experiments.sweep.SweepResult],
                  "every_name_in_all": all(hasattr(purejaxppo, name) for name in purejaxppo.__all__),
                  "unknown_name": hasattr(purejaxppo, "sweeps")}))
"""


def test_the_package_face_loads_no_experiment_module_until_asked():
    done = subprocess.run([sys.executable, "-c", FACE_PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["loaded_by_core"] == [], seen  # import purejaxppo.gae / .train / purejaxppo
    assert seen["all_not_in_dir"] == [] and seen["loaded_by_dir"] == [], seen  # dir() lists them, loads nothing
    assert seen["face_is_the_module's"] == [True] * 4, seen
    assert seen["every_name_in_all"] and not seen["unknown_name"], seen



# the experiment side's layers: module -> what it must never reach, through any chain of imports
# (shared/DESIGN.md: the executor imports no folder and no kind; the checkpoint storage knows no record;
# the run record knows no storage or executor (it reads its sweep section through the kinds, which write
# their reports); the report is text and bytes, no I/O; the run folder writes what a kind gives it, and
# the command line words what a run left (outcome.py): the folder does not)
KINDS = {"experiments.kinds", "experiments.pbt", "experiments.spec", "experiments.plan", "experiments.sweep"}
USER_SIDE = {"experiments.folder", "experiments.saved", "experiments.live", "experiments.cli", "experiments.request",
             "experiments.options", "experiments.replay", "experiments.outcome"}
NEVER_REACHES = {
    "experiments.runs": KINDS | USER_SIDE | {"experiments.experiment", "experiments.report"},
    "experiments.checkpoint": KINDS | USER_SIDE | {"experiments.experiment", "experiments.report",
                                                   "experiments.runs"},
    "experiments.experiment": USER_SIDE | {"experiments.runs", "experiments.checkpoint", "experiments.hosts",
                                           "experiments.parallel"},
    "experiments.memory": KINDS | USER_SIDE | {"experiments.report", "experiments.runs"},
    "experiments.report": USER_SIDE | {"experiments.runs", "experiments.checkpoint", "experiments.experiment",
                                       "experiments.hosts", "experiments.parallel", "experiments.kinds"},
}
# ... and what it must not import itself (a kind's report reaches it through the record's sweep section)
NEVER_IMPORTS = {
    "experiments.folder": {"experiments.report", "experiments.kinds", "experiments.cli", "experiments.request",
                           "experiments.runs", "experiments.sweep", "experiments.outcome", "experiments.hosts"},
    "experiments.plan": {"experiments.pbt", "experiments.report", "experiments.folder"},
    "experiments.memory": {"experiments.spec", "experiments.kinds", "experiments.hosts"},
}
# the job's processes are one object handed in (`hosts.Cluster`): only hosts.py asks JAX which process
# this is, and parallel.py lays arrays out over the processes' devices
PROCESS_QUESTIONS = ("process_index", "process_count", "distributed", "multihost_utils")
ASKS_WHICH_PROCESS = {"experiments.hosts", "experiments.parallel"}


def reached(name: str, graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Every module `name` imports, directly or through others -> one chain of imports to it."""
    chains, todo = {name: [name]}, [name]
    while todo:
        here = todo.pop()
        for there in sorted(graph.get(here, ())):
            if there not in chains:
                chains[there] = [*chains[here], there]
                todo.append(there)
    del chains[name]
    return chains


def test_the_experiment_sides_layers_hold():
    graph = {name: imported(path) - {name} for name, path in modules().items()}
    assert set(NEVER_REACHES) | {m for banned in NEVER_REACHES.values() for m in banned} <= set(graph)
    for name, banned in NEVER_REACHES.items():
        broken = {m: chain for m, chain in reached(name, graph).items()
                  if any(m == b or m.startswith(f"{b}.") for b in banned)}  # a package: its modules too
        assert not broken, f"{name} reaches {sorted(broken)}: " + "; ".join(" -> ".join(c) for c in broken.values())
    for name, banned in NEVER_IMPORTS.items():
        wrong = {m for m in graph[name] if any(m == b or m.startswith(f"{b}.") for b in banned)}
        assert not wrong, f"{name} imports {sorted(wrong)}"


def asks_which_process(path: Path) -> set[str]:
    """The names of `PROCESS_QUESTIONS` a file uses (an attribute `jax.process_index`, an import of
    multihost_utils, ...)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [part for alias in node.names for part in alias.name.split(".")]
            names += (getattr(node, "module", None) or "").split(".")
        else:
            names = []
        found.update(name for name in names if name in PROCESS_QUESTIONS)
    return found


def test_only_the_hosts_module_asks_which_process_this_is():
    """The executor, the folder, the checkpoints and memory are handed the processes (a Cluster)."""
    assert asks_which_process(PACKAGE / "experiments" / "hosts.py") >= {"process_index", "distributed"}
    for name, path in modules().items():
        if name not in ASKS_WHICH_PROCESS:
            asked = asks_which_process(path)
            assert not asked, f"{name} asks JAX which process this is ({sorted(asked)}): take a hosts.Cluster"
