"""The Markdown files a user reads: every relative link resolves to a file of the repository
(and to a heading, where it names one), no link or path leaves the repository, and every
`pip install` line runs from a clone.

Plain text parsing, no mkdocs needed (`mkdocs build --strict`, the `docs` extra, checks the
links between docs/ pages too; .ci/run runs it)."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

from purejaxppo.extras import NAME, requirement_name

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "benchmarks" / "README.md",
                *(ROOT / "docs").glob("*.md")])
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE = re.compile(r"(`+)(.+?)\1", re.S)
PIP = re.compile(r"pip3? install\b[^\n]*")
PATH_EXTRAS = re.compile(r"(?<![\w\]])\.\[([^\]\s]*)\]")  # `.[envs]`, `-e ".[test,envs]"`: a clone's extras
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def prose(text: str) -> str:
    """The text without fenced code blocks (links in code are not links)."""
    return FENCE.sub("", text)


def links(text: str) -> list[str]:
    return LINK.findall(CODE.sub("", prose(text)))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading (mkdocs.yml makes the site's anchors the same)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", prose(page.read_text()), re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def code(text: str) -> str:
    """The text's code, a piece a line: fenced blocks, then inline spans."""
    return "\n".join([m[0] for m in FENCE.finditer(text)] + [span for _, span in CODE.findall(prose(text))])


def install_faults(text: str) -> list[str]:
    """The `pip install` lines of the text's code that fail from a clone: purejaxppo asked of a
    registry (it is on none: a clone installs it with -e and a path), and `.[X]` naming an extra
    pyproject.toml does not declare (in a comment or a span of its own too)."""
    faults = []
    for line in PIP.findall(code(text)):
        words = shlex.split(line, comments=True)[2:]
        for before, word in zip(["install", *words], words):
            if not word.startswith("-") and before not in ("-e", "--editable") and "@" not in word \
                    and requirement_name(word)[0] == NAME:
                faults.append(f"{line.strip()}: {NAME} is on no registry (pip install -e from a clone)")
    for extras in PATH_EXTRAS.findall(code(text)):
        unknown = sorted(set(extras.split(",")) - EXTRAS)
        if unknown:
            faults.append(f".[{extras}]: pyproject.toml declares no extra {', '.join(unknown)}")
    return faults


def inside(path: Path) -> bool:
    try:
        path.resolve().relative_to(ROOT)
        return True
    except ValueError:
        return False


def test_the_pages_exist():
    assert (ROOT / "docs" / "index.md").exists() and (ROOT / "CHANGELOG.md").exists()
    assert len(PAGES) >= 5


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(page):
    broken = []
    for target in links(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:: not a file
            continue
        path, _, anchor = target.partition("#")
        if path.startswith("/"):
            broken.append(f"{target}: an absolute path (a clone puts the repository anywhere)")
            continue
        file = (page.parent / path) if path else page
        if not inside(file):
            broken.append(f"{target}: outside the repository")
        elif not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_path_in_the_text_leaves_the_repository(page):
    """A path written as code (`../x/y.md`) is followed by readers as a link is."""
    outside = [span for _, span in CODE.findall(prose(page.read_text())) if span.startswith("../")
               and not (inside(page.parent / span.split()[0]) and (page.parent / span.split()[0]).exists())]
    assert not outside, f"{page.relative_to(ROOT)} names paths outside the repository (or none): {outside}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_repository_paths_the_text_names_exist(page):
    """`benchmarks/results/x.md`, `purejaxppo/config.py`, ...: written from the repository's
    root, as the pages do; a file that moved or went is named here."""
    top = r"benchmarks|purejaxppo|configs|notebooks|tests|docs|\.ci"  # the repository's folders
    missing = [span for _, span in CODE.findall(prose(page.read_text()))
               if re.fullmatch(rf"(?:{top})/[\w./-]*", span) and not (ROOT / span).exists()]
    assert not missing, f"{page.relative_to(ROOT)} names files that are not in the repository: {missing}"


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "CHANGELOG.md"],  # the changelog: history
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_install_line_runs_from_a_clone(page):
    faults = install_faults(page.read_text())
    assert not faults, f"{page.relative_to(ROOT)}: " + "; ".join(faults)


def test_the_checks_catch_what_they_are_for(tmp_path):
    text = ("[ok](docs/index.md) ![img](a.png) `[not a link](nowhere.md)` [web](https://example.org)\n"
            "```\n[in code](nowhere.md)\n```\n[anchor](#a-heading-with-code)")
    assert links(text) == ["docs/index.md", "a.png", "https://example.org", "#a-heading-with-code"]
    assert slug("A heading with `code`") == "a-heading-with-code"
    assert slug("Sweeps: seeds × hyperparameters") == "sweeps-seeds--hyperparameters"
    assert not inside(ROOT / ".." / "shared" / "notes.md")
    page = tmp_path / "page.md"
    page.write_text("# Top\n## Top\n```\n# not a heading\n```\n")
    assert anchors(page) == {"top", "top-1"}
    text = ("`pip install 'purejaxppo[envs]'` `pip install -e \".[envs]\"` `pip install wandb` `.[tpu,gpu]`\n"
            "```bash\npython -m pip install purejaxppo   # or .[cuda13], or .[cuda99]\npip install -e .\n```\n"
            "`pip install git+https://example.org/purejaxppo.git` `pip install 'purejaxppo @ ./x'` "
            "`pip install -e '.[nope]' -r req.txt` the sentence ends.[a link](x.md)")
    assert [fault.split(":")[0] for fault in install_faults(text)] == [
        "pip install purejaxppo   # or .[cuda13], or .[cuda99]", "pip install 'purejaxppo[envs]'",
        ".[cuda99]", ".[tpu,gpu]", ".[nope]"]
