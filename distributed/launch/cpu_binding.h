// Which CPUs each local rank runs on: launch's --cpu-bind auto (distributed/launch/launch.cpp).
#pragma once

#include <sched.h>

#include <vector>

namespace lockstep::dist {

// A CPU and the physical core it belongs to (package and core id; -1 where sysfs does not say).
struct CpuPlace {
  int cpu;
  int package = -1;
  int core = -1;
};

// The CPUs this process may run on (sched_getaffinity), each with its place from
// /sys/devices/system/cpu/cpuN/topology.
std::vector<CpuPlace> allowed_cpus();

// n blocks of CPUs, block i for local rank i: the CPUs in the order of their package and core (a
// core's hardware threads are numbered far apart, as 0 and 32, but land in one block), cut into n
// contiguous runs of equal size (the first ones one smaller when n does not divide the count). So
// ranks share no core while there are at least as many cores as ranks and they divide evenly. No
// blocks (ranks run unbound) when there are more ranks than CPUs.
std::vector<std::vector<int>> split_cpus(std::vector<CpuPlace> cpus, int n);

// Runs the calling thread on `cpus` until destroyed, then on what it had before: a process it spawns
// meanwhile starts with that mask (the launcher binds each rank so). No CPUs: nothing changes. A CPU
// this thread may not use, or no such CPU, throws an Error naming it.
class ScopedAffinity {
 public:
  explicit ScopedAffinity(const std::vector<int>& cpus);
  ScopedAffinity(const ScopedAffinity&) = delete;
  ScopedAffinity& operator=(const ScopedAffinity&) = delete;
  ~ScopedAffinity();

 private:
  cpu_set_t saved_;
  bool active_ = false;
};

}  // namespace lockstep::dist
