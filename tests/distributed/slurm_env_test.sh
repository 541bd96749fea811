#!/usr/bin/env bash
# env:// under a real Slurm: the test starts a private cluster (munged, slurmctld and one slurmd per
# node, all configured under a temporary directory, stopped on exit) and runs linear_demo with
# `srun -n 2` and `srun -n 3` on this host's node, then with 2 tasks on each of two nodes: this host and
# "localhost", a second slurmd on the same machine. Every rank must say it took rank, world size and
# local rank from SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID, the master from SLURM_STEP_NODELIST and
# the port from SLURM_JOB_ID, and each job must train to the same weights as under lockstep's launcher.
set -euo pipefail
launch="$1" demo="$2"
export PATH="$PATH:/usr/sbin:/sbin"  # the daemons live in sbin, which a test's PATH may lack
for tool in munged mungekey slurmctld slurmd srun sinfo squeue scancel scontrol; do
  command -v "$tool" >/dev/null || {
    echo "SKIPPED: $tool is not installed (Debian's munge, slurmctld, slurmd and slurm-client)"
    exit 0
  }
done
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: a private Slurm runs its daemons as root, and this is uid $(id -u)"; exit 0; }
host=$(hostname -s)
# The ranks meet at the first host of SLURM_STEP_NODELIST, i.e. a node's name, so it must resolve.
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
    local end=$((SECONDS + 10))
    while ((SECONDS < end)) && [ -n "$(timeout 5 squeue -h 2>/dev/null)" ]; do sleep 0.2; done
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
  busy=$(for k in 0 1 2; do ss -Htln "sport = :$((20000 + (first_job + k) % 10000))"; done)
  [ -z "$busy" ] && break
done
# The second node is another slurmd on this machine (its own port, spool, pid and log through %n),
# named localhost so that the master resolves whichever node comes first. Not when this host is
# called localhost itself.
nodes=("$host")
[ "$host" != localhost ] && nodes+=(localhost)
# Nodes with this machine's CPUs; no cgroups (linuxproc tracks the tasks, task/none binds nothing), no
# accounting; a shared partition so that a 3-task step fits on 2 cores with srun --overcommit.
{
  echo "ClusterName=lockstep"
  echo "SlurmctldHost=$host(127.0.0.1)"
  echo "SlurmctldPort=$(free_port)"
  echo "SlurmdPort=$(free_port)"
  echo "SlurmUser=root"
  echo "SlurmdUser=root"
  echo "AuthType=auth/munge"
  echo "CredType=cred/munge"
  echo "AuthInfo=socket=$run/munge.socket"
  echo "StateSaveLocation=$dir/state"
  echo "SlurmdSpoolDir=$run/spool/%n"
  echo "SlurmctldPidFile=$run/slurmctld.pid"
  echo "SlurmdPidFile=$run/slurmd-%n.pid"
  echo "SlurmctldLogFile=$dir/log/slurmctld.log"
  echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "AccountingStorageType=accounting_storage/none"
  echo "MpiDefault=none"
  echo "SwitchType=switch/none"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_CPU"
  echo "ReturnToService=2"
  echo "MailProg=/bin/true"  # slurmctld logs an error when its default, /bin/mail, is missing
  echo "FirstJobId=$first_job"
  for node in "${nodes[@]}"; do
    echo "NodeName=$node NodeAddr=127.0.0.1 Port=$(free_port) CPUs=$(nproc) State=UNKNOWN"
  done
  echo "PartitionName=test Nodes=$(IFS=,; echo "${nodes[*]}") Default=YES MaxTime=10 State=UP OverSubscribe=FORCE"
} > "$dir/slurm.conf"
export SLURM_CONF="$dir/slurm.conf"
end=$((SECONDS + 30))
while ((SECONDS < end)) && [ ! -S "$run/munge.socket" ]; do sleep 0.1; done
[ -S "$run/munge.socket" ] || fail "munged did not create its socket"
slurmctld -D -i -f "$SLURM_CONF" > "$dir/slurmctld.out" 2>&1 &
pids+=($!)
for node in "${nodes[@]}"; do
  mkdir -p "$run/spool/$node"
  slurmd -D -N "$node" -f "$SLURM_CONF" > "$dir/slurmd-$node.out" 2>&1 &
  pids+=($!)
done
# Hang guard, not a timing check: wait (up to 60 s) for every node to be ready.
idle() { [ "$(timeout 5 sinfo -h -t idle -o %D 2>/dev/null)" = "${#nodes[@]}" ]; }
end=$((SECONDS + 60))
while ((SECONDS < end)) && ! idle; do sleep 0.2; done
idle || fail "the Slurm nodes did not come up"
timeout 5 sinfo

# srun_case NAME RANKS MASTER TASKS_PER_NODE SRUN_ARGS...: the job under srun and under the launcher.
job=$first_job
srun_case() {
  local name=$1 n=$2 master=$3 per_node=$4
  shift 4
  local port=$((20000 + job % 10000))
  "$launch" --nproc_per_node=$n "$demo" --timeout 60 > "$dir/launch-$name.log"
  LOCKSTEP_DISTRIBUTED_DEBUG=INFO timeout 300 srun --overcommit --time=5 "$@" "$demo" --timeout 60 \
    > "$dir/srun-$name.log" 2> "$dir/srun-$name.err" || {
    local rc=$?
    cat "$dir/srun-$name.log" "$dir/srun-$name.err"
    fail "srun $* exited with $rc"
  }
  cat "$dir/srun-$name.err"
  for ((r = 0; r < n; r++)); do
    grep -qF "rank $r from SLURM_PROCID, world_size $n from SLURM_NTASKS, local_rank $((r % per_node)) from SLURM_LOCALID, master_addr $master from SLURM_STEP_NODELIST, master_port $port from SLURM_JOB_ID (20000 + id % 10000)" "$dir/srun-$name.err" \
      || fail "rank $r of srun $* (job $job) did not report what it found in Slurm's variables"
  done
  local a b
  a=$(grep "parameters identical" "$dir/launch-$name.log")
  b=$(grep "parameters identical" "$dir/srun-$name.log")
  echo "launch: $a"
  echo "srun:   $b"
  [[ "$a" == *"identical on all $n ranks: yes"* && "$a" == "$b" ]] || fail "srun $* differs from the launcher"
  job=$((job + 1))
}

srun_case n2 2 "$host" 2 --nodes=1 --nodelist="$host" --ntasks=2
srun_case n3 3 "$host" 3 --nodes=1 --nodelist="$host" --ntasks=3
# With a job token in the environment srun passes on to every task (as a batch script would export
# it): the store, the mesh and the shared memory check it, and the job trains as without one.
LOCKSTEP_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n') \
  srun_case n2_token 2 "$host" 2 --nodes=1 --nodelist="$host" --ntasks=2
[ "$(grep -c '^init_process_group: job token from LOCKSTEP_JOB_TOKEN$' "$dir/srun-n2_token.err")" = 2 ] \
  || fail "the ranks of srun with LOCKSTEP_JOB_TOKEN did not report the token"
if ((${#nodes[@]} == 2)); then
  # A step's node list is compressed and sorted by Slurm; the master is its first host (scontrol
  # expands the list independently of lockstep's parser).
  first=$(scontrol show hostnames "$(timeout 5 sinfo -h -o %N)" | sed -n 1p)
  # Block distribution: ranks 0-1 on the first node, 2-3 on the second, so local_rank = rank % 2.
  srun_case 2x2 4 "$first" 2 --nodes=2 --ntasks-per-node=2 --distribution=block
  echo "PASS: srun -n 2, -n 3 (one node) and 2 nodes x 2 tasks find their ranks in Slurm's variables and train as the launcher does"
else
  echo "PASS: srun -n 2 and -n 3 find their ranks in Slurm's variables and train as the launcher does (one node: this host is called localhost)"
fi
