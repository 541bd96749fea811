// Store tests: c10d semantics for TCPStore, FileStore and PrefixStore, timeouts and their messages,
// concurrency across threads and forked processes, and a TCPStore server facing hostile clients.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distributed/store/file_store.h"
#include "distributed/store/prefix_store.h"
#include "distributed/net/socket.h"
#include "distributed/store/tcp_store.h"
#include "tests/util/test_util.h"

using namespace lockstep::dist;
using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;

namespace {
using lockstep::testing::contains;
using lockstep::testing::seconds_since;

using lockstep::testing::error_of;



// A fresh directory for FileStore files, under Bazel's per-test temp dir when there is one.
std::string temp_dir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base ? base : "/tmp") + "/store_test.XXXXXX";
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// A port with nothing listening on it: bind port 0, note the port, close.
uint16_t unused_port() {
  Socket s = Socket::listen("127.0.0.1", 0);
  return s.local_port();
}

// The semantics every Store shares; `s` must start empty. Errors name keys as the underlying store
// sees them: `shown` is the PrefixStore's "prefix/", else empty.
void check_store_semantics(Store& s, const std::string& shown = "") {
  CHECK(s.num_keys() == 0);

  s.set("a", "1");
  CHECK(s.get_string("a") == "1");
  s.set("a", "one");  // overwrite
  CHECK(s.get_string("a") == "one");
  s.set("bin", Bytes{0, 255, 1, 0});
  CHECK(s.get("bin") == Bytes{0, 255, 1, 0});
  s.set("empty", "");
  CHECK(s.get("empty").empty());

  // add: a missing key starts at 0; the counter is stored as decimal text.
  CHECK(s.add("c", 5) == 5);
  CHECK(s.add("c", -7) == -2);
  CHECK(s.get_string("c") == "-2");
  s.set("n", "40");
  CHECK(s.add("n", 2) == 42);
  std::string err = error_of([&] { s.add("a", 1); });
  CHECK(contains(err, "add(\"" + shown + "a\""));
  CHECK(contains(err, "\"one\" is not an integer"));
  CHECK(s.get_string("a") == "one");  // unchanged by the failed add

  // compare_set, c10d's rules.
  CHECK(s.compare_set("cs", "", "x") == "x");  // missing + empty expected: created
  CHECK(s.get_string("cs") == "x");
  CHECK(s.compare_set("cs", "wrong", "y") == "x");  // mismatch: unchanged, current value returned
  CHECK(s.compare_set("cs", "x", "y") == "y");
  CHECK(s.get_string("cs") == "y");
  CHECK(s.compare_set("absent", "something", "z") == "something");  // missing + non-empty expected
  CHECK_FALSE(s.check({"absent"}));

  // check / delete_key / num_keys.
  CHECK(s.check({"a", "bin", "cs"}));
  CHECK_FALSE(s.check({"a", "nope"}));
  CHECK(s.check({}));
  CHECK(s.num_keys() == 6);  // a bin empty c n cs
  CHECK(s.delete_key("a"));
  CHECK_FALSE(s.delete_key("a"));
  CHECK_FALSE(s.check({"a"}));
  CHECK(s.num_keys() == 5);
  s.set("a", "back");
  CHECK(s.get_string("a") == "back");

  // wait returns at once for existing keys and times out naming the keys.
  s.wait({"a", "bin"});
  auto start = Clock::now();
  err = error_of([&] { s.wait({"a", "never"}, 100ms); });
  CHECK(contains(err, "wait([\"" + shown + "a\", \"" + shown + "never\"])"));
  CHECK(contains(err, "within 0.1s"));
  CHECK(seconds_since(start) >= 0.1);

  // get blocks for timeout() and then names the key and the timeout.
  auto old = s.timeout();
  s.set_timeout(200ms);
  CHECK(s.timeout() == 200ms);
  start = Clock::now();
  err = error_of([&] { s.get("missing"); });
  double took = seconds_since(start);
  CHECK(contains(err, "get(\"" + shown + "missing\"): key not set within 0.2s"));
  CHECK(took >= 0.2);
  CHECK(took < 2.0);
  CHECK_THROWS_AS(s.get("missing"), TimeoutError);
  s.set_timeout(old);

  // The store still works after timeouts (TCPStore reconnects).
  s.set("missing", "found");
  CHECK(s.get_string("missing") == "found");
}

// `make()` returns a fresh client of the same store; one thread blocks in get/wait until another sets.
void check_blocking_get_released(const std::function<std::unique_ptr<Store>()>& make) {
  auto waiter = make();
  auto setter = make();
  std::atomic<bool> got{false};
  std::string value;
  std::thread t([&] {
    value = waiter->get_string("late");
    waiter->wait({"late", "later"});
    got = true;
  });
  std::this_thread::sleep_for(150ms);
  CHECK_FALSE(got.load());
  setter->set("late", "here");
  std::this_thread::sleep_for(100ms);
  CHECK_FALSE(got.load());  // still waiting for "later"
  setter->set("later", "");
  t.join();
  CHECK(got.load());
  CHECK(value == "here");
}

// 16 threads and 4 forked processes each add 1, kAdds times; the counter must end at the exact total.
void check_concurrent_adds(const std::function<std::unique_ptr<Store>()>& make, int adds) {
  constexpr int kThreads = 16, kProcs = 4;
  std::vector<pid_t> pids;
  std::fflush(nullptr);  // or the children's copies of unflushed output could be written twice
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int rc = 0;
      try {
        auto s = make();
        for (int i = 0; i < adds; ++i) s->add("counter", 1);
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      try {
        auto s = make();
        for (int i = 0; i < adds; ++i) s->add("counter", 1);
      } catch (...) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (pid_t pid : pids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(failures.load() == 0);
  CHECK(make()->add("counter", 0) == int64_t{kThreads + kProcs} * adds);
}

// A raw connection to the store's port, for sending what no client would.
Socket raw_connect(uint16_t port) { return Socket::connect("127.0.0.1", port, deadline_after(2s)); }

// True when the server closes `s` within 2 s (reads EOF or a reset).
bool closed_by_server(const Socket& s) {
  try {
    uint8_t b;
    s.recv_all(&b, 1, deadline_after(2s));
  } catch (const TimeoutError&) {
    return false;
  } catch (const lockstep::Error&) {
    return true;
  }
  return false;
}

}  // namespace

TEST_CASE("format_seconds prints timeouts the way errors show them") {
  CHECK(detail::format_seconds(300000ms) == "300s");
  CHECK(detail::format_seconds(200ms) == "0.2s");
  CHECK(detail::format_seconds(1250ms) == "1.25s");
  CHECK(detail::format_seconds(5ms) == "0.005s");
}

TEST_CASE("TCPStore: store semantics, port 0") {
  TCPStore master("127.0.0.1", 0, /*is_master=*/true);
  CHECK(master.port() != 0);
  CHECK(master.is_master());
  CHECK(master.timeout() == 300s);
  check_store_semantics(master);
  TCPStore worker("127.0.0.1", master.port(), /*is_master=*/false);
  CHECK(worker.get_string("cs") == "y");  // same data through another connection
}

TEST_CASE("FileStore: store semantics, shared by two instances") {
  std::string path = temp_dir() + "/store";
  FileStore a(path);
  check_store_semantics(a);
  FileStore b(path);
  CHECK(b.get_string("cs") == "y");
  b.set("from_b", "hi");
  CHECK(a.get_string("from_b") == "hi");
}

TEST_CASE("PrefixStore: semantics and namespacing") {
  auto base = std::make_shared<TCPStore>("127.0.0.1", 0, true);
  PrefixStore p("pg0", base);
  check_store_semantics(p, "pg0/");
  CHECK(base->get_string("pg0/cs") == "y");
  CHECK_FALSE(base->check({"cs"}));
  PrefixStore other("pg1", base);
  CHECK_FALSE(other.check({"cs"}));
  CHECK(other.add("c", 1) == 1);  // independent of pg0/c
  p.set_timeout(1234ms);
  CHECK(base->timeout() == 1234ms);
  CHECK(contains(error_of([] { PrefixStore("x", nullptr); }), "PrefixStore(\"x\"): the underlying store is null"));
}

TEST_CASE("TCPStore: listen and connect errors") {
  TCPStore master("127.0.0.1", 0, true);
  std::string addr = "127.0.0.1:" + std::to_string(master.port());
  CHECK(error_of([&] { TCPStore("127.0.0.1", master.port(), true, 1s); }) ==
        "TCPStore: cannot listen on " + addr + ": Address already in use");

  uint16_t port = unused_port();
  auto start = Clock::now();
  std::string err = error_of([&] { TCPStore("127.0.0.1", port, false, 300ms); });
  CHECK(contains(err, "TCPStore: could not connect to master at 127.0.0.1:" + std::to_string(port) + " within 0.3s"));
  CHECK(contains(err, "Connection refused"));
  CHECK(seconds_since(start) >= 0.3);
  CHECK(seconds_since(start) < 3.0);
}

TEST_CASE("TCPStore: a client that starts before the master connects once it is up") {
  uint16_t port = unused_port();
  std::unique_ptr<TCPStore> master;
  std::thread late([&] {
    std::this_thread::sleep_for(200ms);
    master = std::make_unique<TCPStore>("127.0.0.1", port, true);
  });
  TCPStore worker("127.0.0.1", port, false, 5s);
  late.join();
  worker.set("k", "v");
  CHECK(master->get_string("k") == "v");
}

TEST_CASE("TCPStore: a blocking get is released by another client's set") {
  TCPStore master("127.0.0.1", 0, true);
  check_blocking_get_released([&] { return std::make_unique<TCPStore>("127.0.0.1", master.port(), false); });
}

TEST_CASE("FileStore: a blocking get is released by another instance's set") {
  std::string path = temp_dir() + "/store";
  check_blocking_get_released([&] { return std::make_unique<FileStore>(path); });
}

TEST_CASE("TCPStore: 16 threads and 4 processes add concurrently") {
  TCPStore master("127.0.0.1", 0, true);
  check_concurrent_adds([&] { return std::make_unique<TCPStore>("127.0.0.1", master.port(), false); }, 200);

  // One TCPStore shared by several threads: calls are serialized, none is lost.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) master.add("shared", 1);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(master.get_string("shared") == "400");
}

TEST_CASE("FileStore: 16 threads and 4 processes add concurrently") {
  std::string path = temp_dir() + "/store";
  check_concurrent_adds([&] { return std::make_unique<FileStore>(path); }, 25);
}

TEST_CASE("FileStore: the last of world_size stores removes the file") {
  std::string dir = temp_dir();
  {
    FileStore a(dir + "/two", 2);
    {
      FileStore b(dir + "/two", 2);
      b.set("k", "v");
    }
    CHECK(file_exists(dir + "/two"));
    CHECK(a.get_string("k") == "v");
  }
  CHECK_FALSE(file_exists(dir + "/two"));
  { FileStore keep(dir + "/keep"); }
  CHECK(file_exists(dir + "/keep"));
  CHECK(contains(error_of([&] { FileStore(dir + "/no/such/dir/f"); }), "cannot open " + dir + "/no/such/dir/f"));
}

TEST_CASE("TCPStore: wait_for_workers") {
  uint16_t port = unused_port();
  std::vector<std::thread> workers;
  for (int i = 0; i < 2; ++i) {
    workers.emplace_back([port] {
      TCPStore w("127.0.0.1", port, false, 5s, 3);
      w.get("go");  // keep the connection until the master has seen everyone
    });
  }
  TCPStore master("127.0.0.1", port, true, 5s, 3);
  master.set("go", "");
  for (auto& t : workers) t.join();
  CHECK(master.num_keys() == 1);  // the rendezvous counters are not user keys

  auto start = Clock::now();
  std::string err = error_of([] { TCPStore("127.0.0.1", 0, true, 300ms, 2); });
  CHECK(contains(err, "only 1 of 2 stores connected within 0.3s"));
  CHECK(seconds_since(start) < 3.0);
}

TEST_CASE("TCPStore: bad messages drop only the offending connection") {
  TCPStore master("127.0.0.1", 0, true);
  TCPStore before("127.0.0.1", master.port(), false);
  before.set("k", "v");

  {  // A length prefix over the 64 MiB limit.
    Socket s = raw_connect(master.port());
    uint32_t huge = 0xFFFFFFF0u;
    s.send_all(&huge, 4, deadline_after(2s));
    CHECK(closed_by_server(s));
  }
  {  // A well-framed body with an unknown command.
    Socket s = raw_connect(master.port());
    uint8_t frame[] = {3, 0, 0, 0, 0x77, 1, 2};
    s.send_all(frame, sizeof(frame), deadline_after(2s));
    CHECK(closed_by_server(s));
  }
  {  // A set whose key length runs past the end of the body.
    Socket s = raw_connect(master.port());
    uint8_t frame[] = {6, 0, 0, 0, 1, 0xff, 0xff, 0, 0, 'k'};
    s.send_all(frame, sizeof(frame), deadline_after(2s));
    CHECK(closed_by_server(s));
  }
  {  // Half a frame, then the client vanishes.
    Socket s = raw_connect(master.port());
    uint8_t frame[] = {100, 0, 0, 0, 1, 2};
    s.send_all(frame, sizeof(frame), deadline_after(2s));
  }

  TCPStore after("127.0.0.1", master.port(), false);
  CHECK(after.get_string("k") == "v");
  CHECK(before.add("n", 3) == 3);
  CHECK(master.num_keys() == 2);

  // The client refuses values over the limit before sending, and large legal values round-trip.
  std::string err = error_of([&] { after.set("big", Bytes(65u << 20)); });
  CHECK(contains(err, "exceeds the 67108864-byte message limit"));
  Bytes big(3u << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7);
  after.set("big", big);
  CHECK(before.get("big") == big);
}

TEST_CASE("TCPStore: destroying the master releases clients blocked in get") {
  auto master = std::make_unique<TCPStore>("127.0.0.1", 0, true);
  TCPStore worker("127.0.0.1", master->port(), false, 10s);
  std::string err;
  std::thread t([&] { err = error_of([&] { worker.get("never"); }); });
  std::this_thread::sleep_for(100ms);
  auto start = Clock::now();
  master.reset();
  t.join();
  CHECK(seconds_since(start) < 2.0);
  CHECK(contains(err, "TCPStore: get(\"never\") on master 127.0.0.1:"));
  CHECK(contains(err, "connection closed by peer"));
}
