// TCPStoreServer: the master side of TCPStore. One thread multiplexes every client with poll() and
// owns the key-value map, so requests need no locking. A blocking get/wait is parked on the server
// until its keys appear (clients never busy-poll); the client enforces its own timeout and drops the
// connection when it gives up, which unparks the request. Internal to TCPStore (tcp_store.h).
//
// Hostile or broken clients cost the server bounded resources and never block the others:
//   - a malformed frame (see parse_request in tcp_store_protocol.h) closes that connection only;
//   - a client that stops in the middle of a frame is disconnected after stalled_frame_timeout;
//   - at most max_connections are open; at the limit the oldest connection that has not sent a byte
//     since it connected is closed to make room (TCPStore clients send a handshake as they connect,
//     and retry if closed before it), and when every connection has spoken, new ones wait in the
//     listen backlog until one closes;
//   - input is read freely up to kSmallRequestBytes a connection (every rendezvous request is
//     smaller), so small requests are always served; a frame larger than that is read only once its
//     whole size is admitted against max_buffered_bytes, shared by all connections (one frame at a
//     time is admitted even when it alone exceeds the budget). A connection waiting for admission is
//     not read (TCP holds its sender back), and is not counted as stalled while it has bytes waiting;
//     an admitted frame is read to its end, so admitted frames always complete and free the budget;
//   - a connection stops being read while kMaxMessageBytes of its replies are unsent.
// So input memory stays under max_buffered_bytes + about 2 * kSmallRequestBytes per connection.
//   - with a job token, a connection is served only once it has proven the token (the handshake in
//     tcp_store_protocol.h); until then a frame over kMaxHandshakeFrame, any other request or a wrong
//     proof is answered kRefusedJobToken and closed, logged and counted in refused_peers, and at
//     max_connections a connection that has not proven it is evicted as a silent one would be.
// Log lines about dropped clients go to stderr, at most 10 a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "distributed/net/job_token.h"
#include "distributed/net/socket.h"
#include "distributed/store/tcp_store_protocol.h"

namespace lockstep::dist::detail {

struct TCPStoreServerOptions {
  // Connections open at once; 0: half the process's open-file limit (RLIMIT_NOFILE), at least 64, so
  // a flood of connections leaves the process (gloo, files) the other half.
  size_t max_connections = 0;
  // A client that has sent part of a frame and then nothing for this long is disconnected.
  std::chrono::milliseconds stalled_frame_timeout{30'000};
  // Bytes of frames over kSmallRequestBytes buffered at once, over all connections.
  size_t max_buffered_bytes = size_t{256} << 20;
  // Serve only peers that prove this token; none: every peer is served (as PyTorch's TCPStore).
  JobToken token{};
};

// What the server did with frames over kSmallRequestBytes, for tests: they assert on these, not on how
// fast the kernel drained a client's socket.
struct TCPStoreServerStats {
  size_t frames_admitted = 0;        // big frames admitted so far
  size_t frames_waiting = 0;         // connections now holding back a big frame for want of budget
  size_t most_admitted_at_once = 0;  // the most big frames admitted at the same time
  size_t refused_peers = 0;          // connections closed for not proving the job token
};

class TCPStoreServer {
 public:
  static constexpr size_t kSmallRequestBytes = 64 << 10;

  // Listens on host:port (0: a free port) and starts serving. Throws "cannot listen on HOST:PORT: ..."
  // (AddressInUseError when the port is taken).
  TCPStoreServer(const std::string& host, uint16_t port, TCPStoreServerOptions options = {});
  // Stops the thread and closes every socket; parked clients see their connection close.
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  uint16_t port() const { return port_; }
  // The address the listener is bound to, numeric ("127.0.0.1:29500").
  std::string bound_address() const { return listener_.local_address(); }
  size_t max_connections() const { return max_connections_; }
  // A snapshot, from any thread.
  TCPStoreServerStats stats() const;

 private:
  // A get/wait parked until all of `keys` exist.
  struct Parked {
    Command command;
    std::vector<std::string> keys;
  };
  struct Connection {
    Socket socket;
    std::vector<uint8_t> in;   // bytes received, not yet parsed
    std::vector<uint8_t> out;  // responses not yet sent; out_sent of them already went out
    size_t out_sent = 0;
    std::optional<Parked> parked;  // while set, later requests wait their turn in `in`
    bool silent = true;            // nothing received since the connection was accepted
    size_t admitted = 0;           // budget held for the frame at the front of `in` (0: none)
    bool waiting = false;          // a big frame at the front of `in` waits for budget
    Clock::time_point last_input;  // last byte received (or last time the client was held back)
    bool authenticated = true;     // false until a peer proves the job token (when there is one)
    std::optional<JobToken::Nonce> server_nonce;  // the handshake's: set by kHello
    std::vector<uint8_t> client_nonce;
    size_t pending_out() const { return out.size() - out_sent; }
  };

  void run();
  void accept_all();
  bool evict_silent();
  bool may_read(Connection& c, Clock::time_point now);
  bool read_from(uint64_t id, Connection& c, size_t max_bytes);
  bool flush(Connection& c);
  bool process_input(uint64_t id, Connection& c);
  void handle(uint64_t id, Connection& c, Request q);
  bool authenticate(Connection& c, const Request& q);
  void refuse(Connection& c, const std::string& why);
  void park(uint64_t id, Connection& c, Command command, std::vector<std::string> keys);
  void key_written(const std::string& key);
  void resume_woken();
  void drop_stalled(Clock::time_point now);
  void close_connection(uint64_t id);
  bool has_all(const std::vector<std::string>& keys) const;
  void set_waiting(Connection& c, bool waiting);
  void log(const std::string& line);
  void log_dropped(const Connection& c, const std::string& why);

  TCPStoreServerOptions options_;
  size_t max_connections_ = 0;
  Socket listener_;
  uint16_t port_ = 0;
  int wake_fd_ = -1;             // eventfd written by the destructor to stop run()
  bool accept_paused_ = false;   // out of file descriptors or at max_connections: retry every 100 ms
  bool at_limit_logged_ = false;
  size_t admitted_total_ = 0;    // sum of the connections' `admitted`
  size_t admitted_frames_ = 0;   // connections with `admitted` > 0

  mutable std::mutex stats_mu_;
  TCPStoreServerStats stats_;  // guarded by stats_mu_; written by the server thread

  std::unordered_map<std::string, std::vector<uint8_t>> data_;
  uint64_t next_id_ = 0;
  std::unordered_map<uint64_t, Connection> connections_;
  std::set<uint64_t> silent_;  // ids of silent (or, with a token, unproven) connections, oldest first
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_;  // key -> parked connection ids
  std::deque<uint64_t> woken_;  // parked connections whose keys may all exist now

  Clock::time_point log_window_;  // log(): the current one-second window, lines in it, lines dropped
  int logged_in_window_ = 0;
  size_t suppressed_ = 0;

  std::thread thread_;  // last: starts after everything above is initialized
};

}  // namespace lockstep::dist::detail
