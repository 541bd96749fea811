// Collective fingerprints: LOCKSTEP_DISTRIBUTED_DEBUG=DETAIL (torch's TORCH_DISTRIBUTED_DEBUG=DETAIL).
//
// Every rank must call the same collectives, with the same dtypes, shapes and arguments, in the same
// order. When one does not, the collectives pair up wrongly: they hang until the timeout, or worse,
// finish with corrupted data. With LOCKSTEP_DISTRIBUTED_DEBUG=DETAIL each collective is first described
// by a fingerprint, "all_reduce(float32 [1024], SUM)", which every rank publishes in the group's store
// under the collective's number and compares with every other rank's before the collective runs:
//
//   collective #7 mismatch: rank 0 called all_reduce(float32 [1024], SUM), rank 1 called all_reduce(float32 [512], SUM)
//   rank 1 did not call collective #7 all_reduce(float32 [1024], SUM) within 30s
//
// The first is raised on every rank (each sees every fingerprint); the second on the ranks that
// waited. The check costs one store round trip per collective and makes each call block until every
// rank has made it; it is off by default (OFF or INFO), and then costs nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "distributed/store/store.h"
#include "tensor/tensor.h"

namespace lockstep::dist {

enum class DebugLevel { Off, Info, Detail };

// LOCKSTEP_DISTRIBUTED_DEBUG: unset or empty, OFF, INFO or DETAIL (any case). Throws lockstep::Error
// for any other value.
DebugLevel debug_level();

namespace detail {

// "all_reduce(float32 [1024], SUM)", "broadcast(int64 [2, 3], root 1)", "barrier()": `tensor` may be
// null (barrier), `reduce_op` null (no reduction), `root` -1 (no root).
std::string fingerprint(const char* op, const Tensor* tensor, const char* reduce_op = nullptr, int root = -1);

// Compares each collective's fingerprint across the ranks of one group, through `store` (the group's
// own prefix of it). Keys: "debug/<n>/<rank>" for collective #n; a rank removes its key of #n - 1 once
// every rank has published #n (by then every rank has read #n - 1). Thread-safe.
class CollectiveChecker {
 public:
  CollectiveChecker(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout);

  // Publishes `call` as the next collective and returns once every rank has published the same call.
  // Throws lockstep::Error on a mismatch, lockstep::TimeoutError naming the ranks that did not call it
  // within the timeout. After a failure every later call throws, naming the first failure: the ranks
  // no longer agree on the numbering.
  void check(const std::string& call);

 private:
  std::string key(uint64_t n, int rank) const;

  std::shared_ptr<Store> store_;
  const int rank_, size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  uint64_t count_ = 0;    // guarded by mu_: collectives checked so far
  std::string failure_;   // guarded by mu_
};

}  // namespace detail
}  // namespace lockstep::dist
