"""Learning checks: full budgets, marked `learning` (run by .ci/run after the default suite)."""

import jax
import numpy as np
import pytest

import purejaxppo as ppo


@pytest.mark.learning
def test_cartpole_learns_with_the_reference_config():
    cfg = ppo.load_config("configs/cartpole.yaml")
    train = jax.jit(jax.vmap(ppo.make_train(cfg)))
    out = train(jax.random.split(jax.random.PRNGKey(0), 4))
    final = np.asarray(out.metrics["episode_return"])[:, -1]
    print("final returns per seed:", final)
    assert final.mean() >= 475, final
