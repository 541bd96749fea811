// Host identity and the ranks-per-host layout.
#include "distributed/shm/host.h"

#include <sys/stat.h>

#include <fstream>
#include <map>

#include "common/check.h"

namespace lockstep::dist::shm {

namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "dev:inode" of a path, "" when it cannot be read.
std::string file_id(const char* path) {
  struct stat st {};
  if (::stat(path, &st) != 0) return "";
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

}  // namespace

std::string host_identity() {
  const std::string boot = first_line("/proc/sys/kernel/random/boot_id");
  const std::string shm = file_id("/dev/shm");
  const std::string net = file_id("/proc/self/ns/net");
  const std::string pid = file_id("/proc/self/ns/pid");
  if (boot.empty() || shm.empty() || net.empty() || pid.empty()) return "";
  return "boot " + boot + " shm " + shm + " net " + net + " pid " + pid;
}

HostLayout exchange_host_layout(Store& store, int rank, int size, std::chrono::milliseconds timeout, bool enabled) {
  std::string mine = enabled ? host_identity() : "off";
  // A rank that cannot tell its host is a host of its own.
  if (mine.empty()) mine = "unknown, rank " + std::to_string(rank);
  store.set("host/" + std::to_string(rank), mine);
  HostLayout layout;
  layout.host_of.resize(size);
  std::map<std::string, int> index;
  for (int r = 0; r < size; ++r) {
    const std::string key = "host/" + std::to_string(r);
    store.wait({key}, timeout);
    const std::string id = store.get_string(key);
    if (id == "off") return HostLayout{};
    auto [it, added] = index.emplace(id, static_cast<int>(layout.ranks_on.size()));
    if (added) layout.ranks_on.emplace_back();
    layout.host_of[r] = it->second;
    layout.ranks_on[it->second].push_back(r);
  }
  layout.enabled = true;
  return layout;
}

}  // namespace lockstep::dist::shm
