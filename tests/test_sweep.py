import chex
import jax
import numpy as np
import pytest

import purejaxppo as ppo
from purejaxppo.experiments.cli import main
from purejaxppo.config import ConfigError, check_fields
from purejaxppo.experiments.sweep import load_sweep, make_spec, plan, sweep

BASE = dict(num_envs=4, num_steps=16, num_minibatches=2, total_timesteps=4 * 16 * 3)


def single(cfg_values, seed):
    cfg = ppo.make_config(cfg_values)
    return jax.jit(ppo.make_train(cfg))(jax.random.PRNGKey(seed))


@pytest.fixture(scope="module")
def study():
    """The clip x epochs study file on a tiny budget: 4 clip ranges x 2 epoch counts x 2 seeds."""
    base, spec = load_sweep("configs/sweeps/clip_epochs.yaml", {"total_timesteps": 8 * 128 * 3},
                            grid={"update_epochs": [1, 3]}, seeds=2)
    return base, spec, sweep(base, spec=spec, first_seed=4)


@pytest.mark.slow
def test_sweep_run_equals_single_run(study):
    base, spec, result = study
    assert result.compiles == 1 and len(result.runs) == 16
    for k in (1, 14):  # (clip 0.05, 1 epoch, seed 5) and (clip 0.4, 3 epochs, seed 4)
        run = result.runs[k]
        values = {**base.to_dict(), "clip_eps": run["clip_eps"], "update_epochs": run["update_epochs"]}
        values["max_epochs"] = None
        one = single(values, run["seed"])
        for name in ("episode_return", "total_loss", "epochs_run"):
            np.testing.assert_allclose(result.metrics[k][name], one.metrics[name], rtol=2e-5, atol=1e-6)
        ep = run["update_epochs"]
        np.testing.assert_allclose(result.metrics[k]["kl_k3"][:, :ep], one.metrics["kl_k3"], rtol=2e-4, atol=1e-9)


@pytest.mark.slow
def test_results_stay_stacked_and_a_run_is_a_slice(study):
    base, spec, result = study
    # two run sets (1 and 3 epochs scanned) in one program; each keeps its runs stacked
    assert sorted(s.config.max_epochs for s in result.run_sets) == [1, 3]
    assert sorted(k for s in result.run_sets for k in s.runs) == list(range(16))
    for s in result.run_sets:
        assert result.outputs[s.name].metrics["episode_return"].shape == (len(s.runs), base.num_updates)
    for i in range(len(result.points)):
        point = result.point(i)
        assert point.metrics["episode_return"].shape == (spec.seeds, base.num_updates)
        assert any(np.shares_memory(point.metrics["episode_return"], out.metrics["episode_return"])
                   for out in result.outputs.values())  # a view of the run set's arrays, not a copy
        for seed, k in enumerate(result.point_runs(i)):
            run = result.run(k)
            chex.assert_trees_all_equal(run, jax.tree.map(lambda x: x[seed], point))
            chex.assert_trees_all_equal(result.states[k], run.state)
            chex.assert_trees_all_equal(result.metrics[k], run.metrics)
            chex.assert_trees_all_equal(result.evaluation[k], run.evaluation)
    assert len(result.metrics) == 16 and len(list(result.evaluation)) == 16 and len(result.states[14:]) == 2
    chex.assert_trees_all_equal(result.run(-1), result.run(15))
    with pytest.raises(IndexError):
        result.run(16)
    # the table reads the stacked runs: a point's train return is the mean of its seeds' last returns
    from purejaxppo.experiments import report

    rows = report.sweep_summary(result)
    for i, row in enumerate(rows):
        finals = [result.run(k).metrics["episode_return"][-1] for k in result.point_runs(i)]
        evals = [np.mean(result.run(k).evaluation["deterministic"]) for k in result.point_runs(i)]
        assert row["train_return"] == pytest.approx(np.nanmean(finals), rel=1e-6)
        assert row["eval_return"] == pytest.approx(np.mean(evals), rel=1e-6)


@pytest.mark.slow
def test_chunked_equals_unchunked(study):
    base, spec, result = study
    chunked = sweep(base, spec=spec, first_seed=4, max_parallel=3)
    for a, b in zip(result.metrics, chunked.metrics):
        chex.assert_trees_all_close(a, b, rtol=1e-5, atol=1e-6)  # float rounding of batched reductions


@pytest.mark.slow
def test_clip_epochs_study_single_full_batch_epoch_never_clips(study):
    base, spec, result = study
    assert spec.grid["clip_eps"] == [0.05, 0.1, 0.2, 0.4] and base.num_minibatches == 1
    one_epoch = [k for k, run in enumerate(result.runs) if run["update_epochs"] == 1]
    assert len(one_epoch) == 8
    for k in one_epoch:
        assert np.all(result.metrics[k]["clip_fraction"][:, 0] == 0.0)
        assert np.all(np.isnan(result.metrics[k]["clip_fraction"][:, 1:]))  # masked epochs
    # identical across clip ranges, seed by seed
    for seed in (4, 5):
        same = [k for k in one_epoch if result.runs[k]["seed"] == seed]
        for k in same[1:]:
            chex.assert_trees_all_equal(result.metrics[k]["episode_return"], result.metrics[same[0]]["episode_return"])
            chex.assert_trees_all_equal(result.metrics[k]["total_loss"], result.metrics[same[0]]["total_loss"])


@pytest.mark.slow
def test_diverging_run_is_flagged_and_leaves_neighbours_alone():
    base = ppo.make_config(BASE)
    result = sweep(base, grid={"lr": [2.5e-4, 1e30]}, seeds=1)
    assert result.diverged.tolist() == [False, True]
    one = single({**BASE, "lr": 2.5e-4}, 0)
    np.testing.assert_allclose(result.metrics[0]["episode_return"], one.metrics["episode_return"], rtol=2e-5)
    from purejaxppo.experiments import report

    assert [list(result.point_runs(i)) for i in range(2)] == [[0], [1]]
    assert all(result.runs[k]["point"] == i for i in range(2) for k in result.point_runs(i))
    rows = report.sweep_summary(result)
    assert rows[1]["diverged"] == 1 and np.isnan(rows[1]["train_return"])
    assert rows[0]["diverged"] == 0 and np.isfinite(rows[0]["train_return"])


def test_static_fields_form_groups(monkeypatch):
    import purejaxppo.envs

    built = []
    make_raw_env = purejaxppo.envs.make_raw_env
    monkeypatch.setattr(purejaxppo.envs, "make_raw_env", lambda *a: built.append(a) or make_raw_env(*a))
    base = ppo.make_config(BASE)
    planned = plan(base, make_spec(grid={"num_envs": [2, 4], "update_epochs": [2, 1]}))
    assert len(planned.points) == 4 and len(planned.groups) == 2
    assert all(g.config.max_epochs == 2 for g in planned.groups)
    assert len(built) == 1 + 2  # the base's check, then one environment per group
    assert all(cfg == check_fields(cfg.to_dict()) for cfg in planned.configs)
    learner = ppo.Learner(planned.groups[0].set_bundles[1])
    assert learner.env is planned.groups[0].env and len(built) == 3  # handed down, not built again
    for group in planned.groups:
        assert group.run_sets == {2: group.point_indices[:1], 1: group.point_indices[1:]}
        assert len({id(b.agent) for b in group.set_bundles.values()}) == 1  # one network, checked once
        for epochs, bundle in group.set_bundles.items():
            # a run set's program is a valid config of its own (loading a folder rebuilds it)
            cfg = bundle.config
            assert bundle.env is group.env and cfg.max_epochs == epochs and cfg.update_epochs <= epochs
            assert ppo.make_config(cfg.to_dict()) == cfg


@pytest.mark.parametrize("kwargs, field", [
    (dict(grid={"clip_epsilon": [0.1]}), "grid.clip_epsilon"),
    (dict(grid={"env": ["Acrobot-v1"]}), "grid.env"),
    (dict(grid={"clip_eps": []}), "grid.clip_eps"),
    (dict(grid={"clip_eps": 0.1}), "grid.clip_eps"),
    (dict(grid={}), "grid"),
    (dict(grid={"clip_eps": [0.1]}, seeds=0), "seeds"),
])
def test_bad_sweep_specs(kwargs, field):
    with pytest.raises(ConfigError) as info:
        make_spec(**kwargs)
    assert info.value.field == field


def test_bad_values_are_caught_before_compiling():
    base = ppo.make_config(BASE)
    with pytest.raises(ConfigError, match="clip_eps.*must be a number.*sweep point"):
        plan(base, make_spec(grid={"clip_eps": ["wide"]}))
    with pytest.raises(ConfigError, match="num_minibatches.*must divide"):
        plan(base, make_spec(grid={"num_minibatches": [2, 3]}))
    with pytest.raises(ConfigError, match="random.lr"):
        make_spec({"random": {"trials": 2, "lr": {"loguniform": [0, 1]}}})


@pytest.mark.parametrize("values, field", [
    ({"log_std_init": -0.5}, "log_std_init"),
    ({"env_params": {"max_steps_in_episode": -5}}, "env_params.max_steps_in_episode"),
])
def test_a_train_runs_errors_point_at_no_sweep_point(values, field):
    """A train run is the base alone (one point, nothing swept): its errors are the config's own."""
    base = check_fields({**BASE, **values})
    with pytest.raises(ConfigError) as info:
        plan(base, make_spec({"seeds": 2}))
    assert info.value.field == field and "sweep point" not in str(info.value), str(info.value)
    with pytest.raises(ConfigError) as info:  # a sweep's point is named
        plan(base, make_spec(grid={"clip_eps": [0.1], "num_envs": [4]}))
    assert str(info.value).endswith("(in sweep point {'clip_eps': 0.1, 'num_envs': 4})"), str(info.value)


def test_random_search_draws_reproducible_points():
    spec = make_spec({"grid": {"clip_eps": [0.1, 0.2]},
                      "random": {"trials": 3, "lr": {"loguniform": [1e-4, 1e-3]},
                                 "activation": {"choice": ["tanh", "relu"]}}})
    from purejaxppo.experiments.sweep import expand

    points = expand(spec)
    assert len(points) == 6 and points == expand(spec)
    assert all(1e-4 <= p["lr"] <= 1e-3 and p["activation"] in ("tanh", "relu") for p in points)


def test_cli_sweep_bad_input_exits_2(capsys):
    assert main(["sweep", "configs/sweeps/clip_epochs.yaml", "--grid", "clip_epsilon=0.1,0.2"]) == 2
    assert "clip_epsilon" in capsys.readouterr().err
    assert main(["sweep", "configs/cartpole.yaml"]) == 2
    assert "no sweep: section" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_sweep_writes_tables(tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(["sweep", "configs/sweeps/clip_epochs.yaml", "--set", "total_timesteps=2048",
                 "--grid", "clip_eps=0.1,0.2", "--grid", "update_epochs=1,2", "--seeds", "3", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "4 point(s) x 3 seed(s) = 12 runs, 1 compile(s)" in printed
    import csv

    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 12 * 2 and {"clip_eps", "update_epochs", "seed", "diverged"} <= set(rows[0])
    with open(out / "summary.csv") as f:
        summary = list(csv.DictReader(f))
    assert len(summary) == 4 and "train_return_se" in summary[0]
    summary_md = (out / "summary.md").read_text()
    assert "≈ best, eval return" in summary_md and "- clip_eps=0.1, update_epochs=1: " in summary_md
    # a 3-seed sweep ranks on the evaluation, says its 3 seeds are few, and never speaks of five
    assert {row["ranked_on"] for row in summary} == {"eval"} and "Few seeds: 3 seeds per point" in summary_md
    assert "five" not in summary_md.lower() and "5 seeds" not in summary_md
    best = [row for row in summary if row["best"] == "True"]
    assert len(best) == 1 and float(best[0]["eval_return"]) == max(float(row["eval_return"]) for row in summary)
    for name in ("learning_curves.png", "clip_fraction_by_epoch.png", "heatmap_return.png", "heatmap_kl.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG")


def test_diagnosis_rules_fire_as_documented():
    from purejaxppo.experiments.diagnosis import diagnose

    assert diagnose([0.0, 0.001, 0.005]).startswith("under-used: the last epoch (3) clips 0.5%")
    assert diagnose([0.05, 0.15, 0.25, 0.3]).startswith("over-used: epoch 3 already clips 25.0%")
    assert diagnose([0.01, 0.05, 0.1]).startswith("in range")
    assert diagnose([0.01, 0.05, 0.1], {"under_used_below": 0.2}).startswith("under-used")
    assert diagnose([0.0, np.nan, np.nan]).startswith("single epoch: the one epoch clips 0.0%")


def test_heatmap_cell_is_the_mean_over_every_run_of_its_two_values():
    from purejaxppo.experiments.report import heatmap_grid
    from purejaxppo.experiments.sweep import expand

    # three swept keys of 2, 3 and 4 values; points hold 1 to 3 runs (others diverged), one NaN return
    points = expand(make_spec(grid={"clip_eps": [0.1, 0.2], "update_epochs": [1, 2, 4],
                                    "lr": [1e-4, 3e-4, 1e-3, 3e-3]}))
    rng = np.random.default_rng(0)
    values = [rng.normal(100 * i, 10, size=1 + i % 3) for i in range(len(points))]
    values[5][0] = np.nan
    xs, ys, grid = heatmap_grid(points, values, "clip_eps", "update_epochs")
    assert xs == ["0.1", "0.2"] and ys == ["1", "2", "4"] and grid.shape == (3, 2)
    for y, epochs in enumerate((1, 2, 4)):
        for x, clip in enumerate((0.1, 0.2)):
            runs = np.concatenate([v for p, v in zip(points, values)
                                   if p["clip_eps"] == clip and p["update_epochs"] == epochs])
            assert grid[y, x] == pytest.approx(np.nanmean(runs), rel=1e-12)
    # by hand: three points of one run each (a, b, c) make a cell of (a + b + c) / 3, not a/4 + b/4 + c/2
    three = expand(make_spec(grid={"clip_eps": [0.1], "update_epochs": [1], "lr": [1e-4, 3e-4, 1e-3]}))
    assert heatmap_grid(three, [[3.0], [6.0], [12.0]], "clip_eps", "update_epochs")[2][0, 0] == 7.0
    # a cell whose every run diverged is empty: NaN, not 0
    assert np.isnan(heatmap_grid(three[:1], [[]], "clip_eps", "update_epochs")[2][0, 0])


@pytest.mark.slow  # compiles whole training programs three times
def test_progress_is_reported_from_the_host_between_chunks_and_a_remainder_chunk_is_its_own_program():
    # 53 updates, a prime above 2 x PROGRESS_POINTS: chunks of 3, the last of 2; no program holds a callback
    base = ppo.make_config({**BASE, "total_timesteps": 4 * 16 * 53})
    spec = make_spec({"seeds": 2, "eval_episodes": 0})
    reports = []
    reported = sweep(base, spec=spec, progress=lambda updates, ret: reports.append((updates, float(ret))))
    assert [updates for updates, _ in reports] == [u for u in [*range(3, 52, 3), 53] for _ in range(2)]
    assert reported.timings.compiles == 3  # init, the chunk of 3 updates, the chunk of 2
    whole = sweep(base, spec=spec)
    assert whole.timings.compiles == 2  # init, the whole run
    for k in range(2):  # chunks equal one piece, bit for bit
        chex.assert_trees_all_equal(reported.run(k), whole.run(k))
        assert reports[-2 + k][1] == pytest.approx(float(whole.run(k).metrics["episode_return"][-1]), nan_ok=True)
