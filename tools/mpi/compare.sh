#!/usr/bin/env bash
# compare.sh: lockstep's mpi backend (bench/allreduce_bench --backend mpi) against MPI_Allreduce called
# directly, from C (mpi_allreduce_bench.c) and from the same benchmark binary on the same tensors
# (allreduce_bench --raw-mpi), all under the same mpirun options, interleaved and repeated; then
# compare_report.py prints medians and best of the repetitions, and the differences.
#   tools/mpi/compare.sh [--reps N] [--ranks N] [--out DIR] [allreduce flags, default -b 4 -e 64M -f 4]
#   tools/mpi/compare.sh --sizes "1M 4M 16M 64M" [--reps N] [flags]: one size per run, the two alternating
#     size by size (a load that changes over a sweep then weighs on both alike)
# Build first: tools/bazel build //bench:allreduce_bench
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=3 ranks=2 out="" sizes=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) reps="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    *) break ;;
  esac
done
flags=("$@")
[ ${#flags[@]} -gt 0 ] || [ -n "$sizes" ] || flags=(-b 4 -e 64M -f 4)
out="${out:-$(mktemp -d /tmp/mpi_compare.XXXX)}"
mkdir -p "$out"
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
export OMP_NUM_THREADS=1
echo "# $(date -u) $(uptime)" | tee "$out/load.txt"
bench() { mpirun "${root[@]}" --oversubscribe -np "$ranks" bazel-bin/bench/allreduce_bench --csv "$@"; }
for rep in $(seq 1 "$reps"); do
  if [ -z "$sizes" ]; then
    bench --backend mpi "${flags[@]}" > "$out/lockstep_$rep.csv"
    tools/mpi/run.sh "$ranks" --csv "${flags[@]}" > "$out/mpi_$rep.csv"
    bench --raw-mpi "${flags[@]}" > "$out/rawbin_$rep.csv"
  else
    first=1
    for s in $sizes; do
      # The CSV header once per file.
      bench --backend mpi -b "$s" -e "$s" "${flags[@]}" | tail -n +$((first ? 1 : 2)) >> "$out/lockstep_$rep.csv"
      tools/mpi/run.sh "$ranks" --csv -b "$s" -e "$s" "${flags[@]}" | tail -n +$((first ? 1 : 2)) >> "$out/mpi_$rep.csv"
      bench --raw-mpi -b "$s" -e "$s" "${flags[@]}" | tail -n +$((first ? 1 : 2)) >> "$out/rawbin_$rep.csv"
      first=0
    done
  fi
  echo "# rep $rep done: $(uptime)" | tee -a "$out/load.txt"
done
python3 tools/mpi/compare_report.py "$out"
