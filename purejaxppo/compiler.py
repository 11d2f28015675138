"""The XLA options purejaxppo compiles its programs with, and `jit`, which compiles with them.

`ppo.jit(f)` is `jax.jit(f, compiler_options=ppo.compiler_options())`: the README's and the
docs' examples use it, so a notebook gets the command line's program (same options, same
speed) without knowing about them. A plain `jax.jit` works too, with XLA's defaults.

On a CPU, LLVM optimises at -O1 instead of XLA's default -O2. Our programs are many small
kernels whose time goes to dispatch and memory traffic, not to the loop vectorisation -O2
adds, so they run as fast while compiling 10-40% sooner (CartPole 1 seed: 8.0 -> 6.6 s,
64 seeds: 12.8 -> 7.8 s, MinAtar Breakout: 12.8 -> 9.5 s; run times within the machine's
noise; benchmarks/results/2026-12-01-cpu2-llvm-o1.md). The numbers differ from -O2's within
float rounding; one program always computes the same numbers (resume stays bit-identical).
Other platforms keep XLA's defaults: not measured there.
"""

from __future__ import annotations

import jax

CPU_OPTIONS = {"xla_backend_optimization_level": 1}


def compiler_options(platform: str | None = None) -> dict | None:
    """XLA options for programs on `platform` ("cpu", "gpu", ...; default: JAX's default
    backend), for `jax.jit(..., compiler_options=...)`; None: XLA's defaults."""
    return dict(CPU_OPTIONS) if (platform or jax.default_backend()) == "cpu" else None


def jit(fn, **jit_kwargs):
    """`jax.jit(fn, **jit_kwargs)`, compiled with `compiler_options()` for JAX's default
    backend; `compiler_options=` in jit_kwargs adds to them (and wins where both set one)."""
    options = {**(compiler_options() or {}), **(jit_kwargs.pop("compiler_options", None) or {})}
    return jax.jit(fn, compiler_options=options or None, **jit_kwargs)
