import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from purejaxppo.distributions import Categorical, DiagGaussian


def test_categorical_matches_scipy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 4)).astype(np.float32)
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    actions = rng.integers(0, 4, size=5)
    d = Categorical(jnp.asarray(logits))
    want_lp = [stats.multinomial(1, p).logpmf(np.eye(4)[a]) for p, a in zip(probs, actions)]
    np.testing.assert_allclose(d.log_prob(jnp.asarray(actions)), want_lp, rtol=1e-5)
    np.testing.assert_allclose(d.entropy(), [stats.entropy(p) for p in probs], rtol=1e-5)
    np.testing.assert_array_equal(d.mode(), logits.argmax(-1))


def test_categorical_sample_frequencies():
    logits = jnp.log(jnp.array([0.1, 0.6, 0.3]))
    samples = Categorical(jnp.broadcast_to(logits, (20000, 3))).sample(jax.random.PRNGKey(0))
    freq = np.bincount(np.asarray(samples), minlength=3) / 20000
    np.testing.assert_allclose(freq, [0.1, 0.6, 0.3], atol=0.015)


def test_diag_gaussian_matches_scipy():
    rng = np.random.default_rng(1)
    mean = rng.normal(size=(6, 3)).astype(np.float32)
    log_std = rng.normal(scale=0.5, size=3).astype(np.float32)
    x = rng.normal(size=(6, 3)).astype(np.float32)
    d = DiagGaussian(jnp.asarray(mean), jnp.asarray(log_std))
    cov = np.diag(np.exp(2 * log_std))
    want_lp = [stats.multivariate_normal(m, cov).logpdf(xi) for m, xi in zip(mean, x)]
    np.testing.assert_allclose(d.log_prob(jnp.asarray(x)), want_lp, rtol=1e-5)
    want_ent = stats.multivariate_normal(mean[0], cov).entropy()
    np.testing.assert_allclose(d.entropy(), np.full(6, want_ent), rtol=1e-5)
    np.testing.assert_array_equal(d.mode(), mean)


def test_diag_gaussian_sample_moments():
    d = DiagGaussian(jnp.full((50000, 2), 1.5), jnp.log(jnp.array([0.5, 2.0])))
    s = np.asarray(d.sample(jax.random.PRNGKey(3)))
    np.testing.assert_allclose(s.mean(0), [1.5, 1.5], atol=0.05)
    np.testing.assert_allclose(s.std(0), [0.5, 2.0], rtol=0.03)


def test_tanh_gaussian_is_the_change_of_variables_of_its_gaussian():
    from purejaxppo.distributions import TanhGaussian

    rng = np.random.default_rng(2)
    low, high = jnp.array([-3.0, 0.0]), jnp.array([3.0, 1.0])
    base = DiagGaussian(jnp.asarray(rng.normal(size=(5, 2)), jnp.float32), jnp.array([-0.5, 0.3]))
    d = TanhGaussian(base, low, high)
    u = jnp.asarray(rng.normal(scale=2.0, size=(5, 2)), jnp.float32)
    # log p(a) = log N(u) - log |det da/du|, the Jacobian taken by autodiff (diagonal: one action per dim)
    jacobian = jax.vmap(jax.jacfwd(d.to_env))(u)  # [5, 2, 2]
    log_det = jnp.log(jnp.abs(jnp.linalg.det(jacobian)))
    np.testing.assert_allclose(d.log_prob(u), base.log_prob(u) - log_det, rtol=1e-5, atol=1e-5)
    # stable far into the tails, where 1 - tanh(u)^2 underflows in float32
    assert np.all(np.isfinite(d.log_prob(jnp.full((1, 2), 30.0))))
    # actions land in the box; the mode is the squashed mean
    a = d.to_env(d.sample(jax.random.PRNGKey(0)))
    assert np.all((a >= low) & (a <= high))
    np.testing.assert_allclose(d.to_env(d.mode()), low + (jnp.tanh(base.mean) + 1) / 2 * (high - low), rtol=1e-6)
    # the entropy estimate: the Gaussian's plus the log-determinant at the mean
    np.testing.assert_allclose(d.entropy(), base.entropy() + jnp.log(jnp.abs(jnp.linalg.det(
        jax.vmap(jax.jacfwd(d.to_env))(base.mean)))), rtol=1e-5)
