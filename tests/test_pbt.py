"""Population-based training (experiments.pbt): the exploit/explore step alone, on small
hand-made arrays; the fitness of an interval; a tiny whole run through the command line,
and its resume from a middle checkpoint, bit for bit."""

import csv
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
from purejaxppo.config import ConfigError, HParams
from purejaxppo.experiments.cli import main
from purejaxppo.experiments.pbt import interval_fitness, make_pbt, make_step, step_keys
from purejaxppo.experiments.kinds.pbt_report import pbt_schedule
from purejaxppo.normalize import RewardScaler, RunningStats
from purejaxppo.train import LearnerState

from conftest import cut_back

MEMBERS, SEEDS = 4, 2
RUNS = MEMBERS * SEEDS  # run = member * SEEDS + seed


def tiny_cfg(**values):
    return ppo.make_config({"num_envs": 4, "num_steps": 16, "num_minibatches": 2, "total_timesteps": 640, **values})


def states():
    """A population's learner states: every leaf of run k holds k (+ a per-leaf offset)."""
    run = np.arange(RUNS, dtype=np.float32)

    def leaf(offset, *shape):
        return jnp.asarray(run.reshape(-1, *[1] * len(shape)) + offset + np.zeros((RUNS, *shape), np.float32))

    stats = RunningStats(leaf(100), leaf(200, 3), leaf(300, 3))
    keys = np.arange(2 * RUNS, dtype=np.uint32).reshape(RUNS, 2)
    return LearnerState(
        params={"w": leaf(0, 2, 3)}, opt_state={"mu": leaf(10, 2, 3)},
        agent_state={"obs_stats": stats, "carry": leaf(20, 4)},
        reward_scaler=RewardScaler(leaf(30, 4), RunningStats(leaf(40), leaf(50), leaf(60))),
        env_state={"x": leaf(70, 4)}, obs=leaf(80, 4, 3), key=jnp.asarray(keys), eval_key=jnp.asarray(keys + 100),
        updates_done=jnp.full(RUNS, 5, jnp.int32), last_episode_return=leaf(90), last_episode_length=leaf(95))


def pbt(**section):
    return make_pbt({"population": MEMBERS, "interval": 2,
                     "hyperparameters": {"lr": {"loguniform": [1e-4, 1e-2]}, "gamma": {"uniform": [0.9, 0.999]}},
                     **section})


def step(section, fitness, interval=0, se=None):
    hparams = HParams.stack(tiny_cfg(), lr=[1e-3 * (1 + k) for k in range(RUNS)], gamma=[0.99] * RUNS)
    se = np.zeros(RUNS, np.float32) if se is None else np.asarray(se, np.float32)
    out = jax.jit(make_step(section, SEEDS))(states(), hparams, np.asarray(fitness, np.float32), se,
                                             step_keys(0, list(range(SEEDS)), interval))
    return hparams, jax.tree.map(np.asarray, out)


# fitness per run (member * 2 + seed): seed 0 ranks members 2 > 0 > 3 > 1, seed 1 ranks 1 > 3 > 2 > NaN (0)
FITNESS = [5.0, np.nan, 1.0, 9.0, 9.0, 2.0, 3.0, 4.0]


def test_the_bottom_copies_the_top_within_its_own_population():
    before = states()
    hparams, (after, explored, copied_from) = step(pbt(), FITNESS)
    member_of = copied_from.reshape(MEMBERS, SEEDS)
    # one member of four is replaced per seed (0.25 x 4), by the population's best (the top quarter)
    np.testing.assert_array_equal(member_of[:, 0], [0, 2, 2, 3])  # seed 0: member 1 (the worst) copies member 2
    np.testing.assert_array_equal(member_of[:, 1], [1, 1, 2, 3])  # seed 1: NaN ranks last; member 0 copies 1
    source = np.array([m * SEEDS + k % SEEDS for k, m in enumerate(copied_from)])  # the run copied from
    copied = [after.params, after.opt_state, after.agent_state["obs_stats"], after.reward_scaler.stats]
    originals = [before.params, before.opt_state, before.agent_state["obs_stats"], before.reward_scaler.stats]
    for got, was in zip(copied, originals):
        chex.assert_trees_all_equal(got, jax.tree.map(lambda x: np.asarray(x)[source], was))
    def kept(s):
        return [s.agent_state["carry"], s.reward_scaler.discounted_return, s.env_state, s.obs, s.key, s.eval_key,
                s.updates_done, s.last_episode_return, s.last_episode_length]

    chex.assert_trees_all_equal(kept(after), jax.tree.map(np.asarray, kept(before)))


def test_a_replaced_member_explores_its_sources_values_and_the_others_keep_theirs():
    for resample, factors in ((0.0, [0.8, 1.25]), (1.0, [0.8, 1.25]), (0.0, [1.25])):
        hparams, (_, explored, copied_from) = step(pbt(explore={"perturb": factors, "resample": resample}), FITNESS)
        lr, gamma = np.asarray(hparams.lr), np.asarray(hparams.gamma)
        for k, member in enumerate(copied_from):
            source = member * SEEDS + k % SEEDS
            if source == k:
                assert explored.lr[k] == lr[k] and explored.gamma[k] == gamma[k]
            elif resample == 1.0:  # a fresh draw from the initial distribution
                assert 1e-4 <= explored.lr[k] <= 1e-2 and 0.9 <= explored.gamma[k] <= 0.999
            else:  # the source's value times a factor, clipped to the key's rule (gamma <= 1)
                assert any(explored.lr[k] == np.float32(lr[source] * np.float32(f)) for f in factors), k
                if factors == [1.25]:
                    assert explored.gamma[k] == 1.0


def test_the_step_is_deterministic_for_its_keys():
    _, first = step(pbt(explore={"resample": 0.5}), FITNESS, interval=3)
    _, again = step(pbt(explore={"resample": 0.5}), FITNESS, interval=3)
    chex.assert_trees_all_equal(first, again)
    draws = {tuple(step(pbt(explore={"resample": 0.5}), FITNESS, interval=i)[1][1].lr) for i in range(4)}
    assert len(draws) > 1  # another interval, another draw


def test_exploit_fraction_sets_how_many_are_replaced():
    _, (_, _, copied_from) = step(pbt(exploit=0.5), FITNESS)
    replaced = copied_from.reshape(MEMBERS, SEEDS) != np.arange(MEMBERS)[:, None]
    assert replaced.sum(axis=0).tolist() == [2, 2]


def test_fitness_is_the_mean_return_of_the_episodes_finished_in_the_interval():
    metrics = {"episode_return": np.array([[10.0, 20.0, 20.0], [np.nan, np.nan, np.nan], [5.0, 5.0, 7.0]]),
               "episodes_finished": np.array([[1, 3, 0], [0, 0, 0], [0, 0, 0]])}
    # run 0: (10 + 3 x 20) / 4; run 1: no episode yet (NaN, ranked last); run 2: none in the interval: the last one
    fitness, se = interval_fitness(metrics)
    np.testing.assert_allclose(fitness, [17.5, np.nan, 7.0])
    # run 0's batches (updates): 1 episode of 10, 3 of 20: sqrt(2 x ((10 - 17.5)^2 + (3 x 2.5)^2)) / 4
    np.testing.assert_allclose(se, [np.sqrt(2 * (7.5 ** 2 + 7.5 ** 2)) / 4, 0.0, 0.0], rtol=1e-6)


def test_the_fitness_se_is_the_spread_of_the_updates_means():
    rng = np.random.default_rng(0)
    returns = rng.normal(100.0, 10.0, (1, 400))  # one episode per update: the plain s.e. of the mean
    fitness, se = interval_fitness({"episode_return": returns, "episodes_finished": np.ones((1, 400), int)})
    np.testing.assert_allclose(se, returns.std(ddof=1) / np.sqrt(400), rtol=1e-5)
    assert 0.4 < se[0] < 0.6  # 10 / sqrt(400)
    flat = {"episode_return": np.full((1, 5), 500.0), "episodes_finished": np.full((1, 5), 2)}
    assert interval_fitness(flat)[1][0] == 0.0  # at the cap: no noise


# seed 0: every member at the cap (a tie); seed 1: members 1, 3 tied at the top, 2 and 0 tied below
TIED = [500.0, 200.0, 500.0, 500.0, 500.0, 200.0, 500.0, 500.0]


def test_tied_members_are_not_replaced():
    """Ties do not churn: the bottom quarter's drawn source has the same fitness, so it keeps its
    weights and its values, step after step (without the gap, the old step replaced one member per
    seed each time, by index order)."""
    for interval in range(6):
        hparams, (after, explored, copied_from) = step(pbt(), [500.0] * RUNS, interval=interval)
        np.testing.assert_array_equal(copied_from, np.arange(RUNS) // SEEDS)
        np.testing.assert_array_equal(explored.lr, hparams.lr)
        chex.assert_trees_all_equal(after.params, jax.tree.map(np.asarray, states().params))
    # min_gap's se part: equal fitness plus noise (a 3-unit gap against an s.e. of 2 each) replaces nothing
    _, (_, _, copied_from) = step(pbt(), [503.0, 500.0] * MEMBERS, se=[2.0] * RUNS)
    np.testing.assert_array_equal(copied_from, np.arange(RUNS) // SEEDS)


def test_a_real_fitness_gap_still_exploits():
    """A gap beyond the noise replaces: seed 1's bottom quarter (member 2, 200 against 500, s.e. 2)
    copies its top quarter (member 1); with a min_gap above the gap, nothing is replaced."""
    se = [2.0] * RUNS
    _, (_, _, copied_from) = step(pbt(), TIED, se=se)
    member_of = copied_from.reshape(MEMBERS, SEEDS)
    np.testing.assert_array_equal(member_of[:, 0], np.arange(MEMBERS))  # seed 0: all tied, kept
    np.testing.assert_array_equal(member_of[:, 1], [0, 1, 1, 3])
    _, (_, _, copied_from) = step(pbt(min_gap={"absolute": 400.0}), TIED, se=se)
    np.testing.assert_array_equal(copied_from, np.arange(RUNS) // SEEDS)
    _, (_, _, copied_from) = step(pbt(min_gap={"se": 200.0}), TIED, se=se)  # 300 < 200 x sqrt(8): kept
    np.testing.assert_array_equal(copied_from, np.arange(RUNS) // SEEDS)
    _, (_, _, copied_from) = step(pbt(min_gap={"se": 100.0}), TIED, se=se)  # 300 > 100 x sqrt(8): replaced
    assert copied_from[5] == 1


@pytest.mark.parametrize("gap", [{"se": -1.0}, {"absolute": float("nan")}, {"sigma": 2}, [2.0]])
def test_a_bad_min_gap_is_named(gap):
    with pytest.raises(ConfigError) as info:
        pbt(min_gap=gap)
    assert info.value.field.startswith("pbt.min_gap"), info.value.field



def test_explored_values_stay_finite_and_within_their_rule():
    """A factor that overflows float32 (2 x 3e38) gives float32's largest lr, not inf, and gamma 1:
    a replaced member's values are a config's (`ppo.load` reads them back)."""
    section = pbt(explore={"perturb": [3e38], "resample": 0.0})
    hparams = HParams.stack(tiny_cfg(), lr=[2.0] * RUNS, gamma=[0.99] * RUNS)
    _, explored, copied_from = jax.jit(make_step(section, SEEDS))(
        states(), hparams, np.asarray(FITNESS, np.float32), np.zeros(RUNS, np.float32),
        step_keys(0, list(range(SEEDS)), 0))
    replaced = np.asarray(copied_from) != np.arange(RUNS) // SEEDS
    assert replaced.any()
    assert np.all(np.asarray(explored.lr)[replaced] == np.finfo(np.float32).max)
    assert np.all(np.asarray(explored.gamma)[replaced] == 1.0)
    assert np.all(np.asarray(explored.lr)[~replaced] == 2.0)


@pytest.mark.parametrize("factor", [float("inf"), float("nan"), 1e308, 1e-50, 0.0, -1.25, "fast"])
def test_perturb_factors_are_finite_float32_numbers_and_a_bad_one_is_named(factor):
    with pytest.raises(ConfigError) as info:
        pbt(explore={"perturb": [1.25, factor]})
    assert info.value.field == "pbt.explore.perturb"
    assert f"{factor!r} is not" in str(info.value) and "positive factors" in str(info.value), str(info.value)


@pytest.mark.parametrize("fitness", [["episode_return"], {"episode_return": 1}])
def test_fitness_is_one_name(fitness):
    with pytest.raises(ConfigError, match="must be one of episode_return") as info:
        pbt(fitness=fitness)
    assert info.value.field == "pbt.fitness"


def test_a_schedule_follows_the_weights_back_through_copied_from():
    def row(interval, member, copied_from):
        return {"interval": interval, "seed": 0, "member": member, "run": member, "copied_from": copied_from,
                "lr": 10 * interval + member}

    # member 2's final weights: member 1's after interval 1, which were member 0's after interval 0
    lineage = [row(0, 0, 0), row(0, 1, 1), row(0, 2, 2),
               row(1, 0, 0), row(1, 1, 0), row(1, 2, 2),
               row(2, 0, 0), row(2, 1, 1), row(2, 2, 1)]
    assert [(r["member"], r["lr"]) for r in pbt_schedule(lineage, 2)] == [(0, 0), (1, 11), (2, 22)]
    assert [r["member"] for r in pbt_schedule(lineage, 0)] == [0, 0, 0]  # never replaced: its own rows

def test_tied_members_share_their_rank_in_the_summary():
    """Three members at 500 (greedy and fitness), one below: ranks 1, 1, 1 and 4, the summary
    names all three as the best and no 'best member'."""
    from types import SimpleNamespace

    from purejaxppo.experiments.kinds.pbt_report import pbt_markdown, pbt_summary

    greedy, fitness = [500.0, 500.0, 480.0, 500.0], [500.0, 500.0, 470.0, 500.0]
    lineage = [{"interval": i, "updates": 2 * (i + 1), "seed": 0, "member": k, "run": k, "copied_from": k,
                "fitness": fitness[k], "fitness_se": 0.0, "lr": 1e-3, "gamma": 0.99} for i in range(2) for k in range(4)]
    result = SimpleNamespace(
        lineage=lineage, spec=SimpleNamespace(section=pbt(), seeds=1, threshold=None),
        runs=[{"point": k, "seed": 0, "lr": 1e-3, "gamma": 0.99} for k in range(4)],
        evaluation=[{"deterministic": [g, g]} for g in greedy], diverged=np.zeros(4, bool),
        base=SimpleNamespace(env="CartPole-v1"), configs=[tiny_cfg()], run_seconds=1.0, compile_seconds=1.0,
        between=SimpleNamespace(step_seconds=[0.1]))
    summary = pbt_summary(result)
    assert [m["rank"] for m in summary["members"]] == [1, 1, 4, 1]
    assert summary["best_tied"] == [0, 1, 3] and summary["best"]["run"] == 0
    text = pbt_markdown(summary)
    assert "Best members (tied): 3 share rank 1: member 0 seed 0, member 1 seed 0, member 3 seed 0" in text
    assert "The best member" not in text and "| 1 (tied) | 3 |" in text and "| 4 | 2 |" in text


# --------------------------------------------------------------------------------------
# a whole run, through the command line, and its resume
# --------------------------------------------------------------------------------------
PBT_FILE = """env: CartPole-v1
num_envs: 4
num_steps: 16
num_minibatches: 2
total_timesteps: 384
normalize_obs: true
normalize_reward: true
sweep:
  seeds: 2
  eval_episodes: 2
  pbt:
    population: 4
    interval: 2
    hyperparameters:
      lr: {loguniform: [1.0e-4, 1.0e-2]}
    min_gap: {se: 0}               # 6 updates of noise: any higher fitness exploits, so the run has events
    explore: {resample: 0.5}
"""


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pbt")
    (folder / "pbt.yaml").write_text(PBT_FILE)
    assert main(["sweep", str(folder / "pbt.yaml"), "--out", str(folder / "whole")]) == 0
    return folder


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_a_pbt_run_writes_its_lineage_and_saves_each_members_values(whole):
    rows = _rows(whole / "whole" / "pbt.csv")
    assert len(rows) == 3 * RUNS  # 6 updates: 3 intervals x 4 members x 2 seeds
    assert [r["interval"] for r in rows[::RUNS]] == ["0", "1", "2"]
    assert all(r["copied_from"] == r["member"] for r in rows[:RUNS])  # nothing is copied before the first step
    assert any(r["copied_from"] != r["member"] for r in rows[RUNS:])  # exploit events
    assert (whole / "whole" / "summary.md").exists()
    last = {int(r["run"]): float(r["lr"]) for r in rows[-RUNS:]}
    for k in (0, 5):  # a member's saved config holds the values it ran its last interval with
        cfg, state = ppo.load(whole / "whole", run=k)
        assert np.float32(cfg.lr) == np.float32(last[k]) and int(state.updates_done) == 6


def test_the_summary_gives_the_final_population_and_the_best_members_schedule(whole):
    out = whole / "whole"
    summary = json.loads((out / "summary.json").read_text())
    lineage = _rows(out / "pbt.csv")
    members = summary["members"]
    assert [m["run"] for m in members] == list(range(RUNS)) and summary["intervals"] == 3
    for m in members:
        rows = [r for r in lineage if int(r["run"]) == m["run"]]
        cfg = ppo.load(out, run=m["run"])[0]  # the final values are the member's saved config
        assert np.float32(m["final"]["lr"]) == np.float32(cfg.lr) == np.float32(rows[-1]["lr"])
        assert np.float32(m["initial"]["lr"]) == np.float32(rows[0]["lr"])
        assert m["copies"] == sum(r["copied_from"] != r["member"] for r in rows)
        assert set(m["eval_return"]) == {"mean", "se"}
    assert summary["eval_return"]["per_run"] == [m["eval_return"]["mean"] for m in members]
    assert summary["eval_return"]["median"] == np.median(summary["eval_return"]["per_run"])
    by_rank = sorted(members, key=lambda m: (m["rank"], m["run"]))
    merit = [(m["eval_return"]["mean"], m["final_fitness"]) for m in members]
    for m, mine in zip(members, merit):  # competition ranks: ties share one
        assert m["rank"] == 1 + sum(other > mine for other in merit)
    greedy = [m["eval_return"]["mean"] for m in by_rank]
    assert greedy == sorted(greedy, reverse=True)
    best = summary["best"]
    assert best["rank"] == 1 and best["run"] == by_rank[0]["run"]
    assert summary["best_tied"] == [m["run"] for m in members if m["rank"] == 1]
    # the schedule: the lineage's rows of the members that held the best's weights, chained by copied_from
    schedule = best["schedule"]
    assert [r["interval"] for r in schedule] == [0, 1, 2] and schedule[-1]["run"] == best["run"]
    for r in schedule:
        (same,) = [x for x in lineage if (int(x["interval"]), int(x["seed"]), int(x["member"]))
                   == (r["interval"], r["seed"], r["member"])]
        assert {k: "" if v is None else str(v) for k, v in r.items()} == same  # as pbt.csv writes it
    for before, after in zip(schedule, schedule[1:]):
        assert after["copied_from"] == before["member"]
    assert schedule[-1]["lr"] == best["final"]["lr"]
    table = list(csv.DictReader(open(out / "summary.csv")))
    assert [(int(t["run"]), int(t["rank"]), float(t["lr"])) for t in table] == [
        (m["run"], m["rank"], m["final"]["lr"]) for m in members]
    text = (out / "summary.md").read_text()
    if len(summary["best_tied"]) == 1:
        assert f"The best member: member {best['member']}, seed {best['seed']}" in text
    else:
        assert "Best members (tied)" in text
    for name in ("pbt_lr.png", "pbt_fitness.png", "pbt_lineage.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_eval_reads_every_member_of_a_pbt_folder(whole, capsys):
    capsys.readouterr()
    assert main(["eval", str(whole / "whole"), "--episodes", "2", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["run"] for r in runs] == list(range(RUNS))
    assert [r["seed"] for r in runs] == [k % SEEDS for k in range(RUNS)]
    assert all(len(r["returns"]) == 2 and r["step"] == 6 for r in runs)


@pytest.mark.slow  # a PBT sweep resumed, compiled again: run by .ci/run after the default suite
def test_a_pbt_run_resumed_from_a_middle_checkpoint_is_the_same_run(whole, capsys):
    # kept: the checkpoint after the first interval (and its step)
    cut = cut_back(whole / "whole", whole / "cut", 2, kept=("sweep.yaml", "progress.jsonl"))
    capsys.readouterr()
    assert main(["sweep", "--resume", str(cut)]) == 0
    assert "resuming" in capsys.readouterr().out
    for name in ("pbt.csv", "metrics.csv", "summary.csv"):
        assert (cut / name).read_text() == (whole / "whole" / name).read_text(), name
    for k in range(RUNS):
        chex.assert_trees_all_equal(ppo.load(cut, run=k), ppo.load(whole / "whole", run=k))


OVERFLOWING_FILE = """env: CartPole-v1
num_envs: 4
num_steps: 32
num_minibatches: 2
total_timesteps: 640
sweep:
  eval_episodes: 0
  pbt:
    population: 2
    interval: 1
    hyperparameters:
      lr: {uniform: [1.0e-2, 5.0e-2]}
      max_grad_norm: {uniform: [1.5, 2.0]}
      gamma: {uniform: [0.9, 0.99]}
    exploit: 0.5
    explore: {perturb: [3.0e+38], resample: 0}
"""


@pytest.mark.slow  # a second PBT sweep (the step alone: test_explored_values_stay_finite_and_within_their_rule)
def test_a_member_perturbed_past_float32_is_saved_as_a_config_that_loads(tmp_path):
    """Five updates, a step after each of the first four (the first finds the members tied: the
    same seed, the same first rollout; later ones, after different updates, replace): a replaced
    member's max_grad_norm (1.5 to 2, times 3e38) would be inf, which no config takes; it is
    float32's largest, and its gamma 1."""
    (tmp_path / "pbt.yaml").write_text(OVERFLOWING_FILE)
    assert main(["sweep", str(tmp_path / "pbt.yaml"), "--out", str(tmp_path / "out"), "--no-cache"]) == 0
    configs = [ppo.load(tmp_path / "out", run=k)[0] for k in range(2)]
    assert all(0 < cfg.max_grad_norm <= np.finfo(np.float32).max and 0 <= cfg.gamma <= 1 for cfg in configs)
    rows = _rows(tmp_path / "out" / "pbt.csv")
    replaced = {int(r["run"]) for r in rows if r["copied_from"] != r["member"]}
    assert replaced and rows[0]["fitness"] == rows[1]["fitness"]  # the first interval: a tie, kept
    for k in replaced:
        assert configs[k].max_grad_norm == float(np.finfo(np.float32).max) and configs[k].gamma == 1.0


@pytest.mark.learning
def test_the_shipped_cartpole_population_learns_where_its_random_search_does_not():
    """configs/sweeps/pbt_cartpole.yaml: the same 16 initial learning rates as a random search
    run the same first interval, bit for bit; then PBT's population ends with a greedy median
    of 475 or more and nearly every member there, where the random search's five members with
    a learning rate below 1e-5 cannot learn."""
    from purejaxppo.experiments.sweep import load_sweep, make_spec, sweep

    base, spec = load_sweep("configs/sweeps/pbt_cartpole.yaml")
    population = ppo.pbt(base, spec=spec)
    section = spec.section
    search = sweep(base, spec=make_spec({"random": {"trials": section["population"], **section["hyperparameters"]},
                                         "random_seed": spec.random_seed}))
    interval = section["interval"]
    for k in range(section["population"]):
        np.testing.assert_array_equal(population.metrics[k]["episode_return"][:interval],
                                      search.metrics[k]["episode_return"][:interval])
    greedy = [np.array([np.mean(r.evaluation["deterministic"]) for r in map(result.run, range(16))])
              for result in (population, search)]
    assert any(row["copied_from"] != row["member"] for row in population.lineage)
    assert np.median(greedy[0]) >= 475 and np.sum(greedy[0] >= 475) >= 14, greedy[0]
    assert np.sum(greedy[1] >= 475) <= 11, greedy[1]
