#!/usr/bin/env bash
# Writes tests/fixtures/gpt_parity.json: the first 20 step losses of PyTorch (tools/gpt_twin.py) training a
# tiny GPT on tests/fixtures/gpt_text.txt from the weights lockstep's gpt initialises with the same seed.
# tests/examples/gpt_test.cpp trains lockstep from that seed on 1 and 2 ranks and compares every loss.
#   tools/bazel build //examples:gpt //distributed/launch && tools/make_gpt_fixture.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$HOME/.cache/torch-venv/bin/python}
ARGS=(--text tests/fixtures/gpt_text.txt --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --seed 1337)
TRAIN=(--steps 20 --lr 1e-2 --min-lr 1e-3 --warmup-iters 5 --grad-clip 1.0 --weight-decay 0.1 --beta2 0.99)
init=$(mktemp --suffix=.safetensors)
trap 'rm -f "$init"' EXIT
bazel-bin/distributed/launch/launch --nproc_per_node=1 bazel-bin/examples/gpt "${ARGS[@]}" --export-init "$init"
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$PY" tools/gpt_twin.py --init "$init" "${ARGS[@]}" "${TRAIN[@]}" \
  --batch-size 4 --losses-json tests/fixtures/gpt_parity.json
