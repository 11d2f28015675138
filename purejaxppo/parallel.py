"""Many runs as one program: vmap over a leading run axis, sharded over every device.

The run axis is split over `jax.devices()` with a 1-D `Mesh` and `NamedSharding`; it is
padded (by repeating the last run) to a multiple of the device count, and the padding is
dropped from the outputs. On a CPU, `use_all_cpu_cores()` (called before JAX starts its
backend) makes each core a host device, so runs spread over the cores.
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


def _pad(tree, size: int):
    def pad(x):
        extra = size - x.shape[0]
        return x if extra == 0 else jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)])

    return jax.tree.map(pad, tree)


class ShardedRuns:
    """`jax.jit(jax.vmap(fn))` over args whose leaves have a leading run axis, sharded.

        runs = ShardedRuns(train, keys, hparams)   # compiles (timed in .compile_seconds)
        out = runs()                               # executes; leading axis = len(keys)
    """

    def __init__(self, fn, *args, devices=None):
        devices = list(devices if devices is not None else jax.devices())
        self.num_runs = int(jax.tree.leaves(args)[0].shape[0])
        # no more devices than runs: a lone run is not copied onto every device
        devices = devices[: min(len(devices), self.num_runs)]
        self.num_devices = len(devices)
        self.padded_runs = padded = -(-self.num_runs // self.num_devices) * self.num_devices
        sharding = NamedSharding(Mesh(np.array(devices), ("runs",)), PartitionSpec("runs"))
        self._args = jax.device_put(_pad(args, padded), sharding)
        start = time.perf_counter()
        self._compiled = jax.jit(jax.vmap(fn)).lower(*self._args).compile()
        self.compile_seconds = time.perf_counter() - start

    def __call__(self):
        out = self._compiled(*self._args)
        if self.padded_runs == self.num_runs:
            return out
        return jax.tree.map(lambda x: x[: self.num_runs], out)
