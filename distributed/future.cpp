// Future: completion through a Work or a parent future and a callback.
#include "distributed/future.h"

#include "common/check.h"

namespace lockstep::dist {

Future::Future(Tensor value) : value_(std::move(value)), done_(true) {}

Future::Future(std::shared_ptr<Work> work, Tensor value) : work_(std::move(work)), value_(std::move(value)) {
  LOCKSTEP_CHECK(work_, "Future: null Work");
}

Future::Future(std::shared_ptr<Future> parent, std::function<Tensor(Future&)> callback)
    : parent_(std::move(parent)), callback_(std::move(callback)) {}

void Future::wait() {
  if (done_) return;
  if (work_) {
    work_->wait();
  } else {
    parent_->wait();
    value_ = callback_(*parent_);
    parent_.reset();  // the parent's value is no longer needed
    callback_ = nullptr;
  }
  done_ = true;
}

const Tensor& Future::value() {
  wait();
  return value_;
}

std::shared_ptr<Future> Future::then(std::function<Tensor(Future&)> callback) {
  LOCKSTEP_CHECK(callback, "Future::then: null callback");
  return std::shared_ptr<Future>(new Future(shared_from_this(), std::move(callback)));
}

}  // namespace lockstep::dist
