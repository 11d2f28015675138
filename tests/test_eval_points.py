"""`purejaxppo eval` reports a row per point: the mean over seeds of each seed's mean return
± the standard error over seeds, as a sweep's summary (issue 51), and names each point's swept
values. On the stored 0.4.0 folders (tests/data/folders_0_4_0: a 2 x 2 grid of 2 seeds each, a
train run of 2 seeds, a PBT population of 4 members x 1 seed), 2 episodes per run."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np

from purejaxppo.experiments import cli, report
from purejaxppo.experiments.report.run import run_row

FOLDERS = Path(__file__).parent / "data" / "folders_0_4_0"


def evaluated(name: str, tmp_path: Path, capsys) -> tuple[dict, str]:
    """(`eval --json`'s object, `eval`'s text) of a copy of the stored folder `name`."""
    folder = tmp_path / name
    shutil.copytree(FOLDERS / name, folder)
    capsys.readouterr()
    assert cli.main(["eval", str(folder), "--episodes", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert cli.main(["eval", str(folder), "--episodes", "2"]) == 0
    return out, capsys.readouterr().out


def test_eval_of_a_sweep_folder_has_a_row_per_point_with_the_se_over_its_seeds(tmp_path, capsys):
    out, text = evaluated("sweep", tmp_path, capsys)
    runs = {row["run"]: row for row in out["runs"]}
    assert sorted(runs) == list(range(8)) and out["swept"] == ["clip_eps", "update_epochs"]
    grid = [{"clip_eps": c, "update_epochs": e} for c in (0.1, 0.3) for e in (1, 2)]  # the grid, in point order
    assert [point["point"] for point in out["points"]] == [0, 1, 2, 3]
    for point, values in zip(out["points"], grid):
        i = point["point"]
        assert point["values"] == values and point["varies"] == []
        assert point["runs"] == [2 * i, 2 * i + 1] and point["seeds"] == 2  # run = point * seeds + seed
        seed_means = np.array([np.mean(runs[k]["returns"]) for k in point["runs"]])
        assert [runs[k]["seed"] for k in point["runs"]] == [0, 1]
        assert point["mean"] == seed_means.mean()
        assert point["se"] == seed_means.std(ddof=1) / math.sqrt(2)
        assert point["mean_length"] == np.mean([runs[k]["mean_length"] for k in point["runs"]])
        line = next(line for line in text.splitlines() if line.strip().startswith(f"point {i} "))
        assert (f"(clip_eps={values['clip_eps']:g}, update_epochs={values['update_epochs']}; runs {2 * i}, {2 * i + 1})"
                in line), line
        assert f"{point['mean']:.4g} ± {point['se']:.2g} (s.e. over 2 seeds)" in line, line
    assert "return per point, in point order" in text and "every run's episodes: min" in text
    assert "mean" not in out and "se" not in out  # no return pooled over the points' episodes


def test_eval_of_a_train_folder_is_one_line_of_its_seeds(tmp_path, capsys):
    out, text = evaluated("train", tmp_path, capsys)
    (point,) = out["points"]
    assert out["swept"] == [] and point["values"] == {} and point["runs"] == [0, 1] and point["seeds"] == 2
    seed_means = np.array([np.mean(run["returns"]) for run in out["runs"]])
    assert point["mean"] == seed_means.mean()
    assert point["se"] == seed_means.std(ddof=1) / math.sqrt(2)
    assert (f"return, the mean over seeds of each seed's mean over its episodes: {point['mean']:.4g} ± "
            f"{point['se']:.2g} (s.e. over 2 seeds)") in text, text
    assert "point 0" not in text


def test_a_point_of_one_seed_says_it_has_no_standard_error(tmp_path, capsys):
    out, text = evaluated("pbt", tmp_path, capsys)  # 4 members x 1 seed; each member its own final lr
    assert out["swept"] == ["lr"] and len(out["points"]) == 4
    for point, run in zip(out["points"], out["runs"]):
        assert point["runs"] == [run["run"]] and point["seeds"] == 1 and point["se"] is None  # strict JSON: NaN
        assert point["mean"] == run["mean"] and list(point["values"]) == ["lr"]
        line = next(line for line in text.splitlines() if line.strip().startswith(f"point {point['point']} "))
        assert f"lr={report.show_value(point['values']['lr'])}; run {run['run']})" in line, line
        assert f"{point['mean']:.4g} (n=1: no s.e.)" in line and "nan" not in line, line


def run_rows(returns: dict[int, list[float]]) -> list[dict]:
    """`run_row`s of runs with these returns (NaN: an episode that did not end)."""
    return [run_row({"run": k, "seed": None, "step": 1, "returns": np.array(r), "lengths": np.ones(len(r)),
                     "time_limit": np.zeros(len(r), bool)}) for k, r in returns.items()]


def test_without_a_record_the_runs_of_one_config_are_one_point_and_only_seeds_with_a_mean_count():
    rows = run_rows({0: [1.0, 3.0], 1: [5.0, 7.0], 2: [math.nan, math.nan], 3: [10.0, 10.0]})
    configs = {0: {"lr": 0.1, "gamma": 0.99}, 1: {"lr": 0.1, "gamma": 0.99}, 2: {"lr": 0.1, "gamma": 0.99},
               3: {"lr": 0.2, "gamma": 0.99}}
    swept, points = report.evaluation_points(rows, configs)
    assert swept == ["lr"]  # the key whose values differ between the runs
    assert [(p["point"], p["runs"], p["values"]) for p in points] == [(0, [0, 1, 2], {"lr": 0.1}),
                                                                       (1, [3], {"lr": 0.2})]
    assert points[0]["seeds"] == 2 and points[0]["mean"] == 4.0  # run 2 ended no episode: it has no mean
    assert points[0]["se"] == np.std([2.0, 6.0], ddof=1) / math.sqrt(2)
    assert points[1]["seeds"] == 1 and points[1]["mean"] == 10.0 and math.isnan(points[1]["se"])


def test_with_a_record_run_k_is_seed_k_mod_seeds_of_point_k_div_seeds_and_differing_values_are_named():
    rows = run_rows({0: [1.0], 1: [2.0], 2: [3.0], 3: [5.0]})
    configs = {0: {"lr": 0.1}, 1: {"lr": 0.3}, 2: {"lr": 0.2}, 3: {"lr": 0.2}}  # point 0's seeds: PBT's own lr
    swept, points = report.evaluation_points(rows, configs, seeds=2, swept=["lr"])
    assert [(p["runs"], p["values"], p["varies"]) for p in points] == [([0, 1], {}, ["lr"]),
                                                                       ([2, 3], {"lr": 0.2}, [])]
    assert [p["mean"] for p in points] == [1.5, 4.0]
