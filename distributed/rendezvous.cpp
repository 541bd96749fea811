// The rendezvous: opening the store (and the launcher's port retry), the checks every rank runs on it.
#include "distributed/rendezvous.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "common/check.h"
#include "common/env.h"
#include "distributed/net/socket.h"
#include "distributed/store/file_store.h"
#include "distributed/store/prefix_store.h"
#include "distributed/store/tcp_store.h"

namespace lockstep::dist::detail {

namespace {

using std::chrono::milliseconds;

// How long the rank hosting the TCPStore keeps it up after a failed rendezvous, so the other ranks can
// read why before it goes away.
constexpr milliseconds kAbortLinger{2000};

// The launcher (launch.cpp), when it chose MASTER_PORT itself, passes rank 0 a pipe in this variable.
// Rank 0 writes "address-in-use HOST:PORT" to it when the port is taken, and the launcher restarts the
// ranks on another port.
constexpr const char* kLaunchStatusFdVar = "LOCKSTEP_LAUNCH_STATUS_FD";

// True when the launcher was told (so it will retry on another port).
bool tell_launcher_address_in_use(const std::string& addr) {
  const std::optional<std::string> v = env_string(kLaunchStatusFdVar);
  if (!v) return false;
  int fd = -1;
  auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), fd);
  if (ec != std::errc() || ptr != v->data() + v->size() || fd < 0 || ::fcntl(fd, F_GETFD) == -1) return false;
  const std::string line = "address-in-use " + addr + "\n";
  return ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
}

// How long a rank that is about to fail waits for the store to tell the others why.
constexpr milliseconds kNotifyTimeout{5000};

// When rank 0 finds its port taken: is it this job's store, hosted by another process that also
// claims rank 0? Then joining it (as a client) lets the rendezvous report the duplicate to every rank.
std::shared_ptr<Store> existing_rendezvous(const Rendezvous& rv, const std::string& prefix, milliseconds timeout) {
  const milliseconds probe = std::min(timeout, milliseconds(1000));
  try {
    auto store = std::make_shared<TCPStore>(rv.host, rv.port, /*is_master=*/false, probe, std::nullopt, true, rv.token);
    PrefixStore generation(prefix, store);
    const Deadline until = deadline_after(probe);
    do {
      if (generation.check({"master"})) {
        store->set_timeout(timeout);
        return store;
      }
      std::this_thread::sleep_for(milliseconds(20));
    } while (Clock::now() < until);
  } catch (const Error&) {
    // Not a TCPStore, or not answering: the port is simply in use.
  }
  return nullptr;
}

}  // namespace

OpenedStore make_store(const Rendezvous& rv, const std::string& prefix, milliseconds timeout) {
  if (rv.kind == Rendezvous::File) {
    try {
      return {std::make_shared<FileStore>(rv.path, rv.world_size, timeout)};
    } catch (const Error& e) {
      fail("init_process_group: rank ", rv.rank, " could not open the file store: ", e.what());
    }
  }
  const std::string addr = format_address(rv.host, rv.port);
  try {
    return {std::make_shared<TCPStore>(rv.host, rv.port, /*is_master=*/rv.rank == 0, timeout, std::nullopt, true,
                                       rv.token),
            rv.rank == 0};
  } catch (const AddressInUseError& e) {
    if (!tell_launcher_address_in_use(addr)) {
      if (auto store = existing_rendezvous(rv, prefix, timeout)) return {store};
    }
    fail("init_process_group: rank 0 could not host the store on ", addr, " (is another job using the port?): ",
         e.what());
  } catch (const JobTokenError& e) {
    fail("init_process_group: rank ", rv.rank, ": ", e.what());
  } catch (const Error& e) {
    if (rv.rank == 0) fail("init_process_group: rank 0 could not host the store on ", addr, ": ", e.what());
    fail("init_process_group: rank ", rv.rank, " could not reach the store at ", addr, " (rank 0 hosts it) within ",
         detail::format_seconds(timeout), ": ", e.what());
  }
}

[[noreturn]] void fail_rank_out_of_range(const Rendezvous& rv, const std::string& prefix, milliseconds timeout) {
  const std::string why = lockstep::detail::str_cat("a process was started with rank ", rv.rank,
                                                    ", out of range for world_size ", rv.world_size, " (ranks are 0..",
                                                    rv.world_size - 1, ")");
  if (rv.kind == Rendezvous::Tcp) {
    try {
      auto store = std::make_shared<TCPStore>(rv.host, rv.port, /*is_master=*/false, std::min(timeout, kNotifyTimeout),
                                              std::nullopt, true, rv.token);
      PrefixStore rendezvous(prefix, store);
      rendezvous.add("aborters", 1);  // counted by the host's linger, as a rank that has seen the abort
      rendezvous.set("abort", why);
    } catch (const Error&) {
      // Nobody to tell yet: the others will name the rank that is missing when their timeout passes.
    }
  }
  fail("init_process_group: rank ", rv.rank, " is out of range for world_size ", rv.world_size, " (ranks are 0..",
       rv.world_size - 1, ")");
}

namespace {

// Identifies this process in duplicate-rank errors.
std::string process_token() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  return lockstep::detail::str_cat(host, ":pid ", ::getpid(), " #", rd() % 100000);
}

// The rendezvous checks, on `store` (this generation's prefix). Every rank registers as "rank/<r>"
// and writes its world size; a disagreement is published under "abort" so that every waiting rank
// fails with the same message. `hosting`: this rank serves the store (TCP rank 0), and keeps it up a
// little after a failure so the others can read the reason.
class RendezvousCheck {
 public:
  RendezvousCheck(Store& store, const Rendezvous& rv, bool hosting, Deadline deadline, milliseconds timeout)
      : store_(store), rv_(rv), hosting_(hosting), deadline_(deadline), timeout_(timeout) {}

  void run() {
    store_.add("joined", 1);
    const std::string ws = std::to_string(rv_.world_size);
    std::string seen = store_.compare_set("world_size", "", ws);
    if (seen != ws) {
      abort(lockstep::detail::str_cat("rank ", rv_.rank, " has world_size ", rv_.world_size,
                                      " but a rank that joined before it has world_size ", seen,
                                      " (every rank must be started with the same WORLD_SIZE)"));
    }
    const std::string token = process_token();
    const std::string key = "rank/" + std::to_string(rv_.rank);
    std::string owner = store_.compare_set(key, "", token);
    if (owner != token) {
      abort(lockstep::detail::str_cat("rank ", rv_.rank, " was claimed twice, by ", owner, " and by ", token,
                                      " (give every process its own RANK and every job its own MASTER_PORT; with "
                                      "file://, remove a file left over from an earlier job)"));
    }
    wait_for_all();
  }

 private:
  void wait_for_all() {
    std::vector<std::string> keys;
    for (int r = 0; r < rv_.world_size; ++r) keys.push_back("rank/" + std::to_string(r));
    auto pause = milliseconds(1);
    for (;;) {
      if (store_.check({"abort"})) {
        std::string why = store_.get_string("abort");
        store_.add("abort_acks", 1);  // after reading: the host may close the store once all have acked
        linger();
        fail("init_process_group: rank ", rv_.rank, ": the rendezvous failed: ", why);
      }
      if (store_.check(keys)) return;
      if (Clock::now() >= deadline_) {
        std::vector<int> missing;
        for (int r = 0; r < rv_.world_size; ++r) {
          if (!store_.check({keys[r]})) missing.push_back(r);
        }
        if (missing.empty()) return;
        std::string names;
        for (int r : missing) names += (names.empty() ? "" : ", ") + std::to_string(r);
        abort(lockstep::detail::str_cat(missing.size() == 1 ? "rank " : "ranks ", names, " of world size ",
                                        rv_.world_size, " did not join within ", detail::format_seconds(timeout_)),
              /*timed_out=*/true);
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, milliseconds(50));
    }
  }

  [[noreturn]] void abort(const std::string& why, bool timed_out = false) {
    try {
      store_.add("aborters", 1);
      store_.set("abort", why);
      linger();
    } catch (const std::exception&) {
      // Best effort: this rank's own error below is what matters.
    }
    if (timed_out) throw TimeoutError("init_process_group: " + why);
    fail("init_process_group: ", why);
  }

  // The host keeps the store up until every rank (the world_size expected, or all that joined if more
  // did) has seen the abort, or kAbortLinger: a rank still connecting then learns why, instead of
  // finding the store gone.
  void linger() {
    if (!hosting_) return;
    Deadline until = Clock::now() + std::min(kAbortLinger, timeout_);
    while (Clock::now() < until) {
      int64_t expected = std::max<int64_t>(rv_.world_size, store_.add("joined", 0));
      if (store_.add("abort_acks", 0) + store_.add("aborters", 0) >= expected) return;
      std::this_thread::sleep_for(milliseconds(5));
    }
  }

  Store& store_;
  const Rendezvous& rv_;
  bool hosting_;
  Deadline deadline_;
  milliseconds timeout_;
};

}  // namespace

void check_rendezvous(Store& store, const Rendezvous& rv, bool hosting, Deadline deadline, milliseconds timeout) {
  RendezvousCheck(store, rv, hosting, deadline, timeout).run();
}

// Connection errors are retried (the store reconnects) until the deadline.
void await_master(Store& store, const Rendezvous& rv, Deadline deadline, milliseconds timeout) {
  auto pause = milliseconds(1);
  std::string last_error;
  for (;;) {
    try {
      if (store.check({"master"})) return;
    } catch (const Error& e) {
      last_error = e.what();
    }
    if (Clock::now() >= deadline) {
      fail("init_process_group: rank ", rv.rank, ": the store at ", format_address(rv.host, rv.port),
           " was not started by this job's rank 0 within ", detail::format_seconds(timeout),
           last_error.empty() ? "" : " (last error: " + last_error + ")");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(50));
  }
}

}  // namespace lockstep::dist::detail
