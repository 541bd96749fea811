#!/usr/bin/env bash
# examples/vit stopped mid-epoch and resumed from its checkpoint continues the uninterrupted run exactly:
# 2 ranks, shuffling and dropout on; the metrics (every step's loss and lr, each epoch's test accuracy)
# and the final weights are the same bits. The checkpoint carries AdamW's moments and the cosine
# schedule's position; dropout's masks are drawn from a generator reseeded at every step.
set -euo pipefail
launch="$1" vit="$2"
if ! ls /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte* >/dev/null 2>&1; then
  echo "SKIPPED: Fashion-MNIST (dataset-fashion-mnist) is not installed"
  exit 0
fi
dir="${TEST_TMPDIR:-$(mktemp -d)}"
# 96 images, batch 8 per rank: 6 steps per epoch, 18 in all; the stop at step 8 is inside epoch 1.
common=(--dim 16 --depth 2 --heads 2 --mlp-dim 32 --train-limit 96 --test-limit 50 --epochs 3 --batch-size 8
        --log-every 1 --timeout 60)
run() { "$launch" --nproc_per_node=2 "$vit" "${common[@]}" "$@"; }
run --metrics "$dir/a.jsonl" --save "$dir/a.safetensors" > "$dir/a.log"
run --metrics "$dir/b.jsonl" --checkpoint "$dir/ck.safetensors" --steps 8 > "$dir/b1.log"
run --metrics "$dir/b.jsonl" --resume "$dir/ck.safetensors" --save "$dir/b.safetensors" > "$dir/b2.log"
cat "$dir/a.log" "$dir/b1.log" "$dir/b2.log"
grep -q "resuming after step 7" "$dir/b2.log" || { echo "FAIL: the second run did not resume"; exit 1; }
strip() { sed 's/,"samples_per_s":[^,}]*//' "$1"; }  # every record without its timing
[ "$(wc -l < "$dir/a.jsonl")" -eq 18 ] || { echo "FAIL: $(wc -l < "$dir/a.jsonl") records, expected 18"; exit 1; }
grep -q test_acc "$dir/a.jsonl" || { echo "FAIL: no test accuracy recorded"; exit 1; }
diff <(strip "$dir/a.jsonl") <(strip "$dir/b.jsonl") || { echo "FAIL: the resumed run's metrics differ"; exit 1; }
cmp "$dir/a.safetensors" "$dir/b.safetensors" || { echo "FAIL: final weights differ"; exit 1; }
echo "PASS: the resumed run matches the uninterrupted one bit for bit"
