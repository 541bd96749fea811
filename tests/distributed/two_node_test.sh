#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair, each running the launcher
# with --nnodes 2 and its own --node_rank, rendezvousing over the veth link (not loopback). Runs the
# documented linear DDP demo across them and checks that both replicas end identical; then 2 hosts x 2
# ranks, where each host's ranks share memory and the hosts' leaders talk TCP ("shm+tcp": ranks in
# different network namespaces count as different hosts): the demo again (4 replicas identical) and
# allreduce_bench, whose results are checked exactly.
# Skips (and says so) where network namespaces cannot be created (needs root / CAP_NET_ADMIN).
set -uo pipefail
launch="$1" demo="$2" bench="$3"
id="ls$$"
ns0="${id}a" ns1="${id}b" addr0="10.231.$(($$ % 250)).1" addr1="10.231.$(($$ % 250)).2"

cleanup() { ip netns del "$ns0" 2>/dev/null; ip netns del "$ns1" 2>/dev/null; }
trap cleanup EXIT
if ! ip netns add "$ns0" 2>/dev/null || ! ip netns add "$ns1" 2>/dev/null; then
  echo "SKIPPED: cannot create network namespaces here (needs root and iproute2)"
  exit 0
fi
set -e
ip link add "${id}0" type veth peer name "${id}1"
ip link set "${id}0" netns "$ns0"
ip link set "${id}1" netns "$ns1"
ip -n "$ns0" addr add "$addr0/24" dev "${id}0"
ip -n "$ns1" addr add "$addr1/24" dev "${id}1"
for ns in "$ns0" "$ns1"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns0" link set "${id}0" up
ip -n "$ns1" link set "${id}1" up
set +e

dir="${TEST_TMPDIR:-$(mktemp -d)}"
common=(--nnodes 2 --nproc_per_node 1 --master_addr "$addr0" --master_port 29611)
ip netns exec "$ns0" "$launch" "${common[@]}" --node_rank 0 "$demo" --backend gloo --timeout 30 > "$dir/node0.log" 2>&1 &
pid0=$!
ip netns exec "$ns1" "$launch" "${common[@]}" --node_rank 1 "$demo" --backend gloo --timeout 30 > "$dir/node1.log" 2>&1 &
pid1=$!
wait "$pid0"; s0=$?
wait "$pid1"; s1=$?
echo "--- node 0 (exit $s0)"; cat "$dir/node0.log"
echo "--- node 1 (exit $s1)"; cat "$dir/node1.log"
[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ] || { echo "FAIL: a node failed"; exit 1; }
grep -q "lockstep: 2 rank(s), backend gloo" "$dir/node0.log" || { echo "FAIL: rank 0 did not see 2 ranks"; exit 1; }
grep -q "parameters identical on all 2 ranks: yes" "$dir/node0.log" || { echo "FAIL: replicas differ"; exit 1; }
[ "$(grep -c '^Outside: input size' "$dir/node1.log")" -eq 2 ] || { echo "FAIL: node 1 did not train 2 batches"; exit 1; }
echo "PASS: two nodes over a veth link trained in lockstep"

# Two ranks per node: a job of its own (port 29612), run on both nodes at once; $1 names it.
run_both() {
  local name="$1"; shift
  ip netns exec "$ns0" "$launch" --nnodes 2 --nproc_per_node 2 --master_addr "$addr0" --master_port 29612 \
    --node_rank 0 "$@" > "$dir/$name.node0.log" 2>&1 &
  local p0=$!
  ip netns exec "$ns1" "$launch" --nnodes 2 --nproc_per_node 2 --master_addr "$addr0" --master_port 29612 \
    --node_rank 1 "$@" > "$dir/$name.node1.log" 2>&1 &
  local p1=$!
  wait "$p0"; local r0=$?
  wait "$p1"; local r1=$?
  echo "--- $name, node 0 (exit $r0)"; cat "$dir/$name.node0.log"
  echo "--- $name, node 1 (exit $r1)"; cat "$dir/$name.node1.log"
  [ "$r0" -eq 0 ] && [ "$r1" -eq 0 ] || { echo "FAIL: $name: a node failed"; exit 1; }
}
run_both demo4 "$demo" --backend gloo --timeout 30
grep -q "lockstep: 4 rank(s), backend gloo" "$dir/demo4.node0.log" || { echo "FAIL: rank 0 did not see 4 ranks"; exit 1; }
grep -q "parameters identical on all 4 ranks: yes" "$dir/demo4.node0.log" || { echo "FAIL: 4 replicas differ"; exit 1; }
run_both bench4 "$bench" -b 4 -e 4M -f 16 -n 3 -w 1
grep -q "lockstep-gloo/shm+tcp, 4 rank(s)" "$dir/bench4.node0.log" || { echo "FAIL: not shm within hosts, tcp between"; exit 1; }
grep -q "Out of bounds values : 0 OK" "$dir/bench4.node0.log" || { echo "FAIL: wrong all-reduce results"; exit 1; }
echo "PASS: 2 hosts x 2 ranks, shared memory within each host and TCP between"
