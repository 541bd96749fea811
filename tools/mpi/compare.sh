#!/usr/bin/env bash
# compare.sh: lockstep's mpi backend (examples/allreduce_bench --backend mpi) against MPI_Allreduce called
# directly (mpi_allreduce_bench.c), both under the same mpirun options, interleaved and repeated; then
# compare_report.py prints medians and best of the repetitions, and the difference.
#   tools/mpi/compare.sh [--reps N] [--ranks N] [--out DIR] [allreduce flags, default -b 4 -e 64M -f 4]
# Build first: tools/bazel build //examples:allreduce_bench
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=3 ranks=2 out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) reps="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) break ;;
  esac
done
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(-b 4 -e 64M -f 4)
out="${out:-$(mktemp -d /tmp/mpi_compare.XXXX)}"
mkdir -p "$out"
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
export OMP_NUM_THREADS=1
echo "# $(date -u) $(uptime)" | tee "$out/load.txt"
for rep in $(seq 1 "$reps"); do
  mpirun "${root[@]}" --oversubscribe -np "$ranks" bazel-bin/examples/allreduce_bench --backend mpi --csv "${flags[@]}" \
    > "$out/lockstep_$rep.csv"
  tools/mpi/run.sh "$ranks" --csv "${flags[@]}" > "$out/mpi_$rep.csv"
  echo "# rep $rep done: $(uptime)" | tee -a "$out/load.txt"
done
python3 tools/mpi/compare_report.py "$out"
