"""The XLA options purejaxppo compiles its programs with: `jax.jit(f, compiler_options=compiler_options())`.

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
