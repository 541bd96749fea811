// Socket: resolution, listen/connect/accept and deadline-bounded send/recv over BSD sockets.
#include "distributed/net/socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

namespace lockstep::dist {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

using AddrInfoPtr = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

AddrInfoPtr resolve(const std::string& host, uint16_t port, bool passive, const std::string& op) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res);
  LOCKSTEP_CHECK(rc == 0, op, " ", format_address(host, port), ": cannot resolve host: ", gai_strerror(rc));
  return AddrInfoPtr(res, &freeaddrinfo);
}

void set_nodelay(int fd) {
  // Store requests are small request/response pairs: Nagle's delay would cost ~40 ms per round trip.
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

BlockSigpipe::BlockSigpipe(bool on) : on_(on) {
  if (!on_) return;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &set, &previous_);
}

BlockSigpipe::~BlockSigpipe() {
  if (on_) ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

int remaining_ms(Deadline deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

std::pair<std::string, uint16_t> split_host_port(const std::string& address, const std::string& what) {
  const size_t colon = address.rfind(':');
  int port = 0;
  const char* digits = address.data() + (colon == std::string::npos ? address.size() : colon + 1);
  const char* end = address.data() + address.size();
  auto [ptr, ec] = std::from_chars(digits, end, port);
  LOCKSTEP_CHECK(colon != std::string::npos && colon > 0 && ec == std::errc() && ptr == end && digits != end &&
                     port > 0 && port < 65536,
                 what, ": \"", address, "\" is not HOST:PORT with a port in 1..65535");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, static_cast<uint16_t>(port)};
}

std::string format_address(const std::string& host, uint16_t port) {
  bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    peer_ = std::move(other.peer_);
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

// Binds the first address of host:port that accepts; with `listen`, listens on it too.
Socket Socket::bind_to(const std::string& host, uint16_t port, bool listen, const char* op) {
  auto addrs = resolve(host, port, /*passive=*/true, op);
  int last_err = EADDRNOTAVAIL;
  for (addrinfo* a = addrs.get(); a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_err = errno;
      continue;
    }
    Socket s(fd, format_address(host, port));
    // Lets a restarted master rebind while old connections sit in TIME_WAIT (and a listener bind a
    // port held by reserve()); a live listener on the same port still makes bind() fail with EADDRINUSE.
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && (!listen || ::listen(fd, SOMAXCONN) == 0)) {
      s.peer_ = format_address(host, s.local_port());
      return s;
    }
    last_err = errno;
  }
  std::string message = lockstep::detail::str_cat(op, " ", format_address(host, port), ": ", errno_text(last_err));
  if (last_err == EADDRINUSE) throw AddressInUseError(message);
  throw Error(message);
}

Socket Socket::listen(const std::string& host, uint16_t port) { return bind_to(host, port, true, "cannot listen on"); }

Socket Socket::reserve(const std::string& host, uint16_t port) {
  return bind_to(host, port, false, "cannot reserve a port on");
}

Socket Socket::connect(const std::string& host, uint16_t port, Deadline deadline) {
  std::string addr = format_address(host, port);
  auto addrs = resolve(host, port, /*passive=*/false, "connect to");
  int last_err = ECONNREFUSED;
  for (addrinfo* a = addrs.get(); a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_err = errno;
      continue;
    }
    Socket s(fd, addr);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last_err = errno;
        continue;
      }
      s.poll_until(POLLOUT, deadline, "connect to");
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last_err = err;
        continue;
      }
    }
    set_nodelay(fd);
    return s;
  }
  fail("connect to ", addr, ": ", errno_text(last_err));
}

Socket Socket::accept() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return {};
  char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
  ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), serv, sizeof(serv),
                NI_NUMERICHOST | NI_NUMERICSERV);
  set_nodelay(fd);
  return Socket(fd, std::string(host) + ":" + serv);
}

uint16_t Socket::local_port() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  LOCKSTEP_CHECK(::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0, "getsockname on ", peer_, ": ",
                 errno_text(errno));
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

std::string Socket::local_address() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  LOCKSTEP_CHECK(::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0, "getsockname on ", peer_, ": ",
                 errno_text(errno));
  char host[NI_MAXHOST] = "?";
  ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST);
  return format_address(host, local_port());
}

void Socket::poll_until(short events, Deadline deadline, const char* op) const {
  for (;;) {
    pollfd p{fd_, events, 0};
    int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return;  // ready, or an error/hangup that the following call reports
    if (rc < 0 && errno != EINTR) fail(op, " ", peer_, ": poll: ", errno_text(errno));
    if (rc == 0 && Clock::now() >= deadline) throw TimeoutError(lockstep::detail::str_cat(op, " ", peer_, ": timed out"));
  }
}

void Socket::send_all(const void* data, size_t size, Deadline deadline) const {
  LOCKSTEP_CHECK(valid(), "send to ", peer_, ": socket is closed");
  auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd_, p, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      poll_until(POLLOUT, deadline, "send to");
    } else if (errno != EINTR) {
      fail("send to ", peer_, ": ", errno_text(errno));
    }
  }
}

void Socket::recv_all(void* data, size_t size, Deadline deadline) const {
  LOCKSTEP_CHECK(valid(), "recv from ", peer_, ": socket is closed");
  auto* p = static_cast<uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd_, p, size, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
    } else if (n == 0) {
      fail("recv from ", peer_, ": connection closed by peer");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      poll_until(POLLIN, deadline, "recv from");
    } else if (errno != EINTR) {
      fail("recv from ", peer_, ": ", errno_text(errno));
    }
  }
}

std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &res) != 0) return "";
  std::string found;
  for (addrinfo* a = res; a && found.empty(); a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {};
      const void* addr = local.ss_family == AF_INET6
                             ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                             : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, addr, buf, sizeof(buf))) found = buf;
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return found;
}


}  // namespace lockstep::dist
