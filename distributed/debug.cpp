// Collective fingerprints (LOCKSTEP_DISTRIBUTED_DEBUG=DETAIL): publish, wait, compare.
#include "distributed/debug.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <vector>

#include "common/check.h"
#include "common/env.h"

namespace lockstep::dist {

DebugLevel debug_level() {
  const std::string v = env_string("LOCKSTEP_DISTRIBUTED_DEBUG").value_or("");
  std::string s = v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  if (s.empty() || s == "OFF") return DebugLevel::Off;
  if (s == "INFO") return DebugLevel::Info;
  if (s == "DETAIL") return DebugLevel::Detail;
  fail("LOCKSTEP_DISTRIBUTED_DEBUG=\"", v, "\" is not one of OFF, INFO, DETAIL");
}

namespace detail {

std::string fingerprint(const char* op, const Tensor* tensor, const char* reduce_op, int root) {
  std::string s = std::string(op) + "(";
  if (tensor) s += lockstep::detail::str_cat(dtype_name(tensor->dtype()), " ", tensor->shape());
  if (reduce_op) s += std::string(", ") + reduce_op;
  if (root >= 0) s += ", root " + std::to_string(root);
  return s + ")";
}

CollectiveChecker::CollectiveChecker(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout)
    : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout) {
  LOCKSTEP_CHECK(store_ != nullptr, "CollectiveChecker: the store is null");
}

std::string CollectiveChecker::key(uint64_t n, int rank) const {
  return "debug/" + std::to_string(n) + "/" + std::to_string(rank);
}

void CollectiveChecker::check(const std::string& call) {
  std::lock_guard lock(mu_);
  LOCKSTEP_CHECK(failure_.empty(), call, " not run: an earlier collective check failed on this group: ", failure_);
  const uint64_t n = ++count_;
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(key(n, r));
  try {
    store_->set(keys[rank_], call);
    try {
      store_->wait(keys, timeout_);
    } catch (const TimeoutError&) {
      std::vector<int> missing;
      for (int r = 0; r < size_; ++r) {
        if (!store_->check({keys[r]})) missing.push_back(r);
      }
      if (missing.empty()) throw;  // they arrived just now: report the store's own timeout
      std::string names;
      for (int r : missing) names += (names.empty() ? "" : ", ") + std::to_string(r);
      failure_ = lockstep::detail::str_cat(missing.size() == 1 ? "rank " : "ranks ", names, " did not call collective #",
                                           n, " ", call, " within ", format_seconds(timeout_));
      throw TimeoutError(failure_);
    }
    std::vector<std::string> calls(size_);
    for (int r = 0; r < size_; ++r) calls[r] = r == rank_ ? call : store_->get_string(keys[r]);
    // Rank 0's call against the first rank that differs: the same pair, in the same words, on every rank.
    for (int r = 1; r < size_; ++r) {
      if (calls[r] != calls[0]) {
        failure_ = lockstep::detail::str_cat("collective #", n, " mismatch: rank 0 called ", calls[0], ", rank ", r,
                                             " called ", calls[r]);
        fail(failure_);
      }
    }
    if (n > 1) store_->delete_key(key(n - 1, rank_));
  } catch (const Error& e) {
    if (!failure_.empty()) throw;  // the mismatch or timeout above
    failure_ = lockstep::detail::str_cat("collective #", n, " ", call, ": comparing fingerprints through the store failed: ",
                                         e.what());
    fail(failure_);
  }
}

}  // namespace detail
}  // namespace lockstep::dist
