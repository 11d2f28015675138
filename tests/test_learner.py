"""The learner's three pieces: init / run / evaluate compose to train, keep today's numbers,
and a run cut into chunks equals the run in one piece, bit for bit."""

import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import purejaxppo as ppo
from conftest import TINY_CARTPOLE, assert_trees_equal_to_float_rounding
from purejaxppo.train import learning_rate, make_optimizer

sys.path.insert(0, str(Path(__file__).parent / "data"))
from make_train_reference import CASES  # noqa: E402

TINY = TINY_CARTPOLE


# run-time counts the reference file predates (tests/test_runtime_counts.py)
COUNTED_SINCE = ("metrics/no_action_steps", "metrics/overlong_episodes",
                 "evaluation/deterministic_no_action_steps", "evaluation/stochastic_no_action_steps")
# what the final evaluation has recorded of each episode since the file was written: its length and
# whether the time limit ended it (train.EVAL_FIELDS)
RECORDED_SINCE = tuple(f"evaluation/{mode}_{field}" for mode in ("deterministic", "stochastic")
                       for field in ("length", "time_limit"))


def flat(result):
    """params, metrics and evaluation of a TrainResult under the reference file's names."""
    out = {f"params{jax.tree_util.keystr(path)}": np.asarray(leaf)
           for path, leaf in jax.tree_util.tree_leaves_with_path(result.state.params)}
    out.update({f"metrics/{k}": np.asarray(v) for k, v in result.metrics.items()})
    out.update({f"evaluation/{k}": np.asarray(v) for k, v in result.evaluation.items()})
    out["key"] = np.asarray(result.state.key)
    return out


# pendulum's program (continuous actions; also trained here by test_train and test_normalize): a long check
@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.slow) if case == "pendulum" else case
                                  for case in sorted(CASES)])
def test_train_keeps_the_numbers_saved_before_the_learner_state(case):
    """tests/data/train_reference.npz (see make_train_reference.py for its history): parameters
    and losses agree to float rounding (optax's global-norm clip computes (g / norm) * max_norm
    where the first reference's code computed g * (max_norm / norm)); episodes, keys and
    evaluation exactly, but Pendulum's evaluation returns: 200 steps of a continuous system
    whose float rounding differs between jax 0.9's XLA and 0.11's (a relative 6e-6 in one
    sampled episode of the file written with 0.11, 3e-7 in the file written with 0.9)."""
    reference = np.load(Path(__file__).parent / "data" / "train_reference.npz")
    got = flat(jax.jit(ppo.make_train(ppo.make_config(CASES[case]), eval_episodes=4))(jax.random.PRNGKey(3)))
    names = [n[len(case) + 1:] for n in reference.files if n.startswith(case + "/")]
    assert set(got) - set(names) == set(COUNTED_SINCE) | set(RECORDED_SINCE) and set(names) <= set(got)
    for name in COUNTED_SINCE:  # none of the cases has a mask that allows nothing, or an episode past its limit
        assert not np.any(got[name]), name
    for mode in ("deterministic", "stochastic"):  # every episode lasts a step at least; CartPole pays 1 a step
        assert got[f"evaluation/{mode}_length"].shape == got[f"evaluation/{mode}"].shape
        assert np.all(got[f"evaluation/{mode}_length"] >= 1)
        if case == "cartpole":
            np.testing.assert_array_equal(got[f"evaluation/{mode}_length"], got[f"evaluation/{mode}"])
    for name in names:
        expected = reference[f"{case}/{name}"]
        if name.startswith("evaluation") and case == "pendulum":
            np.testing.assert_allclose(got[name], expected, rtol=2e-5, err_msg=name)
        elif name.startswith(("evaluation", "key")) or name in ("metrics/episode_return", "metrics/episodes_finished",
                                                                "metrics/epochs_run", "metrics/learning_rate"):
            np.testing.assert_array_equal(got[name], expected, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], expected, rtol=1e-4, atol=1e-6, err_msg=name)


def chunks(learner, state, hp, sizes):
    run = jax.jit(learner.run, static_argnums=2)
    parts = []
    for size in sizes:
        state, metrics = run(state, hp, size)
        parts.append(metrics)
    return state, jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)


def test_run_in_chunks_equals_run_in_one_piece_bit_for_bit():
    cfg = ppo.make_config(TINY)
    learner = ppo.Learner(cfg)
    hp = ppo.HParams.from_config(cfg)
    start = jax.jit(learner.init)(jax.random.PRNGKey(11))
    whole = chunks(learner, start, hp, [6])
    chex.assert_trees_all_equal(chunks(learner, start, hp, [2, 2, 2]), whole)  # one compiled chunk, reused
    assert int(whole[0].updates_done) == 6
    # and the one-piece run is what make_train computes, given the same (traced) hyperparameters
    out = jax.jit(ppo.make_train(cfg))(jax.random.PRNGKey(11), hp)
    chex.assert_trees_all_equal((out.state, out.metrics), whole)


@pytest.mark.slow
def test_vmapped_runs_in_chunks_equal_one_piece_bit_for_bit():
    cfg = ppo.make_config({**TINY, "target_kl": 0.02, "max_epochs": 3})  # masked epochs too
    learner = ppo.Learner(cfg)
    hp = ppo.HParams.from_config(cfg)
    hps = jax.tree.map(lambda x: jnp.stack([x] * 3), hp).replace(lr=jnp.array([1e-4, 1e-3, 3e-3]))
    start = jax.jit(jax.vmap(learner.init))(jax.random.split(jax.random.PRNGKey(2), 3))
    run = jax.jit(jax.vmap(learner.run, in_axes=(0, 0, None)), static_argnums=2)
    whole = run(start, hps, 6)
    state, first = run(start, hps, 3)
    state, second = run(state, hps, 3)
    chex.assert_trees_all_equal((state, jax.tree.map(lambda a, b: jnp.concatenate([a, b], 1), first, second)),
                                whole)


def _conds(fn, *args) -> int:
    """How many lax.cond the traced program has (nested jaxprs included)."""
    return str(jax.make_jaxpr(fn)(*args)).count("cond[")


def test_the_config_s_own_hyperparameters_trace_without_the_epoch_mask():
    """train(key) inside jit knows its hyperparameters while tracing (HParams.from_config gives
    concrete values, not tracers), so it compiles no epoch mask: one lax.cond fewer than the same
    values handed in as traced arguments; with a KL target the mask stays."""
    cfg = ppo.make_config(TINY)
    train = ppo.make_train(cfg)
    key = jax.random.PRNGKey(0)
    traced = jax.tree.map(jnp.asarray, ppo.HParams.from_config(cfg))
    assert _conds(train, key) == _conds(lambda k, hp: train(k, hp), key, traced) - 1
    with_kl = ppo.make_train(ppo.make_config({**TINY, "target_kl": 0.01}))
    assert _conds(with_kl, key) == _conds(train, key) + 1


@pytest.mark.slow
def test_the_unmasked_epochs_of_known_hyperparameters_equal_the_masked_path():
    """With the config's own hyperparameters (known while tracing), update_epochs = the scanned
    epochs and no KL stop, the update runs its epochs without the mask (no lax.cond); given as
    traced arguments, the same values go through the mask. The same training, one run and
    vmapped, to float rounding: they are two programs, and in the first the hyperparameters are
    constants XLA folds into the arithmetic (the parameters differed by 3e-10 on jax 0.11.2), so
    the two round differently. Integer leaves (counters, environment states) are equal exactly."""
    cfg = ppo.make_config(TINY)
    train = ppo.make_train(cfg)
    hp = ppo.HParams.from_config(cfg)
    assert ppo.train.no_epoch_masked(hp, cfg.epochs_scan)
    assert not ppo.train.no_epoch_masked(ppo.HParams.from_config(ppo.make_config({**TINY, "target_kl": 0.01})),
                                         cfg.epochs_scan)
    key = jax.random.PRNGKey(5)
    keys = jax.random.split(key, 3)
    hps = ppo.HParams.stack(cfg, runs=3)
    for known, traced in ((jax.jit(train)(key), jax.jit(train)(key, hp)),
                          (jax.jit(jax.vmap(train))(keys), jax.jit(jax.vmap(train))(keys, hps))):
        assert_trees_equal_to_float_rounding((known.state, known.metrics, known.evaluation),
                                             (traced.state, traced.metrics, traced.evaluation), atol=1e-6)


def test_learning_rate_anneals_linearly_to_zero_at_the_end_of_the_run():
    # (the traced program: test_run_in_chunks_equals_run_in_one_piece_bit_for_bit's; the other: test_train's tiny)
    cfg = ppo.make_config(TINY)
    train = jax.jit(ppo.make_train(cfg))
    out = train(jax.random.PRNGKey(0))
    U, lr = cfg.num_updates, cfg.lr
    rates = np.asarray(out.metrics["learning_rate"], np.float64)
    np.testing.assert_allclose(rates, lr * (1 - np.arange(U) / U), rtol=1e-6)
    assert rates[-1] == pytest.approx(lr / U, rel=1e-6)  # the last update; the decay ends at 0
    hp = ppo.HParams.from_config(cfg)
    assert float(learning_rate(hp, jnp.int32(U), U)) == 0.0
    assert float(learning_rate(hp, jnp.int32(U + 5), U)) == 0.0  # never negative past the end
    flat_rate = train(jax.random.PRNGKey(0), hp.replace(anneal_lr=jnp.bool_(False))).metrics["learning_rate"]
    np.testing.assert_array_equal(flat_rate, np.float32(lr))


def numpy_adam(grads, lr, b1=0.9, b2=0.999, eps=1e-5):
    m = v = 0.0
    steps = []
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        steps.append(-lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps))
    return steps


def test_gradients_are_clipped_by_global_norm_before_adam():
    """Adam's first step is blind to the gradient's scale, so two steps: the first
    gradient (norm 10) is clipped to norm 0.5, the second (norm 0.25) is not."""
    g1 = {"a": jnp.array([6.0, 0.0]), "b": jnp.array([[8.0]])}    # global norm 10
    g2 = {"a": jnp.array([0.15, -0.2]), "b": jnp.array([[0.0]])}  # global norm 0.25
    params = jax.tree.map(jnp.zeros_like, g1)
    opt = make_optimizer(0.5, 0.01)
    state = opt.init(params)
    steps = []
    for g in (g1, g2):
        step, state = opt.update(g, state, params)
        steps.append(step)
    clipped_g1 = jax.tree.map(lambda x: np.asarray(x) * 0.05, g1)
    for name in ("a", "b"):
        expected = numpy_adam([clipped_g1[name], np.asarray(g2[name])], 0.01)
        for step, want in zip(steps, expected):
            np.testing.assert_allclose(step[name], want, rtol=1e-4, atol=1e-9)
    # unclipped, the second step would differ: the clip did act
    unclipped = numpy_adam([np.asarray(g1["a"]), np.asarray(g2["a"])], 0.01)[1]
    assert not np.allclose(unclipped, steps[1]["a"], rtol=1e-3)
    assert float(optax.global_norm(g1)) == pytest.approx(10.0)


def test_every_network_application_goes_through_the_agent():
    """One seam: nothing outside agent.py applies the network itself."""
    package = Path(ppo.__file__).parent
    appliers = sorted(p.name for p in package.rglob("*.py") if ".apply(" in p.read_text()
                      and "network.apply(" in p.read_text())
    assert appliers == ["agent.py"]
