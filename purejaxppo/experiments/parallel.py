"""Many runs as one program: vmap over a leading run axis, sharded over every device.

The run axis is split over `jax.devices()` with a 1-D `Mesh` and `NamedSharding`; it is
padded (by repeating the last run) to a multiple of the device count, and the padding is
dropped from the outputs. On a CPU, `use_all_cpu_cores()` (called before JAX starts its
backend) makes each core a host device, so runs spread over the cores.

Several processes (hosts, joined by `hosts.join`): every process builds the same inputs
and computes the shard on its own devices. A call gathers the outputs to every process;
`held=True` leaves them where they lie (global `jax.Array`s, padded, each process holding
its own shards: the learner states), and `gather_small` gathers the small ones (metrics,
returns) when they are wanted.

Memory is checked before anything runs (`memory`: a sweep too big is refused before it is
drawn). Before compiling, the shapes of the results are traced: if the results alone do
not fit, no chunking can help. After compiling, XLA's own account of the program's memory
per device (arguments + results + temporaries) is compared with what the device has free;
temporaries grow with the runs in flight, so the error says how many would fit.
"""
from __future__ import annotations

import os
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from purejaxppo.compiler import compiler_options
from purejaxppo.errors import ResourceError
from purejaxppo.experiments import compile_cache
from purejaxppo.experiments.memory import bytes_text, free_memory_bytes, runs_per_device, tree_bytes

# for scripts and notebooks (docs/python-api.md#several-cpu-cores); the rest serves runs.py
__all__ = ["ShardedRuns", "use_all_cpu_cores"]

CPU_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def use_all_cpu_cores() -> None:
    """Expose one host device per CPU core, unless XLA_FLAGS already says how many.

    Only effective before JAX initialises its CPU backend (first computation).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if CPU_DEVICES_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {CPU_DEVICES_FLAG}={os.cpu_count() or 1}".strip()


class _Layout(NamedTuple):
    """One run set on the devices: `devices` x `per_device` slots, the first `num_runs` real."""

    num_runs: int
    devices: int
    per_device: int

    @property
    def padded(self) -> int:
        return self.devices * self.per_device


def _pad(tree, size: int):
    def pad(x):
        extra = size - x.shape[0]
        return x if extra == 0 else jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)])

    return jax.tree.map(pad, tree)


def _empty_constants_inside(fn, *args):
    """`fn(*args)`, traced, with its zero-size constants made in the body (`jnp.zeros`) rather than
    captured: the same program otherwise, traced once and replayed, the same numbers.

    `jax.shard_map` passes the constants its body captures in as operands, and XLA's Shardy (jax
    0.11.2) segfaults compiling a shard_map over 2 or more devices that has a zero-size operand
    (in sdy's ManualComputationUnusedInputsPattern, in the ShardyXLA pass; one device is spared).
    gymnax's SpaceInvaders-MinAtar captures ten (`x.at[:].set(...)` indexes with an empty array).
    An empty array holds no data: made in the body it is no operand. Keys and other extended
    dtypes are left as they are (none seen)."""
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
    consts = [jnp.zeros(np.shape(c), c.dtype)
              if np.size(c) == 0 and not jnp.issubdtype(c.dtype, jax.dtypes.extended) else c
              for c in closed.consts]
    outs = jax.core.eval_jaxpr(closed.jaxpr, consts, *jax.tree.leaves(args))
    return jax.tree.unflatten(jax.tree.structure(out_shape), outs)


def _empty_leaves_outside(on_device, args, layout: _Layout, mesh):
    """`on_device` (a device's runs -> their outputs) as `jax.shard_map` over `mesh`, the
    whole run axis in and out, with its zero-size inputs and outputs kept out of the
    shard_map: made in its body (inputs) and beside it (outputs) by `jnp.zeros`. The body is
    traced once, by the shard_map; what it returns is read there.

    Shardy's segfault with a zero-size operand (`_empty_constants_inside`) comes with zero-size
    inputs too: MJX's state (`env: playground/...`) holds a dozen (`data.act` where a model has
    no activations). An empty array holds no data: the program is the same without them."""
    arg_leaves, arg_tree = jax.tree.flatten(args)
    traced = {}  # the outputs' leaves (shapes) and structure, as tracing the body finds them

    def body(*kept):
        given = iter(kept)
        full = [jnp.zeros((layout.per_device, *x.shape[1:]), x.dtype) if _is_empty(x) else next(given)
                for x in arg_leaves]
        outs, traced["tree"] = jax.tree.flatten(on_device(*jax.tree.unflatten(arg_tree, full)))
        traced["leaves"] = [jax.ShapeDtypeStruct(out.shape, out.dtype) for out in outs]
        return [out for out in outs if not _is_empty(out)]

    mapped = jax.shard_map(body, mesh=mesh, in_specs=PartitionSpec("runs"), out_specs=PartitionSpec("runs"),
                           check_vma=False)

    def program(*all_args):
        kept = [x for x in jax.tree.leaves(all_args) if not _is_empty(x)]
        computed = iter(mapped(*kept))  # traces the body
        outs = [jnp.zeros((layout.padded, *x.shape[1:]), x.dtype) if _is_empty(x) else next(computed)
                for x in traced["leaves"]]
        return jax.tree.unflatten(traced["tree"], outs)

    return program


def _is_empty(x) -> bool:
    return 0 in x.shape and not jnp.issubdtype(x.dtype, jax.dtypes.extended)


class ShardedRunSets:
    """Several run sets (each its own function, e.g. programs of different shapes) as one program over
    all devices: `pairs` = [(fn_a, args_a), (fn_b, args_b), ...], each `fn` over args whose
    leaves have a leading run axis.

        runs = ShardedRunSets([(fn_a, args_a), (fn_b, args_b)])   # compiles (.compile_seconds)
        out_a, out_b = runs()                  # executes; each output's leading axis: its runs
        out_a, out_b = runs([args_a2, args_b2])   # the same program on other inputs
        runs.out_shapes                        # [outputs' shapes per run set], known before it runs

    The args given to build it may be shapes only (`jax.ShapeDtypeStruct` leaves, e.g. from
    `jax.eval_shape`): the program is compiled for them and called with data later.

    Each run set's run axis (padded to devices x runs per device) is split over the devices
    by `jax.shard_map`: each device traces and runs the plain single-device program on its
    own runs (no second vmap to trace, nothing for the partitioner to propagate), vmapped,
    or, with `chunk=N`, N at a time
    (`jax.lax.map(..., batch_size=N)`, runs per device padded to a multiple of N) to bound
    memory: same numbers either way. `memory_bytes` is the memory per device to plan for
    (default: what it has free); a program that does not fit raises ResourceError before it
    runs (see the module doc).
    """

    def __init__(self, pairs, devices=None, chunk: int | None = None, memory_bytes: int | None = None):
        self._setup(list(pairs), devices, chunk, memory_bytes)

    def _setup(self, pairs, devices, chunk, memory_bytes):
        devices = list(devices if devices is not None else jax.devices())
        self._layouts, self._shardings, shapes, programs = [], [], [], []
        for fn, args in pairs:
            num_runs = int(jax.tree.leaves(args)[0].shape[0])
            # no more devices than runs: a lone run is not copied onto every device
            used = devices[: min(len(devices), num_runs)]
            layout = _Layout(num_runs, len(used), runs_per_device(num_runs, len(used), chunk))
            self._layouts.append(layout)
            per_device = layout.per_device

            def runs_here(*device_args, fn=fn, per_device=per_device):  # [per_device, ...]: this device's runs
                if chunk is None or chunk >= per_device:
                    return jax.vmap(fn)(*device_args)
                return jax.lax.map(lambda a: fn(*a), device_args, batch_size=chunk)

            def on_device(*device_args, runs_here=runs_here):
                return _empty_constants_inside(runs_here, *device_args)

            mesh = Mesh(np.array(used), ("runs",))
            programs.append(_empty_leaves_outside(on_device, args, layout, mesh))
            self._shardings.append(NamedSharding(mesh, PartitionSpec("runs")))
            shapes.append(jax.tree.map(lambda x, sharding=self._shardings[-1]: jax.ShapeDtypeStruct(
                (layout.padded, *x.shape[1:]), x.dtype, sharding=sharding), args))
        concrete = not any(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves([a for _, a in pairs]))
        self._args = self._lay_out([a for _, a in pairs]) if concrete else None
        # runs computed at once on a device (the largest run set's)
        self.in_flight = max(min(chunk or layout.per_device, layout.per_device) for layout in self._layouts)
        if memory_bytes is None:  # this process's devices: another process's cannot be asked
            local = [d for d in devices if d in jax.local_devices()]
            memory_bytes = free_memory_bytes(local[0]) if local else None
        self.memory_bytes = memory_bytes
        jitted = jax.jit(lambda all_args: [program(*a) for program, a in zip(programs, all_args)],
                         compiler_options=compiler_options(devices[0].platform))
        start = time.perf_counter()
        lowered = jitted.lower(shapes)
        # each run set's outputs, leading axis its runs (the padding dropped, as `__call__` does)
        self.out_shapes = [jax.tree.map(lambda x, n=layout.num_runs: jax.ShapeDtypeStruct((n, *x.shape[1:]), x.dtype), out)
                           for out, layout in zip(lowered.out_info, self._layouts)]
        # ... and as `held=True` leaves them: padded, sharded over the devices
        self.held_shapes = [jax.tree.map(lambda x, sharding=sharding: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                                                           sharding=sharding), out)
                            for out, sharding in zip(lowered.out_info, self._shardings)]
        self.num_runs_per_set = [layout.num_runs for layout in self._layouts]
        if memory_bytes is not None:  # before compiling: the results alone must fit
            results = sum(tree_bytes(out) // layout.devices for out, layout in zip(lowered.out_info, self._layouts))
            if results > memory_bytes:
                raise ResourceError("runs", sum(layout.num_runs for layout in self._layouts),
                                    f"their results alone need {bytes_text(results)} per device, more than the "
                                    f"{bytes_text(memory_bytes)} it has free; run fewer runs or updates at a time")
        with compile_cache.quiet_cache_loads():
            self._compiled = lowered.compile()
        self.compile_seconds = time.perf_counter() - start
        self.memory = self._compiled.memory_analysis()  # per device; None where XLA does not say
        if memory_bytes is not None and self.memory is not None:
            self._check_memory(memory_bytes)

    def _check_memory(self, memory_bytes: int) -> None:
        memory = self.memory
        need = memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes
        if need <= memory_bytes:
            return
        # Model, measured on CPU: k runs in flight per device need k x (working memory + results)
        # of one run, plus one run's results staged; the results of all (padded) runs are held.
        results = memory.output_size_in_bytes / sum(layout.per_device for layout in self._layouts)
        chunked = self.in_flight < max(layout.per_device for layout in self._layouts)
        per_run = ((memory.temp_size_in_bytes - results) / self.in_flight if chunked
                   else memory.temp_size_in_bytes / self.in_flight + results)

        def need_with(k):
            held = sum(runs_per_device(layout.num_runs, layout.devices, k) for layout in self._layouts) * results
            return memory.argument_size_in_bytes + held + results + k * per_run

        fits = next((k for k in range(self.in_flight - 1, 0, -1) if need_with(k) <= memory_bytes), 0)
        advice = (f"about {fits} at once should fit: set max_parallel (--max-parallel) to {fits}" if fits
                  else "even one run at a time does not fit: use fewer runs, environments or steps")
        raise ResourceError("runs in flight", self.in_flight,
                            f"the compiled program needs {bytes_text(need)} per device "
                            f"({bytes_text(memory.temp_size_in_bytes)} working memory for {self.in_flight} runs at "
                            f"once), more than the "
                            f"{bytes_text(memory_bytes)} free; {advice}")

    def _lay_out(self, all_args):
        """Each run set's args, padded to devices x runs per device and placed on the
        devices: every process holds the same inputs and places the slices of its own.
        Several processes: an arg that is already a global array laid out so (an output
        `held=True` left where it lies) stays where it is."""
        placed = []
        for args, layout, sharding in zip(all_args, self._layouts, self._shardings):
            def place(x, layout=layout, sharding=sharding):
                if (isinstance(x, jax.Array) and jax.process_count() > 1 and x.shape[0] == layout.padded
                        and x.sharding.is_equivalent_to(sharding, x.ndim)):
                    return x  # held where it lies
                x = np.asarray(_pad(x, layout.padded))
                return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

            placed.append(jax.tree.map(place, args))
        return placed

    def __call__(self, all_args=None, held: bool = False) -> list:
        """Run on the args it was built with, or on new args of the same shapes (one args
        tuple per run set) -> one output per run set. `held`: the outputs as they lie, padded
        global arrays (`held_shapes`), gathered nowhere (several processes: each holds its shards)."""
        if all_args is not None:
            placed = self._lay_out(list(all_args))
        elif self._args is None:
            raise TypeError("built from shapes only: call it with inputs")
        else:
            placed = self._args
        outs = self._compiled(placed)
        if held:
            return list(outs)
        if jax.process_count() > 1:  # every process gets every run's results (as numpy)
            from jax.experimental import multihost_utils

            outs = multihost_utils.process_allgather(outs, tiled=True)
        return [jax.tree.map(lambda x, layout=layout: x[:layout.num_runs], out)
                for out, layout in zip(outs, self._layouts)]


def gather_small(tree, num_runs: int):
    """Small outputs left where they lie (metrics, returns: global arrays with a padded leading
    run axis) -> numpy with the first `num_runs` rows, on every process: one all-gather of these
    small parts only (the learner states never go through it; every process must call it). One
    process: numpy, the padding dropped."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        tree = multihost_utils.process_allgather(tree, tiled=True)
    return jax.tree.map(lambda x: np.asarray(x)[:num_runs], tree)


class ShardedRuns(ShardedRunSets):
    """`fn` over args whose leaves have a leading run axis, as one program over all devices
    (one run set of `ShardedRunSets`, whose doc says how runs are laid out).

        runs = ShardedRuns(train, keys, hparams)   # compiles (timed in .compile_seconds)
        out = runs()                               # executes; leading axis = number of runs
        out = runs(other_keys, other_hparams)      # the same program on other inputs
    """

    def __init__(self, fn, *args, devices=None, chunk: int | None = None, memory_bytes: int | None = None):
        super().__init__([(fn, args)], devices, chunk, memory_bytes)
        layout = self._layouts[0]
        self.num_runs, self.num_devices, self.padded_runs = layout.num_runs, layout.devices, layout.padded

    def __call__(self, *args):
        return super().__call__([args] if args else None)[0]
