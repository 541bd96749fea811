// The rendezvous under init_process_group: where the ranks meet (parsed by init.cpp), opening the
// store there, and the checks every rank runs on it before its process group connects: each rank
// registers once, every rank has the same world size, ranks that never come are named. A failure is
// published under the store's "abort" key, so every waiting rank fails with the same message.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/deadline.h"
#include "distributed/net/job_token.h"
#include "distributed/store/store.h"

namespace lockstep::dist::detail {

// Where and how the ranks meet, parsed from InitOptions.
struct Rendezvous {
  enum Kind { Tcp, File } kind = Tcp;
  std::string host;
  uint16_t port = 0;
  std::string path;
  int world_size = -1;
  int rank = -1;
  JobToken token{};  // LOCKSTEP_JOB_TOKEN's, read once by init_process_group; proven to the TCPStore
};

struct OpenedStore {
  std::shared_ptr<Store> store;
  bool hosting = false;  // this process serves it (TCP rank 0)
};

// The store of `rv`, keys of this generation under `prefix`. TCP rank 0 hosts it; when its port is
// taken, the launcher is told (it retries on another port), or the store there is joined when it is
// this job's (a second rank 0), so the rendezvous reports the duplicate.
OpenedStore make_store(const Rendezvous& rv, const std::string& prefix, std::chrono::milliseconds timeout);

// A rank outside [0, world_size) fails; before that it tries, briefly, to tell the other ranks (who
// would otherwise wait for the rank that is missing) through the store's "abort" key.
[[noreturn]] void fail_rank_out_of_range(const Rendezvous& rv, const std::string& prefix,
                                         std::chrono::milliseconds timeout);

// A rank reaching a TCPStore port first makes sure the server there was started by this generation's
// rank 0 (its "master" key): after destroy_process_group a fast rank may reconnect to the port before
// rank 0 has closed the previous store.
void await_master(Store& store, const Rendezvous& rv, Deadline deadline, std::chrono::milliseconds timeout);

// The checks, on `store` (this generation's prefix); returns once every rank has registered. `hosting`:
// this rank serves the store, and keeps it up a little after a failure so the others can read why.
void check_rendezvous(Store& store, const Rendezvous& rv, bool hosting, Deadline deadline,
                      std::chrono::milliseconds timeout);

}  // namespace lockstep::dist::detail
