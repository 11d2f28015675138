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
    """`fn` over args whose leaves have a leading run axis, as one program over all devices.

        runs = ShardedRuns(train, keys, hparams)   # compiles (timed in .compile_seconds)
        out = runs()                               # executes; leading axis = number of runs

    Runs are laid out as [devices, runs per device]; the device axis is sharded and each
    device vmaps its runs, or, with `chunk=N`, runs them N at a time
    (`jax.lax.map(..., batch_size=N)`) to bound memory: same numbers either way.
    """

    def __init__(self, fn, *args, devices=None, chunk: int | None = None):
        devices = list(devices if devices is not None else jax.devices())
        self.num_runs = int(jax.tree.leaves(args)[0].shape[0])
        # no more devices than runs: a lone run is not copied onto every device
        devices = devices[: min(len(devices), self.num_runs)]
        self.num_devices = len(devices)
        self.padded_runs = padded = -(-self.num_runs // self.num_devices) * self.num_devices
        per_device = padded // self.num_devices

        def on_device(*device_args):
            if chunk is None or chunk >= per_device:
                return jax.vmap(fn)(*device_args)
            return jax.lax.map(lambda a: fn(*a), device_args, batch_size=chunk)

        sharding = NamedSharding(Mesh(np.array(devices), ("runs",)), PartitionSpec("runs"))
        laid_out = jax.tree.map(lambda x: x.reshape(self.num_devices, per_device, *x.shape[1:]),
                                _pad(args, padded))
        self._args = jax.device_put(laid_out, sharding)
        start = time.perf_counter()
        self._compiled = jax.jit(jax.vmap(on_device)).lower(*self._args).compile()
        self.compile_seconds = time.perf_counter() - start

    def __call__(self):
        out = self._compiled(*self._args)
        return jax.tree.map(lambda x: x.reshape(self.padded_runs, *x.shape[2:])[: self.num_runs], out)
