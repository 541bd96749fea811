// Which ranks share a host, found through the store at rendezvous, never assumed from addresses.
//
// Two ranks share a host for lockstep when they can share memory and see each other's processes: the
// same booted kernel (/proc/sys/kernel/random/boot_id), the same /dev/shm (its device and inode), and
// the same network and PID namespaces. Ranks in different network namespaces on one machine (the
// two-node test's simulated hosts, or containers) count as different hosts and talk over TCP.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "distributed/store/store.h"

namespace lockstep::dist::shm {

// This process's host identity, as above; "" when it cannot be read (then the rank shares with none).
std::string host_identity();

struct HostLayout {
  // False when any rank took part with shared memory off: then the layout is empty.
  bool enabled = false;
  // host_of[r]: the host index of rank r; hosts are numbered in the order of their lowest rank.
  std::vector<int> host_of;
  // ranks_on[h]: the ranks of host h, ascending; ranks_on[h][0] is the host's leader.
  std::vector<std::vector<int>> ranks_on;
};

// Collective: every rank publishes its identity ("off" when `enabled` is false) under "host/<rank>" in
// `store` (a prefix of this group alone) and reads the others' within `timeout`.
HostLayout exchange_host_layout(Store& store, int rank, int size, std::chrono::milliseconds timeout, bool enabled);

}  // namespace lockstep::dist::shm
