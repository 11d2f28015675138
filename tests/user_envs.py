"""Environments a user writes, imported by the tests as `user_envs:<factory>`."""

import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp
from gymnax.environments import environment, spaces

from purejaxppo.envs import ActionSpace

LEFT, RIGHT, LEAP = 0, 1, 2


class CorridorState(NamedTuple):
    pos: jnp.ndarray
    steps: jnp.ndarray


class Corridor:
    """Walk right along `length` cells to the goal (+1, the end). LEFT at the first cell,
    and LEAP anywhere, are illegal: `action_mask` says so, and taking one anyway ends the
    episode with -1 (as an illegal move does in Jumanji's Snake or Knapsack)."""

    def __init__(self, length: int = 6, time_limit: int = 20):
        self.length = length
        self.obs_shape = (length,)
        self.action_space = ActionSpace("discrete", num_actions=3)
        self.max_episode_steps = time_limit

    def _obs(self, pos):
        return jax.nn.one_hot(pos, self.length, dtype=jnp.float32)

    def reset(self, key):
        pos = jax.random.randint(key, (), 0, self.length - 1)
        return self._obs(pos), CorridorState(pos, jnp.int32(0))

    def action_mask(self, state):
        return jnp.array([True, True, False]).at[LEFT].set(state.pos > 0)

    def step(self, key, state, action):
        illegal = ~self.action_mask(state)[action]
        pos = jnp.clip(state.pos + jnp.where(action == RIGHT, 1, jnp.where(action == LEFT, -1, 0)), 0,
                       self.length - 1)
        at_goal = pos == self.length - 1
        reward = jnp.where(illegal, -1.0, jnp.where(at_goal, 1.0, 0.0)).astype(jnp.float32)
        steps = state.steps + 1
        terminated = illegal | at_goal
        truncated = ~terminated & (steps >= self.max_episode_steps)
        return self._obs(pos), CorridorState(pos, steps), reward, terminated, truncated, {}


def corridor(**params):
    return Corridor(**params)


class GymnaxCorridor(environment.Environment):
    """The same corridor as a gymnax Environment, its mask written as gymnax's own methods
    are: `action_mask(state, params)`."""

    def __init__(self, length: int = 6):
        self.corridor = Corridor(length)

    @property
    def default_params(self):
        return environment.EnvParams(max_steps_in_episode=20)

    def reset_env(self, key, params):
        return self.corridor.reset(key)

    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, _, info = self.corridor.step(key, state, action)
        return obs, state, reward, terminated, info

    def is_truncated(self, state, params):
        return state.steps >= params.max_steps_in_episode

    def action_mask(self, state, params):
        return self.corridor.action_mask(state)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (self.corridor.length,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(3)


def gymnax_corridor(**params):
    return GymnaxCorridor(**params)


def corridor_with(**members):
    """A corridor with `members` put in place of its own (a protocol broken on purpose)."""
    env = Corridor()
    for name, value in members.items():
        setattr(env, name, value)
    return env


def fail(how: str):
    """What a user's factory may do instead of returning: `raise` an error (of two lines),
    `exit` (sys.exit), or be stopped (`stop`: Ctrl-C, KeyboardInterrupt)."""
    if how == "raise":
        raise RuntimeError("the map file is missing\nsecond line")
    if how == "exit":
        sys.exit(3)
    raise KeyboardInterrupt


def failing(how: str = "raise"):
    fail(how)


def gymnax_cartpole(**params):
    """A gymnax Environment instance (gymnax's own CartPole), as a user's factory returns one."""
    import gymnax

    env, _ = gymnax.make("CartPole-v1")
    return env


class Broken(Corridor):
    """Fails the protocol in the way `problem` names."""

    def __init__(self, problem: str):
        super().__init__()
        self.problem = problem

    def reset(self, key):
        obs, state = super().reset(key)
        return (obs.astype(jnp.int32) if self.problem == "int_obs" else obs), state

    def step(self, key, state, action):
        obs, state, reward, terminated, truncated, info = super().step(key, state, action)
        if self.problem == "reward_vector":
            reward = jnp.stack([reward, reward])
        if self.problem == "float_done":
            terminated = terminated.astype(jnp.float32)
        return obs, state, reward, terminated, truncated, info


def broken(problem):
    return Broken(problem)


class NoStep:
    obs_shape = (2,)
    action_space = ActionSpace("discrete", num_actions=2)
    max_episode_steps = 5

    def reset(self, key):
        return jnp.zeros(2), ()


def no_step():
    return NoStep()


class InfoCorridor(Corridor):
    """The corridor, whose step info carries numbers a test knows: `seven` (7.0 on every step),
    `ended` (the step ended the episode), `cell` (the position reached, an int), and `one_hot`
    (not one number: not offered to info_metrics)."""

    def step(self, key, state, action):
        obs, state, reward, terminated, truncated, _ = super().step(key, state, action)
        info = {"seven": jnp.float32(7.0), "ended": terminated | truncated, "cell": state.pos, "one_hot": obs}
        return obs, state, reward, terminated, truncated, info


def info_corridor(**params):
    return InfoCorridor(**params)


class EmptyLeavesState(NamedTuple):
    corridor: CorridorState
    act: jnp.ndarray        # shape (0,): as MJX's data.act where a model has no activations
    contacts: jnp.ndarray   # shape (0, 3), int


class EmptyLeavesCorridor(Corridor):
    """The corridor with zero-size arrays in its state (as MJX's): they must survive sharding
    over devices, checkpoints and a resume."""

    def reset(self, key):
        obs, state = super().reset(key)
        return obs, EmptyLeavesState(state, jnp.zeros((0,)), jnp.zeros((0, 3), jnp.int32))

    def action_mask(self, state):  # the learner asks with this state, Corridor.step with its own
        return super().action_mask(getattr(state, "corridor", state))

    def step(self, key, state, action):
        obs, inner, reward, terminated, truncated, info = super().step(key, state.corridor, action)
        return obs, EmptyLeavesState(inner, state.act + 1.0, state.contacts), reward, terminated, truncated, info


def empty_leaves_corridor(**params):
    return EmptyLeavesCorridor(**params)


def time_limit_ends(name: str = "MountainCar-v0"):
    """gymnax's `name` with its time limit as a termination (no bootstrap from the last state),
    as gymnax before 1.0 reported it: what `bootstrap_truncation: false` must train as."""
    import gymnax

    env, _ = gymnax.make(name)
    natural = env.is_terminated

    def is_terminated(state, params):
        return jnp.logical_or(natural(state, params), state.time >= params.max_steps_in_episode)

    env.is_terminated = is_terminated  # gymnax's step_env asks is_terminal, which asks is_terminated
    return env
