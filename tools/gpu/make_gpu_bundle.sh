#!/usr/bin/env bash
# Builds what a lent GPU machine runs and packs it into one folder to carry there:
#   tools/gpu/make_gpu_bundle.sh [out_dir]      (default gpu_bundle/, which git ignores)
# then, on the GPU machine (no Bazel, no Debian libraries needed):
#   tools/gpu/gpu_check.sh [out_dir]
#
# The bundle: bin/ (the binaries), lib/ (every shared library they load except the CUDA libraries, which
# gpu_check.sh finds on the GPU machine, and glibc), lib/glibc/ (this machine's glibc and loader, used
# only where the GPU machine's glibc is older), MANIFEST (what gpu_check.sh runs) and BUILD_INFO.
set -euo pipefail
cd "$(dirname "$0")/../.."

# The one list of what runs on the GPU machine: "<kind> <bazel label> [arguments...]".
#   test   a test binary: must exit 0 (and must not print "SKIPPED: no CUDA device" there)
#   bench  prints "BENCH <name> <value> <unit>" lines, gathered into gpu_check.sh's table
#   ranks  run as one rank under the bundled launcher (NCCL refuses two ranks on one GPU); its output
#          rows are printed after the table
#   tool   copied, not run (the launcher)
TARGETS=(
  "test //tests/tensor:tensor_test"
  "test //tests/cuda:cuda_test"
  "test //tests/cuda:cuda_kernels_test"
  "test //tests/cuda:cuda_half_kernels_test"
  "test //tests/cuda:cuda_reduce_test"
  "test //tests/cuda:cuda_attention_test"
  "test //tests/cuda:cuda_rnn_test"
  "test //tests/cuda:cublas_loading_test"
  "test //tests/cuda:cuda_nn_test"
  "test //tests/cuda:cuda_optim_test"
  "test //tests/cuda:nccl_test"
  "test //tests/data:bad_input_test"
  "bench //bench:cuda_bench"
  "bench //bench:mlp_bench --device cuda --in 4096 --hidden 4096 --batch 1024 --steps 50 --rounds 3"
  "tool //distributed/launch:launch"
  "ranks //bench:allreduce_bench --backend nccl -b 1M -e 256M -f 4 -n 20"
  "ranks //bench:allreduce_bench --raw-nccl -b 1M -e 256M -f 4 -n 20"
  "bench //bench:linear_overhead_bench --device cuda"
  "ranks //examples:train_eval --device cuda --epochs 1 --data-dir @BUNDLE@/data/fashion-mnist"
  "ranks //examples:cnn_fashion --device cuda --bench-steps 200 --data-dir @BUNDLE@/data/fashion-mnist"
  "ranks //examples:cnn_fashion --device cuda --steps 20 --no-dropout --no-shuffle --log-every 1 --data-dir @BUNDLE@/data/fashion-mnist"
  "ranks //examples:gpt --device cuda --text @BUNDLE@/data/fortunes.txt --steps 20 --log-interval 1 --eval-interval 20 --sample-tokens 100"
)
# Arguments may name @BUNDLE@, the bundle's folder where gpu_check.sh runs; the data the runs read is
# copied under data/ below (Fashion-MNIST's IDX files, the fortunes as one text file).

out="${1:-gpu_bundle}"
labels=()
for t in "${TARGETS[@]}"; do
  read -r _ label _ <<<"$t"
  labels+=("$label")
done
tools/bazel build "${labels[@]}"
bin_dir="$(tools/bazel info bazel-bin 2>/dev/null)"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/glibc"
: >"$out/MANIFEST"

# Libraries the GPU machine provides itself: the CUDA stack (gpu_check.sh puts it on the library path)
# and glibc (copied apart into lib/glibc).
is_cuda_lib() { [[ "$1" =~ ^lib(cuda|cudart|cublas|cublasLt|nccl|nvidia-|nvJitLink|nvrtc|cufft|curand|cusparse|cusolver|cudnn) ]]; }
is_glibc_lib() { [[ "$1" =~ ^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so) ]]; }

for t in "${TARGETS[@]}"; do
  read -r kind label args <<<"$t"
  name="${label##*:}"
  pkg="${label#//}"
  pkg="${pkg%%:*}"
  src="$bin_dir/$pkg/$name"
  [ -x "$src" ] || { echo "make_gpu_bundle: $label did not produce $src" >&2; exit 1; }
  cp -Lf "$src" "$out/bin/$name"
  echo "$kind $name${args:+ $args}" >>"$out/MANIFEST"
  # "soname => /path (addr)" lines; a library ldd cannot find is an error here, not on the GPU machine.
  while read -r soname arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if is_cuda_lib "$soname"; then continue; fi
    [ -e "$path" ] || { echo "make_gpu_bundle: $name needs $soname, which ldd cannot find" >&2; exit 1; }
    if is_glibc_lib "$soname"; then cp -Ln "$path" "$out/lib/glibc/$soname"; else cp -Ln "$path" "$out/lib/$soname"; fi
  done < <(ldd "$src")
done
cp -L /lib64/ld-linux-x86-64.so.2 "$out/lib/glibc/"
for so in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1; do
  [ -e "$out/lib/glibc/$so" ] || cp -L "/lib/x86_64-linux-gnu/$so" "$out/lib/glibc/" 2>/dev/null || true
done

# Symbols are not needed there, and the bundle travels (a carry is limited to 64 MiB).
strip --strip-unneeded "$out"/bin/* "$out"/lib/*.so* 2>/dev/null || true

{
  echo "built $(date -u +%Y-%m-%dT%H:%MZ) from $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo '+changes')"
  echo "glibc $(getconf GNU_LIBC_VERSION | awk '{print $2}')"
  echo "cuda $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
} >"$out/BUILD_INFO"
cp tools/gpu/gpu_check.sh bench/torch_linear_overhead.py tools/twins/cnn_fashion_twin.py tools/twins/gpt_twin.py "$out/"
mkdir -p "$out/data"
cp -r /usr/share/datasets/fashion-mnist "$out/data/" 2>/dev/null ||
  echo "make_gpu_bundle: no Fashion-MNIST in /usr/share/datasets; train_eval and cnn_fashion will fail there" >&2
for f in /usr/share/games/fortunes/*; do  # the plain-text fortune files (not indexes, links or ascii-art)
  case "$f" in *.dat | *.u8 | */art) ;; *) cat "$f" ;; esac
done >"$out/data/fortunes.txt"
# The GPT's initial weights, for PyTorch's twin (tools/twins/gpt_twin.py) to start where lockstep's GPT starts.
"$bin_dir/distributed/launch/launch" --nproc_per_node=1 "$bin_dir/examples/gpt" --text "$out/data/fortunes.txt" \
  --export-init "$(cd "$out" && pwd)/data/gpt_init.safetensors" >/dev/null
# PyTorch's reference step, run beside ours where the GPU machine has PyTorch.
cp ../shared/anchors/torch_mlp.py "$out/" 2>/dev/null || echo "make_gpu_bundle: ../shared/anchors/torch_mlp.py not found; no PyTorch comparison" >&2
echo "make_gpu_bundle: $(wc -l <"$out/MANIFEST") binaries and $(find "$out/lib" -maxdepth 1 -name '*.so*' | wc -l) libraries in $out ($(du -sh "$out" | cut -f1))"
