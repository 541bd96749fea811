#!/usr/bin/env bash
# A training example against its PyTorch twin, step by step (cnn_fashion, resnet): from the same initial
# weights (--seed 0), on a slice of Fashion-MNIST in order, the global loss of each of the first steps
# at 1 rank with batch 2B and at 2 ranks with batch B each equals the twin's fixture (to 1e-4
# relative). The fixture (written by the twin's --write-fixture) gives the flags of both runs ("args"),
# the world sizes to run ("ranks", default both), those added at 2 ranks ("two_rank_args": --sync-bn,
# whose statistics over 2 x B are BatchNorm2d's over 2B), the losses, and optionally the final BatchNorm
# statistics ("running"), which the model each run saves must hold (to 1e-4 of the element + 2e-4 of
# the tensor's largest).
# INIT, when given, is the initial weights the fixture was made from (the example's --init): the example's
# own initialisation can round differently in another build (a sanitizer's -O1 contracts no multiply-adds),
# and a float64 run from weights one float32 ulp apart leaves the fixture within 10 steps.
#   twin_parity_test.sh LAUNCH EXAMPLE_BINARY FIXTURE [INIT]
set -euo pipefail
launch="$1" example="$2" fixture="$3" init="${4:-}"
if ! ls /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte* >/dev/null 2>&1; then
  echo "SKIPPED: Fashion-MNIST (dataset-fashion-mnist) is not installed"
  exit 0
fi
dir="${TEST_TMPDIR:-$(mktemp -d)}"
# The list under KEY in the fixture (json.dump's indent=1 puts each element on its own line), one a line.
list() { awk -v key="\"$1\"" '$1 ~ "^" key {a=1; next} a && /\]/{exit} a{sub(/,$/, ""); gsub(/"/, ""); print $1}' "$fixture"; }
args=$(list args | tr '\n' ' ')
[ -z "$init" ] || args+=" --init $init"
two_rank_args=$(list two_rank_args | tr '\n' ' ')
list losses > "$dir/expected"
steps=$(wc -l < "$dir/expected")
[ "$steps" -ge 10 ] || { echo "FAIL: $fixture holds $steps losses"; exit 1; }
batch=$(awk -F': *' '/"batch_per_rank"/{gsub(/,/, "", $2); print $2}' "$fixture")
ranks=$(list ranks | tr '\n' ' ')
ranks=${ranks:-1 2}
running=$(grep -o '"[a-z0-9_.]*\.running_\(mean\|var\)"' "$fixture" | tr -d '"' || true)

# The float32 or float64 tensor KEY of safetensors FILE, one value a line: an 8-byte header size, a JSON
# header giving each tensor's dtype and byte range after the header, then the data.
tensor_values() {
  local file="$1" key="$2" n header entry range
  n=$(od -A n -t u8 -N 8 "$file" | tr -d ' ')
  header=$(dd if="$file" bs=1 skip=8 count="$n" 2>/dev/null)
  entry=$(grep -o "\"$key\": *{[^}]*}" <<< "$header") || { echo "FAIL: $file has no $key" >&2; return 1; }
  local type=f4
  grep -q '"dtype": *"F64"' <<< "$entry" && type=f8
  grep -q '"dtype": *"F\(32\|64\)"' <<< "$entry" || { echo "FAIL: $key in $file is not F32 or F64: $entry" >&2; return 1; }
  range=$(sed 's/.*"data_offsets": *\[ *\([0-9]*\) *, *\([0-9]*\) *\].*/\1 \2/' <<< "$entry")
  set -- $range
  od -A n -v -t "$type" -j $((8 + n + $1)) -N $(($2 - $1)) "$file" | tr -s ' ' '\n' | grep -v '^$'
}

check() {  # check NAME NPROC BATCH EXTRA_ARGS
  rm -f "$dir/$1.jsonl" "$dir/$1.safetensors"
  # shellcheck disable=SC2086
  "$launch" --nproc_per_node="$2" "$example" $args $4 --batch-size "$3" --steps "$steps" --log-every 1 \
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
name=$(basename "$example")
for r in $ranks; do
  case "$r" in
    1) check one_rank 1 $((2 * batch)) "" ;;
    2) check two_ranks 2 "$batch" "$two_rank_args" ;;
    *) echo "FAIL: $fixture: ranks holds $r (1 or 2 only)"; exit 1 ;;
  esac
done
ranks=${ranks% }
echo "PASS: $name's losses${running:+ and BatchNorm statistics} equal PyTorch's at ${ranks// / and } rank(s)${two_rank_args:+ (2 ranks: ${two_rank_args% })}"
