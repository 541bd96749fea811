#!/usr/bin/env bash
# shm_benchmarks.sh: the same-host numbers of BENCHMARKS.md ("Shared memory"), interleaved and repeated:
#   - all-reduce, float32 SUM, 4 B to 256 MiB, 2 and 4 ranks: lockstep over shared memory (the default),
#     lockstep over TCP (LOCKSTEP_SHM=0), Open MPI's MPI_Allreduce (tools/mpi/) and PyTorch's gloo
#     (../shared/anchors/torch_allreduce.py, 4 B to 64 MiB);
#   - the DDP MLP step on 2 ranks (shm and TCP) against mlp_bench in one process, one thread each, and
#     the Fashion-MNIST-sized workload on 2 ranks against 1.
# Then bench/shm_bench_report.py prints the tables: medians and best of the repetitions, as ratios.
#
#   bench/shm_benchmarks.sh [--reps N] [--out DIR]
# Needs Open MPI (openmpi-bin, libopenmpi-dev: in tools/bazel's packages) and PyTorch at $TORCH_PY (default
# ~/.cache/torch-venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=3
OUT=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "shm_benchmarks.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
TORCH_PY=${TORCH_PY:-$HOME/.cache/torch-venv/bin/python}
[[ -n $OUT ]] || OUT=$(mktemp -d /tmp/lockstep_shm_bench.XXXXXX)
mkdir -p "$OUT/bin"
tools/bazel build //bench:allreduce_bench //bench:ddp_bench //bench:mlp_bench //distributed/launch >&2
cp -f bazel-bin/bench/allreduce_bench bazel-bin/bench/ddp_bench bazel-bin/bench/mlp_bench \
  bazel-bin/distributed/launch/launch "$OUT/bin/"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
B=$OUT/bin
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit: $(git rev-parse --short HEAD)"
  echo "mpi: $(mpirun --version 2>/dev/null | sed -n 1p)"
  echo "torch: $("$TORCH_PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "reps: $REPS"
} | tee "$OUT/machine.txt"

# One lockstep sweep: small sizes with many iterations, large ones with few.
lockstep_sweep() {  # WORLD OUTFILE
  "$B/launch" --nproc_per_node="$1" "$B/allreduce_bench" -b 4 -e 256K -f 4 -n 200 -w 20 --csv > "$2"
  "$B/launch" --nproc_per_node="$1" "$B/allreduce_bench" -b 1M -e 256M -f 4 -n 5 -w 1 --csv | tail -n +2 >> "$2"
}
mpi_sweep() {  # WORLD OUTFILE
  tools/mpi/run.sh "$1" -b 4 -e 256K -f 4 -n 200 -w 20 --csv > "$2"
  tools/mpi/run.sh "$1" -b 1M -e 256M -f 4 -n 5 -w 1 --csv | tail -n +2 >> "$2"
}

for rep in $(seq 1 "$REPS"); do
  echo "=== repetition $rep of $REPS ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))" >&2
  for w in 2 4; do
    lockstep_sweep "$w" "$OUT/ar_shm_w${w}_r$rep.csv"
    mpi_sweep "$w" "$OUT/ar_mpi_w${w}_r$rep.csv"
    LOCKSTEP_SHM=0 lockstep_sweep "$w" "$OUT/ar_tcp_w${w}_r$rep.csv"
    "$TORCH_PY" ../shared/anchors/torch_allreduce.py "$w" > "$OUT/ar_torch_w${w}_r$rep.txt" 2>/dev/null || true
  done
  "$B/mlp_bench" | tail -n1 > "$OUT/mlp_1p_r$rep.txt"
  "$B/launch" --nproc_per_node=2 "$B/ddp_bench" --no-baseline > "$OUT/ddp_shm_mlp_r$rep.txt"
  LOCKSTEP_SHM=0 "$B/launch" --nproc_per_node=2 "$B/ddp_bench" --no-baseline > "$OUT/ddp_tcp_mlp_r$rep.txt"
  "$B/launch" --nproc_per_node=1 "$B/ddp_bench" --workload fmnist --no-baseline > "$OUT/ddp_1p_fmnist_r$rep.txt"
  "$B/launch" --nproc_per_node=2 "$B/ddp_bench" --workload fmnist --no-baseline > "$OUT/ddp_shm_fmnist_r$rep.txt"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
python3 bench/shm_bench_report.py "$OUT"
