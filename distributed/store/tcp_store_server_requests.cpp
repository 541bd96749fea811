// TCPStoreServer's answers: the job-token handshake, the key-value commands, and parking of blocking
// get/wait until their keys exist (the I/O around them is in tcp_store_server.cpp).
#include "distributed/store/tcp_store_server.h"

#include <algorithm>

#include "distributed/store/store.h"

namespace lockstep::dist::detail {

// One step of the job-token handshake (tcp_store_protocol.h); false when the peer is refused.
bool TCPStoreServer::authenticate(Connection& c, const Request& q) {
  FrameWriter w;
  w.u8(static_cast<uint8_t>(Status::kOk));
  if (q.command == Command::kHello && !c.server_nonce) {
    if (q.value.size() != JobToken::kNonceBytes) {
      refuse(c, "its hello carries a nonce of " + std::to_string(q.value.size()) + " bytes");
      return false;
    }
    c.server_nonce = JobToken::nonce();  // fresh per connection: a captured kAuth answers no other
    c.client_nonce = q.value;
    w.bytes(c.server_nonce->data(), c.server_nonce->size());
  } else if (q.command == Command::kAuth && c.server_nonce) {
    if (!options_.token.verify(kClientProof, *c.server_nonce, c.client_nonce, q.value)) {
      refuse(c, "wrong job token");
      return false;
    }
    c.authenticated = true;
    const JobToken::Mac proof = options_.token.prove(kServerProof, c.client_nonce, *c.server_nonce);
    w.bytes(proof.data(), proof.size());
  } else {
    refuse(c, q.command == Command::kHello ? "a second hello" : "no job token (its first request is not the handshake)");
    return false;
  }
  auto frame = w.finish();
  c.out.insert(c.out.end(), frame.begin(), frame.end());
  return true;
}

// Queues the refusal for the peer, logs and counts it; the caller closes the connection.
void TCPStoreServer::refuse(Connection& c, const std::string& why) {
  FrameWriter w;
  w.u8(static_cast<uint8_t>(Status::kError)).str(kRefusedJobToken);
  auto frame = w.finish();
  c.out.insert(c.out.end(), frame.begin(), frame.end());
  {
    std::lock_guard lock(stats_mu_);
    ++stats_.refused_peers;
  }
  log("TCPStore server: refused a connection from " + c.socket.peer() + ": " + why +
      " (set the same LOCKSTEP_JOB_TOKEN for every process of the job); serving the others");
}

void TCPStoreServer::handle(uint64_t id, Connection& c, Request q) {
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
  switch (q.command) {
    case Command::kSet:
      data_[q.key] = std::move(q.value);
      reply(w);
      key_written(q.key);
      return;
    case Command::kGet:
      if (auto it = data_.find(q.key); it != data_.end()) {
        reply(w.blob(it->second));
      } else {
        park(id, c, q.command, {std::move(q.key)});
      }
      return;
    case Command::kAdd: {
      int64_t value = 0;
      auto it = data_.find(q.key);
      if (it != data_.end() && !parse_counter(it->second, &value)) {
        return reply_error("add(" + quote(q.key) + "): the stored value " + quote(Store::to_string(it->second)) +
                           " is not an integer");
      }
      if (__builtin_add_overflow(value, q.delta, &value)) {
        return reply_error("add(" + quote(q.key) + ", " + std::to_string(q.delta) + "): overflows int64");
      }
      data_[q.key] = Store::to_bytes(std::to_string(value));
      reply(w.i64(value));
      key_written(q.key);
      return;
    }
    case Command::kCompareSet: {
      const auto& expected = q.value;
      auto it = data_.find(q.key);
      if (it == data_.end()) {
        if (!expected.empty()) return reply(w.blob(expected));  // c10d's answer for a missing key
        it = data_.emplace(q.key, std::move(q.desired)).first;
      } else if (it->second == expected) {
        it->second = std::move(q.desired);
      } else {
        return reply(w.blob(it->second));
      }
      reply(w.blob(it->second));
      key_written(q.key);
      return;
    }
    case Command::kWait:
      if (has_all(q.keys)) {
        reply(w);
      } else {
        park(id, c, q.command, std::move(q.keys));
      }
      return;
    case Command::kCheck:
      reply(w.u8(has_all(q.keys)));
      return;
    case Command::kDelete:
      reply(w.u8(data_.erase(q.key) > 0));
      return;
    case Command::kNumKeys: {
      auto n = std::count_if(data_.begin(), data_.end(), [](const auto& kv) { return !is_reserved_key(kv.first); });
      reply(w.i64(n));
      return;
    }
    case Command::kHello:
    case Command::kAuth:
      return reply_error(options_.token.enabled() ? "the job-token handshake was already done on this connection"
                                                  : "this server has no job token");
  }
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
    c.last_input = Clock::now();  // waiting on the server was not the client's stall
    if (!process_input(id, c)) close_connection(id);
  }
}

bool TCPStoreServer::has_all(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [this](const std::string& k) { return data_.count(k) > 0; });
}

}  // namespace lockstep::dist::detail
