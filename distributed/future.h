// Future: a tensor that a collective is still producing (torch.futures.Future[Tensor], as DDP's comm
// hooks return it). It completes when its Work does; then() chains a callback that turns the value
// into another (a compress hook's decompression). Callbacks run on the thread that waits, when it
// waits: the Reducer waits for every bucket at the end of backward, so they run there, in bucket
// order. Not thread-safe: a future is waited for by one thread.
#pragma once

#include <functional>
#include <memory>

#include "distributed/work.h"
#include "tensor/tensor.h"

namespace lockstep::dist {

class Future : public std::enable_shared_from_this<Future> {
 public:
  // Completed already, with `value`.
  explicit Future(Tensor value);
  // Completes with `value` (the tensor the collective writes in place) when `work` finishes.
  Future(std::shared_ptr<Work> work, Tensor value);
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;

  // Blocks until the value is there; rethrows the collective's or a callback's error.
  void wait();
  // wait(), then the value.
  const Tensor& value();
  // A future of callback(*this), which runs once this future has completed (when the new one is waited
  // for), as torch.futures.Future.then.
  std::shared_ptr<Future> then(std::function<Tensor(Future&)> callback);

 private:
  Future(std::shared_ptr<Future> parent, std::function<Tensor(Future&)> callback);

  std::shared_ptr<Work> work_;        // what this future waits for, if anything
  std::shared_ptr<Future> parent_;    // or the future whose value callback_ maps
  std::function<Tensor(Future&)> callback_;
  Tensor value_;
  bool done_ = false;
};

}  // namespace lockstep::dist
