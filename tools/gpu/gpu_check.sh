#!/usr/bin/env bash
# The one script to run on a lent GPU machine, on a bundle made by tools/gpu/make_gpu_bundle.sh:
#   tools/gpu/gpu_check.sh [bundle_dir]          (default: gpu_bundle/, or this script's folder inside a bundle)
# It finds the CUDA 13 libraries there (system CUDA or PyTorch's pip nvidia-* wheels), runs every test
# and benchmark in the bundle's MANIFEST, prints a short table, and exits non-zero if a test failed or
# skipped for want of a device. Full output of each binary: <bundle>/logs/<name>.<line>.log.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
if [ $# -ge 1 ]; then bundle="$1"; elif [ -f "$here/MANIFEST" ]; then bundle="$here"; else bundle="gpu_bundle"; fi
[ -f "$bundle/MANIFEST" ] || { echo "gpu_check: no $bundle/MANIFEST; make a bundle with tools/gpu/make_gpu_bundle.sh" >&2; exit 2; }
bundle="$(cd "$bundle" && pwd)"
per_binary_timeout="${GPU_CHECK_TIMEOUT:-600}"
# compute-sanitizer's memcheck and racecheck over the CUDA tests, after everything else, each run limited
# to GPU_CHECK_SANITIZE_TIMEOUT seconds, and none started once GPU_CHECK_DEADLINE seconds have passed
# since this script started (so that one device call ends in time). GPU_CHECK_SANITIZE=0 skips them.
sanitize="${GPU_CHECK_SANITIZE:-1}"
sanitize_timeout="${GPU_CHECK_SANITIZE_TIMEOUT:-150}"
deadline="${GPU_CHECK_DEADLINE:-360}"
script_start=$(date +%s)

# --- the CUDA libraries ----------------------------------------------------------------------------
# Likely places first (a toolkit, the system, PyTorch's nvidia-* wheels); one scan of / for the rest.
want=(libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2)
declare -A found
for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64 \
         /usr/local/lib/python3*/*-packages/nvidia/*/lib /usr/lib/python3*/*-packages/nvidia/*/lib \
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
driver_lib="$( (ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / {print $NF; exit}') )"

# Run through the bundled glibc where this machine's is older than the build machine's.
built_glibc="$(awk '/^glibc/ {print $2}' "$bundle/BUILD_INFO" 2>/dev/null)"
host_glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
use_bundled_glibc=${LOCKSTEP_GPU_CHECK_BUNDLED_GLIBC:-0}  # 1 forces it (to test this path anywhere)
if [ -n "$built_glibc" ] && [ "$(printf '%s\n%s\n' "$built_glibc" "${host_glibc:-0}" | sort -V | head -1)" != "$built_glibc" ]; then
  use_bundled_glibc=1
fi
echo "== lockstep gpu_check: $(head -1 "$bundle/BUILD_INFO" 2>/dev/null)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | sed 's/^/   gpu /'
else
  echo "   gpu: nvidia-smi not found"
fi
echo "   glibc: here ${host_glibc:-?}, built with ${built_glibc:-?}$([ $use_bundled_glibc = 1 ] && echo ' (using the bundled one)')"
printf '   %-18s %s\n' libcuda.so.1 "${driver_lib:-not in the ld cache (no NVIDIA driver?)}"
for so in "${want[@]}"; do printf '   %-18s %s\n' "$so" "${found[$so]:-missing}"; done

# --- run the manifest ------------------------------------------------------------------------------
mkdir -p "$bundle/logs"
failed=0
results=()
benches=()
ranks_logs=()
line=0
while read -r kind name args; do
  [ -n "${kind:-}" ] || continue
  [ "$kind" = tool ] && continue
  line=$((line + 1))
  log="$bundle/logs/$name.$line.log"
  start=$(date +%s.%N)
  args="${args//@BUNDLE@/$bundle}"
  # shellcheck disable=SC2206  # args are split on purpose
  cmd=("$bundle/bin/$name" $args)
  if [ "$kind" = ranks ]; then
    rank_bin="$bundle/bin/$name"
    if [ "$use_bundled_glibc" = 1 ]; then
      # The launcher starts each rank itself, and a plain exec would use this machine's older glibc:
      # it starts a wrapper that runs the rank through the bundled loader as well.
      rank_bin="$bundle/bin/$name.bundled-glibc"
      printf '#!/bin/sh\nexec "%s" --library-path "%s" "%s" "$@"\n' "$bundle/lib/glibc/ld-linux-x86-64.so.2" \
        "$libpath:$bundle/lib/glibc" "$bundle/bin/$name" >"$rank_bin"
      chmod +x "$rank_bin"
    fi
    cmd=("$bundle/bin/launch" --nproc_per_node=1 "$rank_bin" $args)
    ranks_logs+=("$log")
  fi
  if [ "$use_bundled_glibc" = 1 ]; then
    cmd=("$bundle/lib/glibc/ld-linux-x86-64.so.2" --library-path "$libpath:$bundle/lib/glibc" "${cmd[@]}")
  fi
  LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout "$per_binary_timeout" "${cmd[@]}" >"$log" 2>&1
  rc=$?
  secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  if [ $rc -eq 0 ] && grep -q "^SKIPPED: no CUDA device" "$log"; then
    result="NO-GPU"  # passed only because no device was visible: a failure on a GPU machine
  elif [ $rc -eq 0 ]; then
    result="PASS"
  elif [ $rc -eq 124 ]; then
    result="TIMEOUT"
  else
    result="FAIL($rc)"
  fi
  [ "$result" = PASS ] || failed=1
  results+=("$(printf '%-6s %-28s %-9s %6ss' "$kind" "$name" "$result" "$secs")")
  if [ "$kind" = bench ]; then
    while read -r _ bname value unit; do benches+=("$(printf '%-34s %12s %s' "$bname" "$value" "$unit")"); done \
      < <(grep '^BENCH ' "$log")
  fi
  if [ "$result" = NO-GPU ]; then
    echo "--- $name: $(grep -m1 '^SKIPPED' "$log")"
  elif [ "$result" != PASS ]; then
    echo "--- $name: $result; last lines of $log:"
    tail -n 40 "$log" | sed 's/^/   | /'
  fi
done <"$bundle/MANIFEST"

echo
echo "kind   binary                       result       time"
printf '%s\n' "${results[@]}"
if [ ${#benches[@]} -gt 0 ]; then
  echo
  echo "benchmark                                 value unit"
  printf '%s\n' "${benches[@]}"
fi
for log in "${ranks_logs[@]}"; do
  echo
  echo "$(basename "$log" .log): $(grep -m1 '^#' "$log" | cut -c1-100)"
  grep -v '^#' "$log" | tail -n 24 | cut -c1-160
done
# Side by side with PyTorch on the same GPU (the issue's GEMM-bound MLP), where the image has it.
if [ -f "$bundle/torch_mlp.py" ] && python3 -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo
  echo "PyTorch, same workload:"
  timeout 300 python3 "$bundle/torch_mlp.py" 1 50 --device cuda --in 4096 --hidden 4096 --batch 1024 2>&1 | tail -n 1
  [ -f "$bundle/torch_linear_overhead.py" ] && timeout 120 python3 "$bundle/torch_linear_overhead.py" --device cuda 2>&1
  # The CNN's and the GPT's PyTorch twins, as cnn_fashion --bench-steps 200 and gpt --steps 20 above.
  [ -f "$bundle/cnn_fashion_twin.py" ] && echo "cnn_fashion_twin: $(timeout 120 python3 "$bundle/cnn_fashion_twin.py" \
    --device cuda --bench-steps 200 --data-dir "$bundle/data/fashion-mnist" 2>&1 | tail -n 2 | tr '\n' ' ')"
  [ -f "$bundle/gpt_twin.py" ] && [ -f "$bundle/data/gpt_init.safetensors" ] && echo "gpt_twin: $(timeout 120 python3 \
    "$bundle/gpt_twin.py" --device cuda --text "$bundle/data/fortunes.txt" --init "$bundle/data/gpt_init.safetensors" \
    --steps 20 --eval-interval 20 --quiet 2>&1 | tail -n 2 | tr '\n' ' ')"
fi

# --- compute-sanitizer over the CUDA tests ---------------------------------------------------------
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
if [ "$sanitize" = 1 ] && [ -n "$sanitizer" ]; then
  echo
  echo "compute-sanitizer ($sanitizer):"
  for run in "memcheck cuda_test" "memcheck cuda_nn_test" "memcheck cuda_optim_test" "memcheck nccl_test" \
             "racecheck cuda_test" "racecheck cuda_nn_test" "racecheck cuda_optim_test"; do
    read -r tool name <<<"$run"
    [ -x "$bundle/bin/$name" ] || continue
    if [ $(($(date +%s) - script_start)) -ge "$deadline" ]; then
      echo "   $tool $name: not run (past GPU_CHECK_DEADLINE=${deadline}s)"
      continue
    fi
    log="$bundle/logs/$name.$tool.log"
    start=$(date +%s)
    # API errors are left out: cuda_test provokes an out-of-memory on purpose, and NCCL probes for kernel
    # images it lacks (cudaErrorNoKernelImageForDevice from cudaFuncGetAttributes in ncclCommInitRank).
    sflags=(--tool "$tool" --error-exitcode 99 --report-api-errors no)
    cmd=("$sanitizer" "${sflags[@]}" "$bundle/bin/$name")
    [ "$use_bundled_glibc" = 1 ] && cmd=("$sanitizer" "${sflags[@]}" \
      "$bundle/lib/glibc/ld-linux-x86-64.so.2" --library-path "$libpath:$bundle/lib/glibc" "$bundle/bin/$name")
    LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout "$sanitize_timeout" "${cmd[@]}" >"$log" 2>&1
    rc=$?
    case $rc in 0) result=PASS ;; 124) result="TIMEOUT(${sanitize_timeout}s)" ;; *) result="FAIL($rc)"; failed=1 ;; esac
    printf '   %-10s %-18s %-16s %4ss  %s\n' "$tool" "$name" "$result" $(($(date +%s) - start)) \
      "$(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log")"
    [ $rc = 0 ] || [ $rc = 124 ] || grep -m 12 -E '^=========' "$log" | sed 's/^/   | /'
  done
elif [ "$sanitize" = 1 ]; then
  echo
  echo "compute-sanitizer: not found here"
fi
echo
if [ $failed = 0 ]; then echo "gpu_check: all passed"; else echo "gpu_check: FAILURES (logs in $bundle/logs)"; fi
exit $failed
