#!/usr/bin/env bash
# env:// under a real Slurm: the test starts a private one-node cluster (munged, slurmctld, slurmd, all
# configured under a temporary directory, stopped on exit) and runs linear_demo with `srun -n 2` and
# `srun -n 3`. Every rank must say it took rank, world size and local rank from SLURM_PROCID,
# SLURM_NTASKS and SLURM_LOCALID, the master from SLURM_STEP_NODELIST and the port from SLURM_JOB_ID, and
# the job must train to the same weights as under lockstep's launcher.
set -euo pipefail
launch="$1" demo="$2"
export PATH="$PATH:/usr/sbin:/sbin"  # the daemons live in sbin, which a test's PATH may lack
for tool in munged mungekey slurmctld slurmd srun sinfo squeue scancel; do
  command -v "$tool" >/dev/null || {
    echo "SKIPPED: $tool is not installed (Debian's munge, slurmctld, slurmd and slurm-client)"
    exit 0
  }
done
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: a private Slurm runs its daemons as root, and this is uid $(id -u)"; exit 0; }
host=$(hostname -s)
# The ranks meet at the first host of SLURM_STEP_NODELIST, i.e. this node's name, so it must resolve.
getent hosts "$host" >/dev/null || { echo "SKIPPED: this host's name '$host' does not resolve"; exit 0; }

# Nothing from an enclosing Slurm job may reach srun or the ranks.
while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(SLURM_[A-Za-z_]*\)=.*/\1/p')
dir="${TEST_TMPDIR:-$(mktemp -d)}/slurm"
mkdir -p "$dir"
# Sockets (munged's, and slurmd's per step in its spool) must have paths that fit a sockaddr_un (108
# bytes); Bazel's TEST_TMPDIR can be longer, so they go to a short directory under /tmp then.
run="$dir/run"
if ((${#run} > 40)); then run=$(mktemp -d /tmp/lockstep-slurm.XXXXXX); fi
mkdir -p "$run/spool" "$dir/state" "$dir/log"
chmod 755 "$run"  # munged wants its socket's directory open to everyone
pids=()
cleanup() {
  set +e
  if [ -n "${SLURM_CONF:-}" ] && ((${#pids[@]} > 1)); then
    timeout 10 scancel --quiet --user=root
    for _ in $(seq 50); do [ -z "$(timeout 5 squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null; done
  for p in "${pids[@]}"; do timeout 20 tail --pid="$p" -f /dev/null; kill -9 "$p" 2>/dev/null; done
  [[ "$run" == /tmp/lockstep-slurm.* ]] && rm -rf "$run"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$dir"/*.out "$dir"/log/*; do [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }; done
  exit 1
}

# A free TCP port on this host (the daemons and the ranks' master must not meet another test's).
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 20000))
    [ -z "$(ss -Htln "sport = :$p")" ] && { echo "$p"; return; }
  done
}

umask 077
mungekey --create --keyfile="$dir/munge.key"
umask 022
munged --foreground --force --socket="$run/munge.socket" --key-file="$dir/munge.key" \
  --pid-file="$run/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munged.seed" \
  > "$dir/munged.out" 2>&1 &
pids+=($!)

# Jobs get ids first_job, first_job + 1, ...; each job's master port is 20000 + id % 10000 (no
# MASTER_PORT is given), so pick ids whose ports are free.
while :; do
  first_job=$((1000 + RANDOM % 9000))
  p0=$((20000 + first_job % 10000)) p1=$((20000 + (first_job + 1) % 10000))
  [ -z "$(ss -Htln "sport = :$p0 or sport = :$p1")" ] && break
done
ctld_port=$(free_port) slurmd_port=$(free_port)
# One node with this machine's CPUs; no cgroups (linuxproc tracks the tasks, task/none binds nothing),
# no accounting; a shared partition so that a 3-task step fits on 2 cores with srun --overcommit.
cat > "$dir/slurm.conf" <<EOF
ClusterName=lockstep
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$run/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$run/spool
SlurmctldPidFile=$run/slurmctld.pid
SlurmdPidFile=$run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
FirstJobId=$first_job
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=10 State=UP OverSubscribe=FORCE
EOF
export SLURM_CONF="$dir/slurm.conf"
for _ in $(seq 100); do [ -S "$run/munge.socket" ] && break; sleep 0.1; done
[ -S "$run/munge.socket" ] || fail "munged did not create its socket"
slurmctld -D -i -f "$SLURM_CONF" > "$dir/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N "$host" -f "$SLURM_CONF" > "$dir/slurmd.out" 2>&1 &
pids+=($!)
# Hang guard, not a timing check: wait (up to 60 s) for the node to be ready.
for _ in $(seq 300); do
  [ "$(timeout 5 sinfo -h -n "$host" -o %t 2>/dev/null)" = idle ] && break
  sleep 0.2
done
[ "$(timeout 5 sinfo -h -n "$host" -o %t 2>/dev/null)" = idle ] || fail "the Slurm node did not come up"
timeout 5 sinfo

job=$first_job
for n in 2 3; do
  "$launch" --nproc_per_node=$n "$demo" --timeout 60 > "$dir/launch$n.log"
  port=$((20000 + job % 10000))
  LOCKSTEP_DISTRIBUTED_DEBUG=INFO timeout 300 srun --overcommit --ntasks=$n --time=5 "$demo" --timeout 60 \
    > "$dir/srun$n.log" 2> "$dir/srun$n.err" || {
    rc=$?
    cat "$dir/srun$n.log" "$dir/srun$n.err"
    fail "srun -n $n exited with $rc"
  }
  cat "$dir/srun$n.err"
  for ((r = 0; r < n; r++)); do
    grep -qF "rank $r from SLURM_PROCID, world_size $n from SLURM_NTASKS, local_rank $r from SLURM_LOCALID, master_addr $host from SLURM_STEP_NODELIST, master_port $port from SLURM_JOB_ID (20000 + id % 10000)" "$dir/srun$n.err" \
      || fail "rank $r of srun -n $n (job $job) did not report what it found in Slurm's variables"
  done
  a=$(grep "parameters identical" "$dir/launch$n.log")
  b=$(grep "parameters identical" "$dir/srun$n.log")
  echo "launch: $a"
  echo "srun:   $b"
  [[ "$a" == *"identical on all $n ranks: yes"* && "$a" == "$b" ]] || fail "srun -n $n differs from the launcher"
  job=$((job + 1))
done
echo "PASS: srun -n 2 and -n 3 find their ranks in Slurm's variables and train as the launcher does"
