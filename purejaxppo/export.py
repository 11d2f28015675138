"""A trained run's policy as a file that runs without purejaxppo: `export_policy(cfg, state, format=...)`.

Two formats: "stablehlo" (`jax.export`: a StableHLO module with its calling convention, which
`jax.export.deserialize` loads; nothing beyond jax) and "onnx" (through jax2onnx, for
onnxruntime and other ONNX runtimes; the optional extra `pip install -e ".[onnx]"` in a clone;
its own part, apart: purejaxppo.export_onnx).

What is exported is the policy as `make_policy` runs it by its mode: the same agent
(`Agent.act`, deterministic), so the checkpoint's observation statistics are baked in, and
the action is the one the environment receives (the argmax; or the mean, clipped to the
action box or squashed into it as in training). Every input and output has a leading batch
axis of any size. In order:

    inputs:   carry..., obs[, mask]       the carry: a recurrent policy's memory (its leaves)
    outputs:  new carry..., action[, logits | mean, log_std][, value]   (outputs="all": the last ones)

A recurrent policy starts an episode from its initial carry (zeros for the built-in GRU; the
metadata gives it otherwise) and is fed back the carry it returned. A masked policy (an
environment with action masks, `mask_actions`) takes the allowed actions as a bool mask.

Before the file is kept, it is loaded back as a user would load it and run next to
`make_policy` on sample observations (a recurrent policy: several steps, carrying its own
memory); a difference beyond float rounding raises `ExportMismatch` and nothing is written.
The file is written under a temporary name and renamed into place only once verified; its
metadata (`<file>.json`) beside it.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import platform
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.config import PPOConfig
from purejaxppo.distributions import MASKED_LOGIT, Categorical, TanhGaussian
from purejaxppo.errors import NO_VALUE, ConfigError
from purejaxppo.export_onnx import LOAD, VERSIONS, check_onnx_installed, onnx_runner, to_onnx
from purejaxppo.gate import Bundle
from purejaxppo.policy import make_policy
from purejaxppo.train import LearnerState

FORMATS = {"stablehlo": ".stablehlo", "onnx": ".onnx"}  # format -> the file's usual suffix
OUTPUTS = ("action", "all")
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")  # a StableHLO export runs on each
TOLERANCE = 1e-4  # |exported - make_policy| <= TOLERANCE * (1 + |make_policy|): float rounding, not a fault
SAMPLES = 256     # observations per verification step
STEPS = 3         # verification steps of a recurrent policy, each carrying the memory of the last


class ExportError(Exception):
    """An export that could not be made or kept (not a fault of the arguments: a converter that
    cannot convert this network, a file that does not act as the policy does). Nothing was written."""


class ExportMismatch(ExportError):
    """The exported file does not act as `make_policy` does (beyond float rounding): a bug
    of the exporter or of the converter, not of the user's input. Nothing was written."""


@dataclasses.dataclass
class ExportedPolicy:
    """What `export_policy` made: the file's bytes, its metadata (also written beside the
    file as `<file>.json`), the largest difference found against `make_policy`, how long the
    export took (seconds, verification apart) and where it was written (None: not written)."""

    format: str
    data: bytes
    metadata: dict
    max_difference: float
    seconds: float
    path: Path | None = None

    def describe(self) -> str:
        """Where it went, its inputs and outputs, and what its verification found (a few lines)."""
        def shown(items):
            return ", ".join(f"{i['name']} {i['dtype']}[{', '.join(map(str, i['shape']))}]" for i in items)

        checked = self.metadata["verified"]
        where = f"{self.path} and its metadata {self.path.name}.json" if self.path else "not written"
        memory = f" x {checked['steps']} steps carrying memory" if checked["steps"] > 1 else ""
        same = checked["actions_compared"] - checked["actions_differing"]
        loader = "jax.export.deserialize" if self.format == "stablehlo" else "onnxruntime"
        return (f"{where} ({len(self.data) / 1024:.1f} KiB, exported in {self.seconds:.2f} s)\n"
                f"  inputs: {shown(self.metadata['inputs'])}\n  outputs: {shown(self.metadata['outputs'])}\n"
                f"  verified: loaded with {loader}, {checked['observations']} observations{memory} next to "
                f"make_policy: {same} of {checked['actions_compared']} greedy actions the same; largest difference "
                f"{checked['max_difference']:.3g} ({checked['largest_in']})")


def _check_one_run(state) -> None:
    """A state of several runs (a leading run axis on every leaf, as `ppo.load(folder, run=None)`
    and a sweep's state have) is not one policy: a ConfigError saying how many runs it holds and
    to pick one, rather than the network mismatch its parameters' shapes would show. One run's
    `updates_done` is a scalar, so its leading axis counts the runs."""
    if isinstance(state, LearnerState) and np.ndim(state.updates_done) > 0:
        runs = np.shape(state.updates_done)[0]
        raise ConfigError("state", NO_VALUE, f"holds {runs} run{'s' if runs != 1 else ''} (a leading run axis of "
                          f"{runs} on every array, as a sweep's state has); export one run's state: "
                          f"cfg, state = ppo.load(folder, run=k), or jax.tree.map(lambda x: x[k], state)")


def _check_finite(policy) -> None:
    """A policy whose parameters (or observation statistics) hold a NaN or an infinity (a run that
    diverged) acts on nothing: its file would answer the same action to everything, and NaN
    compares equal to NaN in the verification. ExportError naming the first such array."""
    for path, leaf in jax.tree_util.tree_leaves_with_path({"params": policy.params, "agent_state": policy.agent_state}):
        if jnp.issubdtype(leaf.dtype, jnp.inexact) and not np.all(np.isfinite(np.asarray(leaf))):
            raise ExportError(f"the policy is not finite ({jax.tree_util.keystr(path, simple=True, separator='.')} "
                              "holds NaN or Inf: the run diverged); nothing was written")


def export_policy(cfg: PPOConfig | Bundle, state: LearnerState, format: str = "stablehlo", *, network=None,
                  outputs: str = "action", path: str | os.PathLike | None = None,
                  source: dict | None = None) -> ExportedPolicy:
    """One run's policy as a StableHLO (`format="stablehlo"`) or ONNX (`"onnx"`) file, verified
    against `make_policy(cfg, state, network=network)` (`cfg`: a config or its bundle; see the module doc for its inputs and
    outputs). `outputs="all"`: the logits (or the mean and log-std) and the value too, after
    the action. `path`: write the file there and its metadata to `<path>.json` (neither may
    exist); without it nothing is written and `.data` holds the bytes. `source`: a note kept
    in the metadata (where the state came from). Raises ConfigError for a bad argument (or a
    file that cannot be written), ExportError for a policy the format's converter cannot
    export, ExportMismatch when the exported policy does not act as `make_policy` does."""
    if format not in FORMATS:
        raise ConfigError("format", format, f"must be one of {', '.join(FORMATS)}")
    if outputs not in OUTPUTS:
        raise ConfigError("outputs", outputs, f"must be one of {', '.join(OUTPUTS)}")
    if format == "onnx":
        check_onnx_installed()
    target = check_target(path, format)
    _check_one_run(state)
    policy = make_policy(cfg, state, network=network)  # checks the state and the network
    _check_finite(policy)
    agent, cfg = policy.agent, cfg.config if isinstance(cfg, Bundle) else cfg
    spec = _Spec.of(agent, outputs)
    fn = _policy_function(agent, policy.params, policy.agent_state, spec)

    start = time.perf_counter()
    data = _stablehlo(fn, spec) if format == "stablehlo" else _onnx(fn, spec)
    seconds = time.perf_counter() - start
    metadata = _metadata(cfg, agent, policy, spec, format, source)

    temporary = None if target is None else target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        if temporary is not None:  # verified as written, loaded from the file as a user loads it
            temporary.write_bytes(data)
        run = _runner(format, data if temporary is None else temporary.read_bytes())
        metadata["verified"] = _verify(run, policy, spec, state)
        if target is not None:
            metadata["file"] = target.name
            _write_new(target.with_name(target.name + ".json"), _json(metadata))
            try:
                os.link(temporary, target)  # its name, only now; fails if the file appeared meanwhile
            except OSError:
                target.with_name(target.name + ".json").unlink(missing_ok=True)
                raise
    except OSError as error:
        if target is None:
            raise
        raise ConfigError("path", str(target), f"cannot be written: {error.strerror}") from None
    finally:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
    return ExportedPolicy(format, data, metadata, metadata["verified"]["max_difference"], seconds, target)


def format_of(path, default: str = "stablehlo") -> str:
    """The format whose suffix `path` has (policy.onnx: onnx), else `default`."""
    return next((format for format, suffix in FORMATS.items() if path is not None and str(path).endswith(suffix)),
                default)


def check_target(path, format: str | None = None) -> Path | None:
    """`path` as the file to write: new, and so is its metadata file, in a folder that exists; a
    file, not a folder; with no other format's suffix than `format`'s (policy.onnx is never StableHLO)."""
    if path is None:
        return None
    target = Path(path)
    if str(path).endswith(os.sep) or target.is_dir():
        raise ConfigError("path", str(path), "is a folder: give the file to write")
    for file in (target, target.with_name(target.name + ".json")):
        if file.exists() or file.is_symlink():
            raise ConfigError("path", str(path), f"{file} exists: an export never replaces a file")
    if not target.absolute().parent.is_dir():
        raise ConfigError("path", str(path), f"is in a folder that does not exist ({target.parent}); create it "
                                             f"first")
    if format is not None and format_of(path, format) != format:
        other = format_of(path)
        raise ConfigError("path", str(path), f"has the suffix of {other}, but the format is {format}: name it "
                                             f"*{FORMATS[format]}, or export {other}")
    return target


# --------------------------------------------------------------------------------------
# The function exported: the agent acting by its mode
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Spec:
    """The exported function's inputs and outputs: (name, shape after the batch axis, dtype)."""

    inputs: tuple
    outputs: tuple
    carry_tree: Any  # the carry's treedef (None without memory)
    masked: bool
    all_outputs: bool

    @classmethod
    def of(cls, agent, outputs: str) -> "_Spec":
        obs_shape = tuple(agent.network.obs_shape)
        carry = jax.eval_shape(lambda: agent.initial_carry(1)) if agent.recurrent else None
        leaves, tree = jax.tree.flatten(carry) if carry is not None else ([], None)
        names = ["carry"] if len(leaves) == 1 else [f"carry_{i}" for i in range(len(leaves))]
        carried = [(n, tuple(x.shape[1:]), jnp.dtype(x.dtype)) for n, x in zip(names, leaves)]
        inputs = [*carried, ("obs", obs_shape, jnp.dtype(jnp.float32))]
        if agent.masked:
            inputs.append(("mask", (agent.action_space.num_actions,), jnp.dtype(jnp.bool_)))
        space = agent.action_space
        discrete = space.kind == "discrete"
        action = ("action", () if discrete else (space.size,), jnp.dtype(jnp.int32 if discrete else jnp.float32))
        outs = [*((f"new_{n}", s, d) for n, s, d in carried), action]
        if outputs == "all":
            heads = [("logits", (space.size,))] if discrete else [("mean", (space.size,)), ("log_std", (space.size,))]
            outs += [(n, s, jnp.dtype(jnp.float32)) for n, s in heads] + [("value", (), jnp.dtype(jnp.float32))]
        return cls(tuple(inputs), tuple(outs), tree, agent.masked, outputs == "all")

    @property
    def num_carry(self) -> int:
        return 0 if self.carry_tree is None else self.carry_tree.num_leaves


def _policy_function(agent, params, agent_state, spec: _Spec) -> Callable:
    """(carry leaves..., obs[, mask]) -> (new carry leaves..., action[, heads..., value]): the
    agent's `act` by its mode, the parameters and statistics closed over (constants)."""
    def fn(*inputs):
        n = spec.num_carry
        carry = jax.tree.unflatten(spec.carry_tree, inputs[:n]) if n else ()
        obs = inputs[n]
        mask = inputs[n + 1] if spec.masked else None
        seen = {}
        acting = copy.copy(agent)  # the agent, recording the distribution its act builds

        def step(*args, **kwargs):
            seen["dist"], value, new_carry = agent.step(*args, **kwargs)
            return seen["dist"], value, new_carry

        acting.step = step
        carry, env_action, _, _, value = acting.act(params, agent_state, carry, obs, None, True, mask)
        out = [*jax.tree.leaves(carry), env_action]
        if spec.all_outputs:
            out += [*_heads(seen["dist"]), value]
        return tuple(out)

    return fn


def _heads(dist) -> list:
    """The distribution's parameters: the logits (after any mask), or the Gaussian's mean and
    log-std (before a tanh squash), each [batch, size]."""
    if isinstance(dist, Categorical):
        return [dist.logits]
    base = dist.base if isinstance(dist, TanhGaussian) else dist
    return [base.mean, jnp.broadcast_to(base.log_std, base.mean.shape)]


def _abstract_inputs(spec: _Spec) -> list:
    batch, = jax.export.symbolic_shape("batch")
    return [jax.ShapeDtypeStruct((batch, *shape), dtype) for _, shape, dtype in spec.inputs]


def _stablehlo(fn, spec: _Spec) -> bytes:
    try:
        # disable_jit: the jitted functions the network calls (jax.nn.relu is one) are traced inline, not as
        # calls, so what only the unused outputs need (the critic, with outputs="action") is dropped: a ReLU
        # network's file was twice the size with them. The same numbers (verified below)
        with jax.disable_jit():
            exported = jax.export.export(jax.jit(fn), platforms=PLATFORMS)(*_abstract_inputs(spec))
    except Exception as error:  # noqa: BLE001 -- e.g. a network whose shapes need a known batch size: one line
        detail = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        raise ExportError(f"jax.export cannot export this policy for a batch of any size: {type(error).__name__}: "
                          f"{detail}") from error
    return bytes(exported.serialize())


def _onnx(fn, spec: _Spec) -> bytes:
    try:
        model = to_onnx(fn, _abstract_inputs(spec), [n for n, _, _ in spec.inputs], [n for n, _, _ in spec.outputs])
    except Exception as error:  # noqa: BLE001 -- a primitive it cannot convert, any converter fault: one line
        detail = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        raise ExportError(f"jax2onnx {_version('jax2onnx')} cannot convert this policy: {type(error).__name__}: "
                          f"{detail} (the stablehlo format exports any JAX program)") from error
    return model.SerializeToString()


# --------------------------------------------------------------------------------------
# Loading it back, as a user would, and comparing with make_policy
# --------------------------------------------------------------------------------------
def _runner(format: str, data: bytes) -> Callable[[list], list]:
    """A function of the inputs (numpy arrays, in order) -> the outputs (numpy, in order)."""
    if format == "onnx":
        return onnx_runner(data)
    exported = jax.export.deserialize(bytearray(data))
    return lambda inputs: [np.asarray(x) for x in exported.call(*inputs)]


def _verify(run, policy, spec: _Spec, state) -> dict:
    """Run the export and `policy` side by side on SAMPLES observations (a recurrent policy:
    STEPS steps, each side carrying its own memory; a masked one: random masks); raise
    ExportMismatch where they differ beyond float rounding. -> what was compared."""
    agent = policy.agent
    rng = np.random.default_rng(0)
    steps = STEPS if agent.recurrent else 1
    reference = jax.jit(lambda carry, obs, mask: agent.step(policy.params, policy.agent_state, carry, obs, mask))
    policy.reset()
    carry = [np.asarray(x) for x in jax.tree.leaves(agent.initial_carry(SAMPLES))]
    found = {"observations": SAMPLES, "steps": steps, "max_difference": 0.0, "largest_in": "action",
             "actions_compared": SAMPLES * steps, "actions_differing": 0}
    for step in range(1, steps + 1):
        obs = _sample_observations(rng, policy, state)
        mask = _sample_mask(rng, agent.action_space.num_actions) if spec.masked else None
        before = policy.carry if policy.carry is not None else agent.initial_carry(SAMPLES)
        dist, value, new_carry = reference(before, obs, mask)
        action = np.asarray(policy(obs, mask=mask))  # make_policy itself, carrying its own memory
        outs = run([*carry, obs, *([] if mask is None else [mask])])
        if len(outs) != len(spec.outputs):
            raise ExportMismatch(f"the exported policy gave {len(outs)} outputs; {len(spec.outputs)} expected")
        got = {name: np.asarray(x) for (name, _, _), x in zip(spec.outputs, outs)}
        expected = {f"new_{name}": x for (name, _, _), x in zip(spec.inputs, jax.tree.leaves(new_carry))}
        if spec.all_outputs:
            heads = ("logits",) if isinstance(dist, Categorical) else ("mean", "log_std")
            expected.update(zip(heads, _heads(dist)), value=value)
        if agent.action_space.kind == "discrete":
            found["actions_differing"] += _check_actions(got["action"], action, np.asarray(dist.logits), step)
        else:
            expected["action"] = action
        for name, want in expected.items():
            difference = _difference(name, got[name], np.asarray(want), step)
            if difference > found["max_difference"]:
                found["max_difference"], found["largest_in"] = difference, name
        carry = [got[f"new_{name}"] for name, _, _ in spec.inputs[:spec.num_carry]]
    return found


def _check_actions(have, want, logits, step: int) -> int:
    """Discrete greedy actions: the exported ones may differ from make_policy's only where the
    two actions' logits tie to float rounding (either argmax is right there); -> how many differ."""
    if have.shape != want.shape:
        raise ExportMismatch(f"the exported actions have shape {list(have.shape)}; make_policy's {list(want.shape)}")
    n = logits.shape[-1]
    valid = (have >= 0) & (have < n)
    picked = np.take_along_axis(logits, np.clip(have, 0, n - 1)[:, None].astype(np.int64), -1)[:, 0]
    best = np.take_along_axis(logits, want[:, None].astype(np.int64), -1)[:, 0]
    scale = np.where(logits > MASKED_LOGIT, np.abs(logits), 0.0).max(-1)  # the allowed actions' logits
    tie = valid & (best - picked <= TOLERANCE * (1 + scale))
    wrong = (have != want) & ~tie
    if np.any(wrong):
        raise ExportMismatch(f"the exported policy picks another greedy action than make_policy on "
                             f"{int(np.sum(wrong))} of {len(want)} observations (step {step}), where no two logits "
                             f"tie")
    return int(np.sum(have != want))


def _difference(name: str, have, want, step: int) -> float:
    """The largest |exported - make_policy| of one output; ExportMismatch beyond float rounding
    (TOLERANCE relative) or for another shape."""
    if have.shape != want.shape:
        raise ExportMismatch(f"the exported {name} has shape {list(have.shape)}; make_policy's {list(want.shape)}")
    if not have.size:
        return 0.0
    diff = np.abs(have.astype(np.float64) - want.astype(np.float64))
    diff = np.where(np.isnan(have) & np.isnan(want), 0.0, np.where(np.isnan(diff), np.inf, diff))
    if not np.all(diff <= TOLERANCE * (1 + np.abs(want))):
        raise ExportMismatch(f"the exported {name} differs from make_policy's by up to {float(diff.max()):.3g} "
                             f"(step {step}), beyond float rounding ({TOLERANCE:g} relative)")
    return float(diff.max())


def _sample_observations(rng, policy, state) -> np.ndarray:
    """SAMPLES observations: the state's own (the training environments' last ones) and random
    ones about them (about the observation statistics, for a normalising policy)."""
    agent = policy.agent
    shape = tuple(agent.network.obs_shape)
    seen = np.asarray(getattr(state, "obs", np.zeros((0, *shape))), np.float32).reshape(-1, *shape)
    if agent.normalize_obs:
        stats = policy.agent_state["obs_stats"]
        center, scale = np.asarray(stats.mean), np.sqrt(np.asarray(stats.var))
    elif len(seen):
        center, scale = seen.mean(0), seen.std(0) + 1.0
    else:
        center, scale = np.zeros(shape, np.float32), np.ones(shape, np.float32)
    drawn = center + 2.0 * scale * rng.standard_normal((SAMPLES, *shape))
    out = np.concatenate([seen[:SAMPLES // 4], drawn])[:SAMPLES]
    return out.astype(np.float32)


def _sample_mask(rng, num_actions: int) -> np.ndarray:
    """Random masks, each allowing at least one action; a quarter of them allowing all."""
    mask = rng.random((SAMPLES, num_actions)) < 0.5
    mask[np.arange(SAMPLES), rng.integers(0, num_actions, SAMPLES)] = True
    mask[: SAMPLES // 4] = True
    return mask


# --------------------------------------------------------------------------------------
# The metadata file
# --------------------------------------------------------------------------------------
def config_hash(cfg: PPOConfig) -> str:
    """sha256 of the config's values (as JSON, keys sorted): which run's settings a file holds."""
    text = json.dumps(cfg.to_dict(), sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _versions(format: str) -> dict:
    names = ["purejaxppo", "jax", "jaxlib", "flax", *(VERSIONS if format == "onnx" else [])]
    return {"python": platform.python_version(), **{name: _version(name) for name in names}}


def _bound(values, shape) -> list:
    """An action bound (low or high) as JSON: a number per dimension of the action (of `shape`),
    null where that side is open (-inf, inf), since JSON has no infinity."""
    bound = np.broadcast_to(np.asarray(values, dtype=float), shape)
    return np.where(np.isfinite(bound), bound.astype(object), None).tolist()


def _json(metadata: dict) -> str:
    """The metadata as strict JSON, which every parser reads: a NaN or infinity in it (which
    json.dumps would write as NaN or Infinity, which is not JSON) is a bug, and raises ValueError."""
    return json.dumps(metadata, indent=2, allow_nan=False) + "\n"


def _metadata(cfg, agent, policy, spec: _Spec, format: str, source: dict | None) -> dict:
    space = agent.action_space
    if space.kind == "discrete":
        action_space = {"kind": "discrete", "num_actions": space.num_actions}
    else:
        action_space = {"kind": "continuous", "shape": list(space.shape), "low": _bound(space.low, space.shape),
                        "high": _bound(space.high, space.shape), "squash": agent.squash}

    def described(items):
        return [{"name": n, "shape": ["batch", *s], "dtype": d.name} for n, s, d in items]

    meta = {
        "format": format,
        "load": "jax.export.deserialize(open(file, 'rb').read()).call(*inputs)" if format == "stablehlo" else LOAD,
        "env": cfg.env,
        "observation": {"shape": list(agent.network.obs_shape), "dtype": "float32",
                        "normalized": agent.normalize_obs},
        "action_space": action_space,
        "recurrent": agent.recurrent,
        "masked": agent.masked,
        "inputs": described(spec.inputs),
        "outputs": described(spec.outputs),
        "greedy": "the action is the policy's mode: argmax of the logits, or the mean (clipped to the action box, "
                  "or squashed into it, as in training)",
        "config_hash": config_hash(cfg),
        "versions": _versions(format),
    }
    if format == "stablehlo":
        meta["platforms"] = list(PLATFORMS)
    if agent.recurrent:
        row = [np.asarray(x)[0] for x in jax.tree.leaves(agent.initial_carry(1))]
        meta["initial_carry"] = {f"{n}": ("zeros" if not np.any(x) else x.tolist())
                                 for (n, _, _), x in zip(spec.inputs, row)}
    if source:
        meta["source"] = source
    return meta


def _write_new(path: Path, text: str) -> None:
    """A new file, whole or not at all (a temporary name, then a hard link: an existing file
    is never replaced)."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(temporary, "x", encoding="utf-8") as f:
            f.write(text)
        os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


__all__ = ["ExportError", "ExportMismatch", "ExportedPolicy", "FORMATS", "OUTPUTS", "check_onnx_installed",
           "check_target", "config_hash", "export_policy"]
