#!/usr/bin/env bash
# env:// under Open MPI's mpirun: ranks, world size and local rank come from OMPI_COMM_WORLD_*, the
# master is 127.0.0.1 (every rank on this host), and the job trains to the same weights as under
# lockstep's launcher, at 2 and 3 ranks.
set -euo pipefail
launch="$1" demo="$2"
if ! command -v mpirun >/dev/null; then
  echo "SKIPPED: mpirun (Debian's openmpi-bin) is not installed"
  exit 0
fi
dir="${TEST_TMPDIR:-$(mktemp -d)}"
export HOME="$dir"  # Open MPI writes its session files under HOME/TMPDIR
export TMPDIR="$dir"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,tcp --mca btl_tcp_if_include lo
     --mca oob_tcp_if_include lo)
for n in 2 3; do
  port=$((20000 + RANDOM % 20000))
  "$launch" --nproc_per_node=$n "$demo" --timeout 60 > "$dir/launch$n.log"
  # Only MASTER_PORT is given: nothing else from PyTorch's variables.
  MASTER_PORT=$port LOCKSTEP_DISTRIBUTED_DEBUG=INFO timeout 300 "${mpi[@]}" -np $n -x MASTER_PORT \
    -x LOCKSTEP_DISTRIBUTED_DEBUG "$demo" --timeout 60 > "$dir/mpi$n.log" 2> "$dir/mpi$n.err" || {
    cat "$dir/mpi$n.log" "$dir/mpi$n.err"
    echo "FAIL: mpirun -np $n exited with $?"
    exit 1
  }
  cat "$dir/mpi$n.err"
  last=$((n - 1))
  grep -q "rank $last from OMPI_COMM_WORLD_RANK, world_size $n from OMPI_COMM_WORLD_SIZE, local_rank $last from OMPI_COMM_WORLD_LOCAL_RANK, master_addr 127.0.0.1 from OMPI_COMM_WORLD_LOCAL_SIZE (every rank on this host), master_port $port from MASTER_PORT" "$dir/mpi$n.err" \
    || { echo "FAIL: rank $last did not report what it found in Open MPI's variables"; exit 1; }
  a=$(grep "parameters identical" "$dir/launch$n.log")
  b=$(grep "parameters identical" "$dir/mpi$n.log")
  echo "launch: $a"
  echo "mpirun: $b"
  [[ "$a" == *"identical on all $n ranks: yes"* && "$a" == "$b" ]] || { echo "FAIL: -np $n differs from the launcher"; exit 1; }
done
echo "PASS: mpirun -np 2 and -np 3 train as the launcher does"
