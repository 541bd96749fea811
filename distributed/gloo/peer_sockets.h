// PeerSockets: which of this process's TCP sockets connects to which rank, so that a collective's
// error can name the ranks whose connection broke ("lost connection to rank 1"). Linux: a socket is
// known by its inode (/proc/self/fd) and its state read from the kernel's table (/proc/net/tcp, tcp6);
// gloo's descriptors are never touched, since gloo's own threads may close them at any time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distributed/store/store.h"

namespace lockstep::dist {

class PeerSockets {
 public:
  // A connected TCP socket of this process, known by its inode (0 when unknown).
  struct Socket {
    uint64_t inode = 0;
    std::string local, peer;  // "127.0.0.1:45959"
  };
  // This process's connected TCP sockets now.
  static std::vector<Socket> snapshot();

  // Collective over `store`: finds this rank's socket to every other rank among those created since
  // `before` (a snapshot taken before connecting).
  void identify(Store& store, int rank, int size, const std::vector<Socket>& before);
  // The ranks whose connection to this rank is closed or no longer established; empty when unknown.
  std::vector<int> lost() const;

 private:
  std::vector<Socket> peers_;  // [r]: this rank's connection to rank r
};

}  // namespace lockstep::dist
