"""Properties of the fused learner, on tiny budgets (a few updates each)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
from conftest import TINY_CARTPOLE, assert_trees_equal_to_float_rounding
from purejaxppo.agent import make_agent

TINY = dict(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=4, update_epochs=4,
            total_timesteps=4 * 16 * 5)


def run(cfg, seed=0, hparams=None):
    return jax.jit(ppo.make_train(cfg))(jax.random.PRNGKey(seed), hparams)


# the module's one trained run: conftest's tiny config (one program with test_learner's), whose
# time limit test_evaluation_of_the_final_policy bounds the returns by; that test's training
# without the evaluation
@pytest.fixture(scope="module")
def tiny():
    cfg = ppo.make_config(TINY_CARTPOLE)
    return cfg, run(cfg)


def test_metric_shapes_and_first_minibatch_ratio_is_one(tiny):
    cfg, out = tiny
    m = out.metrics
    U, E = cfg.num_updates, cfg.epochs_scan
    assert m["episode_return"].shape == (U,)
    assert m["clip_fraction"].shape == (U, E)
    assert m["kl_k3"].shape == (U, E)
    assert m["clip_cases"].shape == (U, 2, 3)
    assert np.all(np.asarray(m["clip_cases"]).sum(axis=(1, 2)) == cfg.batch_size)
    # the first minibatch of every update sees the policy that collected the data
    assert np.all(np.asarray(m["first_minibatch_ratio_error"]) == 0.0)
    assert np.all(np.asarray(m["epochs_run"]) == cfg.update_epochs)
    # later epochs move the policy: KL is positive after the first epoch
    assert np.all(np.asarray(m["kl_k3"])[:, 1:] > 0)
    assert int(out.state.updates_done) == U


@pytest.mark.slow  # a training program of its own (test_sweep's clip_epochs study: also slow)
def test_full_batch_single_epoch_clip_never_acts():
    cfg = ppo.make_config({**TINY, "num_minibatches": 1, "update_epochs": 1})
    train = jax.jit(ppo.make_train(cfg))
    hp = ppo.HParams.from_config(cfg)
    a = train(jax.random.PRNGKey(3), hp.replace(clip_eps=jnp.float32(0.01)))
    b = train(jax.random.PRNGKey(3), hp.replace(clip_eps=jnp.float32(0.5)))
    chex.assert_trees_all_equal(a.state.params, b.state.params)
    assert np.all(np.asarray(a.metrics["clip_fraction"]) == 0.0)


@pytest.mark.slow  # two more training programs; a sweep's runs are vmapped (test_sweep's long checks too)
def test_vmapped_seeds_and_hparams_equal_single_runs(tiny):
    cfg, _ = tiny
    train = ppo.make_train(cfg)
    keys = jax.random.split(jax.random.PRNGKey(7), 3)
    hp = ppo.HParams.from_config(cfg)
    lrs = jnp.array([1e-4, 3e-4, 1e-3], jnp.float32)
    hps = jax.tree.map(lambda x: jnp.stack([x] * 3), hp).replace(lr=lrs)
    batched = jax.jit(jax.vmap(train))(keys, hps)
    single = jax.jit(train)
    for i in range(3):
        one = single(keys[i], hp.replace(lr=lrs[i]))
        chex.assert_trees_all_close(jax.tree.map(lambda x: x[i], batched.state.params),
                                    one.state.params, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(batched.metrics["episode_return"][i], one.metrics["episode_return"],
                                   rtol=1e-5)


@pytest.mark.slow  # four training programs (about 40 s on a 2-core CPU)
def test_masked_epochs_change_nothing():
    five = ppo.make_config({**TINY, "max_epochs": 5, "update_epochs": 3})
    three = ppo.make_config({**TINY, "max_epochs": 3, "update_epochs": 3})
    a, b = run(five, seed=1), run(three, seed=1)
    chex.assert_trees_all_close(a.state.params, b.state.params, rtol=1e-6, atol=1e-7)
    chex.assert_trees_all_close(a.state.opt_state, b.state.opt_state, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(a.state.key, b.state.key)
    np.testing.assert_allclose(a.metrics["clip_fraction"][:, :3], b.metrics["clip_fraction"], rtol=1e-6)
    assert np.all(np.isnan(np.asarray(a.metrics["clip_fraction"])[:, 3:]))
    assert np.all(np.asarray(a.metrics["epochs_run"]) == 3)

    # KL early stopping: with a tiny target every update stops after its first epoch
    train = jax.jit(ppo.make_train(five))
    hp = ppo.HParams.from_config(five).replace(target_kl=jnp.float32(1e-12))
    stopped = train(jax.random.PRNGKey(1), hp)
    assert np.all(np.asarray(stopped.metrics["epochs_run"]) == 1)
    assert np.all(np.isnan(np.asarray(stopped.metrics["kl_k3"])[:, 1:]))
    # ... and equals a run compiled for a single epoch
    one = run(ppo.make_config({**TINY, "update_epochs": 1}), seed=1)
    chex.assert_trees_all_close(stopped.state.params, one.state.params, rtol=1e-6, atol=1e-7)


def test_episode_statistics_carry_forward_when_no_episode_ends():
    # Pendulum episodes always last 200 steps (a time limit); 1 env x 64 steps per update
    cfg = ppo.make_config(dict(env="Pendulum-v1", num_envs=1, num_steps=64, num_minibatches=1,
                               update_epochs=1, total_timesteps=64 * 8))
    m = jax.tree.map(np.asarray, run(cfg).metrics)
    finished = m["episodes_finished"]
    np.testing.assert_array_equal(finished, [0, 0, 0, 1, 0, 0, 1, 0])  # steps 200 and 400
    assert np.all(np.isnan(m["episode_return"][:3]))
    assert np.all(m["episode_return"][3:6] == m["episode_return"][3])
    assert m["episode_return"][6] != m["episode_return"][3]
    assert np.all(m["episode_length"][3:] == 200)
    assert np.all(np.isfinite(m["policy_loss"]))


def test_continuous_actions_are_clipped_for_the_env_only():
    cfg = ppo.make_config(dict(env="Pendulum-v1"))
    env = ppo.make_env(cfg)
    agent = make_agent(cfg, env)
    obs = jnp.zeros((5, env.obs_size))
    params, agent_state = agent.init(jax.random.PRNGKey(0), obs[0])
    params = jax.tree_util.tree_map_with_path(
        lambda path, x: x + 10.0 if "actor" in str(path) and "Dense_2" in str(path) and "bias" in str(path)
        else x, params)
    _, env_action, action, log_prob, _ = agent.act(params, agent_state, (), obs, jax.random.PRNGKey(1))
    high = float(env.action_space.high[0])
    assert high == 2.0
    np.testing.assert_array_equal(env_action, high)
    assert np.all(np.asarray(action) > 5.0)  # stored unclipped
    dist, _, _ = agent.step(params, agent_state, (), obs)
    np.testing.assert_allclose(log_prob, dist.log_prob(action))


def test_evaluation_of_the_final_policy(tiny):
    cfg, plain = tiny  # run(cfg): the same training, without the evaluation
    out = jax.jit(ppo.make_train(cfg, eval_episodes=6))(jax.random.PRNGKey(0))
    chex.assert_trees_all_equal(out.state.params, plain.state.params)  # training unchanged
    det, sto = np.asarray(out.evaluation["deterministic"]), np.asarray(out.evaluation["stochastic"])
    assert det.shape == sto.shape == (6,)
    # CartPole gives 1 per step, so an episode's return is its length: within the time limit
    limit = cfg.env_params["max_steps_in_episode"]
    assert np.all((det >= 1) & (det <= limit)) and np.all((sto >= 1) & (sto <= limit))
    # the same evaluation by hand: fresh episodes, greedy actions, one episode each
    from purejaxppo.evaluate import evaluate
    learner = ppo.Learner(cfg)
    again = evaluate(learner.env, learner.agent, out.state.params, out.state.agent_state,
                     jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(0), 1), True), 6, True)
    np.testing.assert_array_equal(again, det)
    np.testing.assert_array_equal(jax.jit(learner.evaluate, static_argnums=(1, 2))(out.state, 6, True), det)
    # each episode's length, and whether its time limit ended it (CartPole: the length is the return)
    done = jax.jit(learner.evaluate_episodes, static_argnums=(1, 2))(out.state, 6, True)
    np.testing.assert_array_equal(done["length"], det)
    np.testing.assert_array_equal(done["time_limit"], det == limit)
    short = ppo.Learner(ppo.make_config({**TINY_CARTPOLE, "env_params": {"max_steps_in_episode": 5}}))
    cut = jax.jit(short.evaluate_episodes, static_argnums=(1, 2))(out.state, 6, True)  # no pole falls in 5 steps
    assert np.all(cut["time_limit"]) and np.all(cut["length"] == 5) and np.all(cut["return"] == 5)


def test_rollout_resets_batched_or_in_the_loop_give_the_same_trajectory():
    """"per_step" computes every reset up front; "in_loop" computes them step by step to
    keep memory flat. Same keys, so the trajectories must agree (to float rounding: two programs). "per_rollout"
    (one fresh reset per env per rollout, for Brax) restarts an env that ends twice from
    the same state, and differs from them only after a reset."""
    import functools

    from purejaxppo.rollout import rollout

    cfg = ppo.make_config(dict(TINY, env_params={"max_steps_in_episode": 5}))  # several resets in 40 steps
    env = ppo.make_env(cfg)
    agent = make_agent(cfg, env)
    obs, state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(1), 3))
    params, agent_state = agent.init(jax.random.PRNGKey(2), obs[0])
    policy = functools.partial(agent.act, params, agent_state)
    outs = {mode: jax.jit(lambda s, o, mode=mode: rollout(env, policy, s, o, jax.random.PRNGKey(3), 40, mode))(
        state, obs) for mode in ("per_step", "in_loop", "per_rollout")}
    assert int(np.sum(outs["per_step"][3].episode_done)) >= 3
    assert_trees_equal_to_float_rounding(outs["per_step"], outs["in_loop"])
    first_episode = outs["per_step"][3].obs[:5]  # every episode lasts 5 steps: the first ends at step 4
    np.testing.assert_array_equal(outs["per_rollout"][3].obs[:5], first_episode)
    # the second and third episodes of each env start from the same fresh state
    per_rollout = np.asarray(outs["per_rollout"][3].obs)
    np.testing.assert_array_equal(per_rollout[5], per_rollout[10])
    assert not np.array_equal(per_rollout[5], first_episode[0])


def test_ppo_jit_compiles_with_the_package_compiler_options(monkeypatch):
    """`ppo.jit(f)` is jax.jit with `compiler_options()` (the CLI's): an option XLA does not
    know, put there, fails its compile; options given to it are added; it computes f."""
    import purejaxppo.compiler

    x = jnp.arange(3.0)
    assert np.array_equal(ppo.jit(lambda v: v * 2)(x), x * 2)
    with pytest.raises(Exception, match="xla_given_here"):
        ppo.jit(lambda v: v * 3, compiler_options={"xla_given_here": 1})(x)
    monkeypatch.setattr(purejaxppo.compiler, "compiler_options", lambda platform=None: {"xla_no_such": 1})
    with pytest.raises(Exception, match="xla_no_such"):
        ppo.jit(lambda v: v * 4)(x)
