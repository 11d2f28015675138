"""purejaxppo.extras.install_line: the command that installs an optional extra into this
installation (purejaxppo is on no registry): `pip install -e '<checkout>[extra]'` from a checkout,
the extra's own requirements from an installed wheel."""

from __future__ import annotations

import importlib.metadata
import shlex
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement  # what pip parses a requirement with (matplotlib brings it)

from purejaxppo import extras
from purejaxppo.extras import install_line, requirement_name

ROOT = Path(__file__).resolve().parent.parent
DECLARED = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
# a wheel's metadata as setuptools writes it: an extra's marker ends in `extra == "..."`; `envs`
# names other extras (and itself, which must not loop)
WHEEL = ["numpy>=1.26", 'craftax<1.7,>=1.6.1; extra == "craftax"', 'jumanji<1.2,>=1.1.2; extra == "jumanji"',
         'playground<0.3,>=0.2.0; python_version >= "3.12" and extra == "playground"',
         'PureJaxPPO[craftax,jumanji,envs]; extra == "envs"', 'jumanji<1.2,>=1.1.2; extra == "envs"',
         'jax2onnx<0.18,>=0.17.1; extra == "onnx"']


@pytest.fixture
def installed_wheel(tmp_path, monkeypatch):
    """The package as if in site-packages (no checkout above it); `WHEEL` its metadata's requirements."""
    monkeypatch.setattr(extras, "PACKAGE", tmp_path / "site-packages" / "purejaxppo")
    real = importlib.metadata.requires
    monkeypatch.setattr(importlib.metadata, "requires", lambda name: WHEEL if name == "purejaxppo" else real(name))


@pytest.mark.parametrize("extra", sorted(DECLARED))
def test_from_this_checkout_the_line_installs_it_editable(extra):
    assert shlex.split(install_line(extra)) == ["pip", "install", "-e", f"{ROOT}[{extra}]"]


def test_from_a_wheel_the_line_installs_the_extras_requirements(installed_wheel):
    assert shlex.split(install_line("onnx")) == ["pip", "install", "jax2onnx<0.18,>=0.17.1"]
    playground = 'playground<0.3,>=0.2.0; python_version >= "3.12"'  # its marker but the extra's clause
    assert shlex.split(install_line("playground")) == ["pip", "install", playground]
    # envs: its own extras' requirements, each once
    assert shlex.split(install_line("envs")) == ["pip", "install", "craftax<1.7,>=1.6.1", "jumanji<1.2,>=1.1.2"]
    for line in (install_line("playground"), install_line("envs")):  # requirements as pip reads them
        for requirement in map(Requirement, shlex.split(line)[2:]):
            assert requirement.marker is None or (requirement.marker.evaluate({"python_version": "3.12"})
                                                  and not requirement.marker.evaluate({"python_version": "3.11"}))
    with pytest.raises(ValueError, match="no extra 'gpu'"):
        install_line("gpu")


def test_a_wheels_real_metadata_gives_pyprojects_requirements(tmp_path, monkeypatch):
    """The installed distribution's metadata (this checkout's, read as a wheel's would be): the
    requirements of `onnx`, and of `envs` as its extras' together."""
    monkeypatch.setattr(extras, "PACKAGE", tmp_path / "purejaxppo")

    def names(requirements):
        return sorted(requirement_name(r)[0] for r in requirements)

    assert names(shlex.split(install_line("onnx"))[2:]) == names(DECLARED["onnx"])
    assert names(shlex.split(install_line("envs"))[2:]) == names(
        DECLARED["craftax"] + DECLARED["xminigrid"] + DECLARED["jumanji"])


def test_a_pyproject_of_another_project_is_no_checkout(tmp_path, monkeypatch, installed_wheel):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\n')
    monkeypatch.setattr(extras, "PACKAGE", tmp_path / "purejaxppo")
    assert extras.checkout_project() is None
    assert install_line("craftax") == "pip install 'craftax<1.7,>=1.6.1'"
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "PureJaxPPO"\n[project.optional-dependencies]\n'
                                             'craftax = ["craftax"]\n')
    assert install_line("craftax") == f"pip install -e {shlex.quote(f'{tmp_path}[craftax]')}"
    with pytest.raises(ValueError, match="no extra 'onnx'"):
        install_line("onnx")


def test_a_copy_neither_checked_out_nor_installed_names_a_clone(tmp_path, monkeypatch):
    monkeypatch.setattr(extras, "PACKAGE", tmp_path / "purejaxppo")

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "requires", missing)
    assert install_line("onnx") == "pip install -e '<a clone of purejaxppo>[onnx]'"
