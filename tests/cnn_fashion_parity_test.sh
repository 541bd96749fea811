#!/usr/bin/env bash
# cnn_fashion against PyTorch, step by step: from the same initial weights (--seed 0), without dropout,
# on the first 320 Fashion-MNIST images in order, the global loss of each of the first 20 steps at
# 1 rank with batch 32 and at 2 ranks with batch 16 each equals PyTorch's at batch 32 (to 1e-4
# relative; tests/data/cnn_fashion_parity.json, written by tools/cnn_fashion_twin.py --write-fixture).
set -euo pipefail
launch="$1" cnn="$2" fixture="$3"
if ! ls /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte* >/dev/null 2>&1; then
  echo "SKIPPED: Fashion-MNIST (dataset-fashion-mnist) is not installed"
  exit 0
fi
dir="${TEST_TMPDIR:-$(mktemp -d)}"
# The run's flags and the expected losses, one per line, from the fixture.
args=$(awk '/"args"/{a=1; next} a && /\]/{exit} a{sub(/,$/, ""); gsub(/"/, ""); printf "%s ", $1}' "$fixture")
awk '/"losses"/{a=1; next} a && /\]/{exit} a{gsub(/,/, ""); print $1}' "$fixture" > "$dir/expected"
steps=$(wc -l < "$dir/expected")
[ "$steps" -ge 10 ] || { echo "FAIL: $fixture holds $steps losses"; exit 1; }
batch=$(awk -F': *' '/"batch_per_rank"/{gsub(/,/, "", $2); print $2}' "$fixture")

check() {  # check NAME NPROC BATCH
  rm -f "$dir/$1.jsonl"
  # shellcheck disable=SC2086
  "$launch" --nproc_per_node="$2" "$cnn" $args --batch-size "$3" --steps "$steps" --log-every 1 \
    --timeout 60 --metrics "$dir/$1.jsonl" > "$dir/$1.log"
  grep -o '"loss":[^,}]*' "$dir/$1.jsonl" | cut -d: -f2 > "$dir/$1.got"
  paste "$dir/expected" "$dir/$1.got" | awk -v name="$1" -v n="$steps" '
    { d = $2 - $1; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r
      if (r > 1e-4 || $2 == "") { printf "FAIL: %s step %d: loss %s, PyTorch %s (relative %.2g)\n", name, NR, $2, $1, r; bad = 1 } }
    END { if (NR != n) { printf "FAIL: %s: %d losses, expected %d\n", name, NR, n; exit 1 }
          if (bad) exit 1; printf "%s: %d losses within %.2g of PyTorch\n", name, NR, worst }'
}
check one_rank 1 $((2 * batch))
check two_ranks 2 "$batch"
echo "PASS: cnn_fashion's losses equal PyTorch's at 1 and 2 ranks"
