#!/usr/bin/env bash
# The authors' settings on a shared CPU (experiments/unimask/doorkey.py :paper_n<N>), one data
# size per call; resumes where a previous call stopped (progress is saved per group).
# usage: reproductions/unimask/run_paper_cpu.sh 500 [workdir] [--config.KEY=VALUE ...]
set -euo pipefail
n=${1:?number of training trajectories: 50, 500 or 1000}
workdir=${2:-runs/unimask_paper_n$n}
exec nice -n 10 icrl-jax report --config "experiments/unimask/doorkey.py:paper_n$n" \
  --config.workdir="$workdir" --config.run.progress=True "${@:3}"
