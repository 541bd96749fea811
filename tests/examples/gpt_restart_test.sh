#!/usr/bin/env bash
# A gpt rank is SIGKILLed mid-training; `launch --max_restarts 1` restarts the group, gpt resumes from
# its last checkpoint and ends exactly where an uninterrupted run ends: the same final validation loss
# and the same weights, bit for bit (batches and dropout masks are functions of seed, rank and step).
set -euo pipefail
launch="$1" gpt="$2" text="$3"
dir="${TEST_TMPDIR:-$(mktemp -d)}"
common=(--text "$text" --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch-size 2 --steps 12 --lr 1e-2
        --warmup-iters 2 --min-lr 1e-3 --dropout 0.1 --eval-interval 4 --eval-iters 2 --sample-tokens 0 --timeout 60)
export OMP_NUM_THREADS=1

"$launch" --nproc_per_node=2 "$gpt" "${common[@]}" --save "$dir/a.safetensors" > "$dir/a.log"
set +e
"$launch" --nproc_per_node=2 --max_restarts 1 "$gpt" "${common[@]}" --checkpoint "$dir/ck.safetensors" \
  --checkpoint-interval 3 --sigkill-at-step 7 --save "$dir/b.safetensors" > "$dir/b.log" 2> "$dir/b.err"
status=$?
set -e
cat "$dir/a.log" "$dir/b.log" "$dir/b.err"
[ "$status" -eq 0 ] || { echo "FAIL: the restarted run exited with $status"; exit 1; }
grep -q "killing itself" "$dir/b.err" || { echo "FAIL: the fault was not injected"; exit 1; }
grep -q "resuming at step 6" "$dir/b.log" || { echo "FAIL: the restarted run did not resume at step 6"; exit 1; }
a=$(grep '^step 12 val_loss' "$dir/a.log")
b=$(grep '^step 12 val_loss' "$dir/b.log")
echo "uninterrupted: $a; restarted: $b"
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: final validation losses differ"; exit 1; }
cmp "$dir/a.safetensors" "$dir/b.safetensors" || { echo "FAIL: final weights differ"; exit 1; }
echo "PASS: the restarted run matches the uninterrupted one bit for bit"
