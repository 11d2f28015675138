"""purejaxppo: end-to-end JAX-compiled PPO on accelerator-native environments.

`load`, `sweep`, `pbt` and `SweepResult` belong to the experiment side (purejaxppo.experiments):
they are imported the first time they are asked for, so importing the core
(`import purejaxppo.gae`, `purejaxppo.train`, ...) loads no experiment module."""

import importlib

from purejaxppo import distributions, envs, losses, networks
from purejaxppo.compiler import compiler_options, jit
from purejaxppo.config import ConfigError, HParams, PPOConfig, check_config, load_config, make_config
from purejaxppo.envs import make_env
from purejaxppo.export import export_policy
from purejaxppo.gae import gae
from purejaxppo.policy import Policy, make_policy
from purejaxppo.train import Learner, LearnerState, TrainResult, make_train

__version__ = "0.4.0"

# name -> the experiment-side module that defines it
_LAZY = {"load": "purejaxppo.experiments.saved", "sweep": "purejaxppo.experiments.sweep",
         "pbt": "purejaxppo.experiments.kinds.pbt_api", "SweepResult": "purejaxppo.experiments.sweep"}

__all__ = ["ConfigError", "HParams", "check_config", "Learner", "LearnerState", "PPOConfig", "Policy", "SweepResult",
           "TrainResult", "compiler_options", "distributions", "envs", "export_policy", "gae", "jit", "load",
           "load_config", "losses", "make_config", "make_env", "make_policy", "make_train", "networks", "pbt", "sweep"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'purejaxppo' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # asked once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
