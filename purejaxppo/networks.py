"""Actor-critic networks: flax.linen modules, the built-in ones and the user's.

The contract every network follows (documented for users in docs/):

    feed-forward:  module(obs) -> (actor_out, value)
    recurrent:     module.initial_carry(batch_shape) -> carry   (a pytree of [*batch_shape, ...])
                   module(carry, obs) -> (carry, actor_out, value)

`obs` is a batch [batch, *obs_shape] (normalised when normalize_obs); `actor_out` is the
logits [batch, num_actions] for discrete actions or the Gaussian means [batch, action_dim]
for continuous ones; `value` is [batch]; both of any floating dtype (float16 or bfloat16 too: the
library takes them as float32). A module is recurrent when it has
`initial_carry`; its memory must be a function of what it has seen since the carry it was
given (the library restarts it at `initial_carry` where an episode ended and replays
whole sequences from their first carry in the update). Parameters are flax's "params"
collection only (no batch statistics or other mutable state).

`Network` is the library's side of the contract: it adds the state-independent log-std
of continuous actions (a parameter "log_std" beside the module's own), builds the action
distribution, takes any leading batch shape, and unrolls sequences.

Built-ins (`policy: mlp | gru`): separate actor and critic MLPs, orthogonal weights (gain
sqrt(2) in hidden layers, 0.01 on the policy head, 1.0 on the value head and in the GRU),
zero biases; or, with `init: lecun`, LeCun-normal weights and biases uniform in [0, 0.05) in
every layer. Their parameters keep the layout of purejaxppo 0.3 and 0.4 (checkpoints load).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from purejaxppo.distributions import Categorical, DiagGaussian
from purejaxppo.errors import ConfigError
from purejaxppo.imports import call_factory, failure, import_object
from purejaxppo.rollout import restart

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "swish": nn.swish}
HIDDEN_GAIN = math.sqrt(2)


# --------------------------------------------------------------------------------------
# The built-in modules
# --------------------------------------------------------------------------------------
INITS = ("orthogonal", "lecun")  # the config's `init`


def _inits(init: str, gain: float):
    """(kernel, bias) initialisers: orthogonal of `gain` and zeros, or (`init: lecun`, gymnax-blines'
    networks) flax's default LeCun-normal kernel (variance 1 / fan-in; `gain` unused) and biases
    uniform in [0, 0.05)."""
    if init == "lecun":
        return nn.initializers.lecun_normal(), nn.initializers.uniform(0.05)
    return nn.initializers.orthogonal(gain), nn.initializers.zeros


def _dense(size: int, gain: float, name: str | None = None, init: str = "orthogonal") -> nn.Dense:
    kernel_init, bias_init = _inits(init, gain)
    return nn.Dense(size, kernel_init=kernel_init, bias_init=bias_init, name=name)


class MLP(nn.Module):
    """Hidden layers "Dense_0" ... then the output layer (gain `out_gain`)."""

    hidden_sizes: Sequence[int]
    out_size: int
    out_gain: float
    activation: str = "tanh"
    scheme: str = "orthogonal"  # the config's init (not `init`: a Module's init is its method)

    @nn.compact
    def __call__(self, x):
        for i, width in enumerate(self.hidden_sizes):
            x = ACTIVATIONS[self.activation](_dense(width, HIDDEN_GAIN, f"Dense_{i}", self.scheme)(x))
        return _dense(self.out_size, self.out_gain, f"Dense_{len(self.hidden_sizes)}", self.scheme)(x)


class Conv(nn.Module):
    """A square convolution, VALID padding, as flax's `nn.Conv` computes it (the same
    parameters, "kernel" [k, k, in, out] and "bias"), written as a matrix product over the
    image's k x k shifted slices. XLA's CPU convolution inside a `lax.scan` (the epochs'
    minibatch loop) ran 40x slower than this (58 s against 1.5 s for 32 gradient steps of
    MinAtar's CNN, 2-core CPU, jax 0.11.2); on a GPU both are matrix products."""

    features: int
    kernel: int
    stride: int = 1
    scheme: str = "orthogonal"  # the config's init

    @nn.compact
    def __call__(self, x):
        k, s, channels = self.kernel, self.stride, x.shape[-1]
        kernel_init, bias_init = _inits(self.scheme, HIDDEN_GAIN)  # lecun: fan-in k * k * channels
        w = self.param("kernel", kernel_init, (k, k, channels, self.features))
        b = self.param("bias", bias_init, (self.features,))
        rows, cols = (x.shape[1] - k) // s + 1, (x.shape[2] - k) // s + 1
        shifted = [x[:, i:i + s * (rows - 1) + 1:s, j:j + s * (cols - 1) + 1:s, :] for i in range(k) for j in range(k)]
        return jnp.concatenate(shifted, axis=-1) @ w.reshape(k * k * channels, self.features) + b


class CNN(nn.Module):
    """`torso: cnn`: convolutions (`Conv`: VALID padding, orthogonal gain sqrt(2)) over an
    image [batch, height, width, channels] (or [batch, height, width]), flattened."""

    channels: Sequence[int] = (16, 32)
    kernels: Sequence[int] = (3, 3)
    strides: Sequence[int] = (1, 1)
    activation: str = "relu"
    scheme: str = "orthogonal"  # the config's init

    @nn.compact
    def __call__(self, x):
        x = x[..., None] if x.ndim == 3 else x
        for i, (width, kernel, stride) in enumerate(zip(self.channels, self.kernels, self.strides)):
            x = ACTIVATIONS[self.activation](Conv(width, kernel, stride, self.scheme, name=f"Conv_{i}")(x))
        return x.reshape(x.shape[0], -1)


def _features(torso, obs):
    """What the heads see: the torso's features, or the observation flattened."""
    return obs.reshape(obs.shape[0], -1) if torso is None else torso(obs)


class ActorCritic(nn.Module):
    """`policy: mlp`: the observation, flattened (or through a shared `torso`, e.g. a CNN),
    into separate actor and critic MLPs."""

    num_outputs: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    torso: nn.Module | None = None
    scheme: str = "orthogonal"  # the config's init

    @nn.compact
    def __call__(self, obs):
        x = _features(self.torso, obs)
        out = MLP(self.hidden_sizes, self.num_outputs, 0.01, self.activation, self.scheme, name="actor")(x)
        return out, MLP(self.hidden_sizes, 1, 1.0, self.activation, self.scheme, name="critic")(x)[:, 0]


class GRUCell(nn.Module):
    """One GRU step (Cho et al. 2014): h' = (1 - z) * n + z * h, with r, z = sigmoid(W_i x +
    W_h h) (reset, update) and n = tanh(W_in x + r * (W_hn h))."""

    size: int
    scheme: str = "orthogonal"  # the config's init

    @nn.compact
    def __call__(self, h, x):
        xr, xz, xn = jnp.split(_dense(3 * self.size, 1.0, "input", self.scheme)(x), 3, axis=-1)
        hr, hz, hn = jnp.split(_dense(3 * self.size, 1.0, "recurrent", self.scheme)(h), 3, axis=-1)
        r = jax.nn.sigmoid(xr + hr)
        z = jax.nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * hn)
        return (1.0 - z) * n + z * h


class GRUActorCritic(nn.Module):
    """`policy: gru`: obs (flattened, or through `torso`) -> dense encoder (gru_size,
    activation) -> GRU (gru_size) -> actor and critic MLPs on the memory."""

    num_outputs: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    gru_size: int = 128
    torso: nn.Module | None = None
    scheme: str = "orthogonal"  # the config's init

    def initial_carry(self, batch_shape):
        return jnp.zeros((*batch_shape, self.gru_size), jnp.float32)

    @nn.compact
    def __call__(self, carry, obs):
        encoder = _dense(self.gru_size, HIDDEN_GAIN, "encoder", self.scheme)
        x = ACTIVATIONS[self.activation](encoder(_features(self.torso, obs)))
        carry = GRUCell(self.gru_size, self.scheme, name="gru")(carry, x)
        out = MLP(self.hidden_sizes, self.num_outputs, 0.01, self.activation, self.scheme, name="actor")(carry)
        return carry, out, MLP(self.hidden_sizes, 1, 1.0, self.activation, self.scheme, name="critic")(carry)[:, 0]


# --------------------------------------------------------------------------------------
# The library's side of the contract
# --------------------------------------------------------------------------------------
def _leading(tree, n: int):
    """Every leaf of `tree` with its first `n` axes merged into one."""
    return jax.tree.map(lambda x: x.reshape((-1, *x.shape[n:])), tree)


class Network:
    """A module of the contract above, applied to one environment's observations and actions.

        init(key)                        -> params {"params": {...}} ("log_std" added for continuous actions)
        initial_carry(batch_shape)       -> the memory of fresh episodes (() without memory)
        apply(params, carry, obs)        -> (distribution, value, carry)   obs [..., *obs_shape]
        unroll(params, carry, obs, done) -> (distribution, value)          sequences [B, T, *obs_shape]

    `name` says where the module came from in errors (its import path, or its class).
    """

    def __init__(self, module: nn.Module, obs_shape: Sequence[int], action_kind: str, action_size: int,
                 log_std_init: float = 0.0, name: str | None = None):
        if not isinstance(module, nn.Module):
            raise ConfigError("network", name or type(module).__name__,
                              "must be a flax.linen Module (an NNX module: wrap it with flax.nnx.bridge.to_linen)")
        self.module = module
        self.obs_shape = tuple(obs_shape)
        self.action_kind = action_kind
        self.action_size = action_size
        self.log_std_init = log_std_init
        self.name = name or type(module).__name__
        self.recurrent = callable(getattr(module, "initial_carry", None))

    def initial_carry(self, batch_shape) -> Any:
        return self.module.initial_carry(tuple(batch_shape)) if self.recurrent else ()

    def init(self, key) -> dict:
        obs = jnp.zeros((1, *self.obs_shape), jnp.float32)
        variables = self.module.init(key, *((self.initial_carry((1,)), obs) if self.recurrent else (obs,)))
        others = sorted(set(variables) - {"params"})
        if others:
            raise ConfigError("network", self.name, f"has variables other than params ({', '.join(others)}): "
                                                    f"PPO's networks here keep no mutable state")
        params = dict(variables.get("params", {}))
        if self.action_kind == "continuous":
            if "log_std" in params:
                raise ConfigError("network", self.name, "has a top-level parameter named log_std: the library "
                                                        "keeps the log-std under that name; rename yours")
            params["log_std"] = jnp.full((self.action_size,), self.log_std_init, jnp.float32)
        return {"params": params}

    def _module_call(self, params, *args):
        own = {k: v for k, v in params["params"].items() if k != "log_std" or self.action_kind != "continuous"}
        return self.module.apply({"params": own}, *args)

    def _distribution(self, params, out):
        if self.action_kind == "discrete":
            return Categorical(out)
        return DiagGaussian(out, params["params"]["log_std"])

    def _module_step(self, params, carry, obs):
        """obs [batch, *obs_shape] (carry rows [batch, ...]) -> the module's (actor_out, value, carry)."""
        if self.recurrent:
            carry, out, value = self._module_call(params, carry, obs)
            return out, value, carry
        out, value = self._module_call(params, obs)
        return out, value, carry

    def _step(self, params, carry, obs):
        """`_module_step`, its outputs in float32: where they enter the learner, which computes in
        float32 (a module of float16 or bfloat16 outputs, mixed precision, is cast here)."""
        out, value, carry = self._module_step(params, carry, obs)
        return out.astype(jnp.float32), value.astype(jnp.float32), carry

    def apply(self, params, carry, obs):
        """One step of any leading batch shape: obs [..., *obs_shape] (carry [..., ...]) ->
        (distribution [...], value [...], carry)."""
        batch = obs.shape[:obs.ndim - len(self.obs_shape)]
        out, value, carry = self._step(params, _leading(carry, len(batch)), _leading(obs, len(batch)))
        shaped = lambda x: x.reshape((*batch, *x.shape[1:]))  # noqa: E731
        return self._distribution(params, shaped(out)), shaped(value), jax.tree.map(shaped, carry)

    def unroll(self, params, carry, obs, done):
        """Sequences obs [B, T, *obs_shape], done [B, T] from carry (rows [B, ...]) ->
        (distribution [B, T], value [B, T]); the memory restarts after a done step. Each
        step is computed as `apply` computes it in the rollout (the same operations on the
        same shapes of one step), so a replay with unchanged parameters gives the
        rollout's numbers bit for bit. Without memory: `apply` on every step at once."""
        if not self.recurrent:
            dist, value, _ = self.apply(params, carry, obs)
            return dist, value
        fresh = self.initial_carry(done.shape[:1])

        def step(h, inputs):
            x, ended = inputs
            out, value, h = self._step(params, h, x)
            return restart(h, fresh, ended), (out, value)

        _, (out, value) = jax.lax.scan(step, carry, (jnp.swapaxes(obs, 0, 1), jnp.swapaxes(done, 0, 1)))
        return self._distribution(params, jnp.swapaxes(out, 0, 1)), jnp.swapaxes(value, 0, 1)

    def check(self) -> None:
        """The module's outputs have the contract's shapes and floating dtypes (any: `_step`
        casts them to float32), found by `jax.eval_shape` (no compile): ConfigError naming the
        expected and the actual ones otherwise (and whatever the module raises, sys.exit
        included, in one line)."""
        def shapes(tree):  # each leaf's dtype and shape, e.g. "float32[3, 16]"
            return jax.tree.map(lambda x: f"{jnp.dtype(x.dtype).name}{list(x.shape)}", tree)

        try:
            params = jax.eval_shape(self.init, jax.random.PRNGKey(0))
            batch = 3
            carry = jax.eval_shape(lambda: self.initial_carry((batch,)))
            obs = jax.ShapeDtypeStruct((batch, *self.obs_shape), jnp.float32)
            out, value, new_carry = jax.eval_shape(self._module_step, params, carry, obs)
        except ConfigError:
            raise
        except (Exception, SystemExit) as error:  # the user's module failed on the contract's inputs
            raise ConfigError("network", self.name, f"failed on a batch of observations [batch, "
                              f"{', '.join(map(str, self.obs_shape))}]: {failure(error)}") from None
        got = tuple(getattr(out, "shape", ())), tuple(getattr(value, "shape", ()))
        want = (batch, self.action_size), (batch,)
        if got != want:
            noun = "logits" if self.action_kind == "discrete" else "means"
            raise ConfigError("network", self.name,
                              f"must return (actor_out, value) of shapes [batch, {self.action_size}] ({noun}) and "
                              f"[batch]; it returned {_shown(got[0])} and {_shown(got[1])}")
        for what, x in (("actor_out", out), ("value", value)):
            if not jnp.issubdtype(x.dtype, jnp.floating):
                raise ConfigError("network", self.name, f"must return floating actor_out and value; its {what} is "
                                                        f"{jnp.dtype(x.dtype).name}{_shown(tuple(x.shape))}")
        if self.recurrent and shapes(new_carry) != shapes(carry):
            raise ConfigError("network", self.name, f"must return a carry of the shapes and dtypes initial_carry "
                                                    f"gives it {shapes(carry)}; it returned {shapes(new_carry)}")


def _shown(shape: tuple) -> str:
    """(3, 2) in a batch of 3 -> "[batch, 2]"."""
    return "[" + ", ".join(["batch", *map(str, shape[1:])] if shape else []) + "]"


# --------------------------------------------------------------------------------------
# From a config
# --------------------------------------------------------------------------------------
def make_module(cfg, num_outputs: int) -> nn.Module:
    """The module a config names: `network: package.module:factory` called as
    factory(num_outputs, **network_kwargs), or the built-in network of `policy`."""
    if cfg.network is None:
        torso = None if cfg.torso is None else CNN(cfg.cnn_channels, cfg.cnn_kernels, cfg.cnn_strides,
                                                   cfg.activation, cfg.init)
        args = dict(num_outputs=num_outputs, hidden_sizes=tuple(cfg.hidden_sizes), activation=cfg.activation,
                    torso=torso, scheme=cfg.init)
        return GRUActorCritic(**args, gru_size=cfg.gru_size) if cfg.policy == "gru" else ActorCritic(**args)
    factory = import_object(cfg.network, "network")
    if not callable(factory):
        raise ConfigError("network", cfg.network, "must name a factory: factory(num_outputs, **network_kwargs)")
    return call_factory(factory, (num_outputs,), dict(cfg.network_kwargs), "network", cfg.network, "network_kwargs",
                        f"{cfg.network}(num_outputs, **network_kwargs)")


def make_network(cfg, env, module: nn.Module | None = None) -> Network:
    """The checked network of a config on its built environment: `module` when given (a
    flax.linen module of the contract above), else the config's. Its output shapes are
    checked by `jax.eval_shape`; a recurrent one needs num_minibatches to divide num_envs
    (its minibatches are whole sequences). Raises ConfigError."""
    space = env.action_space
    if module is None and cfg.network is None and cfg.torso == "cnn" and len(env.obs_shape) not in (2, 3):
        raise ConfigError("torso", cfg.torso, f"needs image observations [height, width(, channels)]; {cfg.env}'s "
                                              f"have shape {list(env.obs_shape)}")
    name = None if module is not None else cfg.network
    module = make_module(cfg, space.size) if module is None else module
    log_std_init = 0.0 if cfg.log_std_init is None else cfg.log_std_init
    network = Network(module, env.obs_shape, space.kind, space.size, log_std_init, name)
    network.check()
    if network.recurrent and cfg.num_envs % cfg.num_minibatches:
        raise ConfigError("num_minibatches", cfg.num_minibatches,
                          f"must divide num_envs={cfg.num_envs} with a recurrent network: its minibatches are "
                          f"whole sequences (environments), not single steps")
    return network
