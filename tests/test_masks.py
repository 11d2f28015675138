"""Action masks: an environment's `action_mask(state)` is applied wherever the policy's
distribution is built (acting, the loss, evaluation, make_policy); `mask_actions: false`
ignores it. A user's gymnax Environment with a mask gets the same guarantees."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
import user_envs
from purejaxppo import envs
from purejaxppo.distributions import Categorical
from purejaxppo.rollout import rollout

TINY = dict(num_envs=8, num_steps=32, num_minibatches=2, update_epochs=2, total_timesteps=8 * 32 * 3)


@pytest.fixture(params=["native", "gymnax"])
def corridor(request):
    """The masked corridor registered as `corridor`: of the protocol itself, or a gymnax
    Environment whose adapter gives its mask. Both get every guarantee below."""
    saved = dict(envs._REGISTERED)
    envs.register("corridor", {"native": user_envs.corridor, "gymnax": user_envs.gymnax_corridor}[request.param])
    yield "corridor"
    envs._REGISTERED.clear()
    envs._REGISTERED.update(saved)


def test_a_masked_categorical_is_the_categorical_of_the_valid_actions_alone():
    logits = jnp.array([[3.0, -1.0, 0.5, 2.0], [0.1, 0.2, 0.3, 9.0]])
    mask = jnp.array([[False, True, True, True], [True, False, True, False]])
    dist = Categorical.masked(logits, mask)
    for row in range(2):
        alone = Categorical(logits[row][mask[row]])
        np.testing.assert_allclose(dist.entropy()[row], alone.entropy(), rtol=1e-6)
        valid = np.flatnonzero(mask[row])
        row_dist = Categorical.masked(logits[row], mask[row])
        np.testing.assert_allclose(jax.vmap(row_dist.log_prob)(jnp.asarray(valid)),
                                   jax.vmap(alone.log_prob)(jnp.arange(len(valid))), rtol=1e-6)
    assert np.asarray(dist.mode()).tolist() == [3, 2]  # the largest logit of each row is masked out
    samples = jax.vmap(dist.sample)(jax.random.split(jax.random.PRNGKey(0), 4000))
    assert np.all(np.take_along_axis(np.asarray(mask)[None], np.asarray(samples)[..., None], -1))
    grads = jax.grad(lambda x: jnp.sum(Categorical.masked(x, mask).entropy()))(logits)
    assert np.all(np.asarray(grads)[~np.asarray(mask)] == 0)


def taken_invalid(traj):
    """How many steps of a rollout took an action its mask ruled out."""
    allowed = np.take_along_axis(np.asarray(traj.action_mask), np.asarray(traj.action)[..., None], -1)[..., 0]
    return int(np.sum(~allowed))


# the gymnax corridor's rollouts (its adapter's mask: test_user_edges too) are long checks
@pytest.mark.parametrize("corridor", ["native", pytest.param("gymnax", marks=pytest.mark.slow)], indirect=True)
@pytest.mark.parametrize("deterministic", [False, True])
def test_an_untrained_masked_policy_never_takes_an_invalid_action_greedy_or_sampled(corridor, deterministic):
    learner = ppo.Learner(ppo.make_config(dict(TINY, env=corridor)))
    state = learner.init(jax.random.PRNGKey(0))
    policy = functools.partial(learner.agent.act, state.params, state.agent_state, deterministic=deterministic)
    traj = jax.jit(lambda: rollout(learner.env, policy, state.env_state, state.obs, jax.random.PRNGKey(1), 200))()[3]
    assert np.asarray(traj.action_mask).shape == (200, 8, 3) and not np.all(traj.action_mask)
    assert taken_invalid(traj) == 0
    assert np.all(np.asarray(traj.reward) >= 0)  # an invalid action would be punished with -1


@pytest.mark.slow  # two training programs per corridor: run by .ci/run after the default suite
def test_training_with_the_mask_never_acts_invalidly_and_its_first_ratio_is_exactly_one(corridor):
    masked = ppo.make_config(dict(TINY, env=corridor))
    out = jax.jit(jax.vmap(ppo.make_train(masked, eval_episodes=8)))(jax.random.split(jax.random.PRNGKey(0), 2))
    assert np.all(np.asarray(out.metrics["first_minibatch_ratio_error"]) == 0)
    for mode in ("deterministic", "stochastic"):
        assert np.all(np.asarray(out.evaluation[mode]) >= 0)  # no evaluation episode ended on an invalid action
    # the same runs ignoring the mask do take invalid actions (so the check above could fail)
    unmasked = jax.jit(jax.vmap(ppo.make_train(ppo.make_config(dict(TINY, env=corridor, mask_actions=False)),
                                               eval_episodes=8)))(jax.random.split(jax.random.PRNGKey(0), 2))
    assert np.any(np.asarray(unmasked.evaluation["stochastic"]) < 0)


@pytest.mark.slow  # a recurrent training program per corridor: run by .ci/run after the default suite
def test_a_recurrent_masked_policy_replays_its_sequences(corridor):
    cfg = ppo.make_config(dict(TINY, env=corridor, policy="gru", gru_size=8, hidden_sizes=[8]))
    learner = ppo.Learner(cfg)
    _, metrics = jax.jit(learner.run)(learner.init(jax.random.PRNGKey(3)))
    # a replay of sequences: to an ulp of float rounding across jax versions (see test_recurrent)
    assert np.max(np.asarray(metrics["first_minibatch_ratio_error"])) <= 1e-6, metrics["first_minibatch_ratio_error"]


def test_make_policy_takes_the_mask(corridor):
    cfg = ppo.make_config(dict(TINY, env=corridor))
    learner = ppo.Learner(cfg)
    state = learner.init(jax.random.PRNGKey(0))
    policy = ppo.make_policy(cfg, state)
    obs = jnp.tile(jax.nn.one_hot(2, 6), (64, 1))
    only = {action: jnp.arange(3) == action for action in range(3)}
    for action, mask in only.items():
        assert np.all(np.asarray(policy(obs, mask=mask)) == action)  # greedy
        assert np.all(np.asarray(policy(obs, key=jax.random.PRNGKey(action), mask=mask)) == action)  # sampled
    assert int(policy(obs[0], mask=only[1])) == 1


@pytest.mark.slow  # Jumanji's Knapsack compiled: run by .ci/run after the default suite
def test_jumanji_adapters_expose_their_masks():
    pytest.importorskip("jumanji")
    snake = envs.make_env(ppo.make_config(dict(TINY, env="jumanji/Snake-v1")))
    assert snake.has_action_mask
    obs, state = snake.reset(jax.random.PRNGKey(0))
    assert snake.action_mask(state).shape == (4,)
    knapsack = ppo.Learner(ppo.make_config(dict(TINY, env="jumanji/Knapsack-v1", num_envs=2, num_steps=8,
                                                total_timesteps=32)))
    assert knapsack.agent.masked
    state = knapsack.init(jax.random.PRNGKey(0))
    policy = functools.partial(knapsack.agent.act, state.params, state.agent_state)
    traj = jax.jit(lambda: rollout(knapsack.env, policy, state.env_state, state.obs, jax.random.PRNGKey(1), 60,
                                   resets="per_rollout"))()[3]
    assert taken_invalid(traj) == 0 and not np.all(traj.action_mask)
    assert not ppo.Learner(ppo.make_config(dict(TINY, env="jumanji/Knapsack-v1", num_envs=2, num_steps=8,
                                                total_timesteps=32, mask_actions=False))).agent.masked
