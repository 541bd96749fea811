// TCPStoreServer: the master side of TCPStore. One thread multiplexes every client with poll() and
// owns the key-value map, so requests need no locking. A blocking get/wait is parked on the server
// until its keys appear (clients never busy-poll); the client enforces its own timeout and drops the
// connection when it gives up, which unparks the request. Internal to TCPStore (tcp_store.h).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "distributed/socket.h"
#include "distributed/tcp_store_protocol.h"

namespace lockstep::dist::detail {

class TCPStoreServer {
 public:
  // Listens on host:port (0: a free port) and starts serving. Throws "cannot listen on HOST:PORT: ...".
  TCPStoreServer(const std::string& host, uint16_t port);
  // Stops the thread and closes every socket; parked clients see their connection close.
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  uint16_t port() const { return port_; }

 private:
  // A get/wait parked until all of `keys` exist.
  struct Parked {
    Command command;
    std::vector<std::string> keys;
  };
  struct Connection {
    Socket socket;
    std::vector<uint8_t> in;   // bytes received, not yet parsed (bounded: one frame plus a read)
    std::vector<uint8_t> out;  // responses not yet sent; out_sent of them already went out
    size_t out_sent = 0;
    std::optional<Parked> parked;  // while set, later requests wait their turn in `in`
    size_t pending_out() const { return out.size() - out_sent; }
  };

  void run();
  void accept_all();
  bool read_from(Connection& c);
  bool flush(Connection& c);
  bool process_input(uint64_t id, Connection& c);
  void handle(uint64_t id, Connection& c, FrameReader& r);
  void park(uint64_t id, Connection& c, Command command, std::vector<std::string> keys);
  void key_written(const std::string& key);
  void resume_woken();
  void close_connection(uint64_t id);
  bool has_all(const std::vector<std::string>& keys) const;

  Socket listener_;
  uint16_t port_ = 0;
  int wake_fd_ = -1;  // eventfd written by the destructor to stop run()
  bool accept_paused_ = false;  // out of file descriptors: stop polling the listener until one closes

  std::unordered_map<std::string, std::vector<uint8_t>> data_;
  uint64_t next_id_ = 0;
  std::unordered_map<uint64_t, Connection> connections_;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_;  // key -> parked connection ids
  std::deque<uint64_t> woken_;  // parked connections whose keys may all exist now

  std::thread thread_;  // last: starts after everything above is initialized
};

}  // namespace lockstep::dist::detail
