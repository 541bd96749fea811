// WorkQueue: one worker thread, blocking calls run on the caller's thread when the queue is idle.
#include "distributed/work_queue.h"

#include <algorithm>

#include "common/check.h"
#include "distributed/net/socket.h"

namespace lockstep::dist {

namespace {

using lockstep::detail::str_cat;

}  // namespace

std::string CollectiveInfo::str() const {
  std::string s = op;
  if (numel >= 0) s += str_cat(" (", dtype_name(dtype), ", ", numel, " elements");
  if (detail) s += str_cat(", ", detail);
  if (root >= 0) s += str_cat(", root ", root);
  if (numel >= 0) s += ")";
  return s;
}

WorkQueue::WorkQueue(Options options) : options_(std::move(options)) {
  BlockSigpipe no_sigpipe(options_.block_sigpipe);  // the worker inherits the mask
  worker_ = std::thread([this] { worker_loop(); });
}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::shared_ptr<Work> WorkQueue::submit(const CollectiveInfo& what, Run run, bool async_op) {
  Task task;
  bool inline_run = false;
  std::shared_ptr<Work> work;
  {
    std::lock_guard lock(mu_);
    LOCKSTEP_CHECK(!stop_, options_.owner, ": ", what.op, " on a group being destroyed");
    const uint64_t seq = ++seq_;
    work = options_.make_work ? options_.make_work(what, seq) : std::make_shared<Work>(what.op, seq);
    task = Task{work, what, std::move(run), static_cast<uint32_t>(seq)};
    // A blocking call with nothing queued or running: run it here. The worker keeps off the queue until
    // it is done (inline_running_), so collectives still run one at a time in the order they were issued.
    inline_run = !async_op && queue_.empty() && !worker_running_ && !inline_running_;
    if (inline_run) {
      inline_running_ = true;
      inline_started_ = std::chrono::steady_clock::now();  // the worker watches the clock (worker_loop)
      inline_task_ = &task;
    } else {
      queue_.push_back(std::move(task));
    }
  }
  if (!inline_run) {
    cv_.notify_one();
    return work;
  }
  std::exception_ptr error;
  {
    BlockSigpipe no_sigpipe(options_.block_sigpipe);
    error = execute(task);
  }
  bool wake;
  {
    std::lock_guard lock(mu_);
    inline_running_ = false;
    inline_task_ = nullptr;
    // The worker waits for inline_running_ to clear when work was queued meanwhile by another thread,
    // and when the queue is being destroyed (it must wake to exit, or the destructor's join hangs).
    wake = !queue_.empty() || stop_;
  }
  if (wake) cv_.notify_one();
  work->finish(error);
  return work;
}

void WorkQueue::worker_loop() {
  const bool watched = options_.watchdog.count() > 0 && options_.on_stuck;
  const auto poll = std::clamp(options_.watchdog / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  auto ready = [&] { return !inline_running_ && (stop_ || !queue_.empty()); };
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mu_);
      if (!watched) {
        cv_.wait(lock, ready);
      } else {
        // While idle the worker also watches a blocking collective running on its caller's thread.
        while (!cv_.wait_for(lock, poll, ready)) {
          if (!inline_running_ || std::chrono::steady_clock::now() - inline_started_ < options_.watchdog) continue;
          options_.on_stuck(inline_task_->what, inline_task_->work->seq());
        }
      }
      if (queue_.empty()) return;  // stopping, with every queued collective done
      task = std::move(queue_.front());
      queue_.pop_front();
      worker_running_ = true;
    }
    const std::exception_ptr error = execute(task);
    {
      std::lock_guard lock(mu_);
      worker_running_ = false;
    }
    // Idle before the waiter wakes: a blocking call it makes next may then run on its own thread.
    task.work->finish(error);
  }
}

std::exception_ptr WorkQueue::execute(Task& task) {
  std::exception_ptr error;
  if (!failure_.empty()) {
    error = std::make_exception_ptr(Error(str_cat(options_.owner, ": ", task.what.str(),
                                                  " not run: an earlier collective failed on this group: ", failure_)));
  } else {
    try {
      task.run(task.tag);
      task.work->run_continuations();
    } catch (const std::exception& e) {
      failure_ = str_cat(task.what.str(), ": ", e.what());
      if (options_.on_failure) options_.on_failure();
      error = std::make_exception_ptr(Error(str_cat(options_.owner, ": ", task.what.str(), " failed on rank ",
                                                    options_.rank, " of ", options_.size, ": ", e.what())));
    }
  }
  task.run = nullptr;  // releases the tensors before waiters wake
  return error;
}

}  // namespace lockstep::dist
