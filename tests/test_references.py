"""configs/references.yaml: a published return for every shipped train config, and the line
`purejaxppo train` prints from it."""

from __future__ import annotations

import numbers

import pytest
import yaml

from purejaxppo import configs

REFS = configs.references()


def test_every_shipped_train_config_has_a_reference_and_nothing_else_has():
    train_configs = {n for n in configs.names() if not n.startswith("sweeps/")}
    assert set(REFS) == train_configs


@pytest.mark.parametrize("name", sorted(REFS))
def test_each_reference_is_complete(name):
    ref = REFS[name]
    assert set(ref) <= {"return", "steps", "method", "cap", "cite", "source", "size", "cpu_minutes", "note"}
    assert ref.get("cap") in (None, True) and not (ref.get("cap") and ref["method"] in ("optimum", "none"))
    assert {"return", "steps", "method", "cite", "source", "size", "cpu_minutes"} <= set(ref)
    assert ref["size"] in ("cpu", "gpu") and ref["cite"] and ref["source"]
    if ref["return"] is None:  # nothing published: the cite says so and the note what is known instead
        assert ref["cite"].startswith("none published") and ref["method"] == "none"
    else:
        assert isinstance(ref["return"], numbers.Real) and ref["method"] in ("PPO", "PPO-RNN", "ES", "optimum")
        assert (ref["steps"] is None) == (ref["method"] == "optimum")
        if ref["method"] not in ("PPO", "PPO-RNN"):  # compared with a PPO run: why it may differ is said
            assert ref.get("note")
    for number in ("steps", "cpu_minutes"):  # PyYAML reads 1e7 as a string: numbers must be numbers
        assert ref[number] is None or isinstance(ref[number], numbers.Real)
    if ref["size"] == "gpu":
        assert ref["cpu_minutes"] is None


def test_the_shipped_configs_point_at_their_reference():
    """Each config taken from gymnax-blines says so in its header and refers to the file."""
    envs = {"minatar_asterix": "Asterix-MinAtar", "minatar_freeway": "Freeway-MinAtar",
            "minatar_seaquest": "Seaquest-MinAtar", "mountaincar": "MountainCar-v0",
            "mountaincar_continuous": "MountainCarContinuous-v0"}
    for name, env in envs.items():
        text = configs.find(name).read_text()
        assert "gymnax-blines" in text and "references.yaml" in text
        assert yaml.safe_load(text)["env"] == env


def test_reference_lines():
    assert configs.reference_line("minatar_space_invaders") == "reference: 131 at 1e7 steps (PPO, gymnax README)"
    assert configs.reference_line("xminigrid/empty_5x5") == "reference: 0.955 (optimum, xland-minigrid)"
    assert configs.reference_line("minatar_seaquest") == "reference: none published"
    assert configs.reference_line("sweeps/clip_epochs") is None


@pytest.mark.parametrize("steps, text", [(10_000_000, "1e7"), (250_000, "2.5e5"), (150_000, "1.5e5"),
                                         (32768, "3.28e4"), (976, "976"), (1e9, "1e9")])
def test_steps_text(steps, text):
    assert configs.steps_text(steps) == text


def test_name_of_a_shipped_config_however_reached(tmp_path):
    assert configs.name_of(configs.FOLDER / "brax" / "fast.yaml") == "brax/fast"
    assert configs.name_of(configs.FOLDER / "references.yaml") is None
    copy = tmp_path / "cartpole.yaml"
    copy.write_text(configs.find("cartpole").read_text())
    assert configs.name_of(copy) is None  # a user's copy is the user's config
