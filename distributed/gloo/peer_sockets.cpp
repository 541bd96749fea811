// PeerSockets: which TCP socket of this process goes to which rank, read from /proc, never through
// gloo's descriptors.
#include "distributed/gloo/peer_sockets.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "common/check.h"

namespace lockstep::dist {

namespace {

// "127.0.0.1:45959", "[::1]:45959"; "" for other families.
std::string format_address(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (!::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf))) return "";
    return lockstep::detail::str_cat(buf, ":", ntohs(a->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (!::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf))) return "";
    return lockstep::detail::str_cat("[", buf, "]:", ntohs(a->sin6_port));
  }
  return "";
}


// A socket as the kernel's TCP table shows it.
struct KernelTcpSocket {
  int state = 0;  // TCP_ESTABLISHED, TCP_CLOSE_WAIT, ... (netinet/tcp.h)
  std::string local, peer;
};

// "0100007F:B38F" (/proc/net/tcp: the address's bytes as the kernel stores them, printed as 32-bit
// words; the port in host order) to "127.0.0.1:45967"; "" when malformed.
std::string proc_net_address(const std::string& field, bool v6) {
  const size_t colon = field.find(':');
  const size_t hex_digits = v6 ? 32 : 8;
  if (colon != hex_digits || field.size() < colon + 2) return "";
  uint32_t words[4] = {};
  for (size_t w = 0; w < hex_digits / 8; ++w) {
    words[w] = static_cast<uint32_t>(std::stoul(field.substr(w * 8, 8), nullptr, 16));
  }
  const auto port = static_cast<uint16_t>(std::stoul(field.substr(colon + 1), nullptr, 16));
  sockaddr_storage ss{};
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    std::memcpy(&a->sin6_addr, words, sizeof(a->sin6_addr));
    a->sin6_port = htons(port);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    std::memcpy(&a->sin_addr, words, sizeof(a->sin_addr));
    a->sin_port = htons(port);
  }
  return format_address(ss);
}

// This network namespace's TCP sockets that belong to a process, by inode (/proc/net/tcp and tcp6);
// nullopt when the table cannot be read. Reading it touches no file descriptor, so it cannot race
// with gloo's threads closing theirs (nor inspect a descriptor number that was closed and reused).
std::optional<std::unordered_map<uint64_t, KernelTcpSocket>> kernel_tcp_table() {
  std::unordered_map<uint64_t, KernelTcpSocket> table;
  bool read_any = false;
  for (bool v6 : {false, true}) {
    std::ifstream in(v6 ? "/proc/net/tcp6" : "/proc/net/tcp");
    if (!in) continue;
    read_any = true;
    std::string line;
    std::getline(in, line);  // the column titles
    while (std::getline(in, line)) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
      std::istringstream fields(line);
      std::string slot, local, peer, state, queues, timer, retransmits, uid, timeout;
      uint64_t inode = 0;
      if (!(fields >> slot >> local >> peer >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode)) {
        continue;
      }
      if (inode == 0) continue;  // orphaned: closed by its process, still winding down
      try {
        KernelTcpSocket s{static_cast<int>(std::stoul(state, nullptr, 16)), proc_net_address(local, v6),
                          proc_net_address(peer, v6)};
        if (!s.local.empty() && !s.peer.empty()) table[inode] = std::move(s);
      } catch (const std::exception&) {
        // a line in a format this code does not know: skipped
      }
    }
  }
  if (!read_any) return std::nullopt;
  return table;
}

}  // namespace

// This process's connected TCP sockets: the socket inodes its descriptors name (readlink of
// /proc/self/fd/N, "socket:[INODE]", which does not touch the descriptor itself), looked up in the
// kernel's TCP table.
std::vector<PeerSockets::Socket> PeerSockets::snapshot() {
  std::vector<Socket> out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return out;
  std::vector<uint64_t> inodes;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char target[64] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
    unsigned long long inode = 0;
    if (n > 0 && std::sscanf(target, "socket:[%llu]", &inode) == 1) inodes.push_back(inode);
  }
  ::closedir(dir);
  const auto table = kernel_tcp_table();
  if (!table) return out;
  for (uint64_t inode : inodes) {
    auto it = table->find(inode);
    if (it == table->end() || it->second.state == TCP_LISTEN) continue;  // not TCP, or not connected
    out.push_back({inode, it->second.local, it->second.peer});
  }
  return out;
}

void PeerSockets::identify(Store& store, int rank, int size, const std::vector<Socket>& before) {
  // gloo's connections are the sockets that connecting created. Rank r's end of this rank's
  // connection to it has this end's addresses swapped: each rank publishes its new sockets and looks
  // for its own among the others' lists. A socket that matches no rank, or a rank matched twice,
  // stays unknown (inode 0): errors then quote gloo alone.
  std::vector<Socket> mine;
  for (const Socket& s : snapshot()) {
    bool old = std::any_of(before.begin(), before.end(), [&](const Socket& b) { return b.inode == s.inode; });
    if (!old) mine.push_back(s);
  }
  std::string list;
  for (const Socket& s : mine) list += s.local + " " + s.peer + "\n";
  store.set("sockets/" + std::to_string(rank), list);
  peers_.assign(size, Socket{});
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    // Appended rather than "\n" + get_string(...): GCC 12 warns (-Wrestrict) on that form of operator+.
    std::string theirs = "\n";
    theirs += store.get_string("sockets/" + std::to_string(r));
    int matches = 0;
    for (const Socket& s : mine) {
      if (theirs.find("\n" + s.peer + " " + s.local + "\n") != std::string::npos) {
        ++matches;
        peers_[r] = s;
      }
    }
    if (matches != 1) peers_[r] = Socket{};
  }
}

std::vector<int> PeerSockets::lost() const {
  // By inode in the kernel's table, never through gloo's descriptors: gloo's event loop closes a
  // pair's descriptor as soon as its connection fails, on its own thread. A socket gloo closed is
  // orphaned (inode 0 in the table) or gone, so it is lost too.
  std::vector<int> lost;
  const auto table = kernel_tcp_table();
  if (!table) return lost;  // cannot tell: the error quotes gloo alone
  for (size_t r = 0; r < peers_.size(); ++r) {
    const Socket& s = peers_[r];
    if (s.inode == 0) continue;
    auto it = table->find(s.inode);
    if (it == table->end() || it->second.state != TCP_ESTABLISHED) lost.push_back(static_cast<int>(r));
  }
  return lost;
}


}  // namespace lockstep::dist
