"""purejaxppo: end-to-end JAX-compiled PPO on accelerator-native environments."""

from purejaxppo import distributions, losses
from purejaxppo.compiler import compiler_options
from purejaxppo.config import ConfigError, HParams, PPOConfig, check_config, load_config, make_config
from purejaxppo.envs import make_env
from purejaxppo.gae import gae
from purejaxppo.train import Learner, LearnerState, RunnerState, TrainResult, make_policy, make_train
from purejaxppo.experiments.checkpoint import load
from purejaxppo.experiments.sweep import SweepResult, sweep  # noqa: E402  (the function shadows the module name)

__version__ = "0.4.0"

__all__ = ["ConfigError", "HParams", "check_config", "Learner", "LearnerState", "PPOConfig", "RunnerState", "SweepResult",
           "TrainResult", "compiler_options", "distributions", "gae", "load", "load_config", "losses", "make_config",
           "make_env", "make_policy", "make_train", "sweep"]
