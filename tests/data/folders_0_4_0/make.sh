#!/usr/bin/env bash
# How tests/data/folders_0_4_0 was written: by purejaxppo 0.4.0 (main at 0455f07), Python 3.13, jax 0.11.2,
# on a CPU. Run from a checkout of that commit: `bash make.sh OUT` (OUT: a new folder). Kept so that the
# folders can be told apart from ones a later version writes; never rerun over the committed ones.
set -euo pipefail
out=$1
tiny=(--set num_envs=4 --set num_steps=16 --set hidden_sizes=[8] --set num_minibatches=2 --set update_epochs=2)
run() { python -m purejaxppo.experiments.cli "$@" --no-cache; }
# a finished train run: 2 seeds, 4 updates, a checkpoint every 2 (both kept), 4 evaluation episodes
run train cartpole --seeds 2 "${tiny[@]}" --set total_timesteps=256 --eval-episodes 4 --checkpoint-every 2 \
    --out "$out/train"
# a finished sweep: 2 x 2 points (update_epochs splits the run sets) x 2 seeds, 4 updates
run sweep sweeps/clip_epochs "${tiny[@]}" --set total_timesteps=256 --grid clip_eps=0.1,0.3 \
    --grid update_epochs=1,2 --seeds 2 --out "$out/sweep"
# a finished PBT sweep: 4 members x 1 seed, exploit/explore every 2 of 6 updates
pbt=$(mktemp --suffix=.yaml)
cat > "$pbt" <<'YAML'
env: CartPole-v1
anneal_lr: false
sweep:
  seeds: 1
  eval_episodes: 4
  pbt:
    population: 4
    interval: 2
    hyperparameters:
      lr: {loguniform: [1.0e-4, 1.0e-2]}
YAML
run sweep "$pbt" "${tiny[@]}" --set total_timesteps=384 --out "$out/pbt"
# a train run stopped by SIGINT after its checkpoint at update 4 (of 64)
python -m purejaxppo.experiments.cli train cartpole --seeds 2 "${tiny[@]}" --set total_timesteps=4096 \
    --checkpoint-every 4 --keep 2 --eval-episodes 4 --no-cache --out "$out/stopped" &
pid=$!
until [ -d "$out/stopped/checkpoints/4" ]; do sleep 0.05; done
kill -INT "$pid"
wait "$pid" || echo "stopped: exit $?"
# the plots (*.png) were then removed: results only, nothing reads them back; eval_0_4_0.json holds what
# `purejaxppo eval FOLDER --episodes 3 --json` of 0.4.0 printed for each folder (its runs' returns)
