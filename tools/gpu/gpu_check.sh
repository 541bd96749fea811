#!/usr/bin/env bash
# The one command to run on a lent GPU machine (docs/gpu_check/README.md), on a bundle made by
# tools/gpu/make_gpu_bundle.sh:
#   tools/gpu/gpu_check.sh [--dry-run] [gpu_bundle.tar.xz | bundle_dir]
# With no argument it takes ./gpu_bundle.tar.xz (or the repository root's), unpacks it under
# $GPU_CHECK_DIR (default /tmp/lockstep_gpu_check), finds the CUDA 13 libraries there (toolkit, system or
# PyTorch's pip nvidia-* wheels), and runs, within about GPU_CHECK_DEADLINE seconds (default 420):
#   1. every GPU test in the MANIFEST (one that skips, finding no device or too few, fails);
#   2. bf16 GEMM 4096^3 and fused causal attention forward + backward at T 1024 and 4096: cuda_bench
#      against torch.matmul, raw cublasGemmEx and SDPA's flash backend (torch_cuda_bench.py), interleaved;
#   3. the CNN step (cnn_fashion --bench-steps) against its PyTorch twin, interleaved;
#   4. GPT-2 small's shape (12 layers, 12 heads, 768 wide, block 1024), --dtype bfloat16, against nanoGPT's
#      model in PyTorch (tools/twins/gpt_twin.py: eager, SDPA, autocast, fused AdamW) from the same weights;
#   5. compute-sanitizer memcheck and racecheck over the kernels added since the first check (filtered to
#      their test cases, each run time-boxed);
# then prints one summary table (tools/gpu/gpu_check_summary.py). Raw logs: <bundle>/logs/, and, where $OUT
# is set, $OUT/gpu_check.txt (this output) and $OUT/gpu_check_logs.tar.gz (every log), refreshed after each run.
#
# --dry-run: no GPU needed. Unpacks, sets up the library path, and runs every step at toy sizes on the CPU
# (the tests skip), so the plumbing (flags, weights handed to the twins, log parsing, the table) is exercised
# anywhere; the sanitizer commands are printed, not run. Without --dry-run and without a GPU, each step
# says it was not run and the script exits 2.
# Exit status: 0 all ran and passed, 1 a test or sanitizer run failed, 2 no GPU.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
dry_run=0
src=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
    *) src="$arg" ;;
  esac
done
script_start=$(date +%s)
deadline="${GPU_CHECK_DEADLINE:-420}"
python="${GPU_CHECK_PYTHON:-python3}"
elapsed() { echo $(($(date +%s) - script_start)); }
past_deadline() { [ "$(elapsed)" -ge "$deadline" ]; }

# --- the bundle: a folder, or the archive unpacked ------------------------------------------------
if [ -z "$src" ]; then
  if [ -f "$here/MANIFEST" ]; then src="$here"
  elif [ -f gpu_bundle.tar.xz ]; then src="gpu_bundle.tar.xz"
  elif [ -f "$here/../../gpu_bundle.tar.xz" ]; then src="$here/../../gpu_bundle.tar.xz"
  else src="gpu_bundle"; fi
fi
if [ -f "$src" ]; then
  dest="${GPU_CHECK_DIR:-${TMPDIR:-/tmp}/lockstep_gpu_check}"
  rm -rf "$dest" && mkdir -p "$dest" || { echo "gpu_check: cannot make $dest" >&2; exit 2; }
  t0=$(date +%s.%N)
  if command -v xz >/dev/null; then
    tar -C "$dest" -xJf "$src"
  else  # Python's tarfile reads xz without the xz program
    "$python" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$src" "$dest"
  fi || { echo "gpu_check: cannot unpack $src into $dest" >&2; exit 2; }
  bundle="$(find "$dest" -mindepth 2 -maxdepth 2 -name MANIFEST -printf '%h\n' | sed -n 1p)"
  unpack_msg="unpacked $src ($(du -h "$src" | cut -f1)) into $bundle in $(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s"
else
  bundle="$src"
  unpack_msg="bundle folder $src"
fi
[ -n "$bundle" ] && [ -f "$bundle/MANIFEST" ] ||
  { echo "gpu_check: no MANIFEST in $src; make a bundle with tools/gpu/make_gpu_bundle.sh" >&2; exit 2; }
bundle="$(cd "$bundle" && pwd)"
logs="$bundle/logs"
rm -rf "$logs" && mkdir -p "$logs"
results="$logs/results.tsv"
: >"$results"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee "$OUT/gpu_check.txt") 2>&1
fi
save_logs() { [ -z "${OUT:-}" ] || tar -C "$bundle" -czf "$OUT/gpu_check_logs.tar.gz" logs 2>/dev/null; }

# --- the CUDA libraries ---------------------------------------------------------------------------
# Likely places first (a toolkit, the system, PyTorch's nvidia-* wheels); one scan of / for the rest.
want=(libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2)
declare -A found
for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64 \
         /usr/local/lib/python3*/*-packages/nvidia/*/lib /usr/lib/python3*/*-packages/nvidia/*/lib \
         /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib /opt/*/.venv/lib/python3*/site-packages/nvidia/cu13/lib \
         "$HOME"/.local/lib/python3*/site-packages/nvidia/*/lib /opt/conda/lib/python3*/site-packages/nvidia/*/lib; do
  for so in "${want[@]}"; do
    [ -z "${found[$so]:-}" ] && [ -e "$d/$so" ] && found[$so]="$d/$so"
  done
done
missing=()
for so in "${want[@]}"; do [ -n "${found[$so]:-}" ] || missing+=("$so"); done
if [ ${#missing[@]} -gt 0 ]; then
  expr=()
  for so in "${missing[@]}"; do expr+=(-o -name "$so"); done
  while read -r f; do
    so="$(basename "$f")"
    [ -n "${found[$so]:-}" ] || found[$so]="$f"
  done < <(find / \( -path /proc -o -path /sys -o -path /dev -o -path "$bundle" \) -prune -o \( -false "${expr[@]}" \) -print 2>/dev/null)
fi
libpath="$bundle/lib"
for so in "${want[@]}"; do
  [ -n "${found[$so]:-}" ] || continue
  d="$(dirname "${found[$so]}")"
  case ":$libpath:" in *":$d:"*) ;; *) libpath="$libpath:$d" ;; esac
done
driver_lib="$( (ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / && !found {print $NF; found = 1}') )"

# Run through the bundled glibc where this machine's is older than the build machine's.
built_glibc="$(awk '/^glibc/ {print $2}' "$bundle/BUILD_INFO" 2>/dev/null)"
host_glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
use_bundled_glibc=${LOCKSTEP_GPU_CHECK_BUNDLED_GLIBC:-0}  # 1 forces it (to test this path anywhere)
if [ -n "$built_glibc" ] && [ "$(printf '%s\n%s\n' "$built_glibc" "${host_glibc:-0}" | sort -V | sed -n 1p)" != "$built_glibc" ]; then
  use_bundled_glibc=1
fi

gpu_name=""
if command -v nvidia-smi >/dev/null; then
  gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sed -n 1p)"
fi
has_gpu=0
[ -n "$gpu_name" ] && has_gpu=1
echo "== lockstep gpu_check$([ $dry_run = 1 ] && echo ' --dry-run (CPU, toy sizes)'): $(head -1 "$bundle/BUILD_INFO" 2>/dev/null)"
echo "   $unpack_msg"
if [ $has_gpu = 1 ]; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | sed 's/^/   gpu /'
else
  echo "   gpu: none visible (nvidia-smi $(command -v nvidia-smi >/dev/null && echo 'lists no GPU' || echo 'not found'))"
fi
echo "   glibc: here ${host_glibc:-?}, built with ${built_glibc:-?}$([ "$use_bundled_glibc" = 1 ] && echo ' (using the bundled one)')"
printf '   %-18s %s\n' libcuda.so.1 "${driver_lib:-not in the ld cache (no NVIDIA driver?)}"
for so in "${want[@]}"; do printf '   %-18s %s\n' "$so" "${found[$so]:-missing}"; done
echo "   python: $python ($("$python" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo 'no torch'))"

# --- how a binary runs ----------------------------------------------------------------------------
# bin_cmd NAME ARGS...: the command line of a bundled binary, through the bundled loader where needed.
bin_cmd() {
  local name=$1
  shift
  if [ "$use_bundled_glibc" = 1 ]; then
    echo "$bundle/lib/glibc/ld-linux-x86-64.so.2" --library-path "$libpath:$bundle/lib/glibc" "$bundle/bin/$name" "$@"
  else
    echo "$bundle/bin/$name" "$@"
  fi
}
# rank_bin NAME: what the launcher starts for one rank (a wrapper through the bundled loader where needed:
# a plain exec from the launcher would use this machine's older glibc).
rank_bin() {
  if [ "$use_bundled_glibc" = 1 ]; then
    printf '#!/bin/sh\nexec "%s" --library-path "%s" "%s" "$@"\n' "$bundle/lib/glibc/ld-linux-x86-64.so.2" \
      "$libpath:$bundle/lib/glibc" "$bundle/bin/$1" >"$bundle/bin/$1.bundled-glibc"
    chmod +x "$bundle/bin/$1.bundled-glibc"
    echo "$bundle/bin/$1.bundled-glibc"
  else
    echo "$bundle/bin/$1"
  fi
}
# run LOG TIMEOUT CMD...: runs CMD with the bundle's library path, output to LOG; prints the status.
run() {
  local log=$1 limit=$2
  shift 2
  echo "\$ $*" >"$log"
  LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout "$limit" "$@" >>"$log" 2>&1 </dev/null
  local rc=$?
  save_logs
  return $rc
}
# status RC LOG: PASS, SKIPPED (passed only because it found no device, or too few), TIMEOUT or FAIL(rc).
status() {
  if [ "$1" = 0 ] && grep -qE "(^|MESSAGE: )SKIPPED:" "$2"; then echo SKIPPED
  elif [ "$1" = 0 ]; then echo PASS
  elif [ "$1" = 124 ]; then echo TIMEOUT
  else echo "FAIL($1)"; fi
}
record() { printf '%s\n' "$(IFS=$'\t'; echo "$*")" >>"$results"; }
launch_cmd() { local name=$1; shift; echo "$(bin_cmd launch) --nproc_per_node=1 $(rank_bin "$name") $*"; }

failed=0
if [ $has_gpu = 0 ] && [ $dry_run = 0 ]; then
  for step in "GPU tests" "bf16 GEMM and fused attention against PyTorch and cuBLAS" "CNN step against its twin" \
              "GPT-2 small against nanoGPT" "compute-sanitizer memcheck and racecheck"; do
    echo "   $step: not run (no GPU visible; --dry-run runs the plumbing on the CPU)"
  done
  exit 2
fi

# Sizes: the real ones, or toy ones on the CPU for --dry-run.
if [ $dry_run = 1 ]; then
  dev=cpu rounds=${GPU_CHECK_ROUNDS:-1} gpt_rounds=1 cnn_steps=5
  bench_cmd=("$python" "$bundle/torch_cuda_bench.py" --device cpu --n 128 --tokens 64 --seq 32)
  gpt_cfg=(--n-layer 2 --n-head 2 --n-embd 64 --block-size 32) gpt_batch=4 gpt_steps=22
else
  dev=cuda rounds=${GPU_CHECK_ROUNDS:-3} gpt_rounds=${GPU_CHECK_GPT_ROUNDS:-2} cnn_steps=200
  bench_cmd=("$python" "$bundle/torch_cuda_bench.py")
  gpt_cfg=(--n-layer 12 --n-head 12 --n-embd 768 --block-size 1024) gpt_batch=${GPU_CHECK_GPT_BATCH:-12} gpt_steps=30
fi

# --- 1. tests -------------------------------------------------------------------------------------
echo
echo "== 1. GPU tests ($(elapsed) s)"
while read -r kind name; do
  [ "$kind" = test ] || continue
  log="$logs/test.$name.log"
  start=$(date +%s)
  # shellcheck disable=SC2046  # bin_cmd's words are split on purpose
  run "$log" "${GPU_CHECK_TEST_TIMEOUT:-180}" $(bin_cmd "$name")
  result=$(status $? "$log")
  record test "$name" "$result" $(($(date +%s) - start))
  printf '   %-30s %-9s %4s s\n' "$name" "$result" $(($(date +%s) - start))
  case "$result" in
    PASS) ;;
    SKIPPED) [ $dry_run = 1 ] || { failed=1; grep -m1 -E "SKIPPED:" "$log" | sed 's/^/   | /'; } ;;
    *) failed=1; tail -n 25 "$log" | sed 's/^/   | /' ;;
  esac
done <"$bundle/MANIFEST"

# --- 2-4. benchmarks, each pair interleaved round by round ----------------------------------------
# pair STEP ROUND TIMEOUT "LOCKSTEP CMD" "PYTORCH CMD": logs STEP.lockstep.ROUND.log / STEP.torch.ROUND.log.
pair() {
  local step=$1 r=$2 limit=$3 side cmd rc
  for side in lockstep torch; do
    if [ "$side" = lockstep ]; then cmd=$4; else cmd=$5; fi
    if past_deadline; then
      echo "   $step $side round $r: not run (past GPU_CHECK_DEADLINE=${deadline} s)"
      record run "$step.$side.$r" SKIPPED 0
      continue
    fi
    local start=$(date +%s) left=$((deadline + 60 - $(elapsed)))
    # shellcheck disable=SC2086  # a run started near the deadline gets what is left of it, 30 s at least
    run "$logs/$step.$side.$r.log" "$((left < limit ? (left > 30 ? left : 30) : limit))" $cmd
    rc=$?
    record run "$step.$side.$r" "$(status $rc "$logs/$step.$side.$r.log")" $(($(date +%s) - start))
    printf '   %-8s %-9s round %d: %-9s %4s s  %s\n' "$step" "$side" "$r" "$(status $rc "$logs/$step.$side.$r.log")" \
      $(($(date +%s) - start)) "$(grep -m1 -E '^(step_ms|BENCH gemm_4096_bfloat16 )' "$logs/$step.$side.$r.log" | tr -s ' ')"
    [ $rc = 0 ] || tail -n 8 "$logs/$step.$side.$r.log" | sed 's/^/   | /'
  done
}

echo
echo "== 2. bf16 GEMM and fused attention: cuda_bench against torch_cuda_bench.py ($(elapsed) s)"
for r in $(seq 1 "$rounds"); do  # the float32 and bandwidth rows in the first round only
  pair kernels "$r" 180 "$(bin_cmd cuda_bench) $([ "$r" -gt 1 ] && echo --bf16-only)" "${bench_cmd[*]}"
done

echo
echo "== 3. CNN step, batch 64, float32: cnn_fashion --bench-steps $cnn_steps against its twin ($(elapsed) s)"
data="$bundle/data"
for r in $(seq 1 "$rounds"); do
  pair cnn "$r" 150 \
    "$(launch_cmd cnn_fashion --device "$dev" --bench-steps "$cnn_steps" --data-dir "$data/fashion-mnist")" \
    "$python $bundle/cnn_fashion_twin.py --device $dev --bench-steps $cnn_steps --data-dir $data/fashion-mnist"
done

echo
echo "== 4. GPT ${gpt_cfg[*]}, batch $gpt_batch, --dtype bfloat16, $gpt_steps steps, against nanoGPT's model ($(elapsed) s)"
init="$bundle/gpt_init.safetensors"
# Both sides' optimizer and schedule flags, spelled out (the defaults are meant to agree; this makes sure).
train_flags="--lr 6e-4 --warmup-iters 100 --min-lr 6e-5 --beta2 0.95 --weight-decay 0.1 --grad-clip 1.0 --seed 1337"
run "$logs/gpt.export.log" 300 $(launch_cmd gpt --text "$data/fortunes.txt" "${gpt_cfg[@]}" --export-init "$init")
rc=$?
echo "   export initial weights: $(status $rc "$logs/gpt.export.log") ($(du -h "$init" 2>/dev/null | cut -f1) safetensors)"
for b in "$gpt_batch" $((gpt_batch / 2)); do
  echo "batch $b ${gpt_cfg[*]} steps $gpt_steps" >"$logs/gpt.config"
  oom=0
  for r in $(seq 1 "$gpt_rounds"); do
    pair gpt "$r" 240 \
      "$(launch_cmd gpt --device "$dev" --dtype bfloat16 --text "$data/fortunes.txt" --init "$init" "${gpt_cfg[@]}" \
          --batch-size "$b" --steps "$gpt_steps" $train_flags --log-interval 1 --eval-interval 100000 --eval-iters 1 \
          --sample-tokens 0)" \
      "$python $bundle/gpt_twin.py --device $dev --dtype bfloat16 --text $data/fortunes.txt --init $init ${gpt_cfg[*]} \
          --batch-size $b --steps $gpt_steps $train_flags $([ $dev = cuda ] && echo --fused-adamw)"
    if grep -qi "out of memory" "$logs"/gpt.*."$r".log; then oom=1; break; fi
  done
  # Out of memory at this batch on either side: both sides again at half the batch, the failed runs noted.
  [ $oom = 1 ] && [ "$b" -gt 1 ] && [ "$b" = "$gpt_batch" ] || break
  echo "   out of memory at batch $b ($(grep -li "out of memory" "$logs"/gpt.*.log | xargs -r -n1 basename | tr '\n' ' ')): again at batch $((b / 2))"
  for f in "$logs"/gpt.*.[0-9].log; do mv "$f" "${f%.log}.oom-batch$b.txt"; done
  sed -i '/^run\tgpt\./d' "$results"
  record note gpt "out of memory at batch $b; figures at batch $((b / 2))"
done

# --- 5. compute-sanitizer over the kernels added since the first check ----------------------------
# "<tool> <test> <doctest test-case filter>": the 16-bit elementwise, reductions, softmax/layer_norm,
# fused attention and the device's Philox draws, each case small. racecheck only where kernels share memory.
sanitize_runs=(
  "memcheck cuda_kernels_test unary*,binary and binary_scalar*,copy_ between*"
  "memcheck cuda_half_kernels_test reduce at 16 bits: every*,softmax and log_softmax at 16 bits*,layer_norm at 16 bits*,16-bit random fills*"
  "memcheck cuda_reduce_test *"
  "memcheck cuda_attention_test *"
  "racecheck cuda_half_kernels_test reduce at 16 bits: every*,softmax and log_softmax at 16 bits*,layer_norm at 16 bits*"
  "racecheck cuda_reduce_test *"
  "racecheck cuda_attention_test *"
)
echo
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | sed -n 1p)"
echo "== 5. compute-sanitizer (${sanitizer:-not found}) ($(elapsed) s)"
for entry in "${sanitize_runs[@]}"; do
  read -r tool name filter <<<"$entry"
  # API errors are left out: NCCL and the out-of-memory case provoke them on purpose (BENCHMARKS.md, first check).
  sflags=(--tool "$tool" --error-exitcode 99 --report-api-errors no)
  log="$logs/sanitize.$tool.$name.log"
  if [ $dry_run = 1 ] || [ -z "$sanitizer" ]; then
    echo "   $tool $name: not run ($([ $dry_run = 1 ] && echo 'dry run' || echo 'no compute-sanitizer')):" \
      "compute-sanitizer ${sflags[*]} $(bin_cmd "$name") --test-case='$filter'"
    record sanitize "$tool $name" "NOT-RUN" 0
    continue
  fi
  remaining=$((deadline + 60 - $(elapsed)))  # the sanitizer may use the minute left past the deadline
  if [ "$remaining" -lt 20 ]; then
    echo "   $tool $name: not run (past GPU_CHECK_DEADLINE=${deadline} s)"
    record sanitize "$tool $name" "SKIPPED" 0
    continue
  fi
  limit=$((remaining < ${GPU_CHECK_SANITIZE_TIMEOUT:-90} ? remaining : ${GPU_CHECK_SANITIZE_TIMEOUT:-90}))
  start=$(date +%s)
  # shellcheck disable=SC2046
  run "$log" "$limit" "$sanitizer" "${sflags[@]}" $(bin_cmd "$name") "--test-case=$filter"
  rc=$?
  case $rc in 0) result=PASS ;; 124) result="TIMEOUT(${limit}s)" ;; *) result="FAIL($rc)"; failed=1 ;; esac
  summary="$(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log")"
  record sanitize "$tool $name" "$result" $(($(date +%s) - start)) "$summary"
  printf '   %-10s %-24s %-14s %4ss  %s\n' "$tool" "$name" "$result" $(($(date +%s) - start)) "$summary"
  [ $rc = 0 ] || [ $rc = 124 ] || grep -m 12 -E '^=========' "$log" | sed 's/^/   | /'
done

# --- the table ------------------------------------------------------------------------------------
echo
"$python" "$here/gpu_check_summary.py" "$logs" --gpu "${gpu_name:-cpu (dry run)}" --build "$(head -1 "$bundle/BUILD_INFO")" \
  $([ $dry_run = 1 ] && echo --dry-run) || failed=1
save_logs
echo
echo "gpu_check: $(elapsed) s; $([ $failed = 0 ] && echo 'every test and sanitizer run passed' || echo "FAILURES (logs in $logs)")"
exit $failed
