"""Writes train_reference.npz, so that tests/test_learner.py can check that training keeps its
numbers. Kept for the record; rerunning it on newer code only copies that code's numbers.

First written at main 60a2441, before the learner state was split into init / run /
evaluate. Rewritten once, when the networks moved off flax.linen (0.4): the same layers,
parameter layout and initial distributions, drawn from other keys. Before rewriting, the
new learner given the old initial parameters reproduced the old file (to the test's
tolerances: episodes, keys and evaluations exactly)."""
import jax
import numpy as np

import purejaxppo as ppo

CASES = {
    "cartpole": dict(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=4, update_epochs=4,
                     total_timesteps=4 * 16 * 6, env_params={"max_steps_in_episode": 50}),
    "pendulum": dict(env="Pendulum-v1", num_envs=2, num_steps=32, num_minibatches=2, update_epochs=2,
                     max_epochs=3, target_kl=0.01, total_timesteps=2 * 32 * 6),
}

if __name__ == "__main__":
    out = {}
    for name, values in CASES.items():
        cfg = ppo.make_config(values)
        res = jax.jit(ppo.make_train(cfg, eval_episodes=4))(jax.random.PRNGKey(3))
        for path, leaf in jax.tree_util.tree_leaves_with_path(res.state.params):
            out[f"{name}/params{jax.tree_util.keystr(path)}"] = np.asarray(leaf)
        for k, v in res.metrics.items():
            out[f"{name}/metrics/{k}"] = np.asarray(v)
        for k, v in res.evaluation.items():
            out[f"{name}/evaluation/{k}"] = np.asarray(v)
        out[f"{name}/key"] = np.asarray(res.state.key)
    np.savez_compressed("tests/data/train_reference.npz", **out)
