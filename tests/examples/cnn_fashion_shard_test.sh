#!/usr/bin/env bash
# cnn_fashion --shard none|optimizer|full on 2 ranks: ZeRO-1 and fully_shard train to DDP's losses and test
# accuracies (to 1e-5: the same steps, summed in another order), and in each mode a run stopped mid-epoch
# and resumed from its checkpoint (DDP's and ZeRO's one file, fully_shard's directory) matches the
# uninterrupted run of that mode bit for bit: metrics and final weights; --bench-steps times each mode.
set -euo pipefail
launch="$1" cnn="$2"
if ! ls /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte* >/dev/null 2>&1; then
  echo "SKIPPED: Fashion-MNIST (dataset-fashion-mnist) is not installed"
  exit 0
fi
top="${TEST_TMPDIR:-$(mktemp -d)}"
# 96 images, batch 8 per rank: 6 steps per epoch, 12 in all; the stop at step 8 is inside epoch 1.
common=(--width 4,8,16 --train-limit 96 --test-limit 50 --epochs 2 --batch-size 8 --log-every 1 --timeout 60)
run() { "$launch" --nproc_per_node=2 "$cnn" "${common[@]}" "$@"; }
strip() { sed 's/,"samples_per_s":[^,}]*//' "$1"; }  # a record without its timing
# "loss test_acc" of every record (test_acc: - where there is none).
fields() {
  sed -E 's/.*"loss":([^,}]*).*/\1/' "$1" > "$1.loss"
  awk '{ if (match($0, /"test_acc":[^,}]*/)) print substr($0, RSTART + 11, RLENGTH - 11); else print "-" }' "$1" > "$1.acc"
  paste -d' ' "$1.loss" "$1.acc"
}

for mode in none optimizer full; do
  dir="$top/$mode"
  ck="$dir/ck.safetensors"
  [ "$mode" = full ] && ck="$dir/ck"
  mkdir -p "$dir"
  run --shard "$mode" --metrics "$dir/a.jsonl" --save "$dir/a.safetensors" > "$dir/a.log"
  run --shard "$mode" --metrics "$dir/b.jsonl" --checkpoint "$ck" --steps 8 > "$dir/b1.log"
  run --shard "$mode" --metrics "$dir/b.jsonl" --resume "$ck" --save "$dir/b.safetensors" > "$dir/b2.log"
  cat "$dir/a.log" "$dir/b1.log" "$dir/b2.log"
  grep -q -- "--shard $mode" "$dir/a.log" || { echo "FAIL ($mode): the run does not say --shard $mode"; exit 1; }
  grep -q "resuming after step 7" "$dir/b2.log" || { echo "FAIL ($mode): the second run did not resume"; exit 1; }
  [ "$(wc -l < "$dir/a.jsonl")" -eq 12 ] || { echo "FAIL ($mode): $(wc -l < "$dir/a.jsonl") records, expected 12"; exit 1; }
  diff <(strip "$dir/a.jsonl") <(strip "$dir/b.jsonl") || { echo "FAIL ($mode): the resumed run's metrics differ"; exit 1; }
  cmp "$dir/a.safetensors" "$dir/b.safetensors" || { echo "FAIL ($mode): the resumed run's final weights differ"; exit 1; }
  echo "$mode: the resumed run matches the uninterrupted one bit for bit"
  # --bench-steps times this mode's step, through the same sharding as training.
  run --shard "$mode" --bench-steps 2 > "$dir/bench.log"
  cat "$dir/bench.log"
  grep -q "^bench: 2 rank(s), --shard $mode, batch 8 per rank, 2 steps" "$dir/bench.log" &&
    grep -Eq '^step_ms [0-9]+\.[0-9]+$' "$dir/bench.log" || { echo "FAIL ($mode): --bench-steps gave no step time"; exit 1; }
  [ "$mode" = none ] && continue
  # Against DDP's records: every loss and test accuracy within 1e-5 (relative).
  paste -d' ' <(fields "$top/none/a.jsonl") <(fields "$dir/a.jsonl") | awk -v mode="$mode" '
    function bad(a, b) { d = a - b; if (d < 0) d = -d; s = b < 0 ? -b : b; return d > 1e-5 * s + 1e-12 }
    { n++; if (bad($3, $1)) { printf "FAIL (%s): record %d loss %s, DDP %s\n", mode, n, $3, $1; f = 1 }
      if ($2 != "-" && bad($4, $2)) { printf "FAIL (%s): record %d test_acc %s, DDP %s\n", mode, n, $4, $2; f = 1 }
      if ($2 != "-") accs++ }
    END { if (n != 12 || accs != 2) { printf "FAIL (%s): %d records, %d accuracies\n", mode, n, accs; f = 1 }
          if (!f) printf "%s: the same losses and accuracies as DDP (%d records, last loss %s)\n", mode, n, $3
          exit f }'
done
echo "PASS: every mode trains as DDP does, resumes bit for bit, and --bench-steps times it"
