"""Jumanji (`env: jumanji/<name>`) behind the purejaxppo environment protocol.

Offered: every environment Jumanji registers (`env_names()`) whose action is one discrete
choice or a fixed set of discrete choices, with one scalar reward: 20 of 26 in 1.1.2.
Refused with a ConfigError that says why: `Sokoban-v0` (downloads its levels from the
Hugging Face hub when built), environments with one reward per agent (Connector-v3,
LevelBasedForaging-v0, SearchAndRescue-v0, whose actions are also continuous) or with
continuous actions, and those whose joint discrete action has more than MAX_ACTIONS
(10,000) choices (JobShop-v0: 21**10, MMST-v0: 36**3). Apart from Sokoban the check
needs the environment built, so a refused name is refused when it is made.

Actions: a `DiscreteArray` of n values is ActionSpace("discrete", n). A
`MultiDiscreteArray` (or an integer `BoundedArray`, MultiCVRP-v0) of shape (k,) with
n_1..n_k values is flattened to one discrete action of n_1 * ... * n_k values, decoded
row-major (the first dimension most significant, `jnp.unravel_index`): BinPack-v2
40 * 20 = 800, Cleaner-v0 4**3 = 64, RubiksCube-v0 6 * 1 * 3 = 18, Tetris-v0 4 * 10 = 40,
RobotWarehouse-v0 5**4 = 625, Sudoku-v0 9**3 = 729, FlatPack-v0 8100, Minesweeper-v0 100.
Action masks: where the observation has an `action_mask` over the flat action (of n
values, or of the shape n_1 x ... x n_k, or one row of n values per dimension, whose joint
mask is their outer AND), the adapter gives it as `action_mask(state)`, and the policy
never takes an invalid action (`mask_actions: false` turns that off). Without masking an
invalid action does what the environment does with it (in Snake, Knapsack, BinPack,
Tetris... it ends the episode, with discount 0: terminated). The mask also stays part of
the observation.

Observations: Jumanji's observation is a NamedTuple of arrays (BinPack's nests one more
NamedTuple). Every
array leaf, the action mask and counters such as `step_count` included, is cast to
float32 (bools to 0/1) and flattened row-major, and the leaves are concatenated in the
order `jax.tree_util.tree_leaves` gives (the NamedTuple's field order). Snake-v1 (12x12):
grid 12*12*5 + step_count 1 + action_mask 4 = 725; Knapsack-v1: weights, values,
packed_items, action_mask, 4 * 50 = 200. Counters are not rescaled (Snake's step_count
runs up to its time limit): `normalize_obs: true` is advised.

Episode handling is ours: Jumanji's `Environment.step` does not reset (its auto-reset is
a wrapper, not used); `AutoReset` starts new episodes. The adapter counts steps itself:
  max_episode_steps = the environment's `time_limit` when its constructor has one (Snake
      4000, Maze, Cleaner, Tetris, PacMan, RubiksCube, RobotWarehouse, SlidingTilePuzzle),
      else our own limit `env_params.time_limit` (default 1000; Knapsack, TSP, CVRP, BinPack,
      Game2048, GraphColoring, Minesweeper, Sudoku, FlatPack have none);
  truncated  = steps >= max_episode_steps, or a LAST step with discount > 0 (Jumanji's own
      `truncation`);
  terminated = a LAST step with discount 0 -- except, for an environment with its own time
      limit, on the step that reaches it.
Jumanji environments with a time limit report reaching it as a termination (LAST with
discount 0, like a crash): Jumanji cannot tell them apart. The adapter can from the step
count, except on the very step that reaches the limit: there an episode that also truly
ended (Snake hitting a wall on its 4000th step) is reported as truncated only. For
environments without a time limit of their own, both flags are exact and may both be true.

Settings (in `env_params`): the constructor's arguments that take a number or a bool,
checked against the value the built environment uses (its attribute of the same name,
e.g. Maze's and Cleaner's time_limit derived from a None default; else the constructor's
default) with its type: Snake-v1 num_rows, num_cols, time_limit; `generator`, a mapping
of the default generator's own number arguments (Knapsack-v1: `generator: {num_items:
20, total_budget: 5.0}`); and `time_limit` for environments without one of their own.
Arguments that take Python objects (reward_fn, viewer) cannot be set from a config.

Resets: measured on a 2-core CPU (benchmarks/results/2026-11-30-xminigrid-jumanji-cpu.md):
a jitted vmapped reset of 16 envs costs 0.07x (FlatPack, whose step is slow) to 18x
(RubiksCube-v0: 100 scrambling moves) a vmapped step of 16 (Snake-v1 0.9x, Knapsack-v1
1.8x, Maze-v0 8x); drawn for every env at every step, resets make a 16 env x 64 step
rollout of random actions 1.1x (Game2048, Tetris, FlatPack) to 47x (RubiksCube-v0)
slower (Snake-v1 1.6x, Knapsack-v1 1.7x, BinPack-v2 1.3x). So the training rollout draws
one fresh reset per env slot per rollout (`reset_strategy = "per_rollout"`, as for
Brax): an env that ends twice within one rollout restarts from the same fresh state
both times.
"""

from __future__ import annotations

import difflib
import inspect
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo import pytree
from purejaxppo.envs.base import ActionSpace, param_value, unknown_param
from purejaxppo.errors import ConfigError

MAX_ACTIONS = 10_000
DEFAULT_TIME_LIMIT = 1000  # for environments without a time limit of their own
# Registered in Jumanji but left out on purpose, with the reason.
EXCLUDED = {"Sokoban-v0": "downloads its levels (boxoban) from the Hugging Face hub when built, so it is left "
                          "out on purpose"}


def env_names() -> list[str]:
    import jumanji

    return sorted(n for n in jumanji.registered_environments() if n not in EXCLUDED)


def _number(value) -> bool:
    return isinstance(value, (numbers.Real, np.bool_)) and not isinstance(value, np.ndarray)


def _settable(cls, instance) -> tuple[dict[str, object], list[str]]:
    """A constructor's arguments -> ({settable name: default}, [names taking objects]).
    Settable: an argument with a number or bool default, or whose value the built
    `instance` keeps as a number attribute of the same name; the default is that attribute
    where there is one (the value in use: registered keyword arguments and values the
    constructor derives from a None default included), else the constructor's."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    settable, objects = {}, []
    for n, p in inspect.signature(cls.__init__).parameters.items():
        if n == "self" or p.kind not in kinds:
            continue
        default = getattr(instance, n) if _number(getattr(instance, n, None)) else p.default
        if _number(default):
            settable[n] = default
        else:
            objects.append(n)
    return settable, objects


def _check(name: str, key: str, default, value, prefix: str = "env_params"):
    """`value` typed by `default` (param_value); a time limit or a count (num_*) at least 1."""
    try:
        value = param_value(name, key, default, value)
    except ConfigError as error:  # named by its place: env_params.generator.num_items
        raise ConfigError(f"{prefix}.{key}", error.value, error.rule) from None
    if (key == "time_limit" or key.startswith("num_")) and not isinstance(value, bool) and value < 1:
        raise ConfigError(f"{prefix}.{key}", value, f"must be at least 1: it counts "
                          f"{'steps' if key == 'time_limit' else 'things'} ({name}'s default is {default})")
    return value


def _generator(name: str, generator, values):
    """The default generator's class built with its own arguments, `values` applied."""
    field = "env_params.generator"
    if not isinstance(values, dict):
        raise ConfigError(field, values, "must be a mapping of the generator's arguments, e.g. {num_items: 20}")
    settable, objects = _settable(type(generator), generator)
    for key, value in values.items():
        if key not in settable:
            close = difflib.get_close_matches(str(key), sorted(settable), n=2)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise ConfigError(f"{field}.{key}", value, f"{name}'s generator ({type(generator).__name__}) has no "
                              f"such number argument; {hint}it has {', '.join(sorted(settable)) or 'none'}")
        settable[key] = _check(name, key, settable[key], value, prefix=field)
    required = [n for n, p in inspect.signature(type(generator).__init__).parameters.items()
                if n in objects and p.default is inspect.Parameter.empty]
    if required:
        raise ConfigError(field, values, f"{name}'s generator ({type(generator).__name__}) cannot be rebuilt from "
                          f"a config: it needs {', '.join(required)}")
    try:
        return type(generator)(**settable)
    except (ValueError, TypeError, AssertionError) as error:  # the generator's own checks
        raise ConfigError(field, values, f"{name}'s generator refused it: {error}") from None


def _actions(name: str, spec):
    """-> (number of flat actions, the shape and dtype of Jumanji's action, its counts and
    minimum per dimension, or None for one plain discrete action)."""
    from jumanji import specs

    if isinstance(spec, specs.DiscreteArray):
        return int(spec.num_values), None
    if isinstance(spec, specs.MultiDiscreteArray):
        counts, low = np.asarray(spec.num_values).reshape(-1), np.zeros(math.prod(spec.shape), np.int64)
    elif isinstance(spec, specs.BoundedArray) and np.issubdtype(spec.dtype, np.integer):
        low = np.broadcast_to(np.asarray(spec.minimum), spec.shape).reshape(-1).astype(np.int64)
        counts = np.broadcast_to(np.asarray(spec.maximum), spec.shape).reshape(-1).astype(np.int64) - low + 1
    else:
        kind = "continuous" if isinstance(spec, specs.Array) and np.issubdtype(spec.dtype, np.floating) \
            else type(spec).__name__
        raise ConfigError("env", f"jumanji/{name}", f"has {kind} actions ({spec}); only discrete actions (one, "
                          f"or a fixed set flattened to one) are offered")
    total = math.prod(int(c) for c in counts)
    if total > MAX_ACTIONS:
        raise ConfigError("env", f"jumanji/{name}", f"its action has {' x '.join(str(int(c)) for c in counts)} = "
                          f"{total} joint choices, more than the {MAX_ACTIONS} a flattened discrete action is "
                          f"offered with")
    return total, (tuple(spec.shape), spec.dtype, tuple(int(c) for c in counts), np.asarray(low, spec.dtype))


def _make(name: str, overrides: dict):
    import jumanji
    from jumanji.registration import _REGISTRY, load

    if name in EXCLUDED:
        raise ConfigError("env", f"jumanji/{name}", EXCLUDED[name])
    if name not in env_names():
        close = difflib.get_close_matches(name, env_names(), n=4, cutoff=0.4)
        hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(env_names())}"
        raise ConfigError("env", f"jumanji/{name}", f"unknown Jumanji environment; {hint}")
    cls = load(_REGISTRY[name].entry_point)
    default_env = jumanji.make(name)
    settable, objects = _settable(cls, default_env)
    own_limit = "time_limit" in settable
    known = sorted(set(settable) | {"time_limit"} | ({"generator"} if "generator" in objects else set()))
    kwargs, time_limit = {}, DEFAULT_TIME_LIMIT
    for key, value in overrides.items():
        if key == "generator" and key in objects:
            kwargs[key] = _generator(f"jumanji/{name}", default_env.generator, value)
        elif key in settable:
            kwargs[key] = _check(f"jumanji/{name}", key, settable[key], value)
        elif key == "time_limit":
            time_limit = _check(f"jumanji/{name}", key, DEFAULT_TIME_LIMIT, value)
        elif key in objects:
            raise ConfigError(f"env_params.{key}", value, f"jumanji/{name}'s {key} takes a Python object: it "
                              f"cannot be set from a config; settable: {', '.join(known)}")
        else:
            raise unknown_param(f"jumanji/{name}", key, value, known)
    try:
        env = jumanji.make(name, **kwargs) if kwargs else default_env
    except (ValueError, TypeError, AssertionError) as error:  # the environment's own checks
        raise ConfigError("env_params", overrides, f"jumanji/{name} refused it: {error}") from None
    if own_limit:
        time_limit = int(env.time_limit)
    return env, own_limit, time_limit


@pytree.dataclass
class JumanjiState:
    env_state: object   # Jumanji's State
    steps: jnp.ndarray  # steps taken in this episode
    action_mask: object  # the flat actions allowed now [num_actions], or () where the environment has no mask


def _allowed(state: JumanjiState):
    """The action mask of a Jumanji environment that has one (`JumanjiEnv.action_mask`)."""
    return state.action_mask


class JumanjiEnv:
    """A Jumanji environment: flat float32 observations, one flat discrete action, bool done flags."""

    reset_strategy = "per_rollout"

    def __init__(self, name: str, env_params: dict | None = None):
        self.name = name
        self._env, self._own_limit, self.max_episode_steps = _make(name, dict(env_params or {}))
        for what, spec in (("reward", self._env.reward_spec), ("discount", self._env.discount_spec)):
            if tuple(getattr(spec, "shape", ())) != ():
                raise ConfigError("env", f"jumanji/{name}", f"has one {what} per agent (shape "
                                  f"{tuple(spec.shape)}): multi-agent environments are not offered")
        num_actions, self._multi = _actions(name, self._env.action_spec)
        self.action_space = ActionSpace("discrete", num_actions=num_actions)
        example = self._env.observation_spec.generate_value()
        self.obs_size = int(sum(math.prod(np.shape(leaf)) for leaf in jax.tree_util.tree_leaves(example)))
        if self._mask_of(example) is not None:  # the protocol's optional action_mask: only where there is a mask
            self.action_mask = _allowed
        self.obs_shape = (self.obs_size,)  # flattened

    @property
    def jumanji_env(self):
        """The Jumanji environment itself (for rendering: `env.jumanji_env.render(state.env_state)`)."""
        return self._env

    def _flat(self, observation):
        leaves = jax.tree_util.tree_leaves(observation)
        return jnp.concatenate([jnp.ravel(leaf).astype(jnp.float32) for leaf in leaves])

    def _action(self, action):
        """Our flat action -> Jumanji's (an index into the joint action, row-major)."""
        if self._multi is None:
            return jnp.asarray(action, jnp.int32)
        shape, dtype, counts, low = self._multi
        digits = jnp.stack(jnp.unravel_index(jnp.asarray(action, jnp.int32), counts))
        return jnp.reshape(digits.astype(dtype) + low, shape)

    def _mask_of(self, observation):
        """The observation's action mask over our flat action [num_actions], or None."""
        mask = getattr(observation, "action_mask", None)
        if mask is None:
            return None
        mask = jnp.asarray(mask, jnp.bool_)
        if self._multi is None:
            return mask.reshape(-1) if mask.size == self.action_space.num_actions else None
        counts = self._multi[2]
        if mask.shape == counts:
            return mask.reshape(-1)
        if mask.shape == (len(counts), counts[0]) and len(set(counts)) == 1:  # a row per dimension
            joint = mask[0]
            for row in mask[1:]:
                joint = (joint[:, None] & row[None, :]).reshape(-1)
            return joint
        return None

    def _state(self, env_state, steps, observation):
        mask = self._mask_of(observation) if hasattr(self, "action_mask") else None
        return JumanjiState(env_state, steps, () if mask is None else mask)

    def reset(self, key):
        env_state, timestep = self._env.reset(key)
        return self._flat(timestep.observation), self._state(env_state, jnp.int32(0), timestep.observation)

    def step(self, key, state, action):
        """One transition (the key is unused: Jumanji draws from its own state key)."""
        from jumanji.types import StepType

        env_state, timestep = self._env.step(state.env_state, self._action(action))
        steps = state.steps + 1
        at_limit = steps >= self.max_episode_steps
        last = timestep.step_type == StepType.LAST
        ended = last & (timestep.discount == 0)
        terminated = ended & ~at_limit if self._own_limit else ended
        truncated = at_limit | (last & (timestep.discount > 0))
        return (self._flat(timestep.observation), self._state(env_state, steps, timestep.observation),
                jnp.asarray(timestep.reward, jnp.float32), jnp.asarray(terminated, jnp.bool_),
                jnp.asarray(truncated, jnp.bool_), {})
