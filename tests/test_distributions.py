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
