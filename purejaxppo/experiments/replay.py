"""A watchable replay of one evaluation episode of a Brax policy (`purejaxppo eval DIR --render F`)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import jax
import numpy as np

from purejaxppo.compiler import compiler_options
from purejaxppo.config import PPOConfig
from purejaxppo.envs import make_raw_env
from purejaxppo.envs.brax import BraxEnv
from purejaxppo.envs.wrappers import Wrapper
from purejaxppo.errors import ConfigError
from purejaxppo.experiments import compile_cache
from purejaxppo.experiments.paths import write_new
from purejaxppo.gate import Bundle


def episode(agent, env: BraxEnv, state, key, deterministic: bool = True):
    """One episode of the policy in `state` (acting through `agent`) on `env` -> (Brax pipeline
    states, one per step from the reset to the episode's end, and the episode's return)."""

    @partial(jax.jit, compiler_options=compiler_options())
    def play(key):
        reset_key, key = jax.random.split(key)
        obs, env_state = env.reset(reset_key)

        def step(carry, step_key):
            obs, env_state, memory, done = carry
            act_key, env_key = jax.random.split(step_key)
            memory, action, *_ = agent.act(state.params, state.agent_state, memory, obs[None], act_key,
                                           deterministic)
            obs, env_state, reward, terminated, truncated, _ = env.step(env_key, env_state, action[0])
            out = (env_state.env_state.pipeline_state, reward * ~done, done)
            return (obs, env_state, memory, done | terminated | truncated), out

        first = env_state.env_state.pipeline_state
        _, (states, rewards, done_before) = jax.lax.scan(
            step, (obs, env_state, agent.initial_carry(1), False), jax.random.split(key, env.max_episode_steps))
        return first, states, rewards, done_before

    first, states, rewards, done_before = jax.device_get(play(key))
    length = int(np.sum(~done_before))  # steps up to and including the one that ended the episode
    return [first] + [jax.tree.map(lambda x: x[t], states) for t in range(length)], float(np.sum(rewards))


def check_renderable(cfg: PPOConfig, field: str = "render", env=None) -> BraxEnv:
    """The Brax environment a replay of a run of `cfg` is drawn in (`env`: cfg's, built already,
    wrapped or not); a ConfigError naming `field` when there is none (before anything compiles)."""
    env = make_raw_env(cfg.env, cfg.env_params) if env is None else env
    while isinstance(env, Wrapper):
        env = env.env
    if not isinstance(env, BraxEnv) or getattr(env.brax_env, "sys", None) is None:
        raise ConfigError(field, cfg.env, "replays are drawn for Brax environments with a model "
                          "(not gymnax, not brax/fast)")
    return env


def render(bundle: Bundle, state, key, deterministic: bool = True) -> tuple[str, float, int]:
    """An HTML page (brax.io.html) replaying one episode of a run (its bundle and state) ->
    (html, return, steps)."""
    from brax.io import html

    env = check_renderable(bundle.config, env=bundle.env)
    with compile_cache.quiet_cache_loads():
        states, total = episode(bundle.agent, env, state, key, deterministic)
    return html.render(env.brax_env.sys, states, colab=False), total, len(states) - 1


def check_target(path: str, field: str = "render") -> None:
    """Before anything is evaluated: a replay is written into `path`, a new file in a folder that
    exists (a ConfigError naming `field` otherwise)."""
    if Path(path).exists():
        raise ConfigError(field, path, "exists: replays never replace a file")
    if not Path(path).absolute().parent.is_dir():
        raise ConfigError(field, path, f"is in a folder that does not exist ({Path(path).parent}); create it first")


def write(path: str, bundle: Bundle, state, key, deterministic: bool = True, field: str = "render") -> dict:
    """Write the replay of one episode (`render`) into `path`, a new file -> {path, return, steps}."""
    html, total, steps = render(bundle, state, key, deterministic)
    try:
        write_new(Path(path), html)
    except OSError as error:
        raise ConfigError(field, path, f"cannot be written: {error.strerror}") from None
    return {"path": str(path), "return": total, "steps": steps}
