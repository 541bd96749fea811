// Work: the completion flag behind every collective's handle.
#include "distributed/work.h"

#include "distributed/store/store.h"  // TimeoutError, detail::format_seconds

namespace lockstep::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "SUM";
    case ReduceOp::AVG: return "AVG";
    case ReduceOp::MIN: return "MIN";
    case ReduceOp::MAX: return "MAX";
    case ReduceOp::PRODUCT: return "PRODUCT";
  }
  return "?";
}

void Work::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (timeout > kNoTimeout) {
    if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
      throw TimeoutError(lockstep::detail::str_cat("Work::wait: ", op_, " (collective #", seq_,
                                                   ") did not complete within ", detail::format_seconds(timeout)));
    }
  } else {
    cv_.wait(lock, [&] { return completed_; });
  }
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() {
  std::lock_guard lock(mu_);
  return completed_;
}

bool Work::is_success() {
  std::lock_guard lock(mu_);
  return completed_ && !error_;
}

std::exception_ptr Work::exception() {
  std::lock_guard lock(mu_);
  return error_;
}

void Work::then(std::function<void()> fn) {
  std::unique_lock lock(mu_);
  if (!continuations_ran_ && !completed_) {
    continuations_.push_back(std::move(fn));
    return;
  }
  // The backend's thread is past its continuations: they are ours to run once the work has finished.
  cv_.wait(lock, [&] { return completed_; });
  const bool ok = !error_;
  lock.unlock();
  if (ok) fn();
}

void Work::run_continuations() {
  std::vector<std::function<void()>> todo;
  {
    std::lock_guard lock(mu_);
    if (continuations_ran_) return;
    continuations_ran_ = true;
    todo.swap(continuations_);
  }
  for (auto& fn : todo) fn();
}

void Work::finish(std::exception_ptr error) {
  if (!error) {
    try {
      run_continuations();
    } catch (...) {
      error = std::current_exception();
    }
  }
  {
    std::lock_guard lock(mu_);
    completed_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

}  // namespace lockstep::dist
