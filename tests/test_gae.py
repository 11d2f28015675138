import numpy as np
import jax.numpy as jnp

from purejaxppo import gae


def gae_loop(rewards, values, next_values, terminated, truncated, gamma, lam):
    """Textbook GAE, one environment at a time, in plain Python."""
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            bootstrap = 0.0 if terminated[t, n] else gamma * next_values[t, n]
            delta = rewards[t, n] + bootstrap - values[t, n]
            if terminated[t, n] or truncated[t, n]:
                running = 0.0  # a new episode starts at t + 1
            running = delta + gamma * lam * running
            adv[t, n] = running
    return adv, adv + values


def test_gae_matches_plain_loop_with_terminations_and_truncations():
    rng = np.random.default_rng(0)
    T, N = 50, 6
    rewards = rng.normal(size=(T, N)).astype(np.float32)
    values = rng.normal(size=(T, N)).astype(np.float32)
    # next_values[t] is V of the observation step t led to: values[t + 1] unless the
    # episode ended at t, where it is V(final observation), unrelated to values[t + 1].
    next_values = np.concatenate([values[1:], rng.normal(size=(1, N))]).astype(np.float32)
    terminated = rng.random((T, N)) < 0.1
    truncated = rng.random((T, N)) < 0.1
    terminated[10, 0], truncated[10, 0] = True, True    # both at once: termination wins
    terminated[20, 1], truncated[20, 1] = False, True   # pure time limit
    ended = terminated | truncated
    next_values[ended] = rng.normal(size=ended.sum())
    got_adv, got_targets = gae(jnp.asarray(rewards), jnp.asarray(values), jnp.asarray(next_values),
                               jnp.asarray(terminated), jnp.asarray(truncated), 0.99, 0.95)
    want_adv, want_targets = gae_loop(rewards, values, next_values, terminated, truncated, 0.99, 0.95)
    np.testing.assert_allclose(got_adv, want_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_targets, want_targets, rtol=1e-5, atol=1e-5)
    # The truncated step bootstraps from the final observation's value and nothing later.
    t = 20
    assert abs(got_adv[t, 1] - (rewards[t, 1] + 0.99 * next_values[t, 1] - values[t, 1])) < 1e-5


def test_truncation_bootstraps_but_termination_cuts():
    rewards = jnp.ones((1, 1))
    values = jnp.zeros((1, 1))
    next_values = jnp.full((1, 1), 10.0)
    no = jnp.zeros((1, 1), bool)
    yes = jnp.ones((1, 1), bool)
    adv_trunc, _ = gae(rewards, values, next_values, no, yes, 0.5, 1.0)
    adv_term, _ = gae(rewards, values, next_values, yes, no, 0.5, 1.0)
    assert float(adv_trunc[0, 0]) == 1.0 + 0.5 * 10.0
    assert float(adv_term[0, 0]) == 1.0
