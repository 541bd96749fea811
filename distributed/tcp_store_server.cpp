// TCPStoreServer: the poll() loop, request handling and parking of blocking get/wait requests.
#include "distributed/tcp_store_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "distributed/store.h"

namespace lockstep::dist::detail {
namespace {

constexpr size_t kReadChunk = 64 << 10;
// One frame at the limit plus one read chunk; a client that sends more without waiting for replies
// is not a TCPStore client.
constexpr size_t kMaxBufferedInput = kMaxMessageBytes + 4 + kReadChunk;

void log_dropped(const Socket& s, const std::string& why) {
  std::fprintf(stderr, "TCPStore server: closing connection from %s: %s\n", s.peer().c_str(), why.c_str());
}

// Gives back the memory of a buffer that once held a large value.
void release_if_large(std::vector<uint8_t>& v) {
  if (v.empty() && v.capacity() > (1 << 20)) v.shrink_to_fit();
}

}  // namespace

TCPStoreServer::TCPStoreServer(const std::string& host, uint16_t port) : listener_(Socket::listen(host, port)) {
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
    fds.clear();
    ids.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({accept_paused_ ? -1 : listener_.fd(), POLLIN, 0});  // poll skips negative fds
    for (auto& [id, c] : connections_) {
      short events = 0;
      if (c.pending_out() < kMaxMessageBytes) events |= POLLIN;  // backpressure on clients that do not read
      if (c.pending_out() > 0) events |= POLLOUT;
      fds.push_back({c.socket.fd(), events, 0});
      ids.push_back(id);
    }
    int n = ::poll(fds.data(), fds.size(), accept_paused_ ? 100 : -1);
    if (n < 0) {
      if (errno != EINTR) std::fprintf(stderr, "TCPStore server: poll: %s\n", std::strerror(errno));
      continue;
    }
    if (fds[0].revents) return;
    accept_paused_ = false;
    if (fds[1].revents & POLLIN) accept_all();
    for (size_t i = 0; i < ids.size(); ++i) {
      short revents = fds[i + 2].revents;
      auto it = connections_.find(ids[i]);
      if (!revents || it == connections_.end()) continue;
      Connection& c = it->second;
      bool ok = true;
      if (revents & (POLLIN | POLLHUP | POLLERR)) ok = read_from(c) && process_input(ids[i], c);
      if (ok && (revents & POLLOUT)) ok = flush(c) && process_input(ids[i], c);  // room again: parse more
      if (!ok) close_connection(ids[i]);
    }
    resume_woken();
  }
}

void TCPStoreServer::accept_all() {
  for (;;) {
    Socket s = listener_.accept();
    if (s.valid()) {
      connections_[next_id_++].socket = std::move(s);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      // The pending connection stays queued; retry after a pause instead of spinning on it.
      std::fprintf(stderr, "TCPStore server: accept: %s\n", std::strerror(errno));
      accept_paused_ = true;
    }
    return;
  }
}

bool TCPStoreServer::read_from(Connection& c) {
  uint8_t buf[kReadChunk];
  for (int i = 0; i < 16; ++i) {  // bounded, so one busy client cannot starve the others
    ssize_t n = ::recv(c.socket.fd(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      c.in.insert(c.in.end(), buf, buf + n);
      if (c.in.size() > kMaxBufferedInput) {
        log_dropped(c.socket, "more than " + std::to_string(kMaxBufferedInput) + " bytes of unanswered requests");
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
  while (!c.parked && c.pending_out() < kMaxMessageBytes && c.in.size() - off >= 4) {
    uint32_t len;
    std::memcpy(&len, c.in.data() + off, 4);
    if (len == 0 || len > kMaxMessageBytes) {
      log_dropped(c.socket, "frame of " + std::to_string(len) + " bytes (limit " + std::to_string(kMaxMessageBytes) + ")");
      ok = false;
      break;
    }
    if (c.in.size() - off - 4 < len) break;  // the rest of the frame is still in flight
    FrameReader r(c.in.data() + off + 4, len);
    off += 4 + len;
    try {
      handle(id, c, r);
    } catch (const std::exception& e) {  // malformed request (or out of memory): drop this client only
      log_dropped(c.socket, e.what());
      ok = false;
      break;
    }
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(off));
  release_if_large(c.in);
  return ok && flush(c);
}

void TCPStoreServer::handle(uint64_t id, Connection& c, FrameReader& r) {
  auto reply = [&c](FrameWriter& w) {
    auto frame = w.finish();
    c.out.insert(c.out.end(), frame.begin(), frame.end());
  };
  auto reply_error = [&](const std::string& message) {
    FrameWriter w;
    w.u8(static_cast<uint8_t>(Status::kError)).str(message);
    reply(w);
  };
  FrameWriter w;
  w.u8(static_cast<uint8_t>(Status::kOk));
  auto command = static_cast<Command>(r.u8());
  switch (command) {
    case Command::kSet: {
      std::string key = r.str();
      auto value = r.blob();
      r.expect_end();
      data_[key] = std::move(value);
      reply(w);
      key_written(key);
      return;
    }
    case Command::kGet: {
      std::string key = r.str();
      r.expect_end();
      if (auto it = data_.find(key); it != data_.end()) {
        reply(w.blob(it->second));
      } else {
        park(id, c, command, {std::move(key)});
      }
      return;
    }
    case Command::kAdd: {
      std::string key = r.str();
      int64_t delta = r.i64();
      r.expect_end();
      int64_t value = 0;
      auto it = data_.find(key);
      if (it != data_.end() && !parse_counter(it->second, &value)) {
        return reply_error("add(" + quote(key) + "): the stored value " + quote(Store::to_string(it->second)) +
                           " is not an integer");
      }
      if (__builtin_add_overflow(value, delta, &value)) {
        return reply_error("add(" + quote(key) + ", " + std::to_string(delta) + "): overflows int64");
      }
      data_[key] = Store::to_bytes(std::to_string(value));
      reply(w.i64(value));
      key_written(key);
      return;
    }
    case Command::kCompareSet: {
      std::string key = r.str();
      auto expected = r.blob();
      auto desired = r.blob();
      r.expect_end();
      auto it = data_.find(key);
      if (it == data_.end()) {
        if (!expected.empty()) return reply(w.blob(expected));  // c10d's answer for a missing key
        it = data_.emplace(key, std::move(desired)).first;
      } else if (it->second == expected) {
        it->second = std::move(desired);
      } else {
        return reply(w.blob(it->second));
      }
      reply(w.blob(it->second));
      key_written(key);
      return;
    }
    case Command::kWait: {
      auto keys = r.str_list();
      r.expect_end();
      if (has_all(keys)) {
        reply(w);
      } else {
        park(id, c, command, std::move(keys));
      }
      return;
    }
    case Command::kCheck: {
      auto keys = r.str_list();
      r.expect_end();
      reply(w.u8(has_all(keys)));
      return;
    }
    case Command::kDelete: {
      std::string key = r.str();
      r.expect_end();
      reply(w.u8(data_.erase(key) > 0));
      return;
    }
    case Command::kNumKeys: {
      r.expect_end();
      auto n = std::count_if(data_.begin(), data_.end(), [](const auto& kv) { return !is_reserved_key(kv.first); });
      reply(w.i64(n));
      return;
    }
  }
  fail("unknown command ", static_cast<int>(command));
}

void TCPStoreServer::park(uint64_t id, Connection& c, Command command, std::vector<std::string> keys) {
  for (const auto& k : keys) {
    if (!data_.count(k)) waiters_[k].push_back(id);
  }
  c.parked = Parked{command, std::move(keys)};
}

void TCPStoreServer::key_written(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  woken_.insert(woken_.end(), it->second.begin(), it->second.end());
  waiters_.erase(it);
}

// Answers parked requests whose keys now all exist, then lets their connections carry on. Runs after
// each poll round rather than inside key_written, so a reply never re-enters request handling.
void TCPStoreServer::resume_woken() {
  while (!woken_.empty()) {
    uint64_t id = woken_.front();
    woken_.pop_front();
    auto it = connections_.find(id);
    if (it == connections_.end() || !it->second.parked) continue;
    Connection& c = it->second;
    const Parked& p = *c.parked;
    if (!has_all(p.keys)) {
      // Another key is still missing (or one was deleted again): stay registered on each missing key.
      for (const auto& k : p.keys) {
        if (data_.count(k)) continue;
        auto& ids = waiters_[k];
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
      }
      continue;
    }
    FrameWriter w;
    w.u8(static_cast<uint8_t>(Status::kOk));
    if (p.command == Command::kGet) w.blob(data_.at(p.keys[0]));
    auto frame = w.finish();
    c.out.insert(c.out.end(), frame.begin(), frame.end());
    c.parked.reset();
    if (!process_input(id, c)) close_connection(id);
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
  connections_.erase(it);
}

bool TCPStoreServer::has_all(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [this](const std::string& k) { return data_.count(k) > 0; });
}

}  // namespace lockstep::dist::detail
