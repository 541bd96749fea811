#!/usr/bin/env bash
# A rank dies mid-training; `launch --max_restarts 1` restarts the group, train_eval resumes from its
# last checkpoint and ends exactly where an uninterrupted run ends (same loss, accuracy and weights).
set -euo pipefail
launch="$1" train_eval="$2"
if ! ls /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte* >/dev/null 2>&1; then
  echo "SKIPPED: Fashion-MNIST (dataset-fashion-mnist) is not installed"
  exit 0
fi
dir="${TEST_TMPDIR:-$(mktemp -d)}"
common=(--epochs 3 --batch-size 128 --timeout 60)

"$launch" --nproc_per_node=2 "$train_eval" "${common[@]}" --save "$dir/a.safetensors" > "$dir/a.log"
set +e
"$launch" --nproc_per_node=2 --max_restarts 1 "$train_eval" "${common[@]}" --checkpoint "$dir/ck.safetensors" \
  --fail-at-epoch 1 --save "$dir/b.safetensors" > "$dir/b.log" 2> "$dir/b.err"
status=$?
set -e
cat "$dir/a.log" "$dir/b.log" "$dir/b.err"
[ "$status" -eq 0 ] || { echo "FAIL: the restarted run exited with $status"; exit 1; }
grep -q "exiting abruptly" "$dir/b.err" || { echo "FAIL: the fault was not injected"; exit 1; }
grep -q "resuming after epoch 1" "$dir/b.log" || { echo "FAIL: the restarted run did not resume"; exit 1; }
# Compare the last epoch's loss and accuracy (samples_per_s differs between runs).
a=$(grep '^epoch 2 ' "$dir/a.log" | awk '{print $4, $6}')
b=$(grep '^epoch 2 ' "$dir/b.log" | awk '{print $4, $6}')
echo "uninterrupted: loss/acc $a; restarted: loss/acc $b"
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: results differ"; exit 1; }
cmp "$dir/a.safetensors" "$dir/b.safetensors" || { echo "FAIL: final weights differ"; exit 1; }
echo "PASS: restarted run matches the uninterrupted one bit for bit"
