#!/usr/bin/env bash
# collectives_bench.sh: reduce-scatter and all-gather (and all-reduce) on one host, lockstep's gloo
# backend over shared memory against Open MPI's MPI_Reduce_scatter_block / MPI_Allgather / MPI_Allreduce
# (allreduce_bench --raw-mpi under mpirun: the same binary, buffers and timing rule), interleaved: each
# repetition runs every (collective, implementation) pair once, the order rotating between repetitions.
# bench/collectives_report.py then prints the medians over repetitions as BENCHMARKS.md's table.
#
#   bench/collectives_bench.sh [--reps 5] [--ranks 2] [--ops "reduce_scatter all_gather"] [--out DIR]
# Needs Open MPI (openmpi-bin, libopenmpi-dev: in tools/bazel's packages).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=5 RANKS=2 OPS="reduce_scatter all_gather" OUT="" SIZES=(-b 64K -e 64M -f 4) ITERS=(-n 20 -w 3)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --ranks) RANKS="$2"; shift 2 ;;
    --ops) OPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "collectives_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $OUT ]] || OUT=$(mktemp -d /tmp/lockstep_collectives_bench.XXXXXX)
mkdir -p "$OUT/bin"
tools/bazel build //bench:allreduce_bench //distributed/launch >&2
cp -f bazel-bin/bench/allreduce_bench bazel-bin/distributed/launch/launch "$OUT/bin/"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
B=$OUT/bin
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit: $(git rev-parse --short HEAD)"
  echo "mpi: $(mpirun --version 2>/dev/null | sed -n 1p)"
  echo "ranks: $RANKS, reps: $REPS"
} | tee "$OUT/machine.txt"

run() {  # IMPL OP OUTFILE
  case "$1" in
    shm) "$B/launch" --nproc_per_node="$RANKS" "$B/allreduce_bench" --op "$2" "${SIZES[@]}" "${ITERS[@]}" --csv > "$3" ;;
    mpi) mpirun "${root[@]}" --oversubscribe -np "$RANKS" "$B/allreduce_bench" --raw-mpi --op "$2" "${SIZES[@]}" \
           "${ITERS[@]}" --csv > "$3" ;;
  esac
}

for rep in $(seq 1 "$REPS"); do
  echo "=== repetition $rep of $REPS ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))" >&2
  impls=(shm mpi)
  (( rep % 2 == 0 )) && impls=(mpi shm)
  for op in $OPS; do
    for impl in "${impls[@]}"; do run "$impl" "$op" "$OUT/${impl}_${op}_w${RANKS}_r${rep}.csv"; done
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
python3 bench/collectives_report.py "$OUT"
