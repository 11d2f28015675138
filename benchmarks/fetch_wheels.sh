#!/usr/bin/env bash
# Downloads the wheels that an offline GPU host lacks for running purejaxppo, when its python already
# has a jax in purejaxppo's range with its CUDA plugin, flax, optax, chex, orbax-checkpoint, numpy,
# scipy, matplotlib and rich, but not gymnax, brax or mujoco (about 36 MB). Then benchmarks/gpu.sh.
#
#   usage (from the repo root, on a machine with the registries):
#     [PYTHON_VERSION=3.12] [FAMILIES=1] [PLAYGROUND=1] benchmarks/fetch_wheels.sh [DIR]     (default DIR: .whl)
#   FAMILIES=1 adds craftax, xminigrid, jumanji and their direct dependencies; PLAYGROUND=1 MuJoCo
#   Playground (about 13 MB more).
#   DIR is git-ignored (.whl/); copy it to the host with the repo.
set -eu
dir=${1:-.whl}
pyver=${PYTHON_VERSION:-3.12}
mkdir -p "$dir"
# the versions of pyproject.toml's ranges, and what gymnax and brax import beyond the host's packages
pkgs="gymnax>=1.0.1,<1.1 six gymnasium<1.4 farama-notifications brax>=0.14.2,<0.15 jaxopt ml-collections
tensorboardx trimesh mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 mujoco-mjx==3.17.0 flask flask-cors blinker itsdangerous werkzeug glfw
pyopengl websockets tzdata"
if [ "${FAMILIES:-0}" = 1 ]; then
  # pygame, imageio-ffmpeg (68 MB) and hf-xet are left out: the envs build and step without them
  pkgs="$pkgs craftax>=1.6.1,<1.7 imageio xminigrid>=0.9.3,<0.10 tqdm jumanji>=1.1.2,<1.2 esquilax jax-tqdm dm-env
dm-tree huggingface-hub filelock wrapt"
fi
if [ "${PLAYGROUND:-0}" = 1 ]; then  # MuJoCo Playground (gpu.sh PARTS=playground); warp-lang is left out: impl jax
  pkgs="$pkgs playground>=0.2.0,<0.3 lxml tqdm"
fi
plat="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
for p in $pkgs; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp $plat \
    -d "$dir" "$p" 2>&1 | grep -v '^WARNING' || true
done
ls "$dir" | wc -l | xargs echo "wheels in $dir:"
du -sh "$dir"
