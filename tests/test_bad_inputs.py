"""Every bad input: one line, the field named, exit code 2, before anything compiles.

One table. A command-line case writes its files to a fresh folder, runs there
(`cli.main`), and must exit 2 with exactly one line on stderr that names the field, no
traceback, and no run folder (neither `--out` nor `runs/`). A Python case must raise
ConfigError whose `field` is the one named. A new config field joins the table: the last
test fails until some case breaks it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
import user_networks
from purejaxppo import config
from purejaxppo.config import ConfigError, HParams, PPOConfig
from purejaxppo.experiments import cli, options
from purejaxppo.extras import install_line

BASE = "env: CartPole-v1\nnum_envs: 4\nnum_steps: 16\nnum_minibatches: 2\ntotal_timesteps: 640\n"
SWEEP = BASE + "sweep:\n  grid: {clip_eps: [0.1, 0.2]}\n"


@dataclasses.dataclass(frozen=True)
class Cli:
    """A command line run in a folder holding `files` (name -> text, or bytes as they are)."""

    id: str
    argv: list[str]
    field: str                 # named in the line (and, for a Python case, ConfigError.field)
    needle: str = ""           # also in the line
    files: dict = dataclasses.field(default_factory=dict)
    absent: tuple = ()         # modules that cannot be imported during the case (an optional package)


@dataclasses.dataclass(frozen=True)
class Api:
    """A Python call that must raise ConfigError with this field."""

    id: str
    call: Callable[[], Any]
    field: str
    needle: str = ""


def train(text: str, *extra: str, needle: str = "", field: str = "config", id: str = "") -> Cli:
    """`purejaxppo train c.yaml` on a config file holding `text`."""
    return Cli(id, ["train", "c.yaml", *extra], field, needle, {"c.yaml": text})


def sweep_file(text: str, field: str, needle: str = "", *extra: str, id: str = "") -> Cli:
    return Cli(id, ["sweep", "s.yaml", *extra], field, needle, {"s.yaml": text})


def setting(assignment: str, field: str, needle: str = "") -> Cli:
    """`--set key=value` on the base config."""
    return Cli(f"set {assignment}", ["train", "base.yaml", "--set", assignment], field, needle)


def section(yaml_text: str, field: str, needle: str = "") -> Cli:
    """A sweep file whose sweep: section is `yaml_text` (indented by the caller)."""
    return sweep_file(BASE + "sweep:\n" + yaml_text, field, needle, id=f"sweep: {yaml_text.strip()}")


LR_UNIFORM = {"lr": {"uniform": [1e-3, 1e-2]}}


def pbt_section(change: str, field: str, needle: str = "") -> Cli:
    """A sweep file with a valid pbt: section (10 updates) but for `change` (one key: value)."""
    settings = {"population": "4", "interval": "2", "hyperparameters": "{lr: {loguniform: [1.0e-4, 1.0e-2]}}"}
    key, value = change.split(": ", 1)
    settings[key] = value
    lines = "".join(f"    {k}: {v}\n" for k, v in settings.items())
    return sweep_file(BASE + "sweep:\n  pbt:\n" + lines, field, needle, id=f"pbt: {change}")


def tiny(**values) -> PPOConfig:
    return ppo.make_config({"num_envs": 4, "num_steps": 16, "num_minibatches": 2, "total_timesteps": 640, **values})


def stacked(**values):
    return lambda: HParams.stack(tiny(), **values)


def run_with(hparams_of: Callable[[PPOConfig], Any], cfg_values: dict | None = None):
    """Learner.run (eagerly, so values are concrete) with the hparams built from the config."""
    def call():
        cfg = tiny(**(cfg_values or {}))
        return ppo.Learner(cfg).run(None, hparams_of(cfg))  # the check comes before the state is used
    return call


def traced_train(hparams_of: Callable[[PPOConfig], Any]):
    """make_train's train traced (jax.eval_shape: nothing compiles) with these hparams."""
    def call():
        cfg = tiny()
        return jax.eval_shape(ppo.make_train(cfg), jax.random.PRNGKey(0), hparams_of(cfg))
    return call


RUN_0_4 = Path(__file__).parent / "data" / "run_0_4"


def policy():
    cfg = tiny()
    return ppo.make_policy(cfg, ppo.Learner(cfg).init(jax.random.PRNGKey(0)))


def hand_built(what: str = "make_train", **values):
    def call():
        cfg = PPOConfig(**values)
        return ppo.make_train(cfg) if what == "make_train" else ppo.Learner(cfg)
    return call


CASES = [
    # --- YAML itself -----------------------------------------------------------------
    train("env: CartPole-v1\nlr: [1, 2\n", needle="not valid YAML: line 3", id="yaml syntax: unclosed ["),
    train("env: CartPole-v1\n  lr: 0.1\n", needle="not valid YAML", id="yaml syntax: bad indentation"),
    train("env: CartPole-v1\n---\nlr: 0.1\n", needle="not valid YAML", id="yaml: two documents"),
    train("env: !!python/object:os.system x\n", needle="not valid YAML", id="yaml: python tag"),
    train("1: 2\n", field="1", needle="a key must be a string", id="yaml: integer key"),
    train("null: 3\n", field="null", needle="a key must be a string", id="yaml: null key"),
    train("env_params: {[a]: 1}\n", field="a sequence", needle="a key must be a string", id="yaml: list key"),
    train(b"env: CartPole-v1\nlr: \xff\n", needle="not UTF-8", id="yaml: not UTF-8"),  # type: ignore[arg-type]
    Cli("config is a folder", ["train", "folder.yaml"], "config", "is a folder", {"folder.yaml/x": ""}),
    Cli("config file missing", ["train", "missing.yaml"], "config", "file not found"),
    Cli("config name not shipped", ["train", "cartpol"], "config", "did you mean cartpole? (purejaxppo configs"),
    Cli("sweep file given to train", ["train", "sweep.yaml"], "config", "run it with purejaxppo sweep sweep.yaml"),
    Cli("config name too long", ["train", "c" * 300], "config", "too long for the file system"),
    Cli("spec name too long", ["sweep", "s/" + "s" * 256], "spec", "too long for the file system"),
    Cli("--resume name too long", ["train", "--resume", "r" * 300], "--resume", "too long for the file system"),
    train("lr: 0.1\nnum_envs: 4\nlr: 0.2\n", field="lr", needle="given twice (lines 1 and 3)",
          id="yaml: duplicate key"),
    train("env_params: {max_steps_in_episode: 10, max_steps_in_episode: 20}\n", field="max_steps_in_episode",
          needle="given twice (line 1, columns 14 and 40)", id="yaml: duplicate nested key"),
    train("- lr\n- 0.1\n", needle="must be a YAML mapping", id="yaml: a list, not a mapping"),
    train("just text\n", needle="must be a YAML mapping", id="yaml: a string, not a mapping"),
    # --- unknown keys: the key alone, matched on meaning ---------------------------------
    train(BASE + "learning_rate: 0.001\n", field="learning_rate", needle="did you mean lr",
          id="unknown key learning_rate"),
    train(BASE + "num_env: 8\n", field="num_env", needle="did you mean num_envs", id="unknown key num_env"),
    train(BASE + "seeds: 8\n", field="seeds", needle="--seeds", id="seeds in a config"),
    train(BASE + "seed: 3\n", field="seed", needle="--seed", id="seed in a config"),
    train(BASE + "grid: {lr: [0.1]}\n", field="grid", needle="sweep: section", id="grid in a config"),
    setting("nonsense=1", "nonsense", "unknown key"),
    setting("clip_epsilon=0.2", "clip_epsilon", "did you mean clip_eps"),
    # --- every field's own rules (type and range) ------------------------------------------
    setting("env=3", "env", "must be a string"),
    setting("env=Pong", "env", "Pong-misc"),
    setting("env=CartPole-v2", "env", "did you mean CartPole-v1"),
    setting("env=atari/Pong", "env", "unknown environment family"),
    setting("env=crafttax/Craftax-Symbolic-v1", "env", "did you mean craftax/Craftax-Symbolic-v1?"),
    setting("env=MNISTBandit-bsuite", "env", "downloads a data set"),
    setting("env_params=[1]", "env_params", "must be a mapping"),
    setting("action_squash=round", "action_squash", "one of clip, tanh"),
    setting("action_squash=tanh", "action_squash", "only applies to continuous actions"),
    setting("num_envs=0", "num_envs", "at least 1"),
    setting("num_envs=four", "num_envs", "must be an integer"),
    setting("num_envs=4.5", "num_envs", "must be an integer"),
    setting("num_steps=-5", "num_steps", "at least 1"),
    setting("num_minibatches=3", "num_minibatches", "must divide the batch"),
    setting("num_minibatches=0", "num_minibatches", "at least 1"),
    setting("max_epochs=0", "max_epochs", "at least 1"),
    setting("total_timesteps=10", "total_timesteps", "at least one batch"),
    setting("total_timesteps=6.405e2", "total_timesteps", "must be an integer"),
    Cli("more than 2**31 updates", ["train", "base.yaml", "--set", "num_envs=1", "--set", "num_steps=1",
                                    "--set", "num_minibatches=1", "--set", "total_timesteps=1e13"],
        "total_timesteps", "at most 2**31-1"),
    setting("policy=lstm", "policy", "one of mlp, gru"),
    setting("gru_size=0", "gru_size", "at least 1"),
    setting("network=no_such_package.nets:build", "network", "cannot be imported"),
    setting("network=purejaxppo.networks:nothing", "network", "has no nothing"),
    setting("network=[1]", "network", "must be a string"),
    setting("network_kwargs={width: 8}", "network_kwargs", "only applies with network set"),
    setting("mask_actions=3", "mask_actions", "must be true or false"),
    setting("torso=resnet", "torso", "one of cnn"),
    setting("torso=cnn", "torso", "needs image observations [height, width(, channels)]"),
    setting("cnn_channels=[0]", "cnn_channels", "positive integers"),
    setting("cnn_strides=3", "cnn_strides", "positive integers"),
    Cli("cnn lists of unequal lengths", ["train", "c.yaml", "--set", "cnn_kernels=[3]"], "cnn_kernels",
        "must be lists of one length", {"c.yaml": "env: Breakout-MinAtar\ntorso: cnn\nnum_envs: 4\nnum_steps: 16\n"
                                                  "num_minibatches: 2\ntotal_timesteps: 640\n"}),
    Cli("network returning the wrong shapes", ["train", "c.yaml", "--set", "network=nets:wrong"], "network",
        "it returned [batch, 5] and [batch]",
        {"c.yaml": BASE, "nets.py": "import purejaxppo.networks as n\n"
                                    "def wrong(num_outputs): return n.ActorCritic(5)\n"}),
    # --- what a user's factory does, and what it returns ------------------------------------------
    Cli("env factory raising", ["train", "c.yaml"], "env", "make's factory(**env_params) failed: RuntimeError: no map",
        {"c.yaml": BASE.replace("CartPole-v1", "raising_env:make"),
         "raising_env.py": "def make():\n    raise RuntimeError('no map\\nsecond line')\n"}),
    Cli("env factory calling sys.exit", ["train", "c.yaml"], "env", "failed: SystemExit: 3",
        {"c.yaml": BASE.replace("CartPole-v1", "exiting_env:make"),
         "exiting_env.py": "import sys\n\ndef make():\n    sys.exit(3)\n"}),
    Cli("network factory raising", ["train", "base.yaml", "--set", "network=raising_net:make"], "network",
        "failed: ValueError: no such layer",
        {"raising_net.py": "def make(num_outputs):\n    raise ValueError('no such layer')\n"}),
    Cli("network of integer logits", ["train", "base.yaml", "--set", "network=int_net:make"], "network",
        "must return floating actor_out and value; its actor_out is int32[batch, 2]",
        {"int_net.py": "from user_networks import IntegerLogits\n\ndef make(num_outputs):\n"
                       "    return IntegerLogits(num_outputs)\n"}),
    Cli("env whose mask allows no action", ["train", "c.yaml"], "env", "allows no action in the state reset",
        {"c.yaml": BASE.replace("CartPole-v1", "closed_env:make"),
         "closed_env.py": "import jax.numpy as jnp\nfrom user_envs import corridor_with\n\ndef make():\n"
                          "    return corridor_with(action_mask=lambda state: jnp.zeros(3, bool))\n"}),
    Cli("env whose action box has low > high", ["train", "c.yaml"], "env",
        "action_space.low must not exceed action_space.high",
        {"c.yaml": BASE.replace("CartPole-v1", "box_env:make"),
         "box_env.py": "from purejaxppo.envs import ActionSpace, GymnaxEnv\n\ndef make():\n"
                       "    env = GymnaxEnv('Pendulum-v1')\n"
                       "    env.action_space = ActionSpace('continuous', shape=(1,), low=2.0, high=-2.0)\n"
                       "    return env\n"}),
    Cli("env whose actions are of no kind", ["train", "c.yaml"], "env", "must be discrete or continuous, not 'box'",
        {"c.yaml": BASE.replace("CartPole-v1", "kind_env:make"),
         "kind_env.py": "from purejaxppo.envs import ActionSpace\nfrom user_envs import corridor_with\n\n"
                        "def make():\n    return corridor_with(action_space=ActionSpace('box', num_actions=3))\n"}),
    Cli("action_squash tanh on an open box", ["train", "c.yaml", "--set", "action_squash=tanh"], "action_squash",
        "must be finite with low < high",
        {"c.yaml": BASE.replace("CartPole-v1", "open_env:make"),
         "open_env.py": "import numpy as np\nfrom purejaxppo.envs import ActionSpace, GymnaxEnv\n\ndef make():\n"
                        "    env = GymnaxEnv('Pendulum-v1')\n"
                        "    env.action_space = ActionSpace('continuous', shape=(1,), low=-2.0, high=np.inf)\n"
                        "    return env\n"}),
    Cli("gru minibatches split the envs", ["train", "base.yaml", "--set", "policy=gru", "--set",
                                           "num_minibatches=8"], "num_minibatches", "must divide num_envs=4"),
    setting("hidden_sizes=[64, 0]", "hidden_sizes", "positive integers"),
    setting("hidden_sizes=[]", "hidden_sizes", "non-empty list"),
    setting("info_metrics=[distance]", "info_metrics", "is not a number in CartPole-v1's step info"),
    setting("info_metrics=[a, a]", "info_metrics", "names a key twice"),
    setting("activation=gelu", "activation", "one of tanh, relu"),
    setting("init=xavier", "init", "one of orthogonal, lecun"),
    Cli("init lecun with a user's network", ["train", "base.yaml", "--set", "network=purejaxppo.networks:ActorCritic",
                                             "--set", "init=lecun"], "init", "only applies to the built-in networks"),
    setting("bootstrap_truncation=no_way", "bootstrap_truncation", "true or false"),
    setting("log_std_init=-0.5", "log_std_init", "only applies to continuous"),
    setting("normalize_obs=maybe", "normalize_obs", "true or false"),
    setting("obs_clip=0", "obs_clip", "must be positive"),
    setting("reward_scale=-1", "reward_scale", "must be positive"),
    setting("normalize_reward=1", "normalize_reward", "true or false"),
    setting("reward_clip=.nan", "reward_clip", "must be finite"),
    setting("lr=-1e-3", "lr", "must be positive"),
    setting("lr=fast", "lr", "must be a number"),
    setting("anneal_lr=2", "anneal_lr", "true or false"),
    setting("lr_warmup_updates=-1", "lr_warmup_updates", "non-negative"),
    setting("lr_warmup_updates=2.5", "lr_warmup_updates", "must be an integer"),
    setting("lr_warmup_start=-1e-3", "lr_warmup_start", "non-negative"),
    setting("clip_eps=0", "clip_eps", "must be positive"),
    setting("vf_clip_eps=-0.1", "vf_clip_eps", "or null: value loss not clipped"),
    setting("ent_coef=-0.01", "ent_coef", "non-negative"),
    setting("vf_coef=-1", "vf_coef", "non-negative"),
    setting("gamma=2", "gamma", "in [0, 1]"),
    setting("gamma=.nan", "gamma", "must be finite"),
    setting("gae_lambda=-0.1", "gae_lambda", "in [0, 1]"),
    setting("max_grad_norm=0", "max_grad_norm", "must be positive"),
    setting("target_kl=0", "target_kl", "positive"),
    setting("target_kl=.inf", "target_kl", "must be finite"),
    setting("update_epochs=0", "update_epochs", "at least 1"),
    setting("update_epochs=true", "update_epochs", "must be an integer"),
    setting("update_epochs=1099511627776", "update_epochs", "32 bits"),
    Cli("update_epochs above max_epochs", ["train", "base.yaml", "--set", "max_epochs=5", "--set",
                                           "update_epochs=6"], "update_epochs", "must not exceed max_epochs"),
    # --- the environment's parameters, checked against its own defaults --------------------------
    train(BASE + "env_params: {max_steps_in_episode: abc}\n", field="env_params.max_steps_in_episode",
          needle="must be an integer", id="env_params step count abc"),
    train(BASE + "env_params: {max_steps_in_episode: -5}\n", field="env_params.max_steps_in_episode",
          needle="at least 1", id="env_params step count -5"),
    train(BASE + "env_params: {max_steps_in_episode: 2.7}\n", field="env_params.max_steps_in_episode",
          needle="must be an integer", id="env_params step count 2.7"),
    train(BASE + "env_params: {gravity: abc}\n", field="env_params.gravity", needle="must be a number",
          id="env_params float abc"),
    train(BASE + "env_params: {gravity: .inf}\n", field="env_params.gravity", needle="must be finite",
          id="env_params float inf"),
    train(BASE + "env_params: {gravity: [1, 2]}\n", field="env_params.gravity", needle="must be a number",
          id="env_params float a list"),
    train(BASE + "env_params: {max_steps: 3}\n", field="env_params.max_steps", needle="no such parameter",
          id="env_params unknown"),
    train(BASE.replace("CartPole-v1", "Asterix-MinAtar") + "env_params: {ramping: 3}\n",
          field="env_params.ramping", needle="true or false", id="env_params bool"),
    train(BASE.replace("CartPole-v1", "Acrobot-v1") + "env_params: {available_torque: [1.0, 2.0]}\n",
          field="env_params.available_torque", needle="shape (3,)", id="env_params array shape"),
    # --- Brax settings and constructor arguments (typed and ranged by their defaults) -------
    train("env: brax/antt\n", field="env", needle="did you mean ant", id="brax unknown env"),
    train("env: brax/fast\nenv_params: {backend: physx}\n", field="env_params.backend", needle="one of",
          id="brax unknown backend"),
    train("env: brax/fast\nenv_params: {action_repeat: 0}\n", field="env_params.action_repeat",
          needle="at least 1", id="brax action_repeat 0"),
    train("env: brax/fast\nenv_params: {max_steps_in_episode: 9}\n", field="env_params.max_steps_in_episode",
          needle="no such parameter", id="brax: a gymnax parameter"),
    train(BASE + "env_params: {backend: spring}\n", field="env_params.backend", needle="no such parameter",
          id="gymnax: a Brax setting"),
    train("env: brax/ant\nenv_params: {backend: positional, ctrl_cost_weight: abc}\n",
          field="env_params.ctrl_cost_weight", needle="must be a number", id="brax float abc"),
    train("env: brax/ant\nenv_params: {backend: positional, healthy_z_range: [0.1]}\n",
          field="env_params.healthy_z_range", needle="shape (2,)", id="brax tuple shape"),
    train("env: brax/ant\nenv_params: {backend: positional, n_frames: 0}\n", field="env_params.n_frames",
          needle="at least 1", id="brax n_frames 0"),
    # --- command-line options --------------------------------------------------------------
    Cli("--seeds 0", ["train", "base.yaml", "--seeds", "0"], "--seeds", "--seeds=0"),
    Cli("--max-parallel 0", ["train", "base.yaml", "--max-parallel", "0"], "--max-parallel"),
    Cli("--eval-episodes 2**31", ["train", "base.yaml", "--eval-episodes", str(2**31)], "--eval-episodes",
        "below 2**31"),
    Cli("--set without =", ["train", "base.yaml", "--set", "lr"], "--set", "key=value"),
    Cli("--grid without =", ["sweep", "sweep.yaml", "--grid", "clip_eps"], "--grid", "key=v1,v2"),
    Cli("--grid without values", ["sweep", "sweep.yaml", "--grid", "clip_eps="], "--grid", "no values"),
    Cli("--grid unknown key", ["sweep", "sweep.yaml", "--grid", "learning_rate=0.1,0.2"], "grid.learning_rate",
        "did you mean lr"),
    Cli("--grid bad value", ["sweep", "sweep.yaml", "--grid", "clip_eps=0.1,wide"], "clip_eps",
        "must be a number"),
    Cli("--grid a value twice", ["sweep", "sweep.yaml", "--grid", "clip_eps=0.1,0.2,0.1"], "grid.clip_eps",
        "gives 0.1 twice"),
    Cli("--grid a key twice", ["sweep", "sweep.yaml", "--grid", "lr=0.1", "--grid", "lr=0.2"], "--grid",
        "given twice"),
    Cli("--seeds not a number", ["train", "base.yaml", "--seeds", "two"], "--seeds", "invalid int value: 'two'"),
    Cli("--seed not a number", ["train", "base.yaml", "--seed", "1.5"], "--seed", "invalid int value: '1.5'"),
    Cli("--seed beyond the key range", ["train", "base.yaml", "--seed", str(2**32)], "--seed", "2**32"),
    Cli("--checkpoint-every 0", ["train", "base.yaml", "--checkpoint-every", "0"], "--checkpoint-every",
        "at least 1"),
    Cli("--keep 0", ["sweep", "sweep.yaml", "--keep", "0"], "--keep", "at least 1"),
    Cli("--out a file", ["train", "base.yaml", "--out", "base.yaml"], "--out", "exists and is not an empty folder"),
    Cli("--out not UTF-8", ["train", "base.yaml", "--out", os.fsdecode(b"out-\xff")], "--out",
        "bytes that are not UTF-8"),
    Cli("--resume not a folder", ["train", "--resume", "nothing"], "--resume", "is not a folder"),
    Cli("--resume not UTF-8", ["sweep", "--resume", os.fsdecode(b"run-\xfe")], "--resume",
        "bytes that are not UTF-8"),
    Cli("--wandb without wandb", ["train", "base.yaml", "--wandb", "project"], "--wandb", "pip install wandb",
        absent=("wandb",)),
    Cli("an unknown option", ["train", "base.yaml", "--seed-count", "3"], "--seed-count", "unrecognized arguments"),
    Cli("an unknown command", ["trian", "base.yaml"], "command", "invalid choice: 'trian'"),
    # --- eval -------------------------------------------------------------------------------------
    Cli("eval: no run folder", ["eval", "nothing"], "nothing", "no checkpoints/ folder"),
    Cli("eval: --episodes 0", ["eval", "nothing", "--episodes", "0"], "--episodes", "at least 1"),
    Cli("eval: --episodes not a number", ["eval", "nothing", "--episodes", "ten"], "--episodes", "invalid int value"),
    Cli("eval: --seed -1", ["eval", "nothing", "--seed", "-1"], "--seed", "[0, 2**32 - seeds]"),
    Cli("eval: --step not a number", ["eval", "nothing", "--step", "last"], "--step", "invalid int value"),
    Cli("eval: --render a file that exists", ["eval", "nothing", "--render", "base.yaml"], "--render",
        "replays never replace a file"),
    Cli("eval: folder not UTF-8", ["eval", os.fsdecode(b"run-\xfd")], "folder", "bytes that are not UTF-8"),
    # --- export ---------------------------------------------------------------------------------
    Cli("export: no run folder", ["export", "nothing"], "nothing", "no checkpoints/ folder"),
    Cli("export: --format unknown", ["export", "nothing", "--format", "tflite"], "--format",
        "invalid choice: 'tflite'"),
    Cli("export: --format onnx without the extra", ["export", "nothing", "--format", "onnx"], "--format",
        f"not installed: {install_line('onnx')} (jax2onnx", absent=("jax2onnx",)),
    Cli("export: --outputs unknown", ["export", "nothing", "--outputs", "logits"], "--outputs",
        "invalid choice: 'logits'"),
    Cli("export: --run -1", ["export", "nothing", "--run", "-1"], "--run", "must be a non-negative integer"),
    Cli("export: --run not a number", ["export", "nothing", "--run", "one"], "--run", "invalid int value"),
    Cli("export: --checkpoint -1", ["export", "nothing", "--checkpoint", "-1"], "--checkpoint",
        "must be a non-negative integer"),
    Cli("export: --run out of range", ["export", str(RUN_0_4), "--run", "7"], "--run", "has no run 7"),
    Cli("export: --checkpoint not saved", ["export", str(RUN_0_4), "--checkpoint", "3"], "--checkpoint",
        "no checkpoint at that update"),
    Cli("export: --out exists", ["export", "nothing", "--out", "base.yaml"], "--out", "never replaces a file"),
    Cli("export: --out in a missing folder", ["export", "nothing", "--out", "no/p.onnx"], "--out",
        "does not exist"),
    # --- sweep files -------------------------------------------------------------------------
    sweep_file(BASE, "sweep", "no sweep: section", id="sweep file without a sweep: section"),
    sweep_file(BASE + "sweep: 5\n", "sweep", "must be a mapping", id="sweep: 5"),
    sweep_file(BASE + "sweep: {grid: {lr: [0.1]}}\nsweep: {seeds: 2}\n", "sweep", "given twice",
               id="sweep: twice"),
    sweep_file("sweep: {grid: {lr: [0.1]\n", "sweep file", "not valid YAML", id="sweep file: yaml syntax"),
    sweep_file(BASE + "learning_rate: 0.1\nsweep: {grid: {clip_eps: [0.1]}}\n", "learning_rate",
               "did you mean lr", id="sweep file: unknown config key"),
    section("  grid: [0.1, 0.2]\n", "sweep.grid", "must be a mapping"),
    section("  grid: clip_eps\n", "sweep.grid", "must be a mapping"),
    section("  grid: {}\n", "grid", "is empty"),
    section("  grid: {clip_eps: 0.1}\n", "grid.clip_eps", "non-empty list"),
    section("  grid: {clip_eps: [0.1, 0.2, 0.1]}\n", "grid.clip_eps", "gives 0.1 twice"),
    section("  grid: {hidden_sizes: [[8], [8]]}\n", "grid.hidden_sizes", "gives [8] twice"),
    section("  grid: {clip_eps: []}\n", "grid.clip_eps", "non-empty list"),
    section("  grid: {env: [Acrobot-v1]}\n", "grid.env", "one sweep is one environment"),
    section("  grid: {learning_rate: [0.1]}\n", "grid.learning_rate", "did you mean lr"),
    section("  grid: {num_minibatches: [2, 3]}\n", "num_minibatches", "in sweep point"),
    section("  grid: {env_params: [{max_steps_in_episode: -5}]}\n", "env_params.max_steps_in_episode",
            "at least 1"),
    section("  random: 5\n", "sweep.random", "must be a mapping"),
    section("  random: {lr: {loguniform: [0.0001, 0.001]}}\n", "random.trials", "at least 1"),
    section("  random: {trials: 2, lr: {loguniform: [0, 1]}}\n", "random.lr", "low > 0"),
    section("  random: {trials: 2, lr: {normal: [0, 1]}}\n", "random.lr", "uniform, loguniform, choice"),
    section("  random: {trials: 2}\n", "random", "names no key"),
    section("  diagnosis: 5\n", "sweep.diagnosis", "must be a mapping"),
    section("  diagnosis: {under_used: 0.1}\n", "diagnosis.under_used", "unknown"),
    section("  diagnosis: {under_used_below: -1}\n", "diagnosis.under_used_below", "non-negative"),
    section("  random_seed: abc\n", "sweep.random_seed", "must be a non-negative integer"),
    section("  seeds: abc\n", "sweep.seeds", "must be an integer"),
    section("  seeds: 0\n", "sweep.seeds", "at least 1"),
    section("  threshold: abc\n", "sweep.threshold", "must be a number"),
    section("  eval_episodes: -1\n", "sweep.eval_episodes", "non-negative"),
    section("  gird: {lr: [0.1]}\n", "sweep.gird", "sweep keys are"),
    # --- PBT (sweep: pbt:) ------------------------------------------------------------------
    pbt_section("population: 1", "pbt.population", "at least 2"),
    pbt_section("population: 2.5", "pbt.population", "must be an integer"),
    pbt_section("interval: 0", "pbt.interval", "at least 1"),
    pbt_section("interval: 11", "pbt.interval", "at most the run's 10 updates"),
    pbt_section("exploit: 0", "pbt.exploit", "in (0, 0.5]"),
    pbt_section("exploit: 0.6", "pbt.exploit", "in (0, 0.5]"),
    pbt_section("explore: {perturb: [0.8, 0]}", "pbt.explore.perturb", "positive factors"),
    pbt_section("explore: {perturb: [-1.25]}", "pbt.explore.perturb", "positive factors"),
    pbt_section("explore: {resample: 2}", "pbt.explore.resample", "probability in [0, 1]"),
    pbt_section("explore: {jitter: 0.1}", "pbt.explore.jitter", "explore keys are perturb, resample"),
    pbt_section("fitness: eval_return", "pbt.fitness", "one of episode_return"),
    pbt_section("elite: 2", "pbt.elite", "pbt keys are"),
    pbt_section("hyperparameters: {num_envs: {choice: [4, 8]}}", "pbt.hyperparameters.num_envs",
                "static keys split the compile"),
    pbt_section("hyperparameters: {activation: {choice: [tanh, relu]}}", "pbt.hyperparameters.activation",
                "cannot change during a run"),
    pbt_section("hyperparameters: {update_epochs: {choice: [1, 2]}}", "pbt.hyperparameters.update_epochs",
                "number keys only"),
    pbt_section("hyperparameters: {learning_rate: {loguniform: [1.0e-4, 1.0e-2]}}",
                "pbt.hyperparameters.learning_rate", "did you mean lr"),
    pbt_section("hyperparameters: {lr: {loguniform: [0, 1.0e-2]}}", "pbt.hyperparameters.lr", "low > 0"),
    pbt_section("hyperparameters: {lr: {loguniform: [1.0e-2, 1.0e-4]}}", "pbt.hyperparameters.lr", "low < high"),
    pbt_section("hyperparameters: {gamma: {uniform: [0.9, 1.5]}}", "pbt.hyperparameters.gamma", "in [0, 1]"),
    pbt_section("hyperparameters: {}", "pbt.hyperparameters", "at least one key"),
    section("  grid: {clip_eps: [0.1, 0.2]}\n  pbt: {population: 4, interval: 2, hyperparameters: {lr: {uniform: "
            "[0.001, 0.01]}}}\n", "sweep.pbt", "give one of them"),
    section("  random: {trials: 2, ent_coef: {uniform: [0, 0.01]}}\n  pbt: {population: 4, interval: 2, "
            "hyperparameters: {lr: {uniform: [0.001, 0.01]}}}\n", "sweep.pbt", "is given with random:"),
    Cli("pbt with --grid", ["sweep", "s.yaml", "--grid", "clip_eps=0.1,0.2"], "sweep.pbt", "give one of them",
        {"s.yaml": BASE + "sweep:\n  pbt: {population: 4, interval: 2, hyperparameters: {lr: {uniform: "
                          "[0.001, 0.01]}}}\n"}),
    # --- bounds before anything runs: memory, 32-bit integers ----------------------------
    Cli("--seeds beyond the memory", ["train", "base.yaml", "--seeds", str(2**31 - 1)], "--seeds", "could fit"),
    Cli("--eval-episodes beyond the memory", ["train", "base.yaml", "--seeds", "1000", "--eval-episodes",
                                              str(2**31 - 1)], "--eval-episodes", "could fit"),
    Cli("--seed beyond the key range with the file's seeds", ["sweep", "s.yaml", "--seed", str(2**32 - 2)], "--seed",
        "2**32", {"s.yaml": SWEEP.replace("sweep:\n", "sweep:\n  seeds: 5\n")}),
    section("  seeds: 2147483647\n", "sweep.seeds", "could fit"),
    section("  seeds: 2147483648\n", "sweep.seeds", "below 2**31"),
    section("  random: {trials: 2147483647, lr: {loguniform: [0.0001, 0.001]}}\n", "random.trials", "could fit"),
    section("  random_seed: 100000000000000000000\n", "sweep.random_seed", "below 2**32"),
    section("  eval_episodes: 2147483648\n", "sweep.eval_episodes", "below 2**31"),
    pbt_section("population: 2147483647", "pbt.population", "could fit"),
    pbt_section("population: 1000000000000", "pbt.population", "below 2**31"),
    setting("num_envs=2147483648", "num_envs", "32 bits"),
    setting("hidden_sizes=[64, 2147483648]", "hidden_sizes", "32 bits"),
    pbt_section("explore: {perturb: [.inf]}", "pbt.explore.perturb", "inf is not"),
    pbt_section("explore: {perturb: [0.8, .nan]}", "pbt.explore.perturb", "nan is not"),
    pbt_section("explore: {perturb: [1.0e+308]}", "pbt.explore.perturb", "1e+308 is not"),
    pbt_section("explore: {perturb: [0.8, 0]}", "pbt.explore.perturb", "0 is not"),
    pbt_section("fitness: [episode_return]", "pbt.fitness", "one of episode_return"),
    pbt_section("fitness: {episode_return: 1}", "pbt.fitness", "one of episode_return"),
    train("", needle="is empty (no key): name at least env", id="empty config file"),
    train("# lr: 0.1\n", needle="is empty (no key)", id="config file of comments only"),
    train("{}\n", needle="is empty (no key)", id="config file {}"),
    sweep_file("", "sweep file", "is empty (no key)", id="empty sweep file"),
    # --- Python API doors ------------------------------------------------------------------------
    Api("load: run given as a string", lambda: ppo.load(RUN_0_4, run="0"), "run", "must be an integer"),
    Api("load: step given as a string", lambda: ppo.load(RUN_0_4, step="4"), "step", "must be an integer"),
    Api("make_policy: no state", lambda: ppo.make_policy(tiny(), None), "state", "must be a LearnerState"),
    Api("make_policy: an observation of the wrong size", lambda: policy()(np.zeros(3)), "obs",
        "has shape [3]; this policy takes one observation [4] or a batch [n, 4]"),
    Api("make_policy: a batch of the wrong size", lambda: policy()(np.zeros((2, 5))), "obs", "has shape [2, 5]"),
    Api("make_config: not a mapping", lambda: ppo.make_config([("lr", 0.1)]), "config"),
    Api("make_config: non-string key", lambda: ppo.make_config({1: 2}), "1", "unknown key"),
    Api("make_config: alias n_envs", lambda: ppo.make_config({"n_envs": 8}), "n_envs", "did you mean num_envs"),
    Api("make_train: PPOConfig(total_timesteps=100)", hand_built(total_timesteps=100), "total_timesteps"),
    Api("sweep: first_seed 2**32", lambda: ppo.sweep(tiny(), seeds=1, first_seed=2**32), "first_seed", "2**32"),
    Api("Learner: PPOConfig(num_minibatches=3)", hand_built("Learner", num_minibatches=3), "num_minibatches"),
    Api("make_train: PPOConfig(lr=-1)", hand_built(lr=-1.0), "lr"),
    Api("make_train: update_epochs above max_epochs", hand_built(update_epochs=6, max_epochs=5), "update_epochs"),
    Api("Learner: PPOConfig(env=...)", hand_built("Learner", env="Nope-v0"), "env"),
    Api("Learner: log_std_init on discrete", hand_built("Learner", log_std_init=-0.5), "log_std_init"),
    Api("Learner: env_params", hand_built("Learner", env_params={"max_steps_in_episode": -5}),
        "env_params.max_steps_in_episode"),
    Api("register: a built-in gymnax name", lambda: ppo.envs.register("CartPole-v1", dict), "env",
        "clashes with the built-in gymnax environment"),
    Api("make_policy: a network module's state without network=", lambda: ppo.make_policy(
        tiny(), ppo.Learner(tiny(), network=user_networks.TwoTowers(2)).init(jax.random.PRNGKey(0))), "network",
        "make_policy(cfg, state, network=module)"),
    Api("ppo.sweep: seeds beyond the memory", lambda: ppo.sweep(tiny(), seeds=2**31 - 1), "seeds", "could fit"),
    Api("ppo.pbt: a perturb factor beyond float32", lambda: ppo.pbt(tiny(), {
        "population": 2, "interval": 2, "hyperparameters": LR_UNIFORM, "explore": {"perturb": [1e308]}}),
        "pbt.explore.perturb", "1e+308 is not"),
    Api("make_train: not a PPOConfig", lambda: ppo.make_train({"lr": 0.1}), "config"),
    Api("make_train: eval_episodes", lambda: ppo.make_train(tiny(), eval_episodes=-1), "eval_episodes"),
    Api("HParams.stack: negative lr", stacked(lr=[1e-3, -1e-3]), "lr", "(run 1)"),
    Api("HParams.stack: NaN gamma", stacked(gamma=[float("nan")]), "gamma", "must be finite"),
    Api("HParams.stack: update_epochs above the scan", stacked(update_epochs=[4, 5]), "update_epochs",
        "epochs_scan=4"),
    Api("HParams.stack: run axis disagrees with runs", stacked(runs=3, lr=[1e-3, 2e-3]), "lr", "runs is 3"),
    Api("HParams.stack: run axes disagree", stacked(lr=[1e-3], clip_eps=[0.1, 0.2]), "clip_eps", "lr has 1"),
    Api("HParams.stack: a static field", stacked(num_envs=[4, 8]), "num_envs", "static structure"),
    Api("HParams.stack: unknown field", stacked(learning_rate=[1e-3]), "learning_rate", "did you mean lr"),
    Api("HParams.stack: not a list", stacked(lr=1e-3), "lr", "one per run"),
    Api("Learner.run: NaN gamma", run_with(lambda c: HParams.from_config(c).replace(gamma=jnp.float32(jnp.nan))),
        "gamma", "must be finite"),
    Api("Learner.run: negative lr", run_with(lambda c: HParams.from_config(c).replace(lr=jnp.float32(-1.0))),
        "lr", "must be positive"),
    Api("Learner.run: update_epochs above the scan",
        run_with(lambda c: HParams.from_config(c).replace(update_epochs=jnp.int32(9))), "update_epochs"),
    Api("Learner.run: update_epochs of the config above max_epochs",
        lambda: ppo.Learner(dataclasses.replace(tiny(max_epochs=4), update_epochs=6)).run(None),
        "update_epochs"),
    Api("Learner.run: not HParams", run_with(lambda c: {"lr": 0.1}), "hparams"),
    Api("ppo.pbt: a population of one",
        lambda: ppo.pbt(tiny(), {"population": 1, "interval": 2, "hyperparameters": LR_UNIFORM}),
        "pbt.population", "at least 2"),
    Api("ppo.pbt: an interval longer than the run",
        lambda: ppo.pbt(tiny(), {"population": 2, "interval": 99, "hyperparameters": LR_UNIFORM}),
        "pbt.interval", "at most the run's 10 updates"),
    Api("ppo.pbt: no section", lambda: ppo.pbt(tiny()), "sweep.pbt", "a PBT run needs a pbt: section"),
    Api("Learner.run: num_updates", lambda: ppo.Learner(tiny()).run(None, None, -1), "num_updates"),
    Api("train: stacked HParams without vmap",
        traced_train(lambda c: HParams.stack(c, lr=[1e-3, 2e-3])), "lr", "vmap over the run axis"),
    Api("train: a wrong dtype", traced_train(lambda c: HParams.from_config(c).replace(update_epochs=jnp.float32(2))),
        "update_epochs", "must be an integer array"),
]


def _case_id(case) -> str:
    return case.id


@pytest.mark.parametrize("case", [c for c in CASES if isinstance(c, Cli)], ids=_case_id)
def test_cli_refuses_in_one_line(case: Cli, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("base.yaml").write_text(BASE)
    Path("sweep.yaml").write_text(SWEEP)
    for name, content in case.files.items():
        Path(name).parent.mkdir(parents=True, exist_ok=True)
        (Path(name).write_bytes if isinstance(content, bytes) else Path(name).write_text)(content)
    for module in case.absent:
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    capsys.readouterr()
    runs = case.argv[0] in ("train", "sweep") and "--out" not in case.argv  # a run's folder would be out/
    code = cli.main([*case.argv, "--out", "out"] if runs else [*case.argv])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in err + out
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    line = lines[0]
    assert line.startswith("purejaxppo: error: "), line
    assert case.field in line and case.needle in line, line
    assert f"{case.field}=None" not in line and "NO_VALUE" not in line, line
    assert not Path("out").exists() and not Path("runs").exists(), "a run folder was created"


@pytest.mark.parametrize("case", [c for c in CASES if isinstance(c, Api)], ids=_case_id)
def test_python_api_refuses_naming_the_field(case: Api):
    with pytest.raises(ConfigError) as info:
        case.call()
    error = info.value
    assert error.field == case.field, str(error)
    assert case.needle in str(error) and "\n" not in str(error), str(error)
    assert f"{case.field}=None" not in str(error) and "NO_VALUE" not in str(error)


# Fields no case can break (none today; say why beside each one added here).
UNBREAKABLE: dict[str, str] = {}
# Command-line options no case can break, with why.
UNBREAKABLE_OPTIONS = {
    "-h": "prints and exits", "--help": "prints and exits", "--help-config": "prints and exits", "--version": "prints and exits",
    "--tensorboard": "a flag: takes no value", "--no-cluster": "a flag: takes no value",
    "--no-cache": "a flag: takes no value", "--stochastic": "a flag: takes no value",
    "--json": "a flag: takes no value",
}


def test_every_field_joins_the_matrix():
    """Every config field is broken by at least one case: a new field must join the table."""
    named = {case.field.split(".")[0] for case in CASES}
    missing = [name for name in config.FIELDS if name not in named and name not in UNBREAKABLE]
    assert not missing, f"add a case to CASES that breaks each of {missing} (or list it in UNBREAKABLE, with why)"
    ruled = {name for name, f in config.FIELDS.items() if f.rules}
    assert ruled <= named, ruled - named


def _options() -> set[str]:
    """Every option and positional argument of every command (`command` for the command itself)."""
    parser = options.parser()
    names = {"command"}
    for sub in [parser, *parser._subparsers._group_actions[0].choices.values()]:
        for action in sub._actions:
            names.update(action.option_strings or ([action.dest] if action.dest != "command" else []))
    return names


def test_every_option_joins_the_matrix():
    """Every command-line option is broken by at least one case (a flag is listed with why it cannot be)."""
    named = {case.field for case in CASES if isinstance(case, Cli)}
    missing = sorted(o for o in _options() if o not in named and o not in UNBREAKABLE_OPTIONS)
    assert not missing, f"add a case to CASES that breaks each of {missing} (or list it in UNBREAKABLE_OPTIONS, with why)"


def test_numpy_scalars_are_the_numbers_they_are():
    cfg = ppo.make_config({"num_envs": np.int64(8), "lr": np.float32(1e-3), "anneal_lr": np.bool_(False),
                           "hidden_sizes": [np.int64(32), np.int32(16)], "gamma": np.float64(0.9),
                           "env_params": {"max_steps_in_episode": np.int64(100), "gravity": np.float32(9.0)}})
    assert cfg.num_envs == 8 and type(cfg.num_envs) is int
    assert cfg.lr == pytest.approx(1e-3) and type(cfg.lr) is float
    assert cfg.anneal_lr is False and cfg.hidden_sizes == (32, 16) and type(cfg.gamma) is float
    assert ppo.make_env(cfg).env.env._params.max_steps_in_episode == 100


def test_checked_hparams_equal_the_configs_and_run_vmapped():
    cfg = tiny(max_epochs=3, update_epochs=2)
    hp = HParams.stack(cfg, runs=3, lr=[1e-4, 3e-4, 1e-3], update_epochs=[1, 2, 3])
    assert hp.lr.shape == (3,) and hp.lr.dtype == np.float32 and hp.update_epochs.dtype == np.int32
    assert hp.clip_eps.tolist() == pytest.approx([0.2] * 3)
    one = HParams.stack(cfg, runs=1)
    single = HParams.from_config(cfg)
    for name in config.HPARAM_FIELDS:
        assert np.asarray(getattr(one, name))[0] == np.asarray(getattr(single, name)), name
    assert np.isinf(HParams.stack(tiny(target_kl=None), runs=2).target_kl).all()
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    shapes = jax.eval_shape(jax.vmap(ppo.make_train(cfg)), keys, hp)  # traces: shapes agree, nothing compiles
    assert shapes.metrics["episode_return"].shape == (3, cfg.num_updates)


def test_a_checked_hand_built_config_is_the_made_one():
    made = tiny(hidden_sizes=[32])
    by_hand = PPOConfig(**{**made.to_dict(), "hidden_sizes": [32], "num_envs": np.int64(4)})
    assert ppo.Learner(by_hand).cfg == made


def test_mnist_bandit_is_excluded_on_purpose():
    with pytest.raises(ConfigError, match="downloads a data set") as info:
        ppo.make_config({"env": "MNISTBandit-bsuite"})
    assert "unknown" not in str(info.value)
