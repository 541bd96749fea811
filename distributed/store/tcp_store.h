// TCPStore: a Store served over TCP by one master process (c10d's TCPStore). The master runs the
// server (tcp_store_server.h) on a background thread and talks to it through a client connection
// like every other rank, so all ranks use the same code path.
//
//   TCPStore master("127.0.0.1", 0, /*is_master=*/true);        // port 0: any free port
//   TCPStore worker("127.0.0.1", master.port(), /*is_master=*/false);
//   worker.set("addr/1", "10.0.0.2:4000");  master.get_string("addr/1");
//
// Each TCPStore holds one connection; its methods are thread-safe but serialized (a blocking get on
// one thread delays other calls on the same TCPStore; give each thread its own TCPStore to avoid that).
// When a call times out the connection is dropped and reopened by the next call, so a late reply can
// never be mistaken for the answer to a later request.
//
// With a job token (job_token.h; init_process_group passes LOCKSTEP_JOB_TOKEN's), the server serves
// only clients that prove it, and each client checks that the server proves it too; a refusal is a
// JobTokenError at once, never retried. Without one, nothing is checked (PyTorch's TCPStore).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "distributed/net/job_token.h"
#include "distributed/net/socket.h"
#include "distributed/store/store.h"

namespace lockstep::dist {

namespace detail {
class TCPStoreServer;
struct Request;
}  // namespace detail

class TCPStore : public Store {
 public:
  // is_master: start the server on host:port (bound to that address only; AddressInUseError when the
  // port is taken). Every rank then connects
  // to host:port, retrying with exponential backoff until `timeout`. With `world_size` and
  // `wait_for_workers`, the master's constructor returns only once world_size stores (itself included)
  // have connected.
  TCPStore(std::string host, uint16_t port, bool is_master, std::chrono::milliseconds timeout = kDefaultTimeout,
           std::optional<int> world_size = std::nullopt, bool wait_for_workers = true, JobToken token = {});
  ~TCPStore() override;

  using Store::compare_set;
  using Store::set;
  using Store::wait;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::vector<uint8_t> compare_set(const std::string& key, const std::vector<uint8_t>& expected,
                                   const std::vector<uint8_t>& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  const std::string& host() const { return host_; }
  // The master's port (the one the kernel chose when constructed with port 0).
  uint16_t port() const { return port_; }
  bool is_master() const { return server_ != nullptr; }

 private:
  // Sends one request and returns the reply body after its status byte. `what` names the call in
  // errors, e.g. get("key"); `waiting_for` says what a timeout means, e.g. "key not set".
  std::vector<uint8_t> request(const std::string& what, const char* waiting_for, const detail::Request& q,
                               std::chrono::milliseconds timeout);
  void connect_locked(Deadline deadline, std::chrono::milliseconds timeout);
  void handshake_locked(Deadline deadline);
  void prove_token_locked(Deadline deadline);
  std::vector<uint8_t> recv_frame_locked(Deadline deadline);
  void await_workers(int world_size);

  std::string host_;
  uint16_t port_;
  JobToken token_;
  std::unique_ptr<detail::TCPStoreServer> server_;  // master only; declared first so it closes last
  std::mutex mu_;                                   // one request/reply at a time on socket_
  Socket socket_;
};

}  // namespace lockstep::dist
