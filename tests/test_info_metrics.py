"""An environment's step info logged as metrics (info_metrics: opt-in by name): the values are
the info's means over each update's steps, they reach metrics.csv, and a name the environment
does not give is refused in one line, before anything compiles."""

import jax
import numpy as np
import pytest

import purejaxppo as ppo
from purejaxppo.errors import ConfigError
from purejaxppo.experiments.cli import main
from purejaxppo.experiments.report.text import metric_rows

TINY = dict(env="user_envs:info_corridor", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1,
            total_timesteps=4 * 16 * 3)


def test_an_info_entry_opted_in_is_its_mean_over_the_updates_steps():
    cfg = ppo.make_config(dict(TINY, info_metrics=["seven", "ended", "cell"]))
    learner = ppo.Learner(cfg)
    state, metrics = jax.jit(learner.run)(learner.init(jax.random.PRNGKey(0)))
    metrics = jax.tree.map(np.asarray, metrics)
    np.testing.assert_array_equal(metrics["info_seven"], [7.0, 7.0, 7.0])
    # `ended` is 1 on the step an episode ends: its mean is the episodes finished per step of the batch
    np.testing.assert_allclose(metrics["info_ended"], metrics["episodes_finished"] / cfg.batch_size, rtol=1e-6)
    assert metrics["episodes_finished"].sum() > 0
    cell = metrics["info_cell"]
    assert np.all((cell >= 0) & (cell <= 4)) and cell.dtype == np.float32
    header, rows = metric_rows({k: v[None] for k, v in metrics.items()}, cfg.batch_size, [{"seed": 0}])
    column = header.index("info_seven")
    assert [row[column] for row in rows] == ["7", "7", "7"]


@pytest.mark.slow  # two training programs: run by .ci/run after the default suite
def test_without_the_opt_in_no_info_metric_and_the_same_numbers():
    """The info is not carried (the metrics, the learner state: as without the field)."""
    plain = ppo.Learner(ppo.make_config(TINY))
    state, metrics = jax.jit(plain.run)(plain.init(jax.random.PRNGKey(0)))
    assert not [name for name in metrics if name.startswith("info_")]
    opted = ppo.Learner(ppo.make_config(dict(TINY, info_metrics=["seven"])))
    state2, metrics2 = jax.jit(opted.run)(opted.init(jax.random.PRNGKey(0)))
    np.testing.assert_array_equal(metrics["episode_return"], metrics2["episode_return"])
    jax.tree.map(np.testing.assert_array_equal, state.params, state2.params)


@pytest.mark.parametrize("name", ["sevn", "one_hot", "final_observation"])
def test_a_name_the_environment_does_not_give_as_a_number_is_one_line_naming_those_it_gives(name):
    with pytest.raises(ConfigError) as info:
        ppo.Learner(ppo.make_config(dict(TINY, info_metrics=["seven", name])))
    message = str(info.value)
    assert "\n" not in message and info.value.field == "info_metrics"
    assert message == (f"info_metrics={name!r}: is not a number in user_envs:info_corridor's step info; its numbers "
                       "per step are cell, ended, episode_done, episode_length, episode_return, seven")


def test_the_command_line_refuses_an_unknown_name_in_one_line_before_compiling(tmp_path, capsys):
    (tmp_path / "run.yaml").write_text("env: user_envs:info_corridor\nnum_envs: 4\nnum_steps: 16\n"
                                       "num_minibatches: 2\ntotal_timesteps: 192\ninfo_metrics: [distance]\n")
    assert main(["train", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "out"), "--no-cache"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["purejaxppo: error: info_metrics='distance': is not a number in user_envs:info_corridor's step "
                   "info; its numbers per step are cell, ended, episode_done, episode_length, episode_return, seven"]


@pytest.mark.parametrize("value", ["seven", [1], ["seven", "seven"], [""]])
def test_info_metrics_is_a_list_of_distinct_names(value):
    with pytest.raises(ConfigError) as info:
        ppo.make_config(dict(TINY, info_metrics=value))
    assert info.value.field == "info_metrics"


def test_an_old_config_without_the_field_loads_with_none():
    assert ppo.make_config({"env": "CartPole-v1"}).info_metrics == ()
    assert ppo.make_config({"env": "CartPole-v1"}).to_dict()["info_metrics"] == []
