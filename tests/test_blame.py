"""Messages that blame the right thing (issue 51): a bad `--set key=value` is blamed on the
option, not on the config or sweep file it overrides (and a bad key of the file still on the
file); a state of several runs given to export is said to be one, not a wrong network; and
export's metadata is strict JSON (an open action bound is null, not -Infinity)."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
from purejaxppo import export
from purejaxppo.config import ConfigError
from purejaxppo.config.files import parse_overrides
from purejaxppo.experiments import cli

BASE = "env: CartPole-v1\nnum_envs: 4\nnum_steps: 16\nnum_minibatches: 2\ntotal_timesteps: 640\n"
SWEEP = "sweep:\n  grid: {clip_eps: [0.1, 0.2]}\n"


def refusal(tmp_path, monkeypatch, capsys, files: dict, argv: list) -> str:
    """The one line `purejaxppo argv` refuses with (exit 2), run in a folder holding `files`."""
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        Path(name).write_text(text)
    capsys.readouterr()
    code = cli.main([*argv, "--out", "out"])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in out + err, (out, err)
    assert len(err.splitlines()) == 1 and err.startswith("purejaxppo: error: "), err
    assert not Path("out").exists()
    return err.strip()


@pytest.mark.parametrize("command, file, text", [("train", "c.yaml", BASE), ("sweep", "s.yaml", BASE + SWEEP)])
def test_an_unknown_key_given_by_set_is_blamed_on_the_option_not_the_file(tmp_path, monkeypatch, capsys, command,
                                                                          file, text):
    line = refusal(tmp_path, monkeypatch, capsys, {file: text}, [command, file, "--set", "unknown=1"])
    assert "unknown: unknown key in --set unknown=1;" in line and file not in line, line
    line = refusal(tmp_path, monkeypatch, capsys, {file: text}, [command, file, "--set", "learning_rate=0.1"])
    assert "learning_rate: unknown key in --set learning_rate=0.1; did you mean lr?" in line, line


@pytest.mark.parametrize("command, file, text", [("train", "c.yaml", BASE), ("sweep", "s.yaml", BASE + SWEEP)])
def test_an_unknown_key_in_the_file_is_still_blamed_on_the_file(tmp_path, monkeypatch, capsys, command, file, text):
    line = refusal(tmp_path, monkeypatch, capsys, {file: text + "bogus: 1\n"}, [command, file, "--set", "lr=0.01"])
    assert f"bogus: unknown key in {file};" in line and "--set" not in line, line


@pytest.mark.parametrize("command, file, text", [("train", "c.yaml", BASE), ("sweep", "s.yaml", BASE + SWEEP)])
def test_a_value_of_the_wrong_type_given_by_set_names_the_option(tmp_path, monkeypatch, capsys, command, file, text):
    line = refusal(tmp_path, monkeypatch, capsys, {file: text}, [command, file, "--set", "lr=abc"])
    assert line.endswith("lr='abc': must be a number (given by --set lr=abc)"), line
    # the file gives lr too; the value refused is the option's, and the option is quoted as a shell reads it
    line = refusal(tmp_path, monkeypatch, capsys, {file: text + "lr: 0.001\n"},
                   [command, file, "--set", "num_envs=[1]", "--set", "lr=0.01"])
    assert line.endswith("num_envs=[1]: must be an integer (given by --set 'num_envs=[1]')"), line
    # the same bad value in the file is the file's (no --set to blame)
    line = refusal(tmp_path, monkeypatch, capsys, {file: text + "lr: abc\n"}, [command, file])
    assert line.endswith("lr='abc': must be a number"), line


def test_parse_overrides_checks_each_key_and_type_and_keeps_the_values():
    assert parse_overrides(["lr=0.001", "hidden_sizes=[8, 8]", "target_kl="]) == {
        "lr": 0.001, "hidden_sizes": [8, 8], "target_kl": None}
    for items, field, needle in ((["lr=1", "nonsense=2"], "nonsense", "in --set nonsense=2;"),
                                 (["gamma=yes please"], "gamma", "(given by --set 'gamma=yes please')"),
                                 (["lr"], "--set", "must look like key=value")):
        with pytest.raises(ConfigError) as info:
            parse_overrides(items)
        assert info.value.field == field and needle in str(info.value), str(info.value)


def tiny(**values):
    return ppo.make_config({"num_envs": 4, "num_steps": 16, "num_minibatches": 2, "total_timesteps": 640, **values})


def test_export_of_a_state_of_several_runs_says_so_and_how_to_pick_one(monkeypatch):
    cfg = tiny(hidden_sizes=[8])
    learner = ppo.Learner(cfg)
    state = learner.init(jax.random.PRNGKey(0))
    runs = jax.tree.map(lambda x: jnp.stack([x] * 3), state)  # a leading run axis of 3, as a sweep's state has
    one = jax.tree.map(lambda x: x[1], runs)
    called = []
    real = export.make_policy
    monkeypatch.setattr(export, "make_policy", lambda *a, **k: called.append(1) or real(*a, **k))
    with pytest.raises(ConfigError) as info:
        export.export_policy(cfg, runs)
    message = str(info.value)
    assert info.value.field == "state" and "holds 3 runs" in message and "ppo.load(folder, run=k)" in message
    assert "network" not in message and "\n" not in message and not called  # refused before the policy is built
    result = export.export_policy(cfg, one)  # the fix the message gives works
    assert called and result.metadata["verified"]["actions_differing"] == 0


def strict(text: str):
    """JSON as a strict parser reads it: NaN, Infinity and -Infinity are refused."""
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_export_metadata_is_strict_json_with_null_for_an_open_action_bound(tmp_path, monkeypatch):
    (tmp_path / "blame_open_env.py").write_text(
        "import numpy as np\nfrom purejaxppo.envs import ActionSpace, GymnaxEnv\n\ndef make():\n"
        "    env = GymnaxEnv('Pendulum-v1')\n"
        "    env.action_space = ActionSpace('continuous', shape=(1,), low=-2.0, high=np.inf)\n"
        "    return env\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = tiny(env="blame_open_env:make", hidden_sizes=[8])
    path = tmp_path / "policy.stablehlo"
    result = export.export_policy(cfg, ppo.Learner(cfg).init(jax.random.PRNGKey(0)), path=path)
    meta = strict(Path(f"{path}.json").read_text())
    assert meta["action_space"]["low"] == [-2.0] and meta["action_space"]["high"] == [None]
    assert meta == result.metadata
    assert export._bound(np.array([[-np.inf, 1.5], [0.0, np.inf]]), (2, 2)) == [[None, 1.5], [0.0, None]]
    assert export._bound(np.inf, (3,)) == [None, None, None]
    for bad in (float("nan"), float("inf")):  # anything else not finite fails loudly, not as Infinity
        with pytest.raises(ValueError):
            export._json({"verified": {"max_difference": bad}})
    assert strict(export._json({"a": [1.5, None]})) == {"a": [1.5, None]}
