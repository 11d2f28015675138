#!/usr/bin/env bash
# The GPU checks as one prepared script, on a host whose python already has a jax in pyproject.toml's
# range (with its CUDA plugin) but maybe not gymnax, brax or mujoco:
#   1. installs the carried wheels of those into that python (no --target side install: the host's
#      own jax, flax, optax, chex and orbax are kept; --target only if its site-packages is read-only);
#   2. checks that the host's jax is in pyproject.toml's range and that JAX sees a GPU;
#   3. the timing suite's GPU points (`python -m benchmarks --gpu`: the headline, 2048 CartPole seeds
#      x 5e5 steps including compile, target under 30 s; scaling; limit), about 8 minutes on one H200;
#   4. Brax ant at configs/brax/ant.yaml (benchmarks/gpu_brax.py: >= 1M env steps/s, >= 5000 at 50M steps);
#   5. only when asked (PARTS=returns; hours): the returns case's GPU-sized configs, Brax, Craftax and the
#      MinAtar CNN, at their full budgets against their published returns
#      (`python -m benchmarks --cases returns --gpu`: resumable, one result per config).
#   6. only when asked (PARTS=playground; the playground wheels carried too): CartpoleBalance and
#      CheetahRun at Playground's own PPO settings, beside Brax's trainer (benchmarks/gpu_playground.py;
#      PLAYGROUND_OPTIONS="--updates 10" cuts each to 10 updates, ~1e7 steps);
#
# Here, with the registries, fetch the wheels (keep .whl/ out of git):
#     benchmarks/fetch_wheels.sh .whl
# then on the GPU host, from the repo root:
#     benchmarks/gpu.sh [WHEELS_DIR] [options of python -m benchmarks, e.g. --cases headline]
#     PARTS=ant benchmarks/gpu.sh .whl          # only step 4 (PARTS=suite: only step 3; default both;
#                                               # PARTS=returns: only step 5;
#                                               # ANT_OPTIONS="--steps 2000000": a short ant run)
# Results: benchmarks/results/<date>-<gpu>-suite.{md,json} and plots, <date>-brax-ant-gpu.{md,json},
# benchmarks/results/returns/<config>.json and <date>-returns-<gpu>.{md,png}.
set -euo pipefail
wheels=${1:-.whl}
[ $# -gt 0 ] && shift
parts=${PARTS:-suite,ant}
py=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -d "$wheels" ]; then
  if ! "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$wheels"/*.whl; then
    site=${SITE:-/tmp/purejaxppo-site}
    echo "gpu.sh: this python's site-packages is not writable: installing the wheels into $site" >&2
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl
    export PYTHONPATH="$site:$PYTHONPATH"
  fi
else
  echo "gpu.sh: no wheels folder '$wheels': using what this python has" >&2
fi
"$py" -m purejaxppo --version
"$py" - <<'PY'
import importlib.metadata, os, tomllib

import jax

spec = next(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"] if d.startswith("jax"))
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
if not Requirement(spec).specifier.contains(importlib.metadata.version("jax")):
    raise SystemExit(f"gpu.sh: this host's jax {importlib.metadata.version('jax')} is outside purejaxppo's '{spec}'")
if jax.default_backend() != "gpu" and not os.environ.get("ALLOW_CPU"):
    raise SystemExit("gpu.sh: JAX sees no GPU (set ALLOW_CPU=1 to check the script on a CPU)")
PY
cpu=${ALLOW_CPU:+--allow-cpu}
case ",$parts," in *,suite,*) "$py" -m benchmarks --gpu "$@" ;; esac
case ",$parts," in *,ant,*) "$py" benchmarks/gpu_brax.py --no-install --results benchmarks/results $cpu ${ANT_OPTIONS:-} ;; esac
case ",$parts," in *,returns,*) "$py" -m benchmarks --cases returns --gpu ;; esac
case ",$parts," in *,playground,*) "$py" benchmarks/gpu_playground.py ${PLAYGROUND_OPTIONS:-} ;; esac
