"""Bounds before anything runs: a sweep's size against the memory (seeds, a PBT population,
random trials, the grid, the evaluation's episodes), refused before any point is drawn and
before anything compiles, naming the option and the largest value that could fit; and
integers beyond what JAX holds (a 32-bit key, 32-bit sizes and counts)."""

import jax
import pytest

import purejaxppo as ppo
from purejaxppo.config import ConfigError
from purejaxppo.errors import ResourceError
from purejaxppo.experiments import memory as memory_module
from purejaxppo.experiments.sweep import make_spec, plan

MEMORY = 64 * 2**20  # free on every device, and on the host per device
LR = {"lr": {"loguniform": [1e-4, 1e-2]}}


def tiny(**values):
    return ppo.make_config({"num_envs": 4, "num_steps": 16, "num_minibatches": 2, "total_timesteps": 640, **values})


@pytest.fixture
def memory(monkeypatch):
    """A machine of MEMORY per device: what `memory.memory_shortfall` reads (on a CPU, the
    devices' share of the host's memory)."""
    monkeypatch.setattr(memory_module, "free_memory_bytes", lambda device: MEMORY)
    monkeypatch.setattr(memory_module, "host_memory_bytes", lambda: MEMORY * jax.device_count(), raising=False)


def refusal(spec, cfg=None) -> ResourceError:
    with pytest.raises(ResourceError) as info:
        plan(cfg or tiny(), spec)
    return info.value


def most(error: ResourceError) -> int:
    """The largest value the error says could fit."""
    return int(str(error).split("; at most ")[1].split()[0])


@pytest.mark.parametrize("section, field", [
    ({"seeds": 2**31 - 1}, "seeds"),
    ({"grid": {"clip_eps": [0.1, 0.2]}, "seeds": 10**6}, "seeds"),
    ({"random": {"trials": 2**31 - 1, **LR}}, "random.trials"),
    ({"pbt": {"population": 2**31 - 1, "interval": 2, "hyperparameters": LR}}, "pbt.population"),
    ({"pbt": {"population": 4, "interval": 2, "hyperparameters": LR}, "seeds": 10**6}, "seeds"),
])
def test_a_sweep_too_large_for_the_memory_is_refused_before_drawing_naming_what_fits(memory, no_drawing, section,
                                                                                      field):
    error = refusal(make_spec(section))
    assert error.field == field and "more than the 64 MiB free per device" in str(error), str(error)
    assert f"({'--seeds, sweep.seeds' if field == 'seeds' else 'sweep.' + field})" in str(error)
    assert 1 <= most(error) < error.value


def test_the_largest_number_of_seeds_said_to_fit_does_fit(memory):
    fits = most(refusal(make_spec(seeds=10**6)))
    assert len(plan(tiny(), make_spec(seeds=fits)).configs) == 1  # planned: no error
    assert most(refusal(make_spec(seeds=fits + 1))) == fits


def test_a_population_too_large_for_32_bits_is_refused_before_drawing(no_drawing):
    with pytest.raises(ConfigError, match="below 2"):
        plan(tiny(), make_spec({"pbt": {"population": 10**12, "interval": 2, "hyperparameters": LR}}))


def test_random_trials_of_static_keys_are_bounded_before_drawing(memory, no_drawing):
    """A static key drawn (activation) makes groups of their own, known only once drawn: before
    drawing, each run counts its key and hyperparameters only, which 2**31 runs still exceed."""
    error = refusal(make_spec({"random": {"trials": 2**31 - 1, "activation": {"choice": ["tanh", "relu"]}}}))
    assert error.field == "random.trials" and most(error) < 2**31 - 1


def test_evaluation_episodes_that_do_not_fit_are_named_with_the_largest_that_could(memory):
    error = refusal(make_spec({"seeds": 2, "eval_episodes": 10**7}))
    assert error.field == "eval_episodes" and "(--eval-episodes, sweep.eval_episodes)" in str(error), str(error)
    fits = most(error)
    assert 64 <= fits < 10**7
    plan(tiny(), make_spec({"seeds": 2, "eval_episodes": fits}))


def test_each_runs_metrics_are_kept_until_the_end(memory):
    """A million updates keep 100+ MiB of metrics per run: one run alone does not fit in 64 MiB."""
    error = refusal(make_spec(), tiny(total_timesteps=64 * 10**6))
    assert error.field == "runs" and "one run alone does not fit" in str(error), str(error)
    assert "MiB of results" in str(error)


def test_the_cli_refuses_seeds_beyond_the_memory_before_claiming_a_folder(tmp_path, capsys):
    from purejaxppo.experiments.cli import main

    config = tmp_path / "c.yaml"
    config.write_text("num_envs: 4\nnum_steps: 16\nnum_minibatches: 2\ntotal_timesteps: 640\n")
    assert main(["train", str(config), "--seeds", str(2**31 - 1), "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("purejaxppo: error: seeds=2147483647: ") and "--seeds" in line and "could fit" in line
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------
# integers JAX holds in 32 bits
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("values, field", [
    ({"num_envs": 2**31}, "num_envs"),
    ({"num_steps": 2**40}, "num_steps"),
    ({"gru_size": 2**31}, "gru_size"),
    ({"max_epochs": 2**31}, "max_epochs"),
    ({"hidden_sizes": [64, 2**31]}, "hidden_sizes"),
    ({"cnn_channels": [2**31]}, "cnn_channels"),
])
def test_sizes_beyond_32_bits_are_refused(values, field):
    with pytest.raises(ConfigError, match="32 bits") as info:
        ppo.make_config(values)
    assert info.value.field == field
    assert tiny(total_timesteps=2**33).num_updates == 2**33 // 64  # divided on the host: its updates are bounded


@pytest.mark.parametrize("section, field", [
    ({"random_seed": 10**20}, "sweep.random_seed"),
    ({"random_seed": 2**32}, "sweep.random_seed"),  # PRNGKey(2**32) would be PRNGKey(0) again
    ({"seeds": 2**31}, "sweep.seeds"),
    ({"eval_episodes": 2**31}, "sweep.eval_episodes"),
    ({"random": {"trials": 2**31, **LR}}, "random.trials"),
    ({"pbt": {"population": 2**31, "interval": 2, "hyperparameters": LR}}, "pbt.population"),
    ({"pbt": {"population": 4, "interval": 2**31, "hyperparameters": LR}}, "pbt.interval"),
])
def test_sweep_integers_beyond_what_jax_takes_are_refused(section, field):
    with pytest.raises(ConfigError, match="below 2\\*\\*3[12]") as info:
        make_spec(section)
    assert info.value.field == field
    assert make_spec({"random_seed": 2**32 - 1}).random_seed == 2**32 - 1


def test_on_an_accelerator_the_states_fill_the_device_and_the_results_the_host(monkeypatch):
    """A device's memory holds the states of its runs (and one run's working memory); the host's
    keeps every run's state and results to the end."""
    import types

    gpus = [types.SimpleNamespace(platform="gpu", process_index=jax.process_index()) for _ in range(2)]
    monkeypatch.setattr(memory_module, "free_memory_bytes", lambda device: 100 * 2**20)
    monkeypatch.setattr(memory_module, "host_memory_bytes", lambda: 2**30)
    need = memory_module.RunBytes(state=2**20, kept=2**20, working=2**20)
    assert memory_module.memory_shortfall(need, 198, gpus) is None  # 99 states + one run's working memory a device
    assert "more than the 100 MiB free per device" in memory_module.memory_shortfall(need, 200, gpus)
    need = memory_module.RunBytes(state=2**10, kept=2**21, working=0)
    assert memory_module.memory_shortfall(need, 500, gpus) is None  # 500 x 2 MiB of results: on the host's 1 GiB
    assert "kept on the host until the end" in memory_module.memory_shortfall(need, 600, gpus)
