// TCPStoreServer's connections: the poll() loop, connection limits, reading and writing, and dropping
// clients; what it answers is in tcp_store_server_requests.cpp.
#include "distributed/store/tcp_store_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace lockstep::dist::detail {
namespace {

constexpr size_t kReadChunk = 64 << 10;
// One frame at the limit plus one read chunk; a client that sends more without waiting for replies
// is not a TCPStore client.
constexpr size_t kMaxBufferedInput = kMaxMessageBytes + 4 + kReadChunk;
constexpr int kLogLinesPerSecond = 10;

// Gives back the memory of a buffer that once held a large value.
void release_if_large(std::vector<uint8_t>& v) {
  if (v.empty() && v.capacity() > (1 << 20)) v.shrink_to_fit();
}

size_t default_max_connections() {
  rlimit rl{};
  size_t files = 1024;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) files = rl.rlim_cur == RLIM_INFINITY ? 1 << 17 : rl.rlim_cur;
  return std::max<size_t>(64, files / 2);
}

}  // namespace

TCPStoreServer::TCPStoreServer(const std::string& host, uint16_t port, TCPStoreServerOptions options)
    : options_(options),
      max_connections_(options.max_connections ? options.max_connections : default_max_connections()),
      listener_(Socket::listen(host, port)) {
  port_ = listener_.local_port();
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  LOCKSTEP_CHECK(wake_fd_ >= 0, "TCPStore: eventfd: ", std::strerror(errno));
  thread_ = std::thread([this] { run(); });
}

TCPStoreServer::~TCPStoreServer() {
  uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof(one)) < 0) {
    // Cannot happen for an eventfd below its maximum count; the join below would then hang, so say why.
    std::fprintf(stderr, "TCPStore server: cannot signal shutdown: %s\n", std::strerror(errno));
  }
  thread_.join();
  ::close(wake_fd_);
  // The listener and every connection close with their Sockets.
}

void TCPStoreServer::run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  for (;;) {
    auto now = Clock::now();
    fds.clear();
    ids.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({accept_paused_ ? -1 : listener_.fd(), POLLIN, 0});  // poll skips negative fds
    std::optional<Clock::time_point> wake_at;  // the earliest moment a stalled frame times out
    for (auto& [id, c] : connections_) {
      short events = may_read(c, now) ? POLLIN : 0;
      if (c.pending_out() > 0) events |= POLLOUT;
      if (!c.parked && !c.in.empty()) {
        auto t = c.last_input + options_.stalled_frame_timeout;
        if (!wake_at || t < *wake_at) wake_at = t;
      }
      fds.push_back({c.socket.fd(), events, 0});
      ids.push_back(id);
    }
    int timeout_ms = accept_paused_ ? 100 : -1;
    if (wake_at) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(*wake_at - now).count();
      ms = std::clamp<int64_t>(ms, 0, 1 << 30);
      timeout_ms = timeout_ms < 0 ? static_cast<int>(ms) : std::min(timeout_ms, static_cast<int>(ms));
    }
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0) {
      if (errno != EINTR) std::fprintf(stderr, "TCPStore server: poll: %s\n", std::strerror(errno));
      continue;
    }
    if (fds[0].revents) return;
    accept_paused_ = false;
    for (size_t i = 0; i < ids.size(); ++i) {
      short revents = fds[i + 2].revents;
      auto it = connections_.find(ids[i]);
      if (!revents || it == connections_.end()) continue;
      Connection& c = it->second;
      bool ok = true;
      if (revents & (POLLIN | POLLHUP | POLLERR)) {
        // An admitted frame is read in big gulps; otherwise one chunk keeps `in` near kSmallRequestBytes.
        ok = read_from(ids[i], c, c.admitted ? 16 * kReadChunk : kReadChunk) && process_input(ids[i], c);
      }
      if (ok && (revents & POLLOUT)) ok = flush(c) && process_input(ids[i], c);  // room again: parse more
      if (!ok) close_connection(ids[i]);
    }
    resume_woken();
    drop_stalled(Clock::now());
    // Last, so a connection evicted to make room was not in this round's fds.
    if (fds[1].revents & POLLIN) accept_all();
  }
}

// Whether to read from `c` this round: not while its replies back up, and past kSmallRequestBytes only
// for an admitted frame. A client held back with bytes waiting in the kernel is not stalling.
bool TCPStoreServer::may_read(Connection& c, Clock::time_point now) {
  bool ok = c.pending_out() < kMaxMessageBytes;
  if (ok && c.admitted == 0 && c.in.size() >= kSmallRequestBytes) {
    ParseResult p = parse_request(c.in.data(), c.in.size());
    size_t frame = p.kind == ParseResult::kNeedMore ? p.frame_size : 0;
    if (frame > 0 && (admitted_total_ == 0 || admitted_total_ + frame <= options_.max_buffered_bytes)) {
      c.admitted = frame;
      admitted_total_ += frame;
      ++admitted_frames_;
      std::lock_guard lock(stats_mu_);
      ++stats_.frames_admitted;
      stats_.most_admitted_at_once = std::max(stats_.most_admitted_at_once, admitted_frames_);
    } else {
      ok = false;  // complete frames queued behind a parked request, or no budget for this frame yet
    }
    set_waiting(c, frame > 0 && c.admitted == 0);
  }
  if (!ok) {
    int waiting = 0;
    if (c.parked || ::ioctl(c.socket.fd(), FIONREAD, &waiting) != 0 || waiting > 0) c.last_input = now;
  }
  return ok;
}

void TCPStoreServer::accept_all() {
  for (;;) {
    if (connections_.size() >= max_connections_) {
      pollfd p{listener_.fd(), POLLIN, 0};
      if (::poll(&p, 1, 0) != 1) return;  // nobody is waiting to connect
      if (!evict_silent()) {
        if (!at_limit_logged_) {
          log("TCPStore server: " + std::to_string(connections_.size()) +
              " connections open, the limit: new clients wait until one closes");
          at_limit_logged_ = true;
        }
        accept_paused_ = true;
        return;
      }
    }
    at_limit_logged_ = false;
    Socket s = listener_.accept();
    if (s.valid()) {
      uint64_t id = next_id_++;
      Connection& c = connections_[id];
      c.socket = std::move(s);
      c.last_input = Clock::now();
      c.authenticated = !options_.token.enabled();
      silent_.insert(silent_.end(), id);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      // The pending connection stays queued; retry after a pause instead of spinning on it.
      log(std::string("TCPStore server: accept: ") + std::strerror(errno));
      accept_paused_ = true;
    }
    return;
  }
}

// Closes the oldest connection that has sent nothing (with a job token: that has not proven it), to
// make room; false when every one has spoken. One whose first bytes are waiting in the kernel has
// spoken (this round's poll came before them); without a token that is enough to stay.
bool TCPStoreServer::evict_silent() {
  while (!silent_.empty()) {
    uint64_t oldest = *silent_.begin();
    Connection& c = connections_.at(oldest);
    int waiting = 0;
    if (c.authenticated && ::ioctl(c.socket.fd(), FIONREAD, &waiting) == 0 && waiting > 0) {
      c.silent = false;
      silent_.erase(silent_.begin());
      continue;
    }
    log_dropped(c, std::string(c.silent ? "it has sent nothing" : "it has not proven the job token") +
                       " since it connected and the server is at its limit of " + std::to_string(max_connections_) +
                       " connections");
    close_connection(oldest);
    return true;
  }
  return false;
}

bool TCPStoreServer::read_from(uint64_t id, Connection& c, size_t max_bytes) {
  uint8_t buf[kReadChunk];
  size_t total = 0;
  while (total < max_bytes) {  // bounded, so one busy client cannot starve the others
    ssize_t n = ::recv(c.socket.fd(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      total += static_cast<size_t>(n);
      c.in.insert(c.in.end(), buf, buf + n);
      c.last_input = Clock::now();
      if (c.silent) {
        c.silent = false;
        if (c.authenticated) silent_.erase(id);  // else evictable until it proves the token
      }
      if (c.in.size() > kMaxBufferedInput) {
        log_dropped(c, "more than " + std::to_string(kMaxBufferedInput) + " bytes of unanswered requests");
        return false;
      }
    } else if (n == 0) {
      return false;  // the client closed its end
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return true;
    } else if (errno != EINTR) {
      return false;
    }
  }
  return true;
}

bool TCPStoreServer::flush(Connection& c) {
  while (c.pending_out() > 0) {
    ssize_t n = ::send(c.socket.fd(), c.out.data() + c.out_sent, c.pending_out(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_sent += static_cast<size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      break;
    } else if (errno != EINTR) {
      return false;
    }
  }
  if (c.out_sent == c.out.size()) {
    c.out.clear();
    c.out_sent = 0;
    release_if_large(c.out);
  }
  return true;
}

// Handles every complete frame in c.in, in order, until one parks or the replies back up.
bool TCPStoreServer::process_input(uint64_t id, Connection& c) {
  size_t off = 0;
  bool ok = true;
  while (!c.parked && c.pending_out() < kMaxMessageBytes) {
    ParseResult p = parse_request(c.in.data() + off, c.in.size() - off);
    if (p.kind == ParseResult::kNeedMore && !c.authenticated && p.frame_size > 4 + kMaxHandshakeFrame) {
      refuse(c, "its first frame is " + std::to_string(p.frame_size) + " bytes, not a job-token handshake");
      ok = false;
      break;
    }
    if (p.kind == ParseResult::kNeedMore) break;  // the rest of the frame is still in flight
    if (p.kind == ParseResult::kError) {
      log_dropped(c, p.error);
      ok = false;
      break;
    }
    off += p.consumed;
    if (!c.authenticated) {
      if (authenticate(c, p.request)) {
        if (c.authenticated) silent_.erase(id);  // proven: no longer evicted to make room
        continue;
      }
      ok = false;
      break;
    }
    try {
      handle(id, c, std::move(p.request));
    } catch (const std::exception& e) {  // out of memory: drop this client only
      log_dropped(c, e.what());
      ok = false;
      break;
    }
  }
  if (off > 0 && c.admitted) {  // the admitted frame, the first in `in`, has been handled
    admitted_total_ -= c.admitted;
    c.admitted = 0;
    --admitted_frames_;
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(off));
  release_if_large(c.in);
  if (!ok) flush(c);  // a refused peer's kError goes out before the connection closes (best effort)
  return ok && flush(c);
}

// Disconnects clients that sent part of a frame and then nothing for stalled_frame_timeout.
void TCPStoreServer::drop_stalled(Clock::time_point now) {
  std::vector<uint64_t> stalled;
  for (auto& [id, c] : connections_) {
    if (c.parked || c.in.empty() || now - c.last_input < options_.stalled_frame_timeout) continue;
    int waiting = 0;
    if (::ioctl(c.socket.fd(), FIONREAD, &waiting) == 0 && waiting > 0) {
      c.last_input = now;  // its bytes are here: the server is the one holding it back
    } else {
      stalled.push_back(id);
    }
  }
  for (uint64_t id : stalled) {
    Connection& c = connections_.at(id);
    ParseResult p = parse_request(c.in.data(), c.in.size());
    std::string have = std::to_string(c.in.size()) + (p.frame_size ? " of " + std::to_string(p.frame_size) : "");
    log_dropped(c, "sent " + have + " bytes of a frame, then nothing for " +
                       format_seconds(options_.stalled_frame_timeout));
    close_connection(id);
  }
}

void TCPStoreServer::close_connection(uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  if (it->second.parked) {
    for (const auto& k : it->second.parked->keys) {
      auto w = waiters_.find(k);
      if (w == waiters_.end()) continue;
      std::erase(w->second, id);
      if (w->second.empty()) waiters_.erase(w);
    }
  }
  admitted_total_ -= it->second.admitted;
  if (it->second.admitted) --admitted_frames_;
  set_waiting(it->second, false);
  silent_.erase(id);
  connections_.erase(it);
}

void TCPStoreServer::set_waiting(Connection& c, bool waiting) {
  if (c.waiting == waiting) return;
  c.waiting = waiting;
  std::lock_guard lock(stats_mu_);
  if (waiting) {
    ++stats_.frames_waiting;
  } else {
    --stats_.frames_waiting;
  }
}

TCPStoreServerStats TCPStoreServer::stats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

// At most kLogLinesPerSecond lines a second, so a flood of bad clients cannot flood stderr.
void TCPStoreServer::log(const std::string& line) {
  auto now = Clock::now();
  if (now - log_window_ >= std::chrono::seconds(1)) {
    if (suppressed_) std::fprintf(stderr, "TCPStore server: (%zu similar lines suppressed)\n", suppressed_);
    log_window_ = now;
    logged_in_window_ = 0;
    suppressed_ = 0;
  }
  if (logged_in_window_ >= kLogLinesPerSecond) {
    ++suppressed_;
    return;
  }
  ++logged_in_window_;
  std::fprintf(stderr, "%s\n", line.c_str());
}

void TCPStoreServer::log_dropped(const Connection& c, const std::string& why) {
  log("TCPStore server: closing connection from " + c.socket.peer() + ": " + why);
}

}  // namespace lockstep::dist::detail
