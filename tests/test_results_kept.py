"""Results are never lost: the run folder is claimed before compiling, every artefact is
written whole or not at all and independently of the others, nothing is replaced, and
sweeps over list- or mapping-valued keys finish with their tables and plots."""

import csv
from pathlib import Path

import pytest

from conftest import CARTPOLE_RUN
from purejaxppo.experiments import folder, paths
from purejaxppo.experiments.cli import main



def test_write_new_is_whole_or_nothing_and_never_replaces(tmp_path):
    paths.write_new(tmp_path / "a.txt", "first")
    with pytest.raises(FileExistsError):
        paths.write_new(tmp_path / "a.txt", "second")
    assert (tmp_path / "a.txt").read_text() == "first"
    paths.write_new(tmp_path / "b.png", b"\x89PNG")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.png"]  # no temporary file left


def test_one_failed_artefact_leaves_the_others(tmp_path, capsys):
    from purejaxppo.experiments.faults import Failures

    def broken():
        raise ValueError("cannot draw")

    (tmp_path / "taken.md").write_text("mine")
    failures = Failures()
    assert not paths.write_artefacts(tmp_path, [("one.csv", lambda: "1"), ("plot.png", broken),
                                                 ("taken.md", lambda: "theirs"), ("two.csv", lambda: "2")], failures)
    assert list(failures.failed) == ["plot.png", "taken.md"]
    assert capsys.readouterr().err.splitlines() == [
        "purejaxppo: error: could not write plot.png (ValueError: cannot draw); the other results are written apart "
        "from it", "purejaxppo: error: could not write taken.md (File exists); the other results are written apart "
        "from it"]
    assert (tmp_path / "one.csv").read_text() == "1" and (tmp_path / "two.csv").read_text() == "2"
    assert (tmp_path / "taken.md").read_text() == "mine" and not (tmp_path / "plot.png").exists()


@pytest.mark.parametrize("command", [["train", "configs/cartpole.yaml"], ["sweep", "configs/sweeps/clip_epochs.yaml"]])
def test_an_out_folder_that_cannot_be_made_is_refused_before_compiling(tmp_path, capsys, monkeypatch, command):
    import purejaxppo.experiments.cli as cli

    monkeypatch.setattr(cli, "run_plan", lambda *a, **k: pytest.fail("compiled before refusing"))
    (tmp_path / "f").write_text("a file")
    assert main([*command, "--out", str(tmp_path / "f" / "run")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "--out" in error and "cannot be created" in error


def test_a_file_that_appears_during_a_run_is_kept_and_the_rest_is_written(tmp_path, capsys, monkeypatch):
    import purejaxppo.experiments.cli as cli

    out = tmp_path / "run"
    original = cli.RunFolder.write_results

    def someone_wrote_summary_md(run_folder, *args):
        (run_folder.path / "summary.md").write_text("someone else's notes")
        return original(run_folder, *args)

    monkeypatch.setattr(cli.RunFolder, "write_results", someone_wrote_summary_md)
    assert main(["train", *CARTPOLE_RUN, "--out", str(out)]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "could not write summary.md (File exists)" in error
    assert (out / "summary.md").read_text() == "someone else's notes"
    for name in ("config.yaml", "metrics.csv", "summary.json", "learning_curve.png"):
        assert (out / name).stat().st_size > 0, name


@pytest.mark.slow
def test_a_sweep_over_list_and_mapping_values_finishes_with_tables_and_plots(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("env: CartPole-v1\nnum_steps: 16\ntotal_timesteps: 128\nsweep:\n  seeds: 1\n  grid:\n"
                    "    hidden_sizes: [[16], [32]]\n"
                    "    env_params: [{max_steps_in_episode: 50}, {max_steps_in_episode: 100}]\n")
    out = tmp_path / "sweep"
    assert main(["sweep", str(spec), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "- hidden_sizes=[16], env_params={max_steps_in_episode: 50}: " in printed
    with open(out / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["hidden_sizes"] for r in rows] == ["[16]", "[16]", "[32]", "[32]"]
    for name in ("learning_curves.png", "clip_fraction_by_epoch.png", "heatmap_return.png", "heatmap_kl.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG"), name


def test_a_claimed_folder_is_new_and_its_config_file_is_written_once(tmp_path, monkeypatch):
    import yaml

    import purejaxppo as ppo
    from purejaxppo.config import ConfigError
    from purejaxppo.experiments.sweep import make_spec

    monkeypatch.chdir(tmp_path)
    real = folder.time.strftime
    monkeypatch.setattr(folder.time, "strftime",  # two claims in one second
                        lambda fmt, *args: "20260102-030405" if fmt == "%Y%m%d-%H%M%S" else real(fmt, *args))
    first = folder.RunFolder.claim(None, "sweep", "CartPole-v1")
    second = folder.RunFolder.claim(None, "sweep", "CartPole-v1")
    assert (first.path, second.path) == (Path("runs/sweep-CartPole-v1-20260102-030405"),
                                         Path("runs/sweep-CartPole-v1-20260102-030405-2"))
    cfg, spec = ppo.make_config({"num_steps": 16}), make_spec(grid={"clip_eps": [0.1, 0.2]}, seeds=2)
    from purejaxppo.experiments.experiment import Experiment

    first.write_config(Experiment("sweep", cfg, spec))
    saved = yaml.safe_load((first.path / "sweep.yaml").read_text())
    assert saved["num_steps"] == 16 and saved["sweep"]["grid"] == {"clip_eps": [0.1, 0.2]}
    with pytest.raises(ConfigError, match="cannot write sweep.yaml"):
        first.write_config(Experiment("sweep", cfg, spec))  # never replaced
    assert yaml.safe_load((first.path / "sweep.yaml").read_text()) == saved
    train = folder.RunFolder.claim(str(tmp_path / "mine"), "train", "CartPole-v1")
    train.write_config(Experiment("train", cfg, make_spec()))
    assert train.config_file.name == "config.yaml" and "sweep" not in yaml.safe_load(train.config_file.read_text())
