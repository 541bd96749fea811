#!/usr/bin/env bash
# mlp_threads_bench.sh: the MLP training step (256-512-512-10, batch 128) of lockstep's mlp_bench and of
# PyTorch (../shared/anchors/torch_mlp.py), each at its default thread count (all cores) and at one
# thread, interleaved: each repetition runs the four configurations, the order rotating by one place.
# Prints one line per run: repetition, configuration, step_ms (mean of STEPS steps after 10 warm-up).
#   bench/mlp_threads_bench.sh [REPS=7] [STEPS=200]   (after tools/bazel build //bench:mlp_bench)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-7} steps=${2:-200}
B=bazel-bin/bench/mlp_bench PY=${TORCH_PY:-$HOME/.cache/torch-venv/bin/python} T=../shared/anchors/torch_mlp.py
threads=$(nproc)
cfgs=(lockstep_all pytorch_all lockstep_one pytorch_one)
run() {
  case $1 in
    lockstep_all) env -u OMP_NUM_THREADS -u MKL_NUM_THREADS "$B" --rounds 1 --steps "$steps" | sed -n 's/^step_ms //p' ;;
    pytorch_all) env -u OMP_NUM_THREADS -u MKL_NUM_THREADS "$PY" "$T" 1 "$steps" --threads "$threads" 2>/dev/null |
      sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' ;;
    lockstep_one) OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$B" --rounds 1 --steps "$steps" | sed -n 's/^step_ms //p' ;;
    pytorch_one) OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$PY" "$T" 1 "$steps" --threads 1 2>/dev/null |
      sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' ;;
  esac
}
for rep in $(seq 1 "$reps"); do
  for i in 0 1 2 3; do
    c=${cfgs[$(((i + rep) % 4))]}
    echo "$rep $c $(run "$c") load=$(cut -d' ' -f1 /proc/loadavg)"
  done
done
