"""The declaration: every config key once, in `FIELDS` (type, static or traced, default,
what null means, rules, a line of help), and `PPOConfig`, derived from it."""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any, Callable, Mapping

import jax.numpy as jnp

# --------------------------------------------------------------------------------------
# The declaration
# --------------------------------------------------------------------------------------
# type name -> Python type of the checked value
TYPES: Mapping[str, Any] = types.MappingProxyType({
    "int": int, "float": float, "bool": bool, "str": str,
    "list of positive ints": tuple[int, ...],
    "list of names": tuple[str, ...],
    "mapping": Mapping[str, Any],  # null reads as {}
})
# dtype of a traced field's value in HParams, by type
_HPARAM_DTYPES = {"bool": jnp.bool_, "int": jnp.int32, "float": jnp.float32}


@dataclasses.dataclass(frozen=True)
class Rule:
    """A condition on one (non-null) value; a value that breaks it is "must be {text}"."""

    text: str
    holds: Callable[[Any], bool]


AT_LEAST_1 = Rule("at least 1", lambda v: v >= 1)
POSITIVE = Rule("positive", lambda v: v > 0)
NON_NEGATIVE = Rule("non-negative", lambda v: v >= 0)
IN_0_1 = Rule("in [0, 1]", lambda v: 0.0 <= v <= 1.0)


def one_of(*choices: str) -> Rule:
    return Rule(f"one of {', '.join(choices)}", lambda v: v in choices)


@dataclasses.dataclass(frozen=True)
class Field:
    """One config key. `null` says what null means; None: null is not allowed."""

    name: str
    type: str  # a key of TYPES
    default: Any
    help: str
    traced: bool = False  # True: a value of HParams (a sweep vmaps over it); False: static structure
    null: str | None = None
    rules: tuple[Rule, ...] = ()
    action_kind: str | None = None  # only meaningful for this action kind (set only then)

    @property
    def annotation(self) -> Any:
        return TYPES[self.type] | None if self.null is not None else TYPES[self.type]


def _table(*fields: Field) -> Mapping[str, Field]:
    """The declaration as a read-only mapping name -> Field, in declaration order."""
    table = {}
    for f in fields:
        if f.name in table or f.type not in TYPES or not f.help:
            raise ValueError(f"bad field declaration: {f}")
        if f.traced and (f.type not in _HPARAM_DTYPES or (f.null is not None and f.type != "float")):
            raise ValueError(f"{f.name}: traced fields are bool, int or float scalars; only a float "
                             f"may be null (traced as +inf, so every run has the same program)")
        table[f.name] = f
    return types.MappingProxyType(table)


ACTIVATIONS = ("tanh", "relu", "swish")

FIELDS: Mapping[str, Field] = _table(
    # --- static structure ---------------------------------------------------------
    Field("env", "str", "CartPole-v1",
          "family/name: gymnax/<any gymnax env> (a bare name is gymnax's; not MNISTBandit, which downloads "
          "data), brax/<env> (ant, hopper, inverted_pendulum, fast, ...), craftax/, xminigrid/, jumanji/; "
          "or your own: a name given to purejaxppo.envs.register, an installed entry point, or "
          "package.module:factory"),
    Field("env_params", "mapping", {},
          "the environment's parameters, e.g. gymnax {max_steps_in_episode: 200}; Brax {backend: spring, "
          "episode_length: 1000, action_repeat: 1} and its constructor's arguments"),
    Field("num_envs", "int", 4, "environments stepped in parallel; batch = num_envs × num_steps per update",
          rules=(AT_LEAST_1,)),
    Field("num_steps", "int", 128, "steps per environment per update", rules=(AT_LEAST_1,)),
    Field("num_minibatches", "int", 4,
          "must divide the batch; minibatches are reshuffled every epoch and cover the batch",
          rules=(AT_LEAST_1,)),
    Field("max_epochs", "int", None, "length of the epoch scan; lets a sweep vary update_epochs up to it",
          null="update_epochs", rules=(AT_LEAST_1,)),
    Field("total_timesteps", "int", 500_000, "environment steps per run; updates = total_timesteps // batch",
          rules=(AT_LEAST_1,)),
    Field("policy", "str", "mlp",
          "mlp: separate actor and critic MLPs on the observation; gru: obs -> dense(gru_size) -> GRU "
          "(a memory, restarted at each episode's start) -> actor and critic MLPs; minibatches are then "
          "whole sequences (num_minibatches must divide num_envs)", rules=(one_of("mlp", "gru"),)),
    Field("gru_size", "int", 128, "policy gru only: width of the encoder and of the GRU's memory",
          rules=(AT_LEAST_1,)),
    Field("torso", "str", None,
          "the built-in networks' torso, shared by actor and critic: cnn (convolutions, then flattened) for "
          "image observations [height, width(, channels)]", null="the observation, flattened",
          rules=(one_of("cnn"),)),
    Field("cnn_channels", "list of positive ints", (16, 32), "torso cnn: output channels of each convolution"),
    Field("cnn_kernels", "list of positive ints", (3, 3), "torso cnn: kernel size of each convolution (square)"),
    Field("cnn_strides", "list of positive ints", (1, 1), "torso cnn: stride of each convolution (VALID padding)"),
    Field("network", "str", None,
          "your own flax.linen actor-critic, package.module:factory, built as factory(num_outputs, "
          "**network_kwargs); module(obs) -> (logits or means, value), or recurrent (docs: your own network)",
          null="the built-in network of policy"),
    Field("network_kwargs", "mapping", {}, "network only: keyword arguments of its factory"),
    Field("hidden_sizes", "list of positive ints", (64, 64),
          "hidden layers of the separate actor and critic MLPs"),
    Field("activation", "str", "tanh", "the MLPs' activation", rules=(one_of(*ACTIVATIONS),)),
    Field("init", "str", "orthogonal",
          "the built-in networks' initialisation: orthogonal (weights of gain sqrt(2) in hidden layers, 0.01 on "
          "the policy head, 1.0 on the value head and in the GRU; zero biases) or lecun (flax's default: "
          "LeCun-normal weights, variance 1 / fan-in, in every layer; biases uniform in [0, 0.05): gymnax-blines' "
          "networks); the parameters' names and shapes are the same", rules=(one_of("orthogonal", "lecun"),)),
    Field("log_std_init", "float", None, "continuous actions only: initial state-independent log-std",
          null="0.0", action_kind="continuous"),
    Field("action_squash", "str", None,
          "continuous actions only: a Gaussian sample becomes the env's action by clip (to the action range, "
          "for the step only) or tanh (squashed into it, with the log-determinant in the log-probability: "
          "Brax's trainer's policy)", null="clip", rules=(one_of("clip", "tanh"),), action_kind="continuous"),
    Field("mask_actions", "bool", True,
          "apply the environment's action mask, where it has one (action_mask(state)): the policy acts, and "
          "the loss's log-probabilities and entropy are computed, over the allowed actions only; false ignores "
          "it, for comparison"),
    Field("normalize_obs", "bool", False,
          "normalise observations by their running mean and variance (kept in the learner state, "
          "merged after each update from its rollout, saved with checkpoints)"),
    Field("obs_clip", "float", 10.0, "normalised observations are clipped to ±obs_clip", rules=(POSITIVE,)),
    Field("reward_scale", "float", 1.0,
          "rewards are multiplied by it before learning, and before normalize_reward (Brax's reward_scaling)",
          rules=(POSITIVE,)),
    Field("normalize_reward", "bool", False,
          "divide rewards by the running standard deviation of the discounted return"),
    Field("reward_clip", "float", 10.0, "normalised rewards are clipped to ±reward_clip", rules=(POSITIVE,)),
    Field("info_metrics", "list of names", (),
          "entries of the environment's step info logged as metrics, info_<name>: each a number per step, "
          "averaged over the update's num_steps × num_envs steps"),
    Field("bootstrap_truncation", "bool", True,
          "GAE bootstraps a time limit (a truncated, not terminated, episode) from the value of its final "
          "observation; false treats it as a termination (no bootstrap): biased, since a time-out is not a "
          "terminal state, but what gymnax before 1.0 and gymnax-blines did; on MountainCar it acts as a shaping"),
    # --- traced hyperparameters ---------------------------------------------------
    Field("lr", "float", 2.5e-4, "Adam learning rate (Adam eps 1e-5)", traced=True, rules=(POSITIVE,)),
    Field("anneal_lr", "bool", True, "decay lr linearly to 0 over the run", traced=True),
    Field("lr_warmup_updates", "int", 0,
          "a warm-up: over the first lr_warmup_updates updates the rate moves linearly from lr_warmup_start "
          "(update 0) towards lr; from then on it is the rate without warm-up (lr, or with anneal_lr its decay "
          "over the whole run, which the warm-up replaces over its updates); 0: none", traced=True,
          rules=(NON_NEGATIVE,)),
    Field("lr_warmup_start", "float", 0.0,
          "the warm-up's rate at update 0 (above lr: a warm-up that falls, as gymnax-blines')", traced=True,
          rules=(NON_NEGATIVE,)),
    Field("clip_eps", "float", 0.2, "policy clip range", traced=True, rules=(POSITIVE,)),
    Field("vf_clip_eps", "float", 0.2, "value clip range", traced=True,
          null="value loss not clipped", rules=(POSITIVE,)),
    Field("ent_coef", "float", 0.01, "entropy bonus weight", traced=True, rules=(NON_NEGATIVE,)),
    Field("vf_coef", "float", 0.5, "value-loss weight", traced=True, rules=(NON_NEGATIVE,)),
    Field("gamma", "float", 0.99, "discount", traced=True, rules=(IN_0_1,)),
    Field("gae_lambda", "float", 0.95, "GAE λ", traced=True, rules=(IN_0_1,)),
    Field("max_grad_norm", "float", 0.5, "clip gradients by global norm", traced=True, rules=(POSITIVE,)),
    Field("target_kl", "float", None,
          "KL early stopping: once an epoch's mean k3 KL exceeds 1.5 × target_kl, the remaining "
          "epochs of that update are masked; the epoch that crossed the line is kept",
          traced=True, null="no KL early stopping", rules=(POSITIVE,)),
    Field("update_epochs", "int", 4,
          "epochs per update (≤ max_epochs); later epochs are masked: they change nothing",
          traced=True, rules=(AT_LEAST_1,)),
)

HPARAM_FIELDS = tuple(name for name, f in FIELDS.items() if f.traced)
STATIC_FIELDS = tuple(name for name, f in FIELDS.items() if not f.traced)
# Fields whose meaning depends on the action space: {field: the kind it needs}.
ACTION_KIND_FIELDS = types.MappingProxyType({name: f.action_kind for name, f in FIELDS.items() if f.action_kind})


# --------------------------------------------------------------------------------------
# The classes derived from it
# --------------------------------------------------------------------------------------
def _config_fields(cls):
    """One attribute per declared field, annotated with its type and set to its default."""
    cls.__annotations__ = {name: f.annotation for name, f in FIELDS.items()}
    for name, f in FIELDS.items():
        default = (dataclasses.field(default_factory=functools.partial(dict, f.default))
                   if f.type == "mapping" else f.default)
        setattr(cls, name, default)
    return cls


@dataclasses.dataclass(frozen=True)
@_config_fields
class PPOConfig:
    """A checked configuration (build it with `make_config` / `load_config`): the fields of
    `FIELDS`, in order, with their defaults."""

    @property
    def epochs_scan(self) -> int:
        """The epochs the program scans: max_epochs, or update_epochs when it is null."""
        return self.update_epochs if self.max_epochs is None else self.max_epochs

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.batch_size

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["env_params"] = dict(self.env_params)
        d["network_kwargs"] = dict(self.network_kwargs)
        for name in ("hidden_sizes", "cnn_channels", "cnn_kernels", "cnn_strides", "info_metrics"):
            d[name] = list(getattr(self, name))
        return d
