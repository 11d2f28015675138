import csv
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import purejaxppo as ppo
from conftest import CARTPOLE_RUN
from purejaxppo.experiments.cli import main


def test_train_writes_a_complete_run_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a shipped config is found by name from any folder
    out = tmp_path / "run"
    # the shipped config by name (CARTPOLE_RUN names its file): the same programs
    code = main(["train", "cartpole", *CARTPOLE_RUN[1:], "--out", str(out), "--tensorboard"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "final episode return" in printed and "compile time" in printed
    # a shipped config's published return under the table, saying what this run changed from it
    assert " ".join(printed.split()).endswith(
        f"reference: 500 at 1.5e5 steps (PPO, gymnax README) for cartpole as shipped; this run changed num_steps, "
        f"total_timesteps run folder: {out}")
    # the resolved config reloads to the same config
    cfg = ppo.load_config(out / "config.yaml")
    assert cfg.num_steps == 16 and cfg.total_timesteps == 256 and cfg.env == "CartPole-v1"
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * cfg.num_updates
    assert {r["seed"] for r in rows} == {"0", "1"}
    assert {"clip_fraction_e4", "kl_k3_e1", "clip_cases_adv_neg_below", "episode_return"} <= set(rows[0])
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["final_return"]["per_seed"]) == 2 and summary["compile_seconds"] > 0
    png = (out / "learning_curve.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    # live logging: one record per logged update, once both seeds reported it
    records = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    assert [r["update"] for r in records] == list(range(1, cfg.num_updates + 1))  # 4 updates: every one logged
    assert records[-1]["env_steps"] == cfg.num_updates * cfg.batch_size
    assert all(r["episode_return_min"] <= r["episode_return"] <= r["episode_return_max"] for r in records)
    assert records[-1]["episode_return"] == pytest.approx(np.mean(summary["final_return"]["per_seed"]))
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    # the final state of every seed is checkpointed
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [str(cfg.num_updates)]


def test_the_shipped_configs_are_listed_and_each_loads(capsys):
    from purejaxppo import configs

    assert main(["configs"]) == 0
    printed = capsys.readouterr().out
    names = configs.names()
    assert {"cartpole", "pendulum", "brax/inverted_pendulum", "sweeps/clip_epochs"} <= set(names)
    assert "references" not in names  # the references file is not a config
    assert all(name in printed for name in names)
    lines = {line.split()[0]: line for line in printed.splitlines() if line.strip()}
    assert "131 at 1e7 steps (PPO, gymnax README)" in lines["minatar_space_invaders"]
    assert "GPU-sized" in lines["brax/ant"] and "GPU-sized" not in lines["cartpole"]
    assert configs.find("cartpole") == configs.find("cartpole.yaml") == configs.FOLDER / "cartpole.yaml"
    assert configs.find("nothing") is None and configs.find("../pyproject.toml") is None
    for name in names:
        # brax: tests/test_brax.py; sweeps: tests/test_sweep.py; playground (an extra that needs Python 3.12):
        # tests/test_env_playground.py
        if not name.startswith(("sweeps/", "brax/", "playground/")):
            ppo.load_config(configs.find(name))


def test_version_names_jax_and_the_devices(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    n = len(jax.devices())
    assert jax.default_backend() == "cpu"  # this suite runs on a CPU
    assert exited.value.code == 0 and capsys.readouterr().out.strip() == (
        f"purejaxppo {ppo.__version__} · jax {jax.__version__} · cpu: {n} device{'s' * (n != 1)}")


def test_version_in_a_fresh_process_sees_one_cpu_device_per_core():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-m", "purejaxppo", "--version"], capture_output=True, text=True,
                         env=env, timeout=120)
    n = os.cpu_count()
    assert out.returncode == 0 and out.stdout.strip().endswith(f" · cpu: {n} device{'s' * (n != 1)}"), out


def test_version_without_a_working_backend_is_one_line(capsys, monkeypatch):
    def broken():
        raise RuntimeError("Unable to initialize backend 'cuda': no CUDA-capable device is detected\nmore")

    monkeypatch.setattr(jax, "devices", broken)
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    out = capsys.readouterr()
    assert exited.value.code == 0 and out.err == ""
    assert out.out == (f"purejaxppo {ppo.__version__} · jax {jax.__version__} · no devices (RuntimeError: "
                       "Unable to initialize backend 'cuda': no CUDA-capable device is detected)\n")


@pytest.mark.parametrize("seed", [str(2**32), str(2**40), str(2**64), "-1"])
def test_a_seed_beyond_the_key_range_is_refused(seed, capsys, tmp_path):
    """A key holds 32 bits of the seed: 2**32 and 2**40 would silently train seed 0 again."""
    assert main(["train", "cartpole", "--seed", seed, "--out", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and error.startswith(f"purejaxppo: error: --seed={seed}")
    assert not (tmp_path / "run").exists()


def test_the_timing_suite_is_not_a_command_of_the_package(capsys):
    # a wheel does not carry benchmarks/: the suite is `python -m benchmarks` from a clone (tests/test_bench_suite.py)
    assert main(["bench", "--quick"]) == 2 and "invalid choice: 'bench'" in capsys.readouterr().err


def test_a_resumed_run_finds_its_shipped_config_by_its_fields():
    """`train --resume DIR` names no config: the reference is the shipped config with the run's fields."""
    from purejaxppo import configs
    from purejaxppo.config import check_fields
    from purejaxppo.experiments.request import reference

    acrobot = ppo.load_config(configs.find("acrobot"))
    assert reference(None, acrobot) == "reference: -80 at 5e5 steps (PPO, gymnax README)"
    assert reference(None, check_fields({**acrobot.to_dict(), "lr": 1e-3})) is None  # no shipped config has it
