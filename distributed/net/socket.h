// Socket: an owning TCP socket whose every blocking call is bounded by a deadline. Used by the
// TCPStore client and server and by the launcher (to pick a free port). Errors are lockstep::Error
// naming the operation and the address; a deadline that passes raises TimeoutError (common/deadline.h) so
// callers can say what they were waiting for.
#pragma once

#include <signal.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "common/check.h"
#include "common/deadline.h"

namespace lockstep::dist {

// "HOST:PORT", bracketing IPv6 literals.
std::string format_address(const std::string& host, uint16_t port);
// The local address the kernel would send from to reach `host` (a UDP connect sends nothing): where
// gloo should listen so that peers routing to `host` reach it. "" when `host` does not resolve or has
// no route.
std::string local_address_towards(const std::string& host);

// "HOST:PORT" or "[IPV6]:PORT" into the host (brackets removed) and the port; throws naming `what` and
// the text unless the port is a number in 1..65535.
std::pair<std::string, uint16_t> split_host_port(const std::string& address, const std::string& what);
// Milliseconds left until `deadline` for poll(), clamped to [0, 2^30].
int remaining_ms(Deadline deadline);

// Blocks SIGPIPE in the calling thread for a scope, and in the threads it starts meanwhile: a write to a
// peer that died then fails with EPIPE instead of killing the process (for sockets written by code that
// does not pass MSG_NOSIGNAL, such as gloo's). `on` false: does nothing.
class BlockSigpipe {
 public:
  explicit BlockSigpipe(bool on = true);
  ~BlockSigpipe();
  BlockSigpipe(const BlockSigpipe&) = delete;
  BlockSigpipe& operator=(const BlockSigpipe&) = delete;

 private:
  const bool on_;
  sigset_t previous_;
};

// What Socket::listen throws when the port is taken (EADDRINUSE), so callers can pick another port.
class AddressInUseError : public Error {
 public:
  using Error::Error;
};

// Move-only owner of a socket file descriptor. Sockets are created non-blocking and close-on-exec; all
// I/O goes through poll() first, and send uses MSG_NOSIGNAL so a vanished peer is an error, not SIGPIPE.
class Socket {
 public:
  Socket() = default;
  Socket(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  Socket(Socket&& other) noexcept { *this = std::move(other); }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  // Binds host:port (port 0: the kernel picks a free one) on that address only, and listens.
  // Throws "cannot listen on HOST:PORT: <reason>" (AddressInUseError when the port is taken).
  static Socket listen(const std::string& host, uint16_t port);
  // Binds host:port with SO_REUSEADDR and does not listen: a reservation. While it is held, other
  // sockets cannot bind the port (and the kernel does not hand it out as an ephemeral port), except a
  // listener that also sets SO_REUSEADDR, as listen() above does: so a launcher can hold a port until
  // the rank it passes the port to listens on it. Throws "cannot reserve a port on HOST:PORT: ...".
  static Socket reserve(const std::string& host, uint16_t port = 0);
  // One connection attempt bounded by `deadline`. Throws "connect to HOST:PORT: <reason>".
  static Socket connect(const std::string& host, uint16_t port, Deadline deadline);

  // Accepts one pending connection; an invalid Socket when none is pending.
  Socket accept() const;

  void send_all(const void* data, size_t size, Deadline deadline) const;
  void recv_all(void* data, size_t size, Deadline deadline) const;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // The peer's (or, for a listener, the bound) address, for messages.
  const std::string& peer() const { return peer_; }
  uint16_t local_port() const;
  // The address this socket is bound to, numeric: "127.0.0.1:29500", "[::1]:29500".
  std::string local_address() const;
  void close();

 private:
  static Socket bind_to(const std::string& host, uint16_t port, bool listen, const char* op);
  // Waits for `events` until `deadline`; throws TimeoutError naming `op` when it passes.
  void poll_until(short events, Deadline deadline, const char* op) const;

  int fd_ = -1;
  std::string peer_;
};

}  // namespace lockstep::dist
