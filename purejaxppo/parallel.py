"""Many runs as one program: vmap over a leading run axis, sharded over every device.

The run axis is split over `jax.devices()` with a 1-D `Mesh` and `NamedSharding`; it is
padded (by repeating the last run) to a multiple of the device count, and the padding is
dropped from the outputs. On a CPU, `use_all_cpu_cores()` (called before JAX starts its
backend) makes each core a host device, so runs spread over the cores.

Several processes (hosts): after `init_distributed_from_env()` every process builds the
same inputs, computes the shard on its own devices, and gets the gathered outputs;
only `is_writer()` (process 0) should write them.
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

CPU_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def use_all_cpu_cores() -> None:
    """Expose one host device per CPU core, unless XLA_FLAGS already says how many.

    Only effective before JAX initialises its CPU backend (first computation).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if CPU_DEVICES_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {CPU_DEVICES_FLAG}={os.cpu_count() or 1}".strip()


def init_distributed_from_env() -> bool:
    """`jax.distributed.initialize` from JAX_COORDINATOR_ADDRESS (host:port),
    JAX_NUM_PROCESSES and JAX_PROCESS_ID, when the first is set; CPU collectives use gloo.
    Returns whether this is a multi-process run."""
    address = os.environ.get("JAX_COORDINATOR_ADDRESS")
    if not address:
        return False
    count, index = os.environ.get("JAX_NUM_PROCESSES"), os.environ.get("JAX_PROCESS_ID")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=address,
                               num_processes=int(count) if count else None,
                               process_id=int(index) if index else None)
    return True


def is_writer() -> bool:
    """Whether this process writes results (process 0)."""
    return jax.process_index() == 0


def _pad(tree, size: int):
    def pad(x):
        extra = size - x.shape[0]
        return x if extra == 0 else jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)])

    return jax.tree.map(pad, tree)


class ShardedRuns:
    """`fn` over args whose leaves have a leading run axis, as one program over all devices.

        runs = ShardedRuns(train, keys, hparams)   # compiles (timed in .compile_seconds)
        out = runs()                               # executes; leading axis = number of runs

    Runs are laid out as [devices, runs per device]; the device axis is sharded and each
    device vmaps its runs, or, with `chunk=N`, runs them N at a time
    (`jax.lax.map(..., batch_size=N)`) to bound memory: same numbers either way.
    `ShardedRuns.buckets([(fn_a, args_a), (fn_b, args_b), ...])` puts several such run
    sets (e.g. programs of different shapes) into the same single compiled program;
    calling it returns one output per bucket.
    """

    def __init__(self, fn, *args, devices=None, chunk: int | None = None):
        self._single = True
        self._setup([(fn, args)], devices, chunk)

    @classmethod
    def buckets(cls, pairs, devices=None, chunk: int | None = None) -> "ShardedRuns":
        runs = cls.__new__(cls)
        runs._single = False
        runs._setup(list(pairs), devices, chunk)
        return runs

    def _setup(self, pairs, devices, chunk):
        devices = list(devices if devices is not None else jax.devices())
        self._layouts, laid_out_args, programs = [], [], []
        for fn, args in pairs:
            num_runs = int(jax.tree.leaves(args)[0].shape[0])
            # no more devices than runs: a lone run is not copied onto every device
            used = devices[: min(len(devices), num_runs)]
            padded = -(-num_runs // len(used)) * len(used)
            per_device = padded // len(used)
            self._layouts.append((num_runs, len(used), padded))

            def on_device(*device_args, fn=fn, per_device=per_device):
                if chunk is None or chunk >= per_device:
                    return jax.vmap(fn)(*device_args)
                return jax.lax.map(lambda a: fn(*a), device_args, batch_size=chunk)

            programs.append(jax.vmap(on_device))
            sharding = NamedSharding(Mesh(np.array(used), ("runs",)), PartitionSpec("runs"))
            laid_out = jax.tree.map(lambda x: np.asarray(x).reshape(len(used), per_device, *x.shape[1:]),
                                    _pad(args, padded))
            # every process holds the same inputs and places the slices of its own devices
            laid_out_args.append(jax.tree.map(
                lambda x: jax.make_array_from_callback(x.shape, sharding, lambda index: x[index]), laid_out))
        self.num_runs, self.num_devices, self.padded_runs = self._layouts[0]
        self._args = laid_out_args
        start = time.perf_counter()
        self._compiled = jax.jit(
            lambda all_args: [program(*a) for program, a in zip(programs, all_args)]).lower(self._args).compile()
        self.compile_seconds = time.perf_counter() - start

    def __call__(self):
        outs = self._compiled(self._args)
        if jax.process_count() > 1:  # every process gets every run's results (as numpy)
            from jax.experimental import multihost_utils

            outs = multihost_utils.process_allgather(outs, tiled=True)
        outs = [jax.tree.map(lambda x: x.reshape(padded, *x.shape[2:])[:num_runs], out)
                for out, (num_runs, _, padded) in zip(outs, self._layouts)]
        return outs[0] if self._single else outs
