#!/usr/bin/env bash
# The timing suite's GPU-sized points on a GPU host (`python -m benchmarks --gpu`: the headline
# 2048 CartPole seeds x 5e5 steps including compile, the scaling curve up to 8192 runs or the
# 30 s cap, the limit at 2048 runs), about 8 minutes on one H200.
#
# The host's image has jax, flax, optax, chex and orbax but not gymnax, brax or mujoco. On a
# machine with the registries, from the repo root, fetch their wheels first and carry them:
#     ../shared/gpu/fetch-wheels.sh .whl            # keep .whl/ out of git
# then on the GPU host, from the repo root:
#     benchmarks/gpu.sh [WHEELS_DIR] [more options of python -m benchmarks, e.g. --cases headline]
# Results: benchmarks/results/<date>-<gpu>-suite.{md,json} and plots (e.g. 2026-12-01-h200-suite.md).
set -euo pipefail
wheels=${1:-.whl}
[ $# -gt 0 ] && shift
site=${SITE:-/tmp/purejaxppo-site}
if [ -d "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl
  export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "gpu.sh: no wheels folder '$wheels': using what this python has" >&2
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 - <<'PY'
import jax, gymnax, purejaxppo
backend = jax.default_backend()
print(f"jax {jax.__version__} on {backend}: {jax.devices()}; purejaxppo {purejaxppo.__version__}")
if backend != "gpu" and not __import__("os").environ.get("ALLOW_CPU"):
    raise SystemExit("gpu.sh: JAX sees no GPU (set ALLOW_CPU=1 to check the script on a CPU)")
PY
exec python3 -m benchmarks --gpu "$@"
