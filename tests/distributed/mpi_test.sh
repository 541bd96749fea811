#!/usr/bin/env bash
# The mpi process-group backend under Open MPI's mpirun, at 2 and 3 ranks:
#   1. mpi_ranks: every collective's values on every rank, each op and dtype, async work, Work::wait's
#      timeout, DDP parity with one process at the global batch (tests/distributed/mpi_ranks.cpp); its
#      flat collectives at 1 and 4 ranks too;
#   2. linear_demo --backend mpi ends with the same weights as under the launcher with gloo (2, 3 ranks),
#      and so does train_eval, one epoch at 2 ranks, bit for bit;
#   3. a rank killed (SIGKILL) mid-job: mpirun ends the job, non-zero, naming the dead rank;
#   4. a rank whose wait timed out exits with the group alive: MPI_Abort ends the job instead of a hang;
#   5. a blocking all-reduce past the timeout: the worker ends the process, mpirun the job.
set -euo pipefail
ranks="$1" launch="$2" demo="$3" train_eval="$4"
if ! command -v mpirun >/dev/null; then
  echo "SKIPPED: mpirun (Debian's openmpi-bin) is not installed"
  exit 0
fi
if [ "$("$ranks" --built-with-mpi)" != yes ]; then
  echo "SKIPPED: lockstep was built without MPI (tools/bazel installs libopenmpi-dev; rebuild)"
  exit 0
fi
dir="${TEST_TMPDIR:-$(mktemp -d)}"
export HOME="$dir"  # Open MPI writes its session files under HOME/TMPDIR
export TMPDIR="$dir"
export OMP_NUM_THREADS=1
# Under the sanitizers (.ci/run's second stage): Open MPI itself leaves allocations behind at
# MPI_Finalize, some in components it has already dlclose'd (so no suppression can name them); the
# ranks' leak check would report Open MPI, not lockstep. AddressSanitizer and UBSan stay on.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# Under TSan, Open MPI's own internal lock orders (tests/distributed/tsan_openmpi.supp says which, and why).
if [ -n "${TSAN_OPTIONS:-}" ]; then
  export TSAN_OPTIONS="$TSAN_OPTIONS:suppressions=$(cd "$(dirname "$0")" && pwd)/tsan_openmpi.supp"
fi
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,tcp --mca btl_tcp_if_include lo
     --mca oob_tcp_if_include lo)
# The flat collectives (all_gather_into_tensor, reduce_scatter_tensor) at 1 and 4 ranks as well; 2 and 3
# run below with every other case.
for n in 1 4; do
  mkdir -p "$dir/flat$n"
  LOCKSTEP_MPI_TEST_DIR="$dir/flat$n" timeout 300 "${mpi[@]}" -np $n "$ranks" --no-colors -tc='flat*' \
    > "$dir/flat$n.log" 2>&1 || { cat "$dir/flat$n.log"; echo "FAIL: mpi_ranks -tc='flat*' under mpirun -np $n"; exit 1; }
  passed=$(grep -c "Status: SUCCESS!" "$dir/flat$n.log" || true)
  [ "$passed" -eq $n ] || { cat "$dir/flat$n.log"; echo "FAIL: $passed of $n ranks passed the flat collectives"; exit 1; }
  echo "mpi_ranks -np $n, flat collectives: every rank passed"
done
for n in 2 3; do
  mkdir -p "$dir/sync$n"
  LOCKSTEP_MPI_TEST_DIR="$dir/sync$n" timeout 300 "${mpi[@]}" -np $n "$ranks" --no-colors > "$dir/ranks$n.log" 2>&1 || {
    cat "$dir/ranks$n.log"
    echo "FAIL: mpi_ranks under mpirun -np $n"
    exit 1
  }
  passed=$(grep -c "Status: SUCCESS!" "$dir/ranks$n.log" || true)
  [ "$passed" -eq $n ] || { cat "$dir/ranks$n.log"; echo "FAIL: $passed of $n ranks passed"; exit 1; }
  grep -m1 "test cases:" "$dir/ranks$n.log"
  echo "mpi_ranks -np $n: every rank passed"

  "$launch" --nproc_per_node=$n "$demo" --backend gloo --timeout 60 > "$dir/gloo$n.log"
  timeout 300 "${mpi[@]}" -np $n "$demo" --backend mpi --timeout 60 > "$dir/mpi$n.log" 2>&1 || {
    cat "$dir/mpi$n.log"
    echo "FAIL: linear_demo --backend mpi under mpirun -np $n"
    exit 1
  }
  grep -q "backend mpi" "$dir/mpi$n.log" || { echo "FAIL: linear_demo did not run on the mpi backend"; exit 1; }
  a=$(grep "parameters identical" "$dir/gloo$n.log")
  b=$(grep "parameters identical" "$dir/mpi$n.log")
  echo "gloo: $a"
  echo "mpi:  $b"
  [[ "$a" == *"identical on all $n ranks: yes"* && "$a" == "$b" ]] || { echo "FAIL: -np $n: mpi differs from gloo"; exit 1; }
done

# train_eval, one epoch of Fashion-MNIST at 2 ranks: the mpi backend's final weights are gloo's, bit for bit.
if [ -d /usr/share/datasets/fashion-mnist ]; then  # data::kFashionMnistDir, from dataset-fashion-mnist
  "$launch" --nproc_per_node=2 "$train_eval" --epochs 1 --backend gloo --save "$dir/gloo.safetensors" > "$dir/te_gloo.log" 2>&1
  timeout 300 "${mpi[@]}" -np 2 "$train_eval" --epochs 1 --backend mpi --save "$dir/mpi.safetensors" > "$dir/te_mpi.log" 2>&1 || {
    tail -5 "$dir/te_mpi.log"; echo "FAIL: train_eval --backend mpi under mpirun -np 2"; exit 1; }
  cmp "$dir/gloo.safetensors" "$dir/mpi.safetensors" || { echo "FAIL: train_eval's weights differ between gloo and mpi"; exit 1; }
  echo "train_eval, 1 epoch, 2 ranks: mpi's final weights are gloo's, bit for bit"
else
  echo "train_eval part SKIPPED: no Fashion-MNIST (dataset-fashion-mnist)"
fi

# A rank killed mid-job: the others are in an all-reduce that cannot finish; mpirun ends them all.
status=0
timeout 120 "${mpi[@]}" -np 3 "$ranks" --kill-rank > "$dir/kill.log" 2>&1 || status=$?
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || { cat "$dir/kill.log"; echo "FAIL: mpirun exited $status after a rank was killed"; exit 1; }
grep -Eq "rank 2 .*exited on signal 9|exited on signal 9 \(Killed\)|returned a non-zero exit code" "$dir/kill.log" \
  || { cat "$dir/kill.log"; echo "FAIL: mpirun did not say that a rank died"; exit 1; }
grep -m 2 -E "signal 9|non-zero exit" "$dir/kill.log"
echo "killed rank: mpirun exited with status $status"

# A rank whose wait timed out leaves with the group alive: MPI_Abort at exit ends the job (no hang in
# MPI_Finalize), with lockstep's reason on stderr and the timeout's message from the program. (mpirun's
# own "MPI_ABORT was invoked" text is not checked: Open MPI 4.1 sometimes fails to print it.)
status=0
timeout 120 "${mpi[@]}" -np 2 "$ranks" --exit-after-timeout > "$dir/timeout.log" 2>&1 || status=$?
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || { cat "$dir/timeout.log"; echo "FAIL: mpirun exited $status after a timeout"; exit 1; }
for want in "all_reduce (float32, 4 elements, SUM) (collective #4) did not complete within 0.3s on rank 0 of 2" \
            "exiting with the mpi process group still alive"; do
  grep -qF "$want" "$dir/timeout.log" || { cat "$dir/timeout.log"; echo "FAIL: no \"$want\" after a timeout"; exit 1; }
done
echo "timed-out rank: mpirun exited with status $status after MPI_Abort"

# The same with a blocking all-reduce, which runs on rank 0's own thread inside MPI: the group's worker
# watches it, prints the error and ends the process; mpirun ends the job.
status=0
timeout 120 "${mpi[@]}" -np 2 "$ranks" --blocking-timeout > "$dir/blocking.log" 2>&1 || status=$?
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || { cat "$dir/blocking.log"; echo "FAIL: mpirun exited $status after a blocking timeout"; exit 1; }
grep -qF "all_reduce (float32, 4 elements, SUM) (collective #4) did not complete within 0.3s on rank 0 of 2" \
  "$dir/blocking.log" || { cat "$dir/blocking.log"; echo "FAIL: no timeout message after a blocking timeout"; exit 1; }
grep -qF "It is a blocking call, run on the calling thread, which MPI cannot interrupt: ending the process" \
  "$dir/blocking.log" || { cat "$dir/blocking.log"; echo "FAIL: the worker did not end the blocked process"; exit 1; }
echo "blocking timed-out rank: mpirun exited with status $status"
echo "PASS: the mpi backend at 2 and 3 ranks"
