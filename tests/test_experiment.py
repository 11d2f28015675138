"""The run record (`experiment.Experiment`): stored and read back whole, read from 0.4.0's layout,
the keys an old record lacks at their defaults, a newer or damaged one refused in one line, and
`diff` naming each setting that differs."""

from __future__ import annotations

import dataclasses

import pytest

import purejaxppo as ppo
from purejaxppo.experiments.experiment import FIELDS_0_4, META_KEY, VERSION, DamagedRecord, Experiment
from purejaxppo.experiments.spec import make_spec


def record(**options) -> Experiment:
    spec = make_spec({"grid": {"clip_eps": [0.1, 0.2]}, "seeds": 2, "eval_episodes": 8})
    return Experiment("sweep", ppo.make_config({"num_steps": 16}), spec, **options)


def test_a_record_is_one_entry_of_the_meta_and_reads_back_equal():
    saved = record(first_seed=7, checkpoint_every=3, max_parallel=2, keep=1)
    entry = saved.meta_entry()
    assert list(entry) == [META_KEY] and entry[META_KEY]["version"] == VERSION
    assert Experiment.from_meta({"step": 4, **entry}) == saved
    pbt = Experiment("sweep", saved.config, make_spec({"pbt": {"population": 4, "interval": 2, "hyperparameters": {
        "lr": {"loguniform": [1.0e-4, 1.0e-2]}}}}))
    assert Experiment.from_meta(pbt.meta_entry()) == pbt
    train = Experiment("train", saved.config, make_spec({"seeds": 3}))
    assert Experiment.from_meta(train.meta_entry()) == train


def test_0_4_0s_layout_reads_as_the_same_record_and_what_it_lacks_has_its_default():
    saved = record(first_seed=7)
    old = {key: value for key, value in saved.to_dict().items() if key in FIELDS_0_4}  # at the meta's top level
    assert Experiment.from_meta({"step": 4, "sets": {}, **old}) == saved
    del old["keep"], old["first_seed"], old["spec"]["rank_by"], old["config"]["gru_size"]
    assert Experiment.from_meta(old) == dataclasses.replace(saved, first_seed=0)
    assert Experiment.from_meta({"step": 4, "sets": {}}) is None  # saved through the Python API: no record


@pytest.mark.parametrize("change, needle", [
    (lambda r: r.update(version=VERSION + 1), f"version={VERSION + 1}: written by a newer purejaxppo"),
    (lambda r: r.update(first_seed=-1), "experiment.first_seed=-1 must be an integer in [0, 2**32 - 1]"),
    (lambda r: r.update(keep=0), "experiment.keep=0 must be null or an integer of at least 1"),
    (lambda r: r.pop("config"), "it has no experiment.config"),
    (lambda r: r["config"].update(lr=-1.0), "experiment.config: lr=-1.0: must be positive"),
    (lambda r: r["spec"].update(rank_by="best"), "experiment.spec: sweep.rank_by='best': must be one of"),
])
def test_a_damaged_record_is_one_line_naming_the_key(change, needle):
    stored = record().to_dict()
    change(stored)
    with pytest.raises(DamagedRecord) as info:
        Experiment.from_meta({META_KEY: stored})
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_diff_names_each_setting_that_differs():
    saved = record()
    asked = dataclasses.replace(saved, config=dataclasses.replace(saved.config, lr=1e-3), keep=2,
                                spec=make_spec({"grid": {"clip_eps": [0.1, 0.3]}, "seeds": 2, "eval_episodes": 8}))
    assert saved.diff(saved) == []
    assert saved.diff(asked) == ["keep None -> 2", "lr 0.00025 -> 0.001",
                                 "sweep.grid {'clip_eps': [0.1, 0.2]} -> {'clip_eps': [0.1, 0.3]}"]
