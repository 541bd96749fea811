#!/usr/bin/env bash
# Builds what a lent GPU machine runs and packs it into one archive small enough to carry there:
#   tools/gpu/make_gpu_bundle.sh [out_dir]      (default gpu_bundle/; the archive is <out_dir>.tar.xz)
# then, on the GPU machine (no Bazel, no Debian libraries needed), from the repository root:
#   tools/gpu/gpu_check.sh                      (unpacks gpu_bundle.tar.xz, runs everything; docs/gpu_check/README.md)
#
# The bundle: bin/ (the binaries, stripped), lib/ (every shared library they load except the CUDA libraries,
# which gpu_check.sh finds on the GPU machine, and glibc), lib/glibc/ (this machine's glibc and loader, used
# only where the GPU machine's glibc is older), data/ (what the runs read), the PyTorch sides (twins and
# torch_cuda_bench.py), MANIFEST (the binaries and which are tests) and BUILD_INFO.
#
# Size: a device call carries the working tree and its carried paths, 64 MiB in all. The static example
# binaries each hold the same ~24 MB of CUDA kernels (.nv_fatbin), which the libraries the tests load hold
# once more: one solid xz stream with a dictionary larger than a binary stores them about once. The script
# fails when the archive and the tree that travels with it exceed GPU_BUNDLE_LIMIT_MIB (default 64).
set -euo pipefail
cd "$(dirname "$0")/../.."

# What runs on the GPU machine: "<kind> <bazel label>".
#   test   a GPU test: gpu_check.sh runs each; it must exit 0 (and not print "SKIPPED: no CUDA device")
#   tool   run by gpu_check.sh's own steps (benchmarks, examples, the launcher)
# Every test that touches a CUDA device on one GPU. nccl_multi_rank_test needs two GPUs; the machines
# lent here have one.
TARGETS=(
  "test //tests/tensor:tensor_test"
  "test //tests/autograd:ops_bad_input_test"
  "test //tests/data:bad_input_test"
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
  "test //tests/distributed:nccl_flat_collectives_test"
  "tool //bench:cuda_bench"
  "tool //examples:cnn_fashion"
  "tool //examples:gpt"
  "tool //distributed/launch:launch"
)
limit_mib="${GPU_BUNDLE_LIMIT_MIB:-64}"
# Training images carried for cnn_fashion --bench-steps (200 steps of 64 < 16384: no second epoch).
fashion_train_images=16384 fashion_test_images=2048

out="${1:-gpu_bundle}"
archive="$out.tar.xz"
labels=()
for t in "${TARGETS[@]}"; do
  read -r _ label <<<"$t"
  labels+=("$label")
done
# The .bazelrc defaults (-c opt, -O3, x86-64-v3, the CUDA toolkit found here): the configuration CI's first
# stage builds and tests. No --config: cudaemu/nocuda/asan builds would not use the GPU.
tools/bazel build "${labels[@]}"
bin_dir="$(tools/bazel info bazel-bin 2>/dev/null)"

rm -rf "$out" "$archive"
mkdir -p "$out/bin" "$out/lib/glibc" "$out/data"
: >"$out/MANIFEST"

# Libraries the GPU machine provides itself: the CUDA stack (gpu_check.sh puts it on the library path)
# and glibc (copied apart into lib/glibc).
is_cuda_lib() { [[ "$1" =~ ^lib(cuda|cudart|cublas|cublasLt|nccl|nvidia-|nvJitLink|nvrtc|cufft|curand|cusparse|cusolver|cudnn) ]]; }
is_glibc_lib() { [[ "$1" =~ ^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so) ]]; }

for t in "${TARGETS[@]}"; do
  read -r kind label <<<"$t"
  name="${label##*:}"
  pkg="${label#//}"
  pkg="${pkg%%:*}"
  src="$bin_dir/$pkg/$name"
  [ -x "$src" ] || { echo "make_gpu_bundle: $label did not produce $src" >&2; exit 1; }
  cp -Lf "$src" "$out/bin/$name"
  echo "$kind $name" >>"$out/MANIFEST"
  # "soname => /path (addr)" lines; a library ldd cannot find is an error here, not on the GPU machine.
  # One copy per soname (-n): the tests share lockstep's libraries.
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

# Symbols are not needed there (Bazel's opt binaries keep their symbol tables; Debian's libraries are
# stripped already). Copies of read-only outputs are made writable first, so that strip can replace them.
chmod -R u+w "$out"
strip --strip-unneeded "$out"/bin/* "$out"/lib/*.so*

{
  echo "built $(date -u +%Y-%m-%dT%H:%MZ) from $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo '+changes')"
  echo "config tools/bazel build (.bazelrc defaults: -c opt, as CI's first stage)"
  echo "glibc $(getconf GNU_LIBC_VERSION | awk '{print $2}')"
  echo "cuda $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
} >"$out/BUILD_INFO"
cp tools/gpu/gpu_check.sh tools/gpu/gpu_check_summary.py tools/gpu/torch_cuda_bench.py tools/twins/cnn_fashion_twin.py \
  tools/twins/gpt_twin.py "$out/"

# Fashion-MNIST's first images only: the check times steps, it does not train to an accuracy, and the
# full set (30 MB of gzip that xz cannot shrink) would not fit beside the binaries.
[ -d /usr/share/datasets/fashion-mnist ] ||
  { echo "make_gpu_bundle: no Fashion-MNIST in /usr/share/datasets (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
python3 - /usr/share/datasets/fashion-mnist "$out/data/fashion-mnist" "$fashion_train_images" "$fashion_test_images" <<'EOF'
import gzip, os, struct, sys
src, dst, n_train, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.makedirs(dst, exist_ok=True)
for split, n in (("train", n_train), ("t10k", n_test)):
    for kind in ("images-idx3", "labels-idx1"):
        name = f"{split}-{kind}-ubyte.gz"
        data = gzip.open(os.path.join(src, name)).read()
        dims = data[3]  # IDX: 0, 0, type, number of dimensions, then one big-endian uint32 per dimension
        shape = struct.unpack(f">{dims}I", data[4:4 + 4 * dims])
        keep = min(n, shape[0])
        row = 1
        for d in shape[1:]:
            row *= d
        header = data[:4] + struct.pack(f">{dims}I", keep, *shape[1:])
        with gzip.open(os.path.join(dst, name), "wb", compresslevel=9) as f:
            f.write(header + data[4 + 4 * dims:4 + 4 * dims + keep * row])
EOF
for f in /usr/share/games/fortunes/*; do  # the plain-text fortune files (not indexes, links or ascii-art)
  case "$f" in *.dat | *.u8 | */art) ;; *) cat "$f" ;; esac
done >"$out/data/fortunes.txt"
# The GPT's initial weights are not carried: gpu_check.sh writes them on the GPU machine with the
# configuration it runs (GPT-2 small's are 340 MB).

# One solid stream (no -T: threads would split it into blocks and lose the matches between binaries).
tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -9e --lzma2=preset=9e,dict=256MiB >"$archive"

# What travels with the archive: tracked files and untracked ones git does not ignore.
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
archive_bytes=$(stat -c %s "$archive")
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "make_gpu_bundle: $(wc -l <"$out/MANIFEST") binaries and $(find "$out/lib" -maxdepth 1 -name '*.so*' | wc -l)" \
  "libraries in $out ($(du -sh "$out" | cut -f1)); $archive $(mib "$archive_bytes"), with the working tree" \
  "($(mib "$tree_bytes")) $(mib $((archive_bytes + tree_bytes))) of the ${limit_mib} MiB a device call carries"
if [ $((archive_bytes + tree_bytes)) -gt $((limit_mib * 1048576)) ]; then
  echo "make_gpu_bundle: TOO LARGE: $archive and the working tree come to $(mib $((archive_bytes + tree_bytes)))," \
    "over ${limit_mib} MiB; it would not travel. Carry fewer binaries or less data." >&2
  exit 1
fi
