// A live TCPStore server under hostile input: garbage and random bytes from many sockets, clients
// that stop mid-frame or never send, floods of connections (past max_connections and past the
// open-file limit), big frames beyond the buffering budget, and the bind address. Throughout, a
// legitimate client keeps working: set/get/add/compare_set/wait/check/delete. With a job token: clients
// without it, with a wrong one, or replaying a captured handshake are refused while a 2-rank job's
// all-reduces over the same store go on.
#include <doctest/doctest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "distributed/gloo/process_group_gloo.h"
#include "distributed/net/job_token.h"
#include "distributed/net/socket.h"
#include "distributed/store/tcp_store.h"
#include "distributed/store/tcp_store_protocol.h"
#include "distributed/store/tcp_store_server.h"
#include "tensor/factory.h"
#include "tests/util/multiprocess.h"
#include "tests/util/test_util.h"

using namespace lockstep::dist;
using namespace std::chrono_literals;
using detail::TCPStoreServer;
using detail::TCPStoreServerOptions;
using Bytes = std::vector<uint8_t>;

namespace {
using lockstep::testing::seconds_since;


Socket raw_connect(uint16_t port) { return Socket::connect("127.0.0.1", port, deadline_after(5s)); }

// True when the server closes `s` (EOF or reset) within `within`; false when it stays open.
bool closed_by_server(const Socket& s, std::chrono::milliseconds within) {
  try {
    uint8_t b;
    s.recv_all(&b, 1, deadline_after(within));
  } catch (const TimeoutError&) {
    return false;
  } catch (const lockstep::Error&) {
    return true;
  }
  return false;  // the server sent a byte: it never does unasked
}

// Sends what it can of `data` before `within` passes (the server may stop reading); returns the bytes sent.
size_t send_some(const Socket& s, const Bytes& data, std::chrono::milliseconds within) {
  Deadline deadline = deadline_after(within);
  size_t sent = 0;
  while (sent < data.size()) {
    size_t n = std::min<size_t>(64 << 10, data.size() - sent);
    try {
      s.send_all(data.data() + sent, n, deadline);
    } catch (const lockstep::Error&) {
      break;  // timed out (held back) or closed by the server
    }
    sent += n;
  }
  return sent;
}

Bytes u32(uint32_t v) { return {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)}; }

// Every Store call once, under keys of its own; throws (failing the test) on any wrong answer.
void exercise(Store& s, const std::string& tag) {
  s.set(tag + "/k", "v");
  REQUIRE(s.get_string(tag + "/k") == "v");
  REQUIRE(s.add(tag + "/n", 2) == 2);
  REQUIRE(s.add(tag + "/n", 3) == 5);
  REQUIRE(s.compare_set(tag + "/cs", "", "a") == "a");
  REQUIRE(s.compare_set(tag + "/cs", "a", "b") == "b");
  s.wait({tag + "/k", tag + "/n"});
  REQUIRE(s.check({tag + "/cs"}));
  REQUIRE(s.delete_key(tag + "/cs"));
  REQUIRE_FALSE(s.check({tag + "/cs"}));
}

// A non-loopback IPv4 address of this machine, if it has one.
std::optional<std::string> other_local_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (ifaddrs* a = list; a && !found; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN];
    auto* in = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
    if (::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf))) found = buf;
  }
  ::freeifaddrs(list);
  return found;
}

}  // namespace

TEST_CASE("hostile: garbage, truncated frames and bad length prefixes close only their own connection") {
  TCPStore master("127.0.0.1", 0, /*is_master=*/true, 10s);
  TCPStore legit("127.0.0.1", master.port(), false, 10s);
  exercise(legit, "before");
  const std::vector<Bytes> bad = {
      u32(0xFFFFFFF0u),                                // length prefix over the limit
      u32((64u << 20) + 1),                            // one byte over
      u32(0),                                          // empty frame
      {3, 0, 0, 0, 0x77, 1, 2},                        // unknown command
      {6, 0, 0, 0, 1, 0xff, 0xff, 0, 0, 'k'},          // key longer than the frame
      {9, 0, 0, 0, 5, 0, 0, 0, 0x40, 0, 0, 0, 0},      // a billion keys in 9 bytes
      {4, 0, 0, 0, 8, 'x', 'y', 'z'},                  // num_keys with trailing bytes
      {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1', '.', '1', '\r', '\n', '\r', '\n'},  // HTTP
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    Socket s = raw_connect(master.port());
    s.send_all(bad[i].data(), bad[i].size(), deadline_after(2s));
    CHECK_MESSAGE(closed_by_server(s, 30s), "bad input #", i);
    exercise(legit, "during" + std::to_string(i));
  }
  exercise(legit, "after");
}

TEST_CASE("hostile: a client that stops mid-frame is dropped after stalled_frame_timeout; waiting clients are not") {
  TCPStoreServer server("127.0.0.1", 0, TCPStoreServerOptions{.stalled_frame_timeout = 300ms});
  TCPStore legit("127.0.0.1", server.port(), false, 10s);
  TCPStore waiter("127.0.0.1", server.port(), false, 10s);
  std::string got;
  std::thread parked([&] { got = waiter.get_string("late"); });  // parked on the server past the timeout

  Socket half_frame = raw_connect(server.port());
  Bytes part = {100, 0, 0, 0, 1, 2, 3};
  half_frame.send_all(part.data(), part.size(), deadline_after(2s));
  Socket half_prefix = raw_connect(server.port());
  half_prefix.send_all(part.data(), 2, deadline_after(2s));
  auto start = Clock::now();
  exercise(legit, "meanwhile");  // served while the stalled frames sit in the server
  CHECK(closed_by_server(half_frame, 30s));
  CHECK(closed_by_server(half_prefix, 30s));
  CHECK(seconds_since(start) >= 0.25);

  std::this_thread::sleep_for(200ms);  // the parked get has now waited well past 300 ms
  legit.set("late", "here");
  parked.join();
  CHECK(got == "here");
  exercise(waiter, "waiter");  // its connection was kept: idle between requests is not a stall
}

TEST_CASE("hostile: 500 connections that never send do not stop legitimate clients") {
  TCPStore master("127.0.0.1", 0, true, 10s);
  std::vector<Socket> idle;
  for (int i = 0; i < 500; ++i) idle.push_back(raw_connect(master.port()));
  auto start = Clock::now();
  TCPStore legit("127.0.0.1", master.port(), false, 10s);
  for (int i = 0; i < 20; ++i) exercise(legit, std::string("round") + std::to_string(i));
  CHECK(seconds_since(start) < 30.0);  // hang guard only
  CHECK_FALSE(closed_by_server(idle.front(), 50ms));  // below the limit nobody is evicted
  CHECK_FALSE(closed_by_server(idle.back(), 50ms));
}

TEST_CASE("hostile: at max_connections the oldest silent connection makes room") {
  TCPStoreServer server("127.0.0.1", 0, TCPStoreServerOptions{.max_connections = 32});
  CHECK(server.max_connections() == 32);
  std::vector<Socket> idle;
  for (int i = 0; i < 100; ++i) idle.push_back(raw_connect(server.port()));
  TCPStore legit("127.0.0.1", server.port(), false, 10s);
  exercise(legit, "legit");
  CHECK(closed_by_server(idle.front(), 30s));       // evicted, oldest first
  CHECK_FALSE(closed_by_server(idle.back(), 50ms));  // the newest silent ones are still there
  TCPStore second("127.0.0.1", server.port(), false, 10s);
  exercise(second, "second");
  exercise(legit, "legit_again");  // a connection that has spoken is never evicted
}

TEST_CASE("hostile: when every connection has spoken, a new client waits until one closes") {
  TCPStoreServer server("127.0.0.1", 0, TCPStoreServerOptions{.max_connections = 4});
  std::vector<std::unique_ptr<TCPStore>> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(std::make_unique<TCPStore>("127.0.0.1", server.port(), false, 10s));
    clients.back()->add("count", 1);
  }
  std::atomic<bool> done{false};
  std::thread t([&] {
    TCPStore fifth("127.0.0.1", server.port(), false, 10s);  // its handshake waits in the backlog
    fifth.add("count", 1);
    done = true;
  });
  std::this_thread::sleep_for(400ms);
  CHECK_FALSE(done.load());
  auto start = Clock::now();
  clients.pop_back();
  t.join();
  CHECK(seconds_since(start) < 30.0);  // hang guard only
  CHECK(clients[0]->add("count", 0) == 5);
}

TEST_CASE("hostile: a connection flood in a process with few file descriptors") {
  // The server runs in a child whose open-file limit is 128, so it keeps at most 64 connections.
  int port_pipe[2], done_pipe[2];
  REQUIRE(::pipe(port_pipe) == 0);
  REQUIRE(::pipe(done_pipe) == 0);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 0;
    try {
      rlimit rl{128, 128};
      if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) ::_exit(3);
      TCPStore master("127.0.0.1", 0, true, 30s);
      uint16_t port = master.port();
      if (::write(port_pipe[1], &port, sizeof(port)) != sizeof(port)) ::_exit(4);
      char c;
      if (::read(done_pipe[0], &c, 1) != 1) code = 5;
      if (master.get_string("legit/k") != "v") code = 6;  // the server still works from its own side
    } catch (...) {
      code = 7;
    }
    ::_exit(code);
  }
  uint16_t port = 0;
  REQUIRE(::read(port_pipe[0], &port, sizeof(port)) == sizeof(port));
  std::vector<Socket> flood;
  for (int i = 0; i < 400; ++i) flood.push_back(raw_connect(port));
  auto start = Clock::now();
  TCPStore legit("127.0.0.1", port, false, 10s);
  exercise(legit, "legit");
  CHECK(seconds_since(start) < 30.0);  // hang guard only
  CHECK(closed_by_server(flood.front(), 30s));
  REQUIRE(::write(done_pipe[1], "x", 1) == 1);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  for (int fd : {port_pipe[0], port_pipe[1], done_pipe[0], done_pipe[1]}) ::close(fd);
}

TEST_CASE("hostile: big frames beyond the buffering budget wait; small requests do not") {
  // Asserts on what the server admitted (its stats), never on how fast the kernel drained a socket. A
  // stalled-frame timeout longer than the test keeps the hogs' state fixed until they are shut down.
  TCPStoreServer server("127.0.0.1", 0,
                        TCPStoreServerOptions{.stalled_frame_timeout = 600s, .max_buffered_bytes = 4 << 20});
  TCPStore legit("127.0.0.1", server.port(), false, 60s);
  // Three clients each announce a 48 MiB frame and send all of it but the last byte. The budget admits
  // one frame at a time (here one over the budget, as nothing else is admitted); the other two wait.
  Bytes frame = u32(48 << 20);
  frame.resize(4 + (48 << 20) - 1, 0xAB);
  std::vector<Socket> hogs;
  std::vector<std::thread> senders;
  for (int i = 0; i < 3; ++i) hogs.push_back(raw_connect(server.port()));
  for (int i = 0; i < 3; ++i) senders.emplace_back([&, i] { send_some(hogs[i], frame, 120s); });
  // Hang guard only: each hog's first 64 KiB reach the server whatever the scheduling.
  const Deadline guard = deadline_after(60s);
  while (server.stats().frames_waiting < 2 && Clock::now() < guard) std::this_thread::sleep_for(5ms);
  auto held = server.stats();
  CHECK(held.frames_admitted == 1);
  CHECK(held.frames_waiting == 2);

  exercise(legit, "small");  // small requests are read while two big frames wait for budget
  auto after = server.stats();
  CHECK(after.frames_admitted == 1);
  CHECK(after.frames_waiting == 2);

  // The hogs give up (their sockets shut down, the senders' sends fail). Each admitted frame is read to
  // its end and its connection closed, which admits the next; then a legitimate 2 MiB set gets budget.
  for (auto& h : hogs) ::shutdown(h.fd(), SHUT_RDWR);
  for (auto& t : senders) t.join();
  Bytes big(2 << 20, 7);
  legit.set("big", big);
  CHECK(legit.get("big") == big);
  for (auto& h : hogs) CHECK(closed_by_server(h, 30s));
  auto end = server.stats();
  CHECK(end.frames_waiting == 0);
  CHECK(end.most_admitted_at_once == 1);  // a 48 MiB frame and the 2 MiB one never shared the budget
  CHECK(end.frames_admitted >= 2);        // the 2 MiB set, and at least the first hog
}

TEST_CASE("hostile: seeded random bytes from 64 sockets, then every call works") {
  TCPStoreServer server("127.0.0.1", 0, TCPStoreServerOptions{.stalled_frame_timeout = 500ms});
  TCPStore legit("127.0.0.1", server.port(), false, 10s);
  std::mt19937 rng(12345);
  Bytes valid_get = {9, 0, 0, 0, 2, 4, 0, 0, 0, 'k', 'e', 'y', '1'};
  std::vector<Socket> sockets(64);
  auto start = Clock::now();
  int sends = 0;
  for (int round = 0; round < 40 && seconds_since(start) < 8.0; ++round) {
    for (auto& s : sockets) {
      if (!s.valid()) s = raw_connect(server.port());
      Bytes b;
      switch (rng() % 4) {
        case 0:  // pure noise
          b.resize(1 + rng() % 512);
          for (auto& x : b) x = static_cast<uint8_t>(rng());
          break;
        case 1:  // a plausible length prefix, then noise
          b = u32(1 + rng() % 256);
          b.resize(4 + rng() % 300, static_cast<uint8_t>(rng()));
          break;
        case 2:  // a valid request with a byte or two changed
          b = valid_get;
          b[rng() % b.size()] = static_cast<uint8_t>(rng());
          break;
        case 3:  // a valid request cut short
          b.assign(valid_get.begin(), valid_get.begin() + rng() % valid_get.size());
          break;
      }
      try {
        s.send_all(b.data(), b.size(), deadline_after(200ms));
      } catch (const lockstep::Error&) {
        s.close();  // the server already closed it
      }
      ++sends;
      if (rng() % 8 == 0) s.close();  // some vanish mid-message
    }
    if (round % 10 == 0) exercise(legit, "during" + std::to_string(round));
  }
  INFO("sent ", sends, " garbage messages in ", seconds_since(start), " s");
  CHECK(sends > 1000);
  sockets.clear();
  exercise(legit, "after");
  TCPStore fresh("127.0.0.1", server.port(), false, 10s);
  exercise(fresh, "fresh");
  CHECK(fresh.get_string("after/k") == "v");
}

TEST_CASE("hostile: a client reaching a listener that is not a TCPStore server fails at its timeout") {
  // One listener never answers; the other answers every connection with an HTTP status line.
  Socket mute = Socket::listen("127.0.0.1", 0);
  Socket chatty = Socket::listen("127.0.0.1", 0);
  std::atomic<bool> stop{false};
  std::thread answerer([&] {
    std::vector<Socket> accepted;
    while (!stop) {
      Socket c = chatty.accept();
      if (c.valid()) {
        const char reply[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
        c.send_all(reply, sizeof(reply) - 1, deadline_after(1s));
        accepted.push_back(std::move(c));
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  auto start = Clock::now();
  std::string err;
  try {
    TCPStore("127.0.0.1", mute.local_port(), false, 300ms);
  } catch (const lockstep::Error& e) {
    err = e.what();
  }
  CHECK(seconds_since(start) < 30.0);  // hang guard only
  CHECK(err.find("TCPStore: could not connect to master at 127.0.0.1:" + std::to_string(mute.local_port()) +
                 " within 0.3s") != std::string::npos);
  CHECK_MESSAGE(err.find("timed out") != std::string::npos, err);
  err.clear();
  try {
    TCPStore("127.0.0.1", chatty.local_port(), false, 300ms);
  } catch (const lockstep::Error& e) {
    err = e.what();
  }
  CHECK_MESSAGE(err.find("not a TCPStore server (bad reply to the handshake)") != std::string::npos, err);
  stop = true;
  answerer.join();
}

TEST_CASE("the server listens on the address it is given, not on every interface") {
  TCPStoreServer server("127.0.0.1", 0);
  CHECK(server.bound_address() == "127.0.0.1:" + std::to_string(server.port()));
  TCPStore master("127.0.0.1", 0, true, 5s);
  if (auto other = other_local_ipv4()) {
    INFO("other local address: ", *other);
    for (uint16_t port : {server.port(), master.port()}) {
      std::string err;
      try {
        Socket::connect(*other, port, deadline_after(2s));
      } catch (const lockstep::Error& e) {
        err = e.what();
      }
      CHECK_MESSAGE(err.find("Connection refused") != std::string::npos, err);
    }
  } else {
    MESSAGE("no non-loopback IPv4 address: checked the bound address only");
  }
}

// ---- The job token (distributed/net/job_token.h; the handshake in tcp_store_protocol.h) ----

namespace {

const JobToken kJobToken("5f0c3b8e2a7d4c6e9f1a2b3c4d5e6f70", "test");
const JobToken kWrongToken("00000000000000000000000000000000", "test");

Bytes recv_frame(const Socket& s) {
  uint32_t len = 0;
  s.recv_all(&len, 4, deadline_after(5s));
  REQUIRE(len >= 1);
  REQUIRE(len <= 1024);
  Bytes body(len);
  s.recv_all(body.data(), len, deadline_after(5s));
  return body;
}

Bytes frame_of(detail::Command c, const uint8_t* value, size_t n) {
  detail::Request q;
  q.command = c;
  q.value.assign(value, value + n);
  return detail::encode_request(q);
}

std::string refused_message(uint16_t port) {
  return "TCPStore: the server at 127.0.0.1:" + std::to_string(port) +
         " refused this process's job token (wrong or missing LOCKSTEP_JOB_TOKEN)";
}

bool is_refusal(const Bytes& body) {
  if (body.empty() || body[0] != static_cast<uint8_t>(detail::Status::kError)) return false;
  detail::FrameReader r(body.data() + 1, body.size() - 1);
  return r.str() == detail::kRefusedJobToken;
}

}  // namespace

TEST_CASE("job token: without it, with a wrong one, or by replay, a client is refused while the job runs") {
  using lockstep::testing::kSanitizerSlowdown;
  // A 2-rank job on the store below: all-reduces before, during and after the attacks (each rank waits
  // for "attacks_done" between its two halves, so the attacks fall inside the job, whatever the timing).
  // The ranks are forked first, while this process has no other threads (the server's come next): a
  // child of a threaded process must not start threads, as its process group does (ThreadSanitizer
  // refuses to). They learn the server's port through a pipe.
  int port_pipe[2];
  REQUIRE(::pipe(port_pipe) == 0);
  auto job = lockstep::testing::start_ranks(2, [&](int rank) {
    ::close(port_pipe[1]);
    uint16_t port = 0;
    pollfd pfd{port_pipe[0], POLLIN, 0};
    RANK_CHECK(::poll(&pfd, 1, 60000 * kSanitizerSlowdown) == 1, "no port from the test's server");
    RANK_CHECK(::read(port_pipe[0], &port, sizeof(port)) == sizeof(port), "a short read of the port");
    {
      auto store = std::make_shared<TCPStore>("127.0.0.1", port, false, 20s, std::nullopt, true, kJobToken);
      ProcessGroupGloo::Options options;
      options.timeout = 20s;
      options.token = kJobToken;
      ProcessGroupGloo pg(store, rank, 2, options);
      auto all_reduce_steps = [&](int from, int to) {
        for (int step = from; step < to; ++step) {
          lockstep::Tensor t = lockstep::full({4}, rank + step);
          pg.all_reduce(t, ReduceOp::SUM, /*async_op=*/false);
          for (double v : t.to_vector<double>()) {
            RANK_CHECK(v == 2 * step + 1, "step ", step, ": got ", v, ", expected ", 2 * step + 1);
          }
        }
      };
      all_reduce_steps(0, 5);
      store->add("started", 1);
      store->wait({"attacks_done"});
      all_reduce_steps(5, 10);
    }
  });
  ::close(port_pipe[0]);
  TCPStoreServer server("127.0.0.1", 0, TCPStoreServerOptions{.token = kJobToken});
  const uint16_t port = server.port();
  for (int r = 0; r < 2; ++r) REQUIRE(::write(port_pipe[1], &port, sizeof(port)) == sizeof(port));
  ::close(port_pipe[1]);
  TCPStore legit("127.0.0.1", port, false, 10s, std::nullopt, true, kJobToken);
  exercise(legit, "before");
  // Both ranks inside the job (a hang guard: ranks that died are reported, not waited for forever).
  const auto until = std::chrono::steady_clock::now() + 60s * kSanitizerSlowdown;
  while (legit.add("started", 0) < 2 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
  if (legit.add("started", 0) < 2) {
    auto results = lockstep::testing::wait_ranks(job, 1s);
    FAIL("the job's ranks did not both start:", lockstep::testing::failures(results));
  }

  // No token, and a wrong one: refused at once (not retried until the timeout), with the message.
  std::string message;
  try {
    TCPStore("127.0.0.1", port, false, 10s);
  } catch (const JobTokenError& e) {
    message = e.what();
  }
  CHECK(message == refused_message(port));
  message.clear();
  try {
    TCPStore("127.0.0.1", port, false, 10s, std::nullopt, true, kWrongToken);
  } catch (const JobTokenError& e) {
    message = e.what();
  }
  CHECK(message == refused_message(port));

  // A request before any handshake: refused and closed.
  {
    Socket s = raw_connect(port);
    Bytes get = {9, 0, 0, 0, 2, 4, 0, 0, 0, 'k', 'e', 'y', '1'};
    s.send_all(get.data(), get.size(), deadline_after(5s));
    CHECK(is_refusal(recv_frame(s)));
    CHECK(closed_by_server(s, 5s));
  }

  // A big first frame: refused as soon as its length prefix is in, before the body is read.
  {
    Socket s = raw_connect(port);
    Bytes prefix = u32(1000000);
    s.send_all(prefix.data(), prefix.size(), deadline_after(5s));
    CHECK(is_refusal(recv_frame(s)));
    CHECK(closed_by_server(s, 5s));
  }

  // A captured handshake, replayed on a new connection: the server's nonce is fresh, so the captured
  // proof answers nothing and the replay is refused.
  Bytes captured;
  Bytes first_nonce;
  {
    Socket s = raw_connect(port);
    const JobToken::Nonce mine = JobToken::nonce();
    Bytes hello = frame_of(detail::Command::kHello, mine.data(), mine.size());
    s.send_all(hello.data(), hello.size(), deadline_after(5s));
    Bytes body = recv_frame(s);
    REQUIRE(body[0] == static_cast<uint8_t>(detail::Status::kOk));
    detail::FrameReader r(body.data() + 1, body.size() - 1);
    first_nonce = r.blob();
    const JobToken::Mac proof = kJobToken.prove(detail::kClientProof, first_nonce, mine);
    Bytes auth = frame_of(detail::Command::kAuth, proof.data(), proof.size());
    s.send_all(auth.data(), auth.size(), deadline_after(5s));
    body = recv_frame(s);
    CHECK(body[0] == static_cast<uint8_t>(detail::Status::kOk));  // the genuine exchange is accepted
    captured = hello;
    captured.insert(captured.end(), auth.begin(), auth.end());
  }
  {
    Socket s = raw_connect(port);
    s.send_all(captured.data(), captured.size(), deadline_after(5s));
    Bytes body = recv_frame(s);
    REQUIRE(body[0] == static_cast<uint8_t>(detail::Status::kOk));
    detail::FrameReader r(body.data() + 1, body.size() - 1);
    CHECK(r.blob() != first_nonce);
    CHECK(is_refusal(recv_frame(s)));
    CHECK(closed_by_server(s, 5s));
  }
  CHECK(server.stats().refused_peers == 5);

  exercise(legit, "during");
  legit.set("attacks_done", "");
  const auto results = lockstep::testing::wait_ranks(job);
  CHECK_MESSAGE(lockstep::testing::all_ok(results), lockstep::testing::failures(results));
  exercise(legit, "after");
}

TEST_CASE("job token: at max_connections, connections that never prove the token make room") {
  TCPStoreServer server("127.0.0.1", 0, TCPStoreServerOptions{.max_connections = 4, .token = kJobToken});
  std::vector<Socket> unproven;  // each sends a valid hello, reads its nonce, and stops there
  for (int i = 0; i < 4; ++i) {
    unproven.push_back(raw_connect(server.port()));
    const JobToken::Nonce n = JobToken::nonce();
    Bytes hello = frame_of(detail::Command::kHello, n.data(), n.size());
    unproven.back().send_all(hello.data(), hello.size(), deadline_after(5s));
    REQUIRE(recv_frame(unproven.back())[0] == static_cast<uint8_t>(detail::Status::kOk));
  }
  TCPStore legit("127.0.0.1", server.port(), false, 10s, std::nullopt, true, kJobToken);
  exercise(legit, "legit");
  CHECK(closed_by_server(unproven.front(), 30s));  // evicted, oldest first
  TCPStore second("127.0.0.1", server.port(), false, 10s, std::nullopt, true, kJobToken);
  exercise(second, "second");
  exercise(legit, "legit_again");  // a proven connection is never evicted
  CHECK(server.stats().refused_peers == 0);  // evicted, not refused
}

TEST_CASE("job token: a client with a token refuses a server without one, and none is needed without tokens") {
  TCPStoreServer plain("127.0.0.1", 0);
  std::string message;
  try {
    TCPStore("127.0.0.1", plain.port(), false, 10s, std::nullopt, true, kJobToken);
  } catch (const JobTokenError& e) {
    message = e.what();
  }
  CHECK(message == "TCPStore: the server at 127.0.0.1:" + std::to_string(plain.port()) +
                       " has no job token while this process has one (LOCKSTEP_JOB_TOKEN is set here but not where "
                       "the master runs)");
  TCPStore none("127.0.0.1", plain.port(), false, 10s);  // no tokens anywhere: as before
  exercise(none, "plain");
  CHECK(plain.stats().refused_peers == 0);
}
