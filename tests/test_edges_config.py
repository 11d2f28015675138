"""Edges of the config's checks (issue 51), each a one-line ConfigError before anything compiles:
a setting that another makes void, a float beyond float32 named as the user gave it, a network
of half-precision outputs, a batch beyond 32 bits and what the memory check counts of a run,
and size bounds that answer at once at any size."""

import re
import time
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
from purejaxppo.config import FIELDS, ConfigError, check_fields, check_hparams
from purejaxppo.errors import ResourceError
from purejaxppo.experiments import memory as memory_module
from purejaxppo.experiments.sweep import make_spec, plan
from purejaxppo.gate import gate

# 10 updates of 4 x 8 steps
TINY = dict(env="CartPole-v1", num_envs=4, num_steps=8, num_minibatches=2, update_epochs=2, total_timesteps=320)
MEMORY = 64 * 2**20  # free on every device, and on the host per device


def refused(values) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        check_fields({**TINY, **values})
    assert "\n" not in str(info.value)
    return info.value


def cli_error(tmp_path, capsys, *args) -> str:
    """The one line `purejaxppo train` prints for a tiny config and these options; no run folder."""
    from purejaxppo.experiments.cli import main

    config = tmp_path / "c.yaml"
    config.write_text("".join(f"{key}: {value}\n" for key, value in TINY.items()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["train", str(config), *args, "--out", str(tmp_path / "out")]) == 2
    assert not caught, [str(w.message) for w in caught]
    (line,) = capsys.readouterr().err.splitlines()
    assert not (tmp_path / "out").exists()
    return line


# --------------------------------------------------------------------------------------
# 1. a setting that another makes void
# --------------------------------------------------------------------------------------
def test_the_issue_s_warm_up_longer_than_the_run_is_refused_naming_both_and_what_to_change(tmp_path, capsys):
    line = cli_error(tmp_path, capsys, "--set", "lr_warmup_updates=100")
    assert line.startswith("purejaxppo: error: lr_warmup_updates=100: must be below the run's num_updates=10 ")
    assert "320 // 32" in line and "lower lr_warmup_updates, or raise total_timesteps" in line


@pytest.mark.parametrize("warmup", [10, 11, 2**31 - 1])
def test_a_warm_up_of_the_run_s_updates_or_more_is_refused(warmup):
    error = refused({"lr_warmup_updates": warmup})
    assert error.field == "lr_warmup_updates" and error.value == warmup and "num_updates=10" in str(error)
    assert check_fields({**TINY, "lr_warmup_updates": 9}).lr_warmup_updates == 9  # the rate reaches lr at the last


def test_a_warm_up_longer_than_the_run_is_refused_in_a_sweep_and_in_stacked_hyperparameters(monkeypatch):
    monkeypatch.setattr(memory_module, "free_memory_bytes", lambda device: MEMORY)
    monkeypatch.setattr(memory_module, "host_memory_bytes", lambda: MEMORY * jax.device_count())
    base = check_fields({**TINY, "lr_warmup_updates": 5})
    with pytest.raises(ConfigError, match=r"num_updates=5 .*\(in sweep point \{'total_timesteps': 160\}\)"):
        plan(base, make_spec({"grid": {"total_timesteps": [320, 160]}}))
    with pytest.raises(ConfigError, match=r"lr_warmup_updates=10: must be below .*\(run 1\)"):
        ppo.HParams.stack(base, lr_warmup_updates=[9, 10])
    given = ppo.HParams.from_config(base).replace(lr_warmup_updates=np.int32(12))
    with pytest.raises(ConfigError, match="lr_warmup_updates=12: must be below"):
        check_hparams(given, base)


def test_a_kl_target_at_a_one_epoch_point_is_kept_a_sweep_over_epochs_is_a_natural_one():
    """Not refused: with one epoch the KL stop has no later epoch to mask, and that point simply never
    stops early; refusing it would refuse every sweep of update_epochs: [1, ...] with a target KL."""
    assert check_fields({**TINY, "target_kl": 0.01, "update_epochs": 1}).target_kl == 0.01


# --------------------------------------------------------------------------------------
# 2. floats beyond float32, named as given, without numpy's warning
# --------------------------------------------------------------------------------------
def test_the_issue_s_lr_1e39_is_refused_as_given_without_a_numpy_warning(tmp_path, capsys):
    line = cli_error(tmp_path, capsys, "--set", "lr=1e39")
    assert line.startswith("purejaxppo: error: lr='1e39': is too large for float32"), line


FLOATS = [name for name, f in FIELDS.items() if f.type == "float"]


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("value, rule", [
    ("1e39", "too large for float32"), (1e39, "too large for float32"), (-3.5e38, "too large for float32"),
    (10**400, "too large for float32"), ("1e-50", "too small for float32"), (1e-40, "too small for float32"),
    ("1e400", "must be finite"),
])
def test_every_float_field_refuses_what_float32_cannot_hold_naming_the_value_given(name, value, rule):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        error = refused({name: value})
    assert error.field == name and error.value == value and rule in str(error)


def test_the_ends_of_float32_are_accepted():
    top, tiny = float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hp = ppo.HParams.from_config(ppo.config.check_fields({**TINY, "lr": top, "ent_coef": tiny, "vf_coef": 0}))
    assert float(hp.lr) == top and float(hp.ent_coef) == tiny and float(hp.vf_coef) == 0.0


def test_hyperparameters_given_per_run_are_held_to_float32_too():
    cfg = check_fields(TINY)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ConfigError, match=r"lr='1e39': is too large for float32.*\(run 1\)"):
            ppo.HParams.stack(cfg, lr=[1e-3, "1e39"])
        with pytest.raises(ConfigError, match="lr=1e\\+39: is too large for float32"):
            check_hparams(ppo.HParams.from_config(cfg).replace(lr=np.float64(1e39)), cfg)  # float64: 1e39 as given
        with pytest.raises(ConfigError, match="update_epochs=4294967296: must fit in 32 bits"):
            check_hparams(ppo.HParams.from_config(cfg).replace(update_epochs=np.int64(2**32)), cfg)


# --------------------------------------------------------------------------------------
# 3. a network of half-precision outputs; a carry whose dtype changes
# --------------------------------------------------------------------------------------
class Half(nn.Module):
    """An actor-critic computing in a half precision: its logits and value are of `dtype`."""

    num_outputs: int
    dtype: str = "bfloat16"

    @nn.compact
    def __call__(self, obs):
        x = nn.tanh(nn.Dense(8, dtype=self.dtype)(obs))
        return nn.Dense(self.num_outputs, dtype=self.dtype)(x), nn.Dense(1, dtype=self.dtype)(x)[:, 0]


class Widening(nn.Module):
    """A recurrent module whose memory comes back in another dtype than initial_carry gives."""

    num_outputs: int

    def initial_carry(self, batch_shape):
        return jnp.zeros((*batch_shape, 4), jnp.bfloat16)

    @nn.compact
    def __call__(self, carry, obs):
        h = nn.tanh(nn.Dense(4)(jnp.concatenate([carry.astype(jnp.float32), obs], -1)))  # float32
        return h, nn.Dense(self.num_outputs)(h), nn.Dense(1)(h)[:, 0]


@pytest.mark.parametrize("env, dtype", [("CartPole-v1", "float16"), ("CartPole-v1", "bfloat16"),
                                        ("Pendulum-v1", "bfloat16")])
def test_half_precision_outputs_enter_the_learner_as_float32(env, dtype):
    cfg = check_fields({**TINY, "env": env})
    network = ppo.Learner(cfg, network=Half(1 if env == "Pendulum-v1" else 2, dtype)).agent.network
    params = network.init(jax.random.PRNGKey(0))
    dist, value, _ = network.apply(params, (), jnp.zeros((5, *network.obs_shape)))
    assert value.dtype == jnp.float32 and dist.log_prob(dist.mode()).dtype == jnp.float32


def test_the_issue_s_bfloat16_network_trains():
    """It ended in a traceback from inside the scan (carry input and output of unequal types)."""
    cfg = ppo.make_config({**TINY, "total_timesteps": 64})
    out = jax.jit(ppo.make_train(cfg, network=Half(2)))(jax.random.PRNGKey(0))
    assert out.metrics["value_loss"].dtype == jnp.float32 and np.isfinite(out.metrics["value_loss"]).all()


def test_a_carry_returned_in_another_dtype_is_one_config_error_naming_both():
    with pytest.raises(ConfigError) as info:
        ppo.Learner(check_fields(TINY), network=Widening(2))
    assert str(info.value) == ("network='Widening': must return a carry of the shapes and dtypes initial_carry "
                               "gives it bfloat16[3, 4]; it returned float32[3, 4]")


# --------------------------------------------------------------------------------------
# 4. a batch beyond 32 bits; what the memory check counts of a run
# --------------------------------------------------------------------------------------
@pytest.fixture
def memory(monkeypatch):
    monkeypatch.setattr(memory_module, "free_memory_bytes", lambda device: MEMORY)
    monkeypatch.setattr(memory_module, "host_memory_bytes", lambda: MEMORY * jax.device_count())


@pytest.mark.parametrize("num_envs, num_steps", [(65536, 32768), (46341, 46341), (2**30, 2), (2, 2**30)])
def test_a_batch_of_2_31_steps_or_more_is_refused(num_envs, num_steps):
    error = refused({"num_envs": num_envs, "num_steps": num_steps, "num_minibatches": 1,
                     "total_timesteps": num_envs * num_steps})
    assert error.field == "num_steps" and f"={num_envs * num_steps} steps; at most 2**31-1" in str(error)


@pytest.mark.parametrize("num_envs, num_steps", [(1, 2**31 - 1), (65536, 32767)])
def test_a_batch_just_below_2_31_is_one_line_from_the_memory_check(memory, num_envs, num_steps):
    cfg = check_fields({**TINY, "num_envs": num_envs, "num_steps": num_steps, "num_minibatches": 1,
                        "total_timesteps": num_envs * num_steps})
    with pytest.raises(ResourceError) as info:
        plan(cfg, make_spec())
    assert info.value.field == "runs" and "one run alone does not fit" in str(info.value)
    assert "\n" not in str(info.value)


def test_an_evaluation_episode_is_counted_with_its_rollout_below_what_xla_needs_and_near_it():
    """The memory check counts an evaluation episode's rollout (each of its max_episode_steps
    steps), a bound from below of what the compiled evaluation needs, within a factor of 4 (it
    counted one environment's state: 1/150 of it, and said 100x too many episodes could fit)."""
    bundle = gate(TINY)
    size = memory_module.run_size(bundle)
    learner = ppo.Learner(bundle)
    state = learner.init(jax.random.PRNGKey(0))
    episodes = 64
    compiled = jax.jit(lambda s: learner.evaluate_episodes(s, episodes, True)).lower(state).compile()
    needed = compiled.memory_analysis().temp_size_in_bytes
    counted = size.need(episodes).working
    assert counted <= needed < 4 * counted, (counted, needed)


def test_an_update_s_batch_is_counted():
    size = memory_module.run_size(gate({**TINY, "num_steps": 4096, "num_minibatches": 1,
                                                 "total_timesteps": 4 * 4096}))
    assert size.batch == 4 * 4096 * (4 * 4 + 16) and size.need(0).working == size.batch  # CartPole: 4 float32


# --------------------------------------------------------------------------------------
# 5. size bounds answer at once, at any size
# --------------------------------------------------------------------------------------
LR = {"lr": {"loguniform": [1e-6, 1e-2]}}


@pytest.mark.parametrize("section, field", [
    ({"pbt": {"population": 3_000_000, "interval": 2, "hyperparameters": LR}}, "pbt.population"),  # the issue's
    ({"random": {"trials": 3_000_000, **LR}}, "random.trials"),
    ({"grid": {"lr": [1e-5 * (i + 1) for i in range(300_000)]}}, "grid"),
    ({"grid": {"lr": [1e-4, 1e-3], "clip_eps": [0.1 + i * 1e-7 for i in range(1_000_000)]}}, "grid"),
])
def test_a_sweep_of_any_size_is_bounded_in_a_second_before_drawing(memory, no_drawing, section, field):
    base = check_fields(TINY)
    gate(base)  # the environment's package imported: what follows is the bound alone
    start = time.perf_counter()
    with pytest.raises(ResourceError) as info:
        plan(base, make_spec(section))
    assert time.perf_counter() - start < 1.5 and info.value.field == field, str(info.value)


@pytest.mark.parametrize("values, given", [([1, 1.0], "1.0"), ([[64, 64], [32], [64, 64]], "[64, 64]"),
                                           ([{"a": 1}, {"a": 1}], "{'a': 1}")])
def test_a_grid_value_given_twice_is_still_refused(values, given):
    with pytest.raises(ConfigError, match=f"gives {re.escape(given)} twice"):
        make_spec({"grid": {"hidden_sizes": values}})
