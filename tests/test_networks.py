"""Networks are flax.linen modules: the built-ins keep 0.4's parameter layout, and a user's
module plugs in through make_train / Learner / make_policy and from the config
(`network: package.module:factory`), its output shapes checked before anything compiles."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
import user_networks
from purejaxppo.errors import ConfigError

TINY = dict(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=2,
            total_timesteps=4 * 16 * 3)


def paths(tree):
    return sorted(jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(tree))


def mlp_paths(prefix, layers):
    return [f"['params']['{prefix}']['Dense_{i}']['{leaf}']" for i in range(layers) for leaf in ("bias", "kernel")]


def test_the_built_in_networks_keep_the_parameter_layout_of_0_4_so_its_checkpoints_load():
    """The names 0.4's pure-JAX networks wrote (and orbax restores by): actor / critic
    Dense_0..n, log_std beside them for continuous actions, encoder and gru/{input,recurrent}."""
    mlp = ppo.Learner(ppo.make_config(TINY)).init(jax.random.PRNGKey(0)).params
    assert paths(mlp) == sorted(mlp_paths("actor", 3) + mlp_paths("critic", 3))
    assert mlp["params"]["actor"]["Dense_2"]["kernel"].shape == (64, 2)
    pendulum = ppo.Learner(ppo.make_config(dict(TINY, env="Pendulum-v1"))).init(jax.random.PRNGKey(0)).params
    assert paths(pendulum) == sorted(mlp_paths("actor", 3) + mlp_paths("critic", 3) + ["['params']['log_std']"])
    gru = ppo.Learner(ppo.make_config(dict(TINY, policy="gru", gru_size=8, hidden_sizes=[8]))).init(
        jax.random.PRNGKey(0)).params
    gru_own = ["['params']['encoder']['bias']", "['params']['encoder']['kernel']"] + [
        f"['params']['gru']['{part}']['{leaf}']" for part in ("input", "recurrent") for leaf in ("bias", "kernel")]
    assert paths(gru) == sorted(mlp_paths("actor", 2) + mlp_paths("critic", 2) + gru_own)
    assert gru["params"]["gru"]["recurrent"]["kernel"].shape == (8, 24)


def test_the_built_in_initialisation_is_orthogonal_with_the_reference_gains():
    p = ppo.Learner(ppo.make_config(TINY)).init(jax.random.PRNGKey(0)).params["params"]
    for tower, out_gain in (("actor", 0.01), ("critic", 1.0)):
        for i, gain in enumerate((np.sqrt(2), np.sqrt(2), out_gain)):
            w = np.asarray(p[tower][f"Dense_{i}"]["kernel"])
            small = w if w.shape[0] <= w.shape[1] else w.T  # orthonormal rows of the smaller side, times gain
            np.testing.assert_allclose(small @ small.T, gain**2 * np.eye(small.shape[0]), atol=1e-5)
            assert not np.any(p[tower][f"Dense_{i}"]["bias"])


def test_a_user_module_given_to_make_train_is_the_network_trained_and_acted_with():
    cfg = ppo.make_config(TINY)
    module = user_networks.TwoTowers(2, width=16)
    out = jax.jit(ppo.make_train(cfg, network=module, eval_episodes=2))(jax.random.PRNGKey(0))
    params = out.state.params["params"]
    assert params["pi_0"]["kernel"].shape == (4, 16) and "actor" not in params
    assert np.all(np.asarray(out.metrics["first_minibatch_ratio_error"]) == 0)  # the module is what acted
    assert np.all(np.isfinite(np.asarray(out.metrics["total_loss"])))
    policy = ppo.make_policy(cfg, out.state, network=module)
    logits, _ = module.apply({"params": params}, jnp.ones((1, 4)))
    assert int(policy(jnp.ones(4))) == int(jnp.argmax(logits[0]))


def test_a_user_module_from_the_config_is_imported_built_with_its_kwargs_and_recorded():
    # the module of the test above, named by the config: the same program (compiled once)
    cfg = ppo.make_config(dict(TINY, network="user_networks:two_towers", network_kwargs={"width": 16}))
    assert cfg.to_dict()["network"] == "user_networks:two_towers"
    assert cfg.to_dict()["network_kwargs"] == {"width": 16}
    out = jax.jit(ppo.make_train(cfg, eval_episodes=2))(jax.random.PRNGKey(1))
    assert out.state.params["params"]["v_1"]["kernel"].shape == (16, 16)
    assert np.all(np.asarray(out.metrics["first_minibatch_ratio_error"]) == 0)


@pytest.mark.parametrize("values, message", [
    (dict(network="user_networks:wrong_outputs"), "[batch, 2] (logits) and [batch]; it returned [batch, 3] and [batch]"),
    (dict(network="user_networks:two_towers", network_kwargs={"value_width": 2}), "it returned [batch, 2] and [batch, 2]"),
    (dict(network="user_networks:two_towers", network_kwargs={"depth": 2}), "unexpected keyword argument 'depth'"),
    (dict(network="no_such_package.nets:build"), "cannot be imported: ModuleNotFoundError"),
    (dict(network="user_networks:nothing_here"), "module user_networks has no nothing_here"),
    (dict(network="user_networks"), "must be an import path package.module:name"),
    (dict(network="user_networks:WithBatchStats"), "has variables other than params (batch_stats)"),
    (dict(network_kwargs={"width": 8}), "only applies with network set"),
    (dict(network="user_networks:two_towers", policy="gru"), "only chooses a built-in network"),
    (dict(network="user_networks:lstm", num_minibatches=8, num_steps=32), "must divide num_envs=4 with a recurrent"),
    (dict(env="Pendulum-v1", network="user_networks:WithLogStd"), "top-level parameter named log_std"),
])
def test_a_network_that_breaks_the_contract_is_one_config_error_before_any_compile(values, message):
    with pytest.raises(ConfigError) as caught:
        ppo.make_config(dict(TINY, **values))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_module_given_from_python_is_checked_as_the_learner_is_built():
    cfg = ppo.make_config(TINY)
    with pytest.raises(ConfigError, match=r"network=.TwoTowers.: must return .* it returned \[batch, 3\]"):
        ppo.make_train(cfg, network=user_networks.TwoTowers(3))
    with pytest.raises(ConfigError, match="must be a flax.linen Module"):
        ppo.Learner(cfg, network=lambda obs: obs)


@pytest.mark.slow  # a training program of its own: run by .ci/run after the default suite
def test_a_recurrent_user_module_with_a_pytree_memory_replays_its_sequences():
    """An LSTM whose carry is a pair: the rollout keeps each env's memory in the agent
    state, and the update replays whole sequences from it: the first minibatch's ratio is
    1 to float rounding, as with the built-in GRU."""
    cfg = ppo.make_config(dict(TINY, network="user_networks:lstm", network_kwargs={"size": 8}))
    learner = ppo.Learner(cfg)
    assert learner.agent.recurrent
    state, metrics = jax.jit(learner.run)(learner.init(jax.random.PRNGKey(2)))
    c, h = state.agent_state["carry"]
    assert c.shape == h.shape == (cfg.num_envs, 8)
    # 0 here; one ulp of 1 (6e-8) with jax 0.9.2, as with the GRU (see test_recurrent)
    assert np.max(np.asarray(metrics["first_minibatch_ratio_error"])) <= 1e-6, metrics["first_minibatch_ratio_error"]
    assert np.all(np.asarray(metrics["epochs_run"]) == 2)
    returns = learner.evaluate(state, 3)
    assert returns.shape == (3,) and np.all(np.isfinite(np.asarray(returns)))
    policy = ppo.make_policy(cfg, state)
    assert policy(jnp.zeros((2, 4))).shape == (2,) and isinstance(policy.carry, tuple)


@pytest.mark.slow  # a training program of its own: run by .ci/run after the default suite
def test_a_continuous_user_module_gives_means_and_the_library_keeps_the_log_std():
    cfg = ppo.make_config(dict(TINY, env="Pendulum-v1", log_std_init=-0.5))
    out = jax.jit(ppo.make_train(cfg, network=user_networks.TwoTowers(1, width=8)))(jax.random.PRNGKey(0))
    params = out.state.params["params"]
    assert params["log_std"].shape == (1,) and "log_std" not in user_networks.TwoTowers(1, width=8).init(
        jax.random.PRNGKey(0), jnp.ones((1, 3)))["params"]
    assert np.all(np.isfinite(np.asarray(out.metrics["total_loss"])))


@pytest.mark.slow  # a training program of its own: run by .ci/run after the default suite
def test_an_nnx_module_is_accepted_through_flax_bridge():
    from flax import nnx
    from flax.nnx import bridge

    class Net(nnx.Module):
        def __init__(self, obs_size, num_outputs, rngs):
            self.body = nnx.Linear(obs_size, 16, rngs=rngs)
            self.pi = nnx.Linear(16, num_outputs, rngs=rngs)
            self.v = nnx.Linear(16, 1, rngs=rngs)

        def __call__(self, obs):
            x = jnp.tanh(self.body(obs))
            return self.pi(x), self.v(x)[:, 0]

    out = jax.jit(ppo.make_train(ppo.make_config(TINY), network=bridge.to_linen(Net, 4, 2)))(jax.random.PRNGKey(0))
    assert out.state.params["params"]["pi"]["kernel"].shape == (16, 2)
    assert np.all(np.asarray(out.metrics["first_minibatch_ratio_error"]) == 0)


@pytest.mark.parametrize("kernel, stride", [(3, 1), (4, 2), (5, 3)])
def test_the_cnn_convolution_is_flax_convolution_with_the_same_parameters(kernel, stride):
    import flax.linen as nn

    from purejaxppo.networks import Conv

    x = jax.random.normal(jax.random.PRNGKey(0), (5, 11, 9, 3))
    ours = Conv(7, kernel, stride)
    params = ours.init(jax.random.PRNGKey(1), x)
    theirs = nn.Conv(7, (kernel, kernel), (stride, stride), padding="VALID")
    np.testing.assert_allclose(ours.apply(params, x), theirs.apply(params, x), rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # a training program of its own: run by .ci/run after the default suite
def test_a_cnn_torso_reads_image_observations_in_their_shape():
    """MinAtar's [10, 10, 4] image: two VALID 3x3 convolutions (10 -> 8 -> 6), flattened
    (6 * 6 * 32) into the separate actor and critic MLPs; observation statistics per pixel
    and channel."""
    cfg = ppo.make_config(dict(TINY, env="Breakout-MinAtar", torso="cnn", hidden_sizes=[32], normalize_obs=True))
    learner = ppo.Learner(cfg)
    state, metrics = jax.jit(learner.run)(learner.init(jax.random.PRNGKey(0)))
    p = state.params["params"]
    assert p["torso"]["Conv_0"]["kernel"].shape == (3, 3, 4, 16) and p["torso"]["Conv_1"]["kernel"].shape == (3, 3, 16, 32)
    assert p["actor"]["Dense_0"]["kernel"].shape == (6 * 6 * 32, 32)
    assert state.agent_state["obs_stats"].mean.shape == (10, 10, 4)
    assert np.all(np.asarray(metrics["first_minibatch_ratio_error"]) == 0)
    gru = ppo.Learner(ppo.make_config(dict(TINY, env="Breakout-MinAtar", torso="cnn", policy="gru", gru_size=8,
                                           hidden_sizes=[8], cnn_channels=[4], cnn_kernels=[5], cnn_strides=[2])))
    assert gru.init(jax.random.PRNGKey(0)).params["params"]["encoder"]["kernel"].shape == (3 * 3 * 4, 8)


def test_a_cnn_torso_reads_xland_minigrid_views():
    pytest.importorskip("xminigrid")
    cfg = ppo.make_config(dict(TINY, env="xminigrid/MiniGrid-Empty-5x5", torso="cnn", cnn_channels=[8, 8]))
    learner = ppo.Learner(cfg)
    assert learner.env.obs_shape == (7, 7, 2)
    params = jax.eval_shape(learner.init, jax.random.PRNGKey(0)).params["params"]
    assert params["actor"]["Dense_0"]["kernel"].shape == (3 * 3 * 8, 64)  # 7 -> 5 -> 3


@pytest.mark.learning
def test_a_user_flax_network_trains_cartpole_to_a_greedy_475_from_python_and_from_the_cli(tmp_path):
    """The reference CartPole config with the user's own two-tower module in place of the
    built-in MLP: through make_train(cfg, network=module) and through the command line."""
    cfg = ppo.load_config("configs/cartpole.yaml")
    train = jax.jit(jax.vmap(ppo.make_train(cfg, network=user_networks.TwoTowers(2), eval_episodes=16)))
    greedy = np.asarray(train(jax.random.split(jax.random.PRNGKey(0), 2)).evaluation["deterministic"])
    print("greedy return per seed (python):", greedy.mean(axis=1))
    assert greedy.mean() >= 475, greedy.mean(axis=1)

    from purejaxppo.experiments.cli import main

    out = tmp_path / "run"
    assert main(["train", "cartpole", "--seeds", "2", "--eval-episodes", "16", "--set",
                 "network=user_networks:two_towers", "--out", str(out)]) == 0
    assert ppo.load_config(out / "config.yaml").network == "user_networks:two_towers"
    greedy_cli = json.loads((out / "summary.json").read_text())["eval_return"]
    print("greedy return (cli):", greedy_cli)
    assert greedy_cli["mean"] >= 475, greedy_cli
