#!/usr/bin/env bash
# cnn_fashion against PyTorch, step by step: from the same initial weights (--seed 0), without dropout,
# on the first 320 Fashion-MNIST images in order, the global loss of each of the first 20 steps at
# 1 rank with batch 32 and at 2 ranks with batch 16 each equals PyTorch's at batch 32 (to 1e-4
# relative). The fixture (tools/twins/cnn_fashion_twin.py --write-fixture) gives the flags of both runs
# ("args"), those added at 2 ranks ("two_rank_args": --sync-bn, whose statistics over 2 x 16 are
# BatchNorm2d's over 32), the losses, and optionally the final BatchNorm statistics ("running"), which
# the model each run saves must hold (to 1e-4 of the element + 2e-4 of the tensor's largest).
set -euo pipefail
launch="$1" cnn="$2" fixture="$3"
if ! ls /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte* >/dev/null 2>&1; then
  echo "SKIPPED: Fashion-MNIST (dataset-fashion-mnist) is not installed"
  exit 0
fi
dir="${TEST_TMPDIR:-$(mktemp -d)}"
# The list under KEY in the fixture (json.dump's indent=1 puts each element on its own line), one a line.
list() { awk -v key="\"$1\"" '$1 ~ "^" key {a=1; next} a && /\]/{exit} a{sub(/,$/, ""); gsub(/"/, ""); print $1}' "$fixture"; }
args=$(list args | tr '\n' ' ')
two_rank_args=$(list two_rank_args | tr '\n' ' ')
list losses > "$dir/expected"
steps=$(wc -l < "$dir/expected")
[ "$steps" -ge 10 ] || { echo "FAIL: $fixture holds $steps losses"; exit 1; }
batch=$(awk -F': *' '/"batch_per_rank"/{gsub(/,/, "", $2); print $2}' "$fixture")
running=$(grep -o '"[a-z0-9_.]*\.running_\(mean\|var\)"' "$fixture" | tr -d '"' || true)

# The float32 tensor KEY of safetensors FILE, one value a line: an 8-byte header size, a JSON header
# giving each tensor's dtype and byte range after the header, then the data.
tensor_values() {
  local file="$1" key="$2" n header entry range
  n=$(od -A n -t u8 -N 8 "$file" | tr -d ' ')
  header=$(dd if="$file" bs=1 skip=8 count="$n" 2>/dev/null)
  entry=$(grep -o "\"$key\": *{[^}]*}" <<< "$header") || { echo "FAIL: $file has no $key" >&2; return 1; }
  grep -q '"dtype": *"F32"' <<< "$entry" || { echo "FAIL: $key in $file is not F32: $entry" >&2; return 1; }
  range=$(sed 's/.*"data_offsets": *\[ *\([0-9]*\) *, *\([0-9]*\) *\].*/\1 \2/' <<< "$entry")
  set -- $range
  od -A n -v -t f4 -j $((8 + n + $1)) -N $(($2 - $1)) "$file" | tr -s ' ' '\n' | grep -v '^$'
}

check() {  # check NAME NPROC BATCH EXTRA_ARGS
  rm -f "$dir/$1.jsonl" "$dir/$1.safetensors"
  # shellcheck disable=SC2086
  "$launch" --nproc_per_node="$2" "$cnn" $args $4 --batch-size "$3" --steps "$steps" --log-every 1 \
    --timeout 60 --metrics "$dir/$1.jsonl" --save "$dir/$1.safetensors" > "$dir/$1.log"
  grep -o '"loss":[^,}]*' "$dir/$1.jsonl" | cut -d: -f2 > "$dir/$1.got"
  paste "$dir/expected" "$dir/$1.got" | awk -v name="$1" -v n="$steps" '
    { d = $2 - $1; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r
      if (r > 1e-4 || $2 == "") { printf "FAIL: %s step %d: loss %s, PyTorch %s (relative %.2g)\n", name, NR, $2, $1, r; bad = 1 } }
    END { if (NR != n) { printf "FAIL: %s: %d losses, expected %d\n", name, NR, n; exit 1 }
          if (bad) exit 1; printf "%s: %d losses within %.2g of PyTorch\n", name, NR, worst }'
  for key in $running; do
    list "$key" > "$dir/$1.$key.expected"
    tensor_values "$dir/$1.safetensors" "$key" > "$dir/$1.$key.got"
    # Within 1e-4 of the element plus 2e-4 of the tensor's largest element (a mean near 0 is no scale).
    top=$(awk '{ a = $1 < 0 ? -$1 : $1; if (a > m) m = a } END { print m + 0 }' "$dir/$1.$key.expected")
    paste "$dir/$1.$key.expected" "$dir/$1.$key.got" | awk -v name="$1 $key" -v top="$top" \
        -v n="$(wc -l < "$dir/$1.$key.expected")" '
      { d = $2 - $1; if (d < 0) d = -d; tol = 1e-4 * ($1 < 0 ? -$1 : $1) + 2e-4 * top; if (d / tol > worst) worst = d / tol
        if (d > tol || $2 == "") { printf "FAIL: %s[%d] is %s, PyTorch %s\n", name, NR - 1, $2, $1; bad = 1 } }
      END { if (NR != n || n == 0) { printf "FAIL: %s: %d values, expected %d\n", name, NR, n; exit 1 }
            if (bad) exit 1; printf "%s: %d values, the worst at %.2g of the tolerance\n", name, NR, worst }'
  done
}
check one_rank 1 $((2 * batch)) ""
check two_ranks 2 "$batch" "$two_rank_args"
echo "PASS: cnn_fashion's losses${running:+ and BatchNorm statistics} equal PyTorch's at 1 and 2 ranks${two_rank_args:+ (2 ranks: ${two_rank_args% })}"
