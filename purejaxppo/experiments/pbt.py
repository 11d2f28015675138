"""Population-based training on the device: a sweep mode (`sweep: pbt:`).

    sweep:
      seeds: 2                      # independent populations, each of `population` members
      pbt:
        population: 16
        interval: 5                 # updates between exploit/explore steps
        hyperparameters:            # traced float keys, with their initial distributions
          lr: {loguniform: [1.0e-5, 1.0e-1]}
          ent_coef: {uniform: [0.0, 0.02]}
        exploit: 0.25               # truncation: the bottom quarter copies a member of the top quarter
        min_gap: {se: 2.0, absolute: 0.0}  # ... only where the source's fitness is higher by more than this
        explore: {perturb: [0.8, 1.25], resample: 0.25}
        fitness: episode_return     # mean return of the episodes finished in the last interval

The members are the points of a random search (`search.draw`, `trials: population`, the
sweep's `random_seed`), each run with every seed: one run set, one compiled chunk of
`interval` updates, vmapped and sharded as any sweep. Seed s of every member starts from
`PRNGKey(first_seed + s)`, as in a sweep, so without exploit events a population is exactly
that random search. After each interval but the last, one compiled step (`make_step`) runs
on the whole population: per seed, the members ranked by fitness, the bottom fraction each
copy a member of the top fraction drawn uniformly, if its fitness is above theirs by more
than `min_gap` (`se` standard errors of the difference plus `absolute`: ties, and differences
within the fitnesses' noise, replace nothing) (parameters, optimiser state, observation
and reward normalisation statistics; each keeps its own environments, recurrent memory,
episode accounting and random streams), and explore its hyperparameters: each explored
value multiplied by one of the perturb factors, or with probability `resample` drawn afresh
from its initial distribution, then clipped to the key's rule within float32's finite
numbers (a saved member loads as any config: lr positive and finite, gamma in [0, 1], ...).
The step's randomness is `PRNGKey(random_seed)` folded with the seed and the interval: a
run is deterministic.

`Population` is the step between `runs.execute`'s chunks: it changes the run set's
hyperparameters (and its run configs, which checkpoints save, so `ppo.load(folder, run=k)`
gives a member's current values), keeps the lineage (`pbt.csv`: one row per member per
interval) and saves it with every checkpoint, from which a resumed run continues bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.config import FIELDS, IN_0_1, NON_NEGATIVE, POSITIVE, ConfigError, HParams, count, suggest
from purejaxppo.errors import NO_VALUE
from purejaxppo.experiments.faults import wait_ready
from purejaxppo.experiments.search import check_distribution, draw, is_number
from purejaxppo.normalize import RewardScaler

PBT_KEYS = ("population", "interval", "hyperparameters", "exploit", "min_gap", "explore", "fitness")
EXPLORE_KEYS = ("perturb", "resample")
GAP_KEYS = ("se", "absolute")
FITNESS = {"episode_return": "the mean return of the episodes finished in the last interval"}
DEFAULTS = {"exploit": 0.25, "min_gap": {"se": 2.0, "absolute": 0.0}, "explore": {"perturb": [0.8, 1.25], "resample": 0.25}, "fitness": "episode_return"}
# hyperparameters are float32 on the device: an explored value stays finite, and a factor must be one
_TINY, _MAX = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)
# a float key's rule -> the interval an explored value is clipped to
_BOUNDS = {POSITIVE: (_TINY, _MAX), NON_NEGATIVE: (0.0, _MAX), IN_0_1: (0.0, 1.0)}


# --------------------------------------------------------------------------------------
# the section
# --------------------------------------------------------------------------------------
def _explored_key(key: Any, dist: Any) -> dict:
    field = f"pbt.hyperparameters.{key}"
    if key not in FIELDS:
        raise ConfigError(field, NO_VALUE, f"not a config key; {suggest(key)}")
    f = FIELDS[key]
    if not f.traced:
        raise ConfigError(field, NO_VALUE, "is static: static keys split the compile (one program per value), "
                          "so they cannot change during a run; explore a traced key (lr, ent_coef, clip_eps, ...)")
    if f.type != "float":
        raise ConfigError(field, NO_VALUE, f"is a{'n integer' if f.type == 'int' else ' bool'}: PBT explores "
                          "number keys only (perturbed by factors); sweep it with grid: instead")
    dist = check_distribution(field, dist)
    kind, args = next(iter(dist.items()))
    if kind == "choice" and not all(is_number(a) and math.isfinite(a) for a in args):
        raise ConfigError(field, dist, "choice needs finite numbers here (a float key)")
    for value in args:
        for rule in f.rules:
            if not rule.holds(value):
                raise ConfigError(field, dist, f"gives {value!r}, but {key} must be {rule.text}")
    return dist


def make_pbt(section: Any) -> dict:
    """A `pbt:` section checked, with its defaults -> plain values (it reloads with make_pbt).
    A bad value is a ConfigError naming `pbt.<key>`."""
    if not isinstance(section, Mapping):
        raise ConfigError("sweep.pbt", section, "must be a mapping (population:, interval:, hyperparameters:, ...)")
    for key in section:
        if key not in PBT_KEYS:
            raise ConfigError(f"pbt.{key}", section[key], f"unknown; pbt keys are {', '.join(PBT_KEYS)}")
    for key in ("population", "interval", "hyperparameters"):
        if key not in section:
            raise ConfigError(f"pbt.{key}", NO_VALUE, "is missing")
    population = count("pbt.population", section["population"], 2, " (a population needs two members)")
    interval = count("pbt.interval", section["interval"], 1)
    hyperparameters = section["hyperparameters"]
    if not isinstance(hyperparameters, Mapping) or not hyperparameters:
        raise ConfigError("pbt.hyperparameters", hyperparameters,
                          "must name at least one key with its distribution, e.g. {lr: {loguniform: [1.0e-5, 1.0e-2]}}")
    hyperparameters = {key: _explored_key(key, dist) for key, dist in hyperparameters.items()}
    exploit = section.get("exploit", DEFAULTS["exploit"])
    if not is_number(exploit) or not 0 < exploit <= 0.5:
        raise ConfigError("pbt.exploit", exploit, "must be a fraction in (0, 0.5]: the bottom fraction copies "
                          "the top fraction")
    min_gap = section.get("min_gap", DEFAULTS["min_gap"])
    if not isinstance(min_gap, Mapping):
        raise ConfigError("pbt.min_gap", min_gap, "must be a mapping, e.g. {se: 2.0, absolute: 0.0}")
    for key in min_gap:
        if key not in GAP_KEYS:
            raise ConfigError(f"pbt.min_gap.{key}", min_gap[key], f"unknown; min_gap keys are {', '.join(GAP_KEYS)}")
    gap = {**DEFAULTS["min_gap"], **min_gap}
    for key, value in gap.items():
        if not (is_number(value) and 0 <= value <= _MAX):
            raise ConfigError(f"pbt.min_gap.{key}", value, "must be a finite number >= 0")
    explore = section.get("explore", DEFAULTS["explore"])
    if not isinstance(explore, Mapping):
        raise ConfigError("pbt.explore", explore, "must be a mapping, e.g. {perturb: [0.8, 1.25], resample: 0.25}")
    for key in explore:
        if key not in EXPLORE_KEYS:
            raise ConfigError(f"pbt.explore.{key}", explore[key],
                              f"unknown; explore keys are {', '.join(EXPLORE_KEYS)}")
    perturb = explore.get("perturb", DEFAULTS["explore"]["perturb"])
    if not isinstance(perturb, (list, tuple)) or not perturb:
        raise ConfigError("pbt.explore.perturb", perturb, "must be a non-empty list of positive factors")
    for factor in perturb:
        if not (is_number(factor) and _TINY <= factor <= _MAX):
            raise ConfigError("pbt.explore.perturb", perturb, f"must be a non-empty list of positive factors, each "
                              f"finite in float32 (from {_TINY:.4g} to {_MAX:.4g}); {factor!r} is not")
    resample = explore.get("resample", DEFAULTS["explore"]["resample"])
    if not is_number(resample) or not 0 <= resample <= 1:
        raise ConfigError("pbt.explore.resample", resample, "must be a probability in [0, 1]")
    fitness = section.get("fitness", DEFAULTS["fitness"])
    if not isinstance(fitness, str) or fitness not in FITNESS:
        raise ConfigError("pbt.fitness", fitness, f"must be one of {', '.join(FITNESS)}")
    return {"population": population, "interval": interval, "hyperparameters": hyperparameters,
            "exploit": float(exploit), "min_gap": {k: float(v) for k, v in gap.items()}, "explore": {"perturb": [float(a) for a in perturb], "resample": float(resample)},
            "fitness": fitness}


def initial_points(pbt: Mapping, random_seed: int) -> list[dict]:
    """The members' initial hyperparameters: a random search's points (`search.draw`)."""
    return draw(pbt["hyperparameters"], pbt["population"], random_seed)


def check_interval(pbt: Mapping, num_updates: int) -> None:
    if pbt["interval"] > num_updates:
        raise ConfigError("pbt.interval", pbt["interval"], f"must be at most the run's {num_updates} updates")


# --------------------------------------------------------------------------------------
# the step, on the device
# --------------------------------------------------------------------------------------
def interval_fitness(metrics: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """-> (fitness, se), each [runs]. fitness: the mean return of the episodes each run
    finished in the interval (`metrics`: [runs, updates]), or where none finished its last
    finished episode's (NaN before any: ranked last). se: its standard error by batch means,
    each update's episodes one batch (the metrics keep each update's mean return, not each
    episode's): sqrt(B / (B - 1) * sum_u n_u^2 (m_u - fitness)^2) / sum_u n_u over the B
    updates that finished episodes, n_u of mean m_u; 0 where B < 2 (no estimate: only
    min_gap's absolute part applies)."""
    returns, finished = metrics["episode_return"], metrics["episodes_finished"].astype(np.float64)
    ended = finished > 0
    count, batches = finished.sum(axis=1), ended.sum(axis=1)
    with np.errstate(invalid="ignore"):
        total = np.where(ended, returns * finished, 0.0).sum(axis=1)
        mean = total / np.maximum(count, 1)
        spread = np.where(ended, (finished * (returns - mean[:, None])) ** 2, 0.0).sum(axis=1)
        se = np.sqrt(batches / np.maximum(batches - 1, 1) * spread) / np.maximum(count, 1)
    fitness = np.where(count > 0, mean, returns[:, -1]).astype(np.float32)
    return fitness, np.where(batches >= 2, se, 0.0).astype(np.float32)


def _sample(dist: Mapping, key, shape):
    kind, args = next(iter(dist.items()))
    if kind == "choice":
        return jnp.asarray(args, jnp.float32)[jax.random.randint(key, shape, 0, len(args))]
    if kind == "uniform":
        return jax.random.uniform(key, shape, jnp.float32, args[0], args[1])
    return jnp.exp(jax.random.uniform(key, shape, jnp.float32, math.log(args[0]), math.log(args[1])))


def _bounds(key: str) -> tuple[float, float]:
    """The interval `key`'s rule allows, within float32's finite numbers."""
    low, high = -_MAX, _MAX
    for rule in FIELDS[key].rules:
        low, high = max(low, _BOUNDS[rule][0]), min(high, _BOUNDS[rule][1])
    return low, high


def beats(pbt: Mapping, fitness, se, source):
    """[members] whether each member's drawn `source` is fitter by more than min_gap: its
    fitness higher by more than `se` standard errors of the difference plus `absolute`
    (a member with no fitness yet (NaN) is beaten by any source that has one)."""
    gap = pbt["min_gap"]
    noise = jnp.sqrt(jnp.nan_to_num(se) ** 2 + jnp.nan_to_num(se[source]) ** 2)
    higher = fitness[source] - fitness > gap["se"] * noise + gap["absolute"]
    return jnp.where(jnp.isnan(fitness), ~jnp.isnan(fitness[source]), higher)


def _population_step(pbt: Mapping, states, hparams: HParams, fitness, se, key):
    """One population ([members] leading axis) -> (states, hparams, source [members])."""
    members = fitness.shape[0]
    n = max(1, int(pbt["exploit"] * members))
    order = jnp.argsort(-jnp.where(jnp.isnan(fitness), -jnp.inf, fitness), stable=True)  # best first
    pick_key, explore_key = jax.random.split(key)
    drawn = jnp.arange(members).at[order[members - n:]].set(order[jax.random.randint(pick_key, (n,), 0, n)])
    source = jnp.where(beats(pbt, fitness, se, drawn), drawn, jnp.arange(members))  # ties, noise: kept
    replaced = source != jnp.arange(members)

    def take(tree):
        return jax.tree.map(lambda x: x[source], tree)

    agent_state = dict(states.agent_state)
    if "obs_stats" in agent_state:  # a recurrent memory ("carry") is of the member's own environments: kept
        agent_state["obs_stats"] = take(agent_state["obs_stats"])
    scaler = states.reward_scaler
    if isinstance(scaler, RewardScaler):  # the statistics copied, each environment's return so far kept
        scaler = scaler.replace(stats=take(scaler.stats))
    states = states.replace(params=take(states.params), opt_state=take(states.opt_state), agent_state=agent_state,
                            reward_scaler=scaler)
    factors = jnp.asarray(pbt["explore"]["perturb"], jnp.float32)
    explored = {}
    for i, (name, dist) in enumerate(pbt["hyperparameters"].items()):
        factor_key, fresh_key, coin_key = jax.random.split(jax.random.fold_in(explore_key, i), 3)
        inherited = take(getattr(hparams, name))
        perturbed = inherited * factors[jax.random.randint(factor_key, (members,), 0, len(factors))]
        resampled = jax.random.uniform(coin_key, (members,)) < pbt["explore"]["resample"]
        value = jnp.clip(jnp.where(resampled, _sample(dist, fresh_key, (members,)), perturbed), *_bounds(name))
        explored[name] = jnp.where(replaced, value, getattr(hparams, name))
    return states, hparams.replace(**explored), source


def make_step(pbt: Mapping, seeds: int) -> Callable:
    """-> step(states, hparams, fitness, se, keys) -> (states, hparams, copied_from), pure (jit
    it). `states`, `hparams`, `fitness`, `se` (fitness's standard error): a leading run axis, run = member * seeds + seed (a sweep's
    order); `keys` [seeds, 2], one per population; `copied_from` [runs]: the member whose
    weights each run now holds (itself when it was not replaced)."""
    def step(states, hparams, fitness, se, keys):
        def by_seed(x):  # [members * seeds, ...] -> [members, seeds, ...]
            return x.reshape(-1, seeds, *x.shape[1:])

        def back(x):
            return x.reshape(-1, *x.shape[2:])

        out = jax.vmap(lambda s, h, f, e, k: _population_step(pbt, s, h, f, e, k), in_axes=(1, 1, 1, 1, 0),
                       out_axes=1)(*jax.tree.map(by_seed, (states, hparams, fitness, se)), keys)
        return jax.tree.map(back, out)

    return step


def step_keys(random_seed: int, seeds: list[int], interval: int) -> np.ndarray:
    """[seeds, 2] the step's keys after `interval`: one per population (its seed)."""
    base = jax.random.PRNGKey(random_seed)
    return np.stack([np.asarray(jax.random.fold_in(jax.random.fold_in(base, s), interval)) for s in seeds])


# --------------------------------------------------------------------------------------
# between the chunks
# --------------------------------------------------------------------------------------
class Population:
    """PBT between the chunks of one run set (`runs.execute`'s `between`): after each
    interval the lineage's rows, then (but after the last) the exploit/explore step, which
    replaces the run set's `hparams` and `run_configs`. `meta()` is saved with each
    checkpoint; `restore(meta, sets)` continues from one."""

    def __init__(self, pbt: Mapping, seeds: int, first_seed: int, random_seed: int):
        self.pbt, self.seeds, self.first_seed, self.random_seed = pbt, seeds, first_seed, random_seed
        self.step = jax.jit(make_step(pbt, seeds))
        self.compiled = None                 # the step, compiled at its first call
        self.compile_seconds = 0.0
        self.lineage: list[dict] = []     # one row per run per interval done
        self.copied_from: list[int] | None = None  # each run's source of weights for the coming interval
        self.step_seconds: list[float] = []  # each step's (after its compile)

    def _where(self, k: int) -> tuple[int, int]:
        return k // self.seeds, k % self.seeds  # (member, seed index)

    def __call__(self, sets, states, metrics, updates_done: int):
        (run_set,), (state,), (chunk_metrics,) = sets, states, metrics
        runs = len(run_set.runs)
        interval = len(self.lineage) // runs
        fitness, se = interval_fitness(chunk_metrics)
        copied_from = self.copied_from or [self._where(k)[0] for k in range(runs)]
        for k in range(runs):
            member, seed = self._where(k)
            self.lineage.append({
                "interval": interval, "updates": updates_done, "seed": self.first_seed + seed, "member": member,
                "run": k, "copied_from": copied_from[k],
                "fitness": None if math.isnan(fitness[k]) else float(fitness[k]), "fitness_se": float(se[k]),
                **{name: float(getattr(run_set.hparams, name)[k]) for name in self.pbt["hyperparameters"]}})
        if updates_done >= run_set.config.num_updates:
            return states
        keys = step_keys(self.random_seed, [self.first_seed + s for s in range(self.seeds)], interval)
        args = (state, run_set.hparams, fitness, se, keys)
        if self.compiled is None:
            start = time.perf_counter()
            self.compiled = self.step.lower(*args).compile()
            self.compile_seconds = time.perf_counter() - start
        start = time.perf_counter()
        state, hparams, source = wait_ready(self.compiled(*args))
        self.step_seconds.append(time.perf_counter() - start)
        self._set_hparams(run_set, {name: getattr(hparams, name) for name in self.pbt["hyperparameters"]})
        self.copied_from = [int(m) for m in source]
        return [state]

    def _set_hparams(self, run_set, values: Mapping[str, np.ndarray]) -> None:
        run_set.hparams = run_set.hparams.replace(**{name: np.asarray(v, np.float32) for name, v in values.items()})
        run_set.run_configs = [dataclasses.replace(c, **{name: float(v[j]) for name, v in values.items()})
                               for j, c in enumerate(run_set.run_configs)]

    def meta(self) -> dict:
        return {"pbt": {"lineage": self.lineage, "copied_from": self.copied_from}}

    def restore(self, meta: Mapping, sets) -> None:
        """The lineage, and the run set's hyperparameters, from a checkpoint's meta."""
        (run_set,) = sets
        saved = meta["sets"][run_set.name]["run_configs"]
        self._set_hparams(run_set, {name: np.asarray([c[name] for c in saved], np.float32)
                                    for name in self.pbt["hyperparameters"]})
        self.lineage = list(meta["pbt"]["lineage"])
        self.copied_from = meta["pbt"]["copied_from"]

