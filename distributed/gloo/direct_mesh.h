// DirectMesh: one plain TCP connection between every pair of ranks, driven only by the thread that
// runs the collective: ProcessGroupGloo's path for small all-reduces and for barriers.
//
// Why not gloo for these: gloo's TCP transport moves every message through its event-loop thread (the
// receiver's loop thread reads the data, then wakes the waiting thread), announces each send with a
// ready/ready handshake, and its loop thread polls epoll in a busy loop while a collective holds the
// connection's lock. A small all-reduce is all latency, so those hand-offs are its whole cost, and
// with more ranks than cores a spinning loop thread holds a core until the scheduler's tick (4 ms).
// Here the collective's own thread writes to every peer and poll()s its sockets until every peer's
// message has arrived: one hop per message, and a blocked rank takes no CPU.
//
// Every message carries the collective's sequence number and size, so ranks that issue different
// collectives get an error naming both, not mixed data. A peer that dies is named at once (its socket
// closes); a peer that never sends is named when the timeout passes.
//
// With a job token (job_token.h) every connection proves it both ways before it counts: the acceptor
// sends a fresh nonce, the connector's hello carries its rank, its own nonce and HMAC(token, the
// acceptor's nonce, its nonce and rank), and the acceptor answers with its proof on the connector's
// nonce. A peer that cannot prove it is closed and counted (never taken for a rank, so it cannot
// claim one), and the connector of a refused hello fails at once with a JobTokenError.
#pragma once

#include <chrono>
#include <cstddef>
#include <poll.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "distributed/net/job_token.h"
#include "distributed/net/socket.h"
#include "distributed/store/store.h"

namespace lockstep::dist {

// A fault of a peer (lost connection, a mismatched collective, the timeout), with the message
// already naming the rank: the process group reports it as is.
class PeerError : public Error {
 public:
  using Error::Error;
};

class DirectMesh {
 public:
  // Collective: every rank listens on `host`, publishes its port under "direct_mesh/<rank>" in
  // `store` (a prefix of this group alone), connects to the lower ranks and accepts the higher ones.
  // An accepted connection counts once it has said which rank it is; one that stays silent, or whose
  // hello is no rank expected here (a stray client), holds up no other, and the TimeoutError at
  // `timeout` names the ranks that never completed the handshake and such connections. A rank
  // claimed by two connections fails at once. With `token` enabled, only peers that prove it count
  // (see above); the timeout's message also counts the connections refused for the token.
  DirectMesh(Store& store, int rank, int size, const std::string& host, std::chrono::milliseconds timeout,
             const JobToken& token = {});

  int rank() const { return rank_; }
  int size() const { return size_; }

  // One message each way with some peers at once: for each Message, `send_bytes` from `send` go to
  // rank `peer`, and rank `peer`'s message of `recv_bytes` lands at `recv` (either side may be empty,
  // not both, and a peer appears once). `seq` must match the peers' (it is checked along with the
  // sizes). Throws PeerError; the caller names the collective.
  struct Message {
    int peer;
    const void* send = nullptr;
    size_t send_bytes = 0;
    void* recv = nullptr;
    size_t recv_bytes = 0;
    bool sends = true;     // false: nothing is sent to `peer` (not even a header)
    bool receives = true;  // false: nothing is received from `peer`
  };
  void transfer(std::span<const Message> messages, uint64_t seq);

  // Sends `bytes` bytes at `send` to every other rank and receives each other rank's `bytes` bytes:
  // rank r's land at recv + slot(r) * bytes.
  void exchange(const void* send, void* recv, size_t bytes, uint64_t seq);
  // Rank r's place among the others: r, or r - 1 above this rank.
  size_t slot(int r) const { return static_cast<size_t>(r < rank_ ? r : r - 1); }

 private:
  // The constructor's two halves: connect to every lower rank (waiting for its address in `store`),
  // then accept every higher one on `listener`.
  void connect_lower(Store& store, const JobToken& token, Deadline deadline);
  void accept_higher(const Socket& listener, const JobToken& token, Deadline deadline);

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::vector<Socket> peers_;  // [r]; invalid for this rank

  // What precedes every message: checked by the receiver before it takes the payload.
  struct Header {
    uint64_t seq;
    uint64_t bytes;
  };
  // One peer's progress through a transfer.
  struct Progress {
    int rank;
    int fd;
    Header out;
    const char* send;
    size_t send_total;  // header + payload; 0 when nothing is sent
    char* recv;
    size_t recv_total;  // header + payload; 0 when nothing is received
    size_t expected;    // the payload's size
    size_t sent = 0;
    size_t received = 0;
    Header in{};
  };
  // Reused by every transfer: no allocation per collective once they have grown.
  std::vector<Message> messages_;
  std::vector<Progress> progress_;
  std::vector<pollfd> fds_;
  std::vector<uint8_t> seen_;  // [r]: r already has a message in this transfer
};

// The address of a network interface ("eth0"): its IPv4 address, else a global IPv6 one; "" when it
// has neither.
std::string interface_address(const std::string& iface);

}  // namespace lockstep::dist
