// TCPStore client: connection with retry, one request/reply per call, and the workers rendezvous.
#include "distributed/store/tcp_store.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <thread>

#include "distributed/store/tcp_store_protocol.h"
#include "distributed/store/tcp_store_server.h"

namespace lockstep::dist {

using detail::Command;
using detail::FrameReader;
using detail::quote;
using detail::Request;

namespace {

// Counts the stores that have connected (see await_workers); reserved, so num_keys() skips them.
const std::string kWorkersKey = std::string(detail::kReservedKeyPrefix) + "tcpstore/workers";
const std::string kWorkersDoneKey = std::string(detail::kReservedKeyPrefix) + "tcpstore/workers_done";

Request request_for(Command c, std::string key = {}) {
  Request q;
  q.command = c;
  q.key = std::move(key);
  return q;
}

}  // namespace

TCPStore::TCPStore(std::string host, uint16_t port, bool is_master, std::chrono::milliseconds timeout,
                   std::optional<int> world_size, bool wait_for_workers, JobToken token)
    : Store(timeout), host_(std::move(host)), port_(port), token_(std::move(token)) {
  LOCKSTEP_CHECK(!world_size || *world_size >= 1, "TCPStore: world_size must be at least 1, got ", world_size.value_or(0));
  if (is_master) {
    try {
      detail::TCPStoreServerOptions options;
      options.token = token_;
      server_ = std::make_unique<detail::TCPStoreServer>(host_, port_, options);
    } catch (const AddressInUseError& e) {
      throw AddressInUseError(std::string("TCPStore: ") + e.what());
    } catch (const Error& e) {
      fail("TCPStore: ", e.what());
    }
    port_ = server_->port();
  }
  {
    std::lock_guard lock(mu_);
    connect_locked(deadline_after(timeout), timeout);
  }
  if (world_size && wait_for_workers) await_workers(*world_size);
}

TCPStore::~TCPStore() = default;

void TCPStore::connect_locked(Deadline deadline, std::chrono::milliseconds timeout) {
  // The master may not be up yet (ranks start in any order): retry, backing off from 10 ms to 1 s.
  auto backoff = std::chrono::milliseconds(10);
  std::string last_error;
  for (;;) {
    try {
      socket_ = Socket::connect(host_, port_, deadline);
      handshake_locked(deadline);
      return;
    } catch (const JobTokenError&) {
      socket_.close();
      throw;  // the server answered: retrying cannot mend a token
    } catch (const TimeoutError& e) {
      // The last attempt often runs out of time only because the deadline is near: an earlier
      // attempt's error (refused, not a TCPStore server) says more.
      socket_.close();
      if (last_error.empty()) last_error = e.what();
    } catch (const Error& e) {
      socket_.close();
      last_error = e.what();
    }
    auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, left));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  fail("TCPStore: could not connect to master at ", format_address(host_, port_), " within ",
       detail::format_seconds(timeout), " (last error: ", last_error, ")");
}

// One reply frame's body (status byte first).
std::vector<uint8_t> TCPStore::recv_frame_locked(Deadline deadline) {
  uint32_t len = 0;
  socket_.recv_all(&len, 4, deadline);
  LOCKSTEP_CHECK(len >= 1 && len <= detail::kMaxMessageBytes, "malformed reply of ", len, " bytes");
  std::vector<uint8_t> body(len);
  socket_.recv_all(body.data(), len, deadline);
  return body;
}

// The job-token handshake (tcp_store_protocol.h): this client proves the token on the server's fresh
// nonce, then the server proves it on this client's.
void TCPStore::prove_token_locked(Deadline deadline) {
  const std::string where = "TCPStore: the server at " + format_address(host_, port_);
  auto exchange = [&](Command c, std::span<const uint8_t> value) {
    Request q = request_for(c);
    q.value.assign(value.begin(), value.end());
    auto bytes = detail::encode_request(q);
    socket_.send_all(bytes.data(), bytes.size(), deadline);
    return recv_frame_locked(deadline);
  };
  const JobToken::Nonce mine = JobToken::nonce();
  auto body = exchange(Command::kHello, mine);
  if (body[0] == static_cast<uint8_t>(detail::Status::kError)) {
    throw JobTokenError(where + " has no job token while this process has one (" + JobToken::kEnvVar +
                        " is set here but not where the master runs)");
  }
  FrameReader hello(body.data() + 1, body.size() - 1);
  const auto theirs = hello.blob();
  hello.expect_end();
  LOCKSTEP_CHECK(body[0] == static_cast<uint8_t>(detail::Status::kOk) && theirs.size() == JobToken::kNonceBytes,
                 "connect to ", format_address(host_, port_), ": not a TCPStore server (bad reply to the hello)");
  body = exchange(Command::kAuth, token_.prove(detail::kClientProof, theirs, mine));
  if (body[0] != static_cast<uint8_t>(detail::Status::kOk)) {
    throw JobTokenError(where + " refused this process's job token (wrong or missing LOCKSTEP_JOB_TOKEN)");
  }
  FrameReader auth(body.data() + 1, body.size() - 1);
  const auto proof = auth.blob();
  auth.expect_end();
  if (!token_.verify(detail::kServerProof, mine, theirs, proof)) {
    throw JobTokenError(where + " did not prove the job token back (not this job's server)");
  }
}

// A check of no keys, answered at once: the server then counts this connection as a client (one that
// has never sent a byte may be closed when the server is at its connection limit), and a listener that
// is not a TCPStore server fails here, where the connection is retried, rather than in a later call.
// With a job token, the token's handshake comes first.
void TCPStore::handshake_locked(Deadline deadline) {
  if (token_.enabled()) prove_token_locked(deadline);
  detail::Request hello;
  hello.command = Command::kCheck;
  auto bytes = detail::encode_request(hello);
  socket_.send_all(bytes.data(), bytes.size(), deadline);
  uint8_t reply[6];  // u32 length 2, status kOk, u8 1 (every one of no keys exists)
  socket_.recv_all(reply, 4, deadline);
  uint32_t len;
  std::memcpy(&len, reply, 4);
  if (len == 1 + 4 + std::strlen(detail::kRefusedJobToken)) {  // a server that wants a token, and this process has none
    std::vector<uint8_t> body(len);
    socket_.recv_all(body.data(), len, deadline);
    if (body[0] == static_cast<uint8_t>(detail::Status::kError)) {
      throw JobTokenError("TCPStore: the server at " + format_address(host_, port_) +
                          " refused this process's job token (wrong or missing LOCKSTEP_JOB_TOKEN)");
    }
  }
  LOCKSTEP_CHECK(len == 2, "connect to ", format_address(host_, port_), ": not a TCPStore server (bad reply to the handshake)");
  socket_.recv_all(reply + 4, 2, deadline);
  LOCKSTEP_CHECK(reply[4] == static_cast<uint8_t>(detail::Status::kOk) && reply[5] == 1,
                 "connect to ", format_address(host_, port_), ": not a TCPStore server (bad reply to the handshake)");
}

std::vector<uint8_t> TCPStore::request(const std::string& what, const char* waiting_for, const Request& q,
                                       std::chrono::milliseconds timeout) {
  auto bytes = detail::encode_request(q);
  Deadline deadline = deadline_after(timeout);
  std::lock_guard lock(mu_);
  if (!socket_.valid()) connect_locked(deadline, timeout);
  std::vector<uint8_t> body;
  try {
    socket_.send_all(bytes.data(), bytes.size(), deadline);
    uint32_t len = 0;
    socket_.recv_all(&len, 4, deadline);
    LOCKSTEP_CHECK(len >= 1 && len <= detail::kMaxMessageBytes, "malformed reply of ", len, " bytes");
    body.resize(len);
    socket_.recv_all(body.data(), len, deadline);
  } catch (const TimeoutError&) {
    // The reply may still come; drop the connection so it cannot answer a later request.
    socket_.close();
    throw TimeoutError(lockstep::detail::str_cat("TCPStore: ", what, ": ", waiting_for, " within ",
                                       detail::format_seconds(timeout), " (master ", format_address(host_, port_), ")"));
  } catch (const Error& e) {
    socket_.close();
    fail("TCPStore: ", what, " on master ", format_address(host_, port_), ": ", e.what());
  }
  if (body[0] == static_cast<uint8_t>(detail::Status::kError)) {
    FrameReader r(body.data() + 1, body.size() - 1);
    fail("TCPStore: ", r.str());
  }
  LOCKSTEP_CHECK(body[0] == static_cast<uint8_t>(detail::Status::kOk), "TCPStore: ", what, ": bad reply status ",
                 static_cast<int>(body[0]));
  body.erase(body.begin());
  return body;
}

void TCPStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  auto q = request_for(Command::kSet, key);
  q.value = value;
  request("set(" + quote(key) + ")", "no reply", q, timeout());
}

std::vector<uint8_t> TCPStore::get(const std::string& key) {
  auto reply = request("get(" + quote(key) + ")", "key not set", request_for(Command::kGet, key), timeout());
  FrameReader r(reply.data(), reply.size());
  auto value = r.blob();
  r.expect_end();
  return value;
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  auto q = request_for(Command::kAdd, key);
  q.delta = delta;
  auto reply = request("add(" + quote(key) + ", " + std::to_string(delta) + ")", "no reply", q, timeout());
  FrameReader r(reply.data(), reply.size());
  int64_t value = r.i64();
  r.expect_end();
  return value;
}

std::vector<uint8_t> TCPStore::compare_set(const std::string& key, const std::vector<uint8_t>& expected,
                                           const std::vector<uint8_t>& desired) {
  auto q = request_for(Command::kCompareSet, key);
  q.value = expected;
  q.desired = desired;
  auto reply = request("compare_set(" + quote(key) + ")", "no reply", q, timeout());
  FrameReader r(reply.data(), reply.size());
  auto value = r.blob();
  r.expect_end();
  return value;
}

void TCPStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  auto q = request_for(Command::kWait);
  q.keys = keys;
  request("wait(" + detail::quote_all(keys) + ")", "keys not all set", q, timeout);
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  auto q = request_for(Command::kCheck);
  q.keys = keys;
  auto reply = request("check(" + detail::quote_all(keys) + ")", "no reply", q, timeout());
  FrameReader r(reply.data(), reply.size());
  return r.u8() != 0;
}

bool TCPStore::delete_key(const std::string& key) {
  auto reply = request("delete_key(" + quote(key) + ")", "no reply", request_for(Command::kDelete, key), timeout());
  FrameReader r(reply.data(), reply.size());
  return r.u8() != 0;
}

int64_t TCPStore::num_keys() {
  auto reply = request("num_keys()", "no reply", request_for(Command::kNumKeys), timeout());
  FrameReader r(reply.data(), reply.size());
  return r.i64();
}

// Every store counts itself in; the one that completes the count marks it done, so the master blocks
// on a single parked wait instead of polling the counter.
void TCPStore::await_workers(int world_size) {
  if (add(kWorkersKey, 1) >= world_size) set(kWorkersDoneKey, "");
  if (!is_master()) return;
  try {
    wait({kWorkersDoneKey}, timeout());
  } catch (const TimeoutError&) {
    throw TimeoutError(lockstep::detail::str_cat("TCPStore: master at ", format_address(host_, port_), ": only ",
                                       add(kWorkersKey, 0), " of ", world_size, " stores connected within ",
                                       detail::format_seconds(timeout())));
  }
}

}  // namespace lockstep::dist
