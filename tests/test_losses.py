import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import losses

C = 0.2


@pytest.mark.parametrize("adv", [1.0, -1.0])
@pytest.mark.parametrize("ratio", [0.5, 0.9, 1.0, 1.1, 1.5])
def test_clipped_surrogate_gradient_in_each_sign_case(adv, ratio):
    old = jnp.log(jnp.array([0.3]))
    log_prob = old + jnp.log(ratio)
    a = jnp.array([adv])

    def objective(lp):
        return losses.clipped_surrogate(lp, old, a, C)[0].sum()

    grad = float(jax.grad(objective)(log_prob)[0])
    obj, clipped = losses.clipped_surrogate(log_prob, old, a, C)
    # zeroed exactly when the clipped term is the smaller one and constant in r
    expect_clipped = (adv > 0 and ratio > 1 + C) or (adv < 0 and ratio < 1 - C)
    assert bool(clipped[0]) == expect_clipped
    if expect_clipped:
        assert grad == 0.0
        assert float(obj[0]) == pytest.approx(np.clip(ratio, 1 - C, 1 + C) * adv, rel=1e-5)
    else:
        # d(r*A)/d(log r) = r*A
        assert grad == pytest.approx(ratio * adv, rel=1e-5)
        assert float(obj[0]) == pytest.approx(ratio * adv, rel=1e-5)


def test_kl_estimates_match_definitions():
    rng = np.random.default_rng(1)
    old = jnp.asarray(rng.normal(size=100))
    new = old + jnp.asarray(rng.normal(scale=0.3, size=100))
    k1, k3 = losses.kl_estimates(new, old)
    r = np.exp(np.asarray(new) - np.asarray(old))
    assert float(k1) == pytest.approx(np.mean(-np.log(r)), rel=1e-5)
    assert float(k3) == pytest.approx(np.mean(r - 1 - np.log(r)), rel=1e-5)
    assert float(k3) >= 0
    k1, k3 = losses.kl_estimates(old, old)
    assert float(k1) == 0.0 and float(k3) == 0.0


def test_value_loss_really_clips():
    old = jnp.array([0.0, 0.0])
    target = jnp.array([1.0, -1.0])
    values = jnp.array([0.5, 0.05])  # first moved beyond eps towards target, second inside

    grad_clipped = jax.grad(lambda v: losses.value_loss(v, old, target, 0.1))(values)
    grad_off = jax.grad(lambda v: losses.value_loss(v, old, target, jnp.inf))(values)
    # clipped term (0.1 - 1)^2 = 0.81 > (0.5 - 1)^2 = 0.25 wins: constant in v, no gradient
    assert float(grad_clipped[0]) == 0.0
    assert float(grad_off[0]) == pytest.approx(0.5 * 2 * (0.5 - 1.0) / 2)
    # a sample inside the band keeps the plain gradient
    assert float(grad_clipped[1]) == pytest.approx(float(grad_off[1]))
    assert float(losses.value_loss(values, old, target, jnp.inf)) == pytest.approx(
        0.5 * np.mean((np.asarray(values) - np.asarray(target)) ** 2))


def test_explained_variance():
    y = jnp.array([1.0, 2.0, 3.0, 4.0])
    assert float(losses.explained_variance(y, y)) == 1.0
    assert float(losses.explained_variance(jnp.zeros(4) + y.mean(), y)) == pytest.approx(0.0)
    assert np.isnan(float(losses.explained_variance(y, jnp.ones(4))))
