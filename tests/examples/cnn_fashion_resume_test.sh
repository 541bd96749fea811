#!/usr/bin/env bash
# cnn_fashion stopped mid-epoch and resumed from its checkpoint continues the uninterrupted run exactly:
# 2 ranks, shuffling, dropout and BatchNorm on; the metrics (every step's loss and lr, each epoch's test
# accuracy) and the final weights are the same bits. Once with the default optimizer (Adam, cosine) and
# once with --optimizer adadelta (its square_avg/acc_delta state and StepLR go through the checkpoint).
set -euo pipefail
launch="$1" cnn="$2"
if ! ls /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte* >/dev/null 2>&1; then
  echo "SKIPPED: Fashion-MNIST (dataset-fashion-mnist) is not installed"
  exit 0
fi
top="${TEST_TMPDIR:-$(mktemp -d)}"
# 96 images, batch 8 per rank: 6 steps per epoch, 18 in all; the stop at step 8 is inside epoch 1.
common=(--width 4,8,16 --train-limit 96 --test-limit 50 --epochs 3 --batch-size 8 --batch-norm --log-every 1
        --timeout 60)
run() { "$launch" --nproc_per_node=2 "$cnn" "${common[@]}" "${extra[@]}" "$@"; }

check() {  # check NAME EXTRA_ARGS...
  name="$1" dir="$top/$1"
  shift
  extra=("$@")
  mkdir -p "$dir"
  run --metrics "$dir/a.jsonl" --save "$dir/a.safetensors" > "$dir/a.log"
  run --metrics "$dir/b.jsonl" --checkpoint "$dir/ck.safetensors" --steps 8 > "$dir/b1.log"
  run --metrics "$dir/b.jsonl" --resume "$dir/ck.safetensors" --save "$dir/b.safetensors" > "$dir/b2.log"
  cat "$dir/a.log" "$dir/b1.log" "$dir/b2.log"
  grep -q "resuming after step 7" "$dir/b2.log" || { echo "FAIL ($name): the second run did not resume"; exit 1; }
  # Every record without its samples_per_s (a timing).
  strip() { sed 's/,"samples_per_s":[^,}]*//' "$1"; }
  [ "$(wc -l < "$dir/a.jsonl")" -eq 18 ] || { echo "FAIL ($name): $(wc -l < "$dir/a.jsonl") records, expected 18"; exit 1; }
  grep -q test_acc "$dir/a.jsonl" || { echo "FAIL ($name): no test accuracy recorded"; exit 1; }
  diff <(strip "$dir/a.jsonl") <(strip "$dir/b.jsonl") || { echo "FAIL ($name): the resumed run's metrics differ"; exit 1; }
  grep '^epoch' "$dir/a.log" > "$dir/a.epochs"
  grep -h '^epoch' "$dir/b1.log" "$dir/b2.log" | sed 's/ samples_per_s [0-9]*//' > "$dir/b.epochs"
  diff <(sed 's/ samples_per_s [0-9]*//' "$dir/a.epochs") "$dir/b.epochs" || { echo "FAIL ($name): epoch lines differ"; exit 1; }
  cmp "$dir/a.safetensors" "$dir/b.safetensors" || { echo "FAIL ($name): final weights differ"; exit 1; }
  echo "$name: the resumed run matches the uninterrupted one bit for bit"
}
check adam
check adadelta --optimizer adadelta
echo "PASS: the resumed runs match the uninterrupted ones bit for bit"
