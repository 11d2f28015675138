"""The command that installs one of purejaxppo's optional extras into THIS installation.

purejaxppo is not on a package registry, so `pip install 'purejaxppo[onnx]'` fails. From a
checkout (an editable install: the folder above the package holds purejaxppo's pyproject.toml)
the extra is `pip install -e '<checkout>[onnx]'`; from a built wheel, the extra's own
requirements, as the installed distribution's metadata lists them."""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import tomllib
from pathlib import Path

NAME = "purejaxppo"
PACKAGE = Path(__file__).resolve().parent  # purejaxppo/ (a test moves it)
# a requirement's name and extras: "jax[cuda12]>=0.9.2; ..." -> ("jax", "cuda12")
REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?\s*(?=$|[;<>=!~@(,])")
# the clause of a requirement's marker that the metadata adds to an extra's requirement
EXTRA_CLAUSE = re.compile(r"""(?:^|\s+and\s+)extra\s*==\s*["']([^"']+)["']\s*$""")


def normalized(name: str) -> str:
    """A project's or an extra's name as the metadata compares them: "Jax_Cuda" -> "jax-cuda"."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> tuple[str, list[str]]:
    """"purejaxppo[craftax,jumanji] ; ..." -> ("purejaxppo", ["craftax", "jumanji"]), the name
    normalized; ("", []) for what does not start with a name (a path, a URL, an option)."""
    found = REQUIREMENT.match(requirement)
    if not found:
        return "", []
    return normalized(found[1]), [e.strip() for e in (found[2] or "").split(",") if e.strip()]


def checkout_project() -> tuple[Path, dict] | None:
    """The checkout this package is imported from (the folder above it holds the pyproject.toml
    of project purejaxppo) and that file's [project] table; None from an installed wheel."""
    try:
        project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text()).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    return (PACKAGE.parent, project) if normalized(str(project.get("name", ""))) == NAME else None


def extra_requirements(extra: str, _seen: frozenset = frozenset()) -> list[str]:
    """The requirements the installed distribution's metadata lists for `extra`, each with the
    marker it has beyond `extra == ...`; an extra naming others of purejaxppo's
    (`envs = purejaxppo[craftax,...]`) gives theirs. ValueError for an extra it does not declare."""
    out, found = [], False
    for line in importlib.metadata.requires(NAME) or []:
        requirement, _, marker = line.partition(";")
        marker = marker.strip()
        clause = EXTRA_CLAUSE.search(marker)
        if not clause or normalized(clause[1]) != normalized(extra):
            continue
        found = True
        name, own = requirement_name(requirement)
        if name == NAME:  # other extras of ours: theirs (an extra already expanded once)
            seen = _seen | {normalized(extra)}
            out += [r for other in own if normalized(other) not in seen for r in extra_requirements(other, seen)]
            continue
        rest = marker[:clause.start()]
        out.append(f"{requirement.strip()}; {rest}" if rest else requirement.strip())
    if not found:
        raise ValueError(f"{NAME} declares no extra {extra!r}")
    return list(dict.fromkeys(out))


def install_line(extra: str) -> str:
    """The shell command that installs `extra` here: `pip install -e '<checkout>[extra]'` from
    a checkout, else `pip install 'req1' 'req2' ...` (the extra's requirements; a copy with no
    metadata: the line with a clone's place to fill in). ValueError for an extra purejaxppo
    does not declare (the caller's mistake)."""
    found = checkout_project()
    if found is not None:
        root, project = found
        if extra not in project.get("optional-dependencies", {}):
            raise ValueError(f"{NAME} declares no extra {extra!r} (in {root / 'pyproject.toml'})")
        return f"pip install -e {shlex.quote(f'{root}[{extra}]')}"
    try:
        requirements = extra_requirements(extra)
    except importlib.metadata.PackageNotFoundError:  # a copy of the package, neither a checkout nor installed
        return f"pip install -e '<a clone of {NAME}>[{extra}]'"
    return "pip install " + " ".join(shlex.quote(r) for r in requirements)
