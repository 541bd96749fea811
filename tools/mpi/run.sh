#!/usr/bin/env bash
# Builds tools/mpi/mpi_allreduce_bench.c with mpicc and runs it on N local ranks with mpirun (Open MPI
# picks its shared-memory transport between local ranks by itself). Needs openmpi-bin and
# libopenmpi-dev (both in tools/bazel's packages).
#   tools/mpi/run.sh N [mpi_allreduce_bench flags...]
set -euo pipefail
n="$1"; shift
here="$(cd "$(dirname "$0")" && pwd)"
out="${LOCKSTEP_MPI_BIN:-/tmp/lockstep_mpi_allreduce_bench}"
[ "$out" -nt "$here/mpi_allreduce_bench.c" ] || mpicc -O3 -march=x86-64-v3 -o "$out" "$here/mpi_allreduce_bench.c"
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
exec mpirun "${root[@]}" --oversubscribe -np "$n" "$out" "$@"
