"""Every bad input is caught before compiling, with a message naming field, value and rule."""

import sys

import jax.numpy as jnp
import pytest

import purejaxppo as ppo
from conftest import run_module_each
from purejaxppo.config import ConfigError

CARTPOLE = "configs/cartpole.yaml"


def error_for(**values):
    with pytest.raises(ConfigError) as info:
        ppo.make_config(values)
    return info.value


@pytest.mark.parametrize("values, field, rule", [
    (dict(num_envs=3, num_steps=5, num_minibatches=4), "num_minibatches", "must divide the batch"),
    (dict(clip_eps=0.0), "clip_eps", "must be positive"),
    (dict(clip_eps=-0.1), "clip_eps", "must be positive"),
    (dict(lr=-1e-3), "lr", "must be positive"),
    (dict(num_envs=0), "num_envs", "at least 1"),
    (dict(num_steps=-5), "num_steps", "at least 1"),
    (dict(update_epochs=0), "update_epochs", "at least 1"),
    (dict(gamma=1.5), "gamma", "[0, 1]"),
    (dict(gae_lambda=-0.1), "gae_lambda", "[0, 1]"),
    (dict(update_epochs=6, max_epochs=5), "update_epochs", "must not exceed max_epochs"),
    (dict(num_envs="four"), "num_envs", "must be an integer"),
    (dict(num_envs=4.5), "num_envs", "must be an integer"),
    (dict(lr="fast"), "lr", "must be a number"),
    (dict(anneal_lr="yes"), "anneal_lr", "true or false"),
    (dict(hidden_sizes=[64, 0]), "hidden_sizes", "positive integers"),
    (dict(activation="gelu"), "activation", "one of tanh, relu"),
    (dict(target_kl=0.0), "target_kl", "positive"),
    (dict(total_timesteps=100), "total_timesteps", "at least one batch"),
    (dict(env="CartPole-v2"), "env", "did you mean CartPole-v1"),
    (dict(env="Breakout"), "env", "Breakout-MinAtar"),
    (dict(env_params={"max_steps": 3}), "env_params.max_steps", "no such parameter"),
    (dict(env="CartPole-v1", log_std_init=-0.5), "log_std_init", "only applies to continuous"),
    (dict(clip_epsilon=0.2), "clip_epsilon", "did you mean clip_eps"),
])
def test_bad_input_is_named(values, field, rule):
    error = error_for(**values)
    assert error.field == field
    assert rule in str(error)
    assert field in str(error)


def test_unknown_key_in_yaml_is_an_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("env: CartPole-v1\nnum_env: 8\n")
    with pytest.raises(ConfigError, match="num_env.*did you mean num_envs"):
        ppo.load_config(path)
    with pytest.raises(ConfigError, match="learning_rate"):
        ppo.load_config(CARTPOLE, overrides={"learning_rate": 1e-3})


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "\n   \n", "{}\n"])
def test_a_config_file_without_a_key_is_refused(tmp_path, text):
    """Writing nothing does not ask for every default: an empty file is a mistake (a wrong path
    redirected into it, a save that failed), named before anything runs."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="is empty \\(no key\\): name at least env") as info:
        ppo.load_config(path)
    assert info.value.field == "config"


@pytest.mark.parametrize("command, field", [("train", "config"), ("sweep", "sweep file")])
def test_the_cli_refuses_an_empty_file_in_one_line(tmp_path, monkeypatch, capsys, command, field):
    from purejaxppo.experiments.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.yaml").write_text("# a config, some day\n")
    assert main([command, "empty.yaml", "--out", "out"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"purejaxppo: error: {field}='empty.yaml': is empty (no key): name at least env, e.g. env: CartPole-v1"
    assert not (tmp_path / "out").exists()


def test_config_loads_and_hparams_are_traced_values():
    cfg = ppo.load_config(CARTPOLE, overrides={"num_envs": 8, "env_params": {"max_steps_in_episode": 200}})
    assert cfg.num_envs == 8 and cfg.batch_size == 8 * 128
    assert cfg.lr == 2.5e-4 and cfg.anneal_lr is True and cfg.epochs_scan == 4
    hp = ppo.HParams.from_config(cfg)
    assert hp.update_epochs.dtype == jnp.int32 and float(hp.clip_eps) == pytest.approx(0.2)
    assert float(ppo.HParams.from_config(ppo.make_config({"target_kl": None})).target_kl) == float("inf")
    env = ppo.make_env(cfg)
    assert env.env.env._params.max_steps_in_episode == 200


def test_continuous_env_accepts_log_std_init():
    cfg = ppo.make_config(dict(env="Pendulum-v1", log_std_init=-0.5))
    assert ppo.make_env(cfg).action_space.kind == "continuous"


BAD_COMMANDS = [
    (["train", CARTPOLE, "--set", "num_minibatches=3"], "num_minibatches=3"),
    (["train", CARTPOLE, "--set", "clip_eps=0"], "clip_eps=0"),
    (["train", CARTPOLE, "--set", "gamma=2"], "gamma=2"),
    (["train", CARTPOLE, "--set", "nonsense=1"], "nonsense"),
    (["train", CARTPOLE, "--set", "env=Pong"], "Pong-misc"),
    (["train", CARTPOLE, "--seeds", "0"], "--seeds=0"),
    (["train", CARTPOLE, "--max-parallel", "0"], "--max-parallel=0"),
    (["train", "configs/missing.yaml"], "file not found"),
]


@pytest.fixture(scope="module")
def bad_commands_run(tmp_path_factory):
    """`python -m purejaxppo.experiments.cli` with each of BAD_COMMANDS, then `train` into a run
    folder's --out: (exit code, stderr) of each, run in one new process (conftest.run_module_each)."""
    taken = tmp_path_factory.mktemp("taken")
    (taken / "metrics.csv").write_text("precious\n")
    results = run_module_each("purejaxppo.experiments.cli", [(args, {}) for args, _ in BAD_COMMANDS]
                              + [(["train", CARTPOLE, "--out", str(taken)], {})])
    return results[:-1], (results[-1], taken)


@pytest.mark.parametrize("case", range(len(BAD_COMMANDS)), ids=[needle for _, needle in BAD_COMMANDS])
def test_cli_bad_input_exits_2_without_traceback(bad_commands_run, case):
    code, stderr = bad_commands_run[0][case]
    needle = BAD_COMMANDS[case][1]
    assert code == 2, stderr
    assert needle in stderr
    assert "Traceback" not in stderr


def test_cli_refuses_to_overwrite_a_run_folder(bad_commands_run):
    (code, stderr), taken = bad_commands_run[1]
    assert code == 2 and "--out" in stderr
    assert (taken / "metrics.csv").read_text() == "precious\n"


@pytest.mark.parametrize("name", ["cartpole", "acrobot", "pendulum", "minatar_breakout",
                                  "minatar_space_invaders"])
def test_shipped_configs_load(name):
    cfg = ppo.load_config(f"configs/{name}.yaml")
    assert cfg.num_updates >= 1


# --------------------------------------------------------------------------------------
# One declaration per field: everything else is derived from config.FIELDS
# --------------------------------------------------------------------------------------
import ast  # noqa: E402
import dataclasses  # noqa: E402
import importlib.util  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402

from purejaxppo import config, errors  # noqa: E402

PACKAGE = Path(config.__file__).parent.parent  # purejaxppo/


def test_the_config_classes_are_the_declared_fields():
    names = tuple(config.FIELDS)
    assert tuple(f.name for f in dataclasses.fields(ppo.PPOConfig)) == names
    assert set(config.STATIC_FIELDS) | set(config.HPARAM_FIELDS) == set(names)
    assert set(config.STATIC_FIELDS).isdisjoint(config.HPARAM_FIELDS)
    # HParams has exactly the traced fields, in declaration order
    assert tuple(f.name for f in dataclasses.fields(ppo.HParams)) == config.HPARAM_FIELDS
    assert config.HPARAM_FIELDS == tuple(n for n, f in config.FIELDS.items() if f.traced)
    defaults = ppo.PPOConfig()
    for name, f in config.FIELDS.items():
        assert getattr(defaults, name) == f.default, name
    assert config.ACTION_KIND_FIELDS == {"log_std_init": "continuous", "action_squash": "continuous"}
    assert not hasattr(ppo.PPOConfig, "minibatch_size")


def test_every_field_has_help_and_a_default_that_passes_its_own_checks():
    for name, f in config.FIELDS.items():
        assert f.help.strip() and "\n" not in f.help, name
        assert f.type in config.TYPES, name
        assert f.null is None or f.null.strip(), name
    explicit = ppo.make_config({name: f.default for name, f in config.FIELDS.items()})
    assert explicit == ppo.PPOConfig()
    # the default env_params is a fresh dict per config, not one shared mutable default
    assert ppo.PPOConfig().env_params is not ppo.PPOConfig().env_params


def test_adding_a_field_to_the_table_is_enough(monkeypatch):
    """The config package imported afresh with one more Field in fields.py: the config,
    HParams, checks and table follow."""
    import purejaxppo

    fields_path = PACKAGE / "config" / "fields.py"
    source = fields_path.read_text()
    anchor = "FIELDS: Mapping[str, Field] = _table(\n"
    assert source.count(anchor) == 1
    source = source.replace(anchor, anchor + '    Field("new_knob", "float", 0.5, "a knob for this test", '
                                              'traced=True, rules=(IN_0_1,)),\n')
    monkeypatch.setattr(purejaxppo, "config", config)  # importing the package afresh rebinds it: restored after
    for name in [n for n in sys.modules if n == "purejaxppo.config" or n.startswith("purejaxppo.config.")]:
        monkeypatch.delitem(sys.modules, name)  # restored after the test
    fields = importlib.util.module_from_spec(importlib.util.spec_from_loader("purejaxppo.config.fields", loader=None))
    monkeypatch.setitem(sys.modules, "purejaxppo.config.fields", fields)
    exec(compile(source, str(fields_path), "exec"), fields.__dict__)
    module = importlib.import_module("purejaxppo.config")  # its other modules import the new fields
    assert module is not config and module.FIELDS is fields.FIELDS

    assert module.PPOConfig().new_knob == 0.5
    assert "new_knob" in module.HPARAM_FIELDS and "new_knob" not in module.STATIC_FIELDS
    cfg = module.make_config({"new_knob": "25e-2"})
    assert cfg.new_knob == 0.25 and cfg.to_dict()["new_knob"] == 0.25
    hp = module.HParams.from_config(cfg)
    assert hp.new_knob.dtype == jnp.float32 and float(hp.new_knob) == 0.25
    with pytest.raises(ConfigError, match=r"new_knob=2.0: must be in \[0, 1\]"):
        module.make_config({"new_knob": 2})
    assert "| `new_knob` | float | traced | `0.5` | in [0, 1] | a knob for this test |" in module.markdown_table()


def test_hparams_follow_the_declared_types():
    cfg = ppo.make_config({"vf_clip_eps": None, "target_kl": 0.02})
    hp = ppo.HParams.from_config(cfg)
    expected = {"bool": jnp.bool_, "int": jnp.int32, "float": jnp.float32}
    for name in config.HPARAM_FIELDS:
        value = getattr(hp, name)
        assert value.shape == () and value.dtype == expected[config.FIELDS[name].type], name
    assert math.isinf(float(hp.vf_clip_eps)) and float(hp.target_kl) == pytest.approx(0.02)
    assert bool(hp.anneal_lr) is True and int(hp.update_epochs) == 4
    # a pytree: replace, tree.map, stacking and vmap over a run axis
    other = hp.replace(clip_eps=jnp.float32(0.1))
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), hp, other)
    assert stacked.clip_eps.shape == (2,)
    doubled = jax.vmap(lambda h: h.clip_eps * 2)(stacked)
    assert doubled.tolist() == pytest.approx([0.4, 0.2])


@pytest.mark.parametrize("values, expected", [
    (dict(total_timesteps=1.0e6), dict(total_timesteps=1_000_000)),  # YAML 1.0e+6 is a float
    (dict(total_timesteps="5e5"), dict(total_timesteps=500_000)),  # YAML 5e5 is a string
    (dict(lr="5e-4", gamma="1"), dict(lr=5e-4, gamma=1.0)),
    (dict(vf_clip_eps=None, max_epochs=None, log_std_init=None), dict(vf_clip_eps=None, max_epochs=None)),
    (dict(env_params=None, hidden_sizes=[32]), dict(env_params={}, hidden_sizes=(32,))),
])
def test_values_are_coerced_to_their_declared_type(values, expected):
    cfg = ppo.make_config(values)
    for name, value in expected.items():
        assert getattr(cfg, name) == value and type(getattr(cfg, name)) is type(value), name


def test_scientific_notation_from_yaml_and_the_command_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("total_timesteps: 5e5\nlr: 3e-4\nmax_grad_norm: 1.0e+0\n")
    cfg = ppo.load_config(path, dict([config.parse_override("num_steps=1.28e+2")]))
    assert (cfg.total_timesteps, cfg.lr, cfg.max_grad_norm, cfg.num_steps) == (500_000, 3e-4, 1.0, 128)
    assert type(cfg.total_timesteps) is int and type(cfg.num_steps) is int


@pytest.mark.parametrize("values, field, rule", [
    (dict(max_epochs=0), "max_epochs", "must be at least 1 (or null: update_epochs)"),
    (dict(vf_clip_eps=-0.1), "vf_clip_eps", "must be positive (or null: value loss not clipped)"),
    (dict(target_kl=float("inf")), "target_kl", "must be finite (or null: no KL early stopping)"),
    (dict(lr=float("nan")), "lr", "must be finite"),
    (dict(ent_coef=-0.01), "ent_coef", "must be non-negative"),
    (dict(update_epochs=True), "update_epochs", "must be an integer"),
    (dict(total_timesteps="5.5e0"), "total_timesteps", "must be an integer"),
    (dict(env=3), "env", "must be a string"),
    (dict(env_params=[1]), "env_params", "must be a mapping"),
    (dict(hidden_sizes=[]), "hidden_sizes", "non-empty list"),
])
def test_rules_read_from_the_declaration(values, field, rule):
    error = error_for(**values)
    assert error.field == field and rule in error.rule


def test_the_docs_table_is_the_generated_one():
    page = (PACKAGE.parent / "docs" / "configuration.md").read_text()
    found = re.search(r"<!-- config-table -->\n(.*?)<!-- /config-table -->", page, re.S)
    assert found, "docs/configuration.md lost its <!-- config-table --> markers"
    assert found.group(1).strip() == config.markdown_table(), \
        "docs/configuration.md's table is stale: paste the output of purejaxppo.config.markdown_table()"
    rows = config.markdown_table().splitlines()[2:]
    assert [re.match(r"\| `(\w+)`", row).group(1) for row in rows] == list(config.FIELDS)


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_help_config_lists_every_field_and_exits_0(command, capsys):
    from purejaxppo.experiments.options import parser

    with pytest.raises(SystemExit) as exited:
        parser().parse_args([command, "--help-config"])  # no config file needed
    assert exited.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["key", "type", "kind", "default"]
    assert [line.split()[0] for line in lines[1:]] == list(config.FIELDS)
    for line, (name, f) in zip(lines[1:], config.FIELDS.items()):
        assert ("traced" if f.traced else "static") in line.split() and line.endswith(f.help)


# --------------------------------------------------------------------------------------
# Errors by kind
# --------------------------------------------------------------------------------------
def test_errors_by_kind():
    assert ppo.ConfigError is config.ConfigError is errors.ConfigError
    assert issubclass(errors.ConfigError, errors.UsageError) and issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.ResourceError, errors.ConfigError)
    error = errors.ResourceError("runs", 8, "does not fit")
    assert (error.field, error.value, error.rule, str(error)) == ("runs", 8, "does not fit", "runs=8: does not fit")


@pytest.mark.parametrize("error", [errors.UsageError("no such thing"),
                                   errors.ResourceError("runs in flight", 4, "needs 9 GiB, 1 GiB free")])
def test_cli_prints_any_usage_error_on_one_line_and_exits_2(error, monkeypatch, capsys):
    from purejaxppo.experiments import cli

    def refuse(args, cluster):
        raise error

    monkeypatch.setattr(cli, "run_command", refuse)
    assert cli.main(["train", CARTPOLE]) == 2
    err = capsys.readouterr().err
    assert err == f"purejaxppo: error: {error}\n"


# --------------------------------------------------------------------------------------
# Imports go one way: config -> envs -> errors
# --------------------------------------------------------------------------------------
def _imports(path: Path):
    """(module imported, whether at module level) for every import in a file."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            yield node.module or "", id(node) in top
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in top


def test_envs_do_not_import_config_and_config_imports_at_the_top():
    for path in (PACKAGE / "envs").glob("*.py"):
        for module, _ in _imports(path):
            assert not module.startswith("purejaxppo.config"), f"{path.name} imports {module}"
    for path in (*(PACKAGE / "config").glob("*.py"), PACKAGE / "errors.py"):
        assert all(at_top for module, at_top in _imports(path) if module.startswith("purejaxppo")), path.name
    assert not [module for module, _ in _imports(PACKAGE / "errors.py") if module.startswith("purejaxppo")]


def test_a_bundle_is_taken_as_it_is_and_a_config_passes_the_gate(monkeypatch):
    """No "already checked" flag: a config (made by make_config, or a dataclasses.replace copy)
    is checked whenever it is handed to make_train; the gate's bundle is never checked, nor its
    environment built, again."""
    import purejaxppo.envs
    from purejaxppo.config import checks
    from purejaxppo.gate import gate

    values = {"num_envs": 4, "num_steps": 16, "num_minibatches": 2, "total_timesteps": 640}
    calls, built = [], []
    monkeypatch.setattr(checks, "_check", lambda c, *a: calls.append(c))
    make_raw_env = purejaxppo.envs.make_raw_env
    monkeypatch.setattr(purejaxppo.envs, "make_raw_env", lambda *a: built.append(a) or make_raw_env(*a))
    bundle = gate(values)
    assert (len(calls), len(built)) == (1, 1)
    ppo.make_train(bundle)
    learner = ppo.Learner(bundle)
    assert (len(calls), len(built)) == (1, 1) and learner.env is bundle.env and learner.agent is bundle.agent
    copy = dataclasses.replace(bundle.config, clip_eps=0.1)
    ppo.make_train(copy)
    assert len(calls) == 2 and calls[-1].clip_eps == 0.1 and len(built) == 2
    with pytest.raises(TypeError, match="pass network= and env= to gate"):
        ppo.Learner(bundle, env=bundle.env)
    with pytest.raises(ConfigError, match="num_envs"):  # another program needs a bundle of its own
        bundle.for_config(dataclasses.replace(bundle.config, num_envs=8))


def test_load_config_finds_a_shipped_config_by_name_from_any_folder(tmp_path, monkeypatch):
    """As the command line does (`purejaxppo train cartpole`): a path that exists first, else the
    shipped config of that name, else one line naming the nearest shipped one."""
    monkeypatch.chdir(tmp_path)  # outside the repository: no configs/ here
    assert ppo.load_config("cartpole") == ppo.load_config(ppo.configs.find("cartpole"))
    assert ppo.load_config("brax/fast.yaml", {"num_envs": 8}).num_envs == 8
    (tmp_path / "cartpole").write_text("env: Pendulum-v1\n")  # a file of that name here wins
    assert ppo.load_config("cartpole").env == "Pendulum-v1"
    with pytest.raises(ConfigError, match="file not found, nor a shipped config; did you mean cartpole"):
        ppo.load_config("cartpol")
