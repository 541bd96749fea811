#include "distributed/launch/cpu_binding.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>

#include "common/check.h"

namespace lockstep::dist {

namespace {

int read_topology(int cpu, const char* what) {
  std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/" + what);
  int v = -1;
  return f >> v ? v : -1;
}

}  // namespace

std::vector<CpuPlace> allowed_cpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return {};
  std::vector<CpuPlace> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back({c, read_topology(c, "physical_package_id"), read_topology(c, "core_id")});
  }
  return cpus;
}

std::vector<std::vector<int>> split_cpus(std::vector<CpuPlace> cpus, int n) {
  const size_t ranks = static_cast<size_t>(n), count = cpus.size();
  if (n <= 0 || ranks > count) return {};
  // CPUs whose place is unknown keep their own number as their core, after the known ones.
  auto key = [](const CpuPlace& p) {
    return p.package < 0 || p.core < 0 ? std::tuple{1, 0, p.cpu, p.cpu} : std::tuple{0, p.package, p.core, p.cpu};
  };
  std::sort(cpus.begin(), cpus.end(), [&](const CpuPlace& a, const CpuPlace& b) { return key(a) < key(b); });
  std::vector<std::vector<int>> blocks(ranks);
  for (size_t i = 0; i < ranks; ++i) {
    for (size_t k = i * count / ranks; k < (i + 1) * count / ranks; ++k) blocks[i].push_back(cpus[k].cpu);
  }
  return blocks;
}

ScopedAffinity::ScopedAffinity(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    LOCKSTEP_CHECK(c >= 0 && c < CPU_SETSIZE, "cpu binding: CPU ", c, " is outside [0, ", CPU_SETSIZE, ")");
    CPU_SET(c, &set);
  }
  LOCKSTEP_CHECK(::sched_getaffinity(0, sizeof(saved_), &saved_) == 0, "cpu binding: sched_getaffinity: ",
                 std::strerror(errno));
  LOCKSTEP_CHECK(::sched_setaffinity(0, sizeof(set), &set) == 0, "cpu binding: cannot run on CPUs ", cpus, ": ",
                 std::strerror(errno));
  active_ = true;
}

ScopedAffinity::~ScopedAffinity() {
  if (active_) ::sched_setaffinity(0, sizeof(saved_), &saved_);
}

}  // namespace lockstep::dist
