// DDP communication hooks (torch.distributed.algorithms.ddp_comm_hooks): what the Reducer does with a
// bucket of gradients once it is full. A hook takes the bucket (GradBucket), starts whatever
// communication it likes and returns a Future of the reduced bucket, the same shape and dtype as
// bucket.buffer(); the Reducer waits for it at the end of backward and copies it into the bucket. The
// hook does the averaging itself (the Reducer's own division by the world size is skipped).
//
//   ddp.register_comm_hook(process_group, dist::default_hooks::bf16_compress_hook);  // or nullptr: DDP's
//
// The default hooks, by PyTorch's names (default_hooks.py), take the process group as their state (null:
// the default group):
//   allreduce_hook      the buffer divided by the world size, all-reduced (what DDP does without a hook)
//   fp16_compress_hook  the buffer cast to float16 and divided by the world size, all-reduced (a SUM that
//                       accumulates in float32 inside every backend), cast back into the bucket
//   bf16_compress_hook  the same in bfloat16: half the bytes on the wire, float32's range
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "distributed/future.h"
#include "distributed/process_group.h"
#include "tensor/tensor.h"

namespace lockstep::dist {

// One bucket of gradients, as a hook sees it (c10d's GradBucket). Tensors are handles into the bucket.
class GradBucket {
 public:
  GradBucket(size_t index, bool is_last, Tensor buffer, std::vector<Tensor> gradients, std::vector<Tensor> parameters)
      : index_(index), is_last_(is_last), buffer_(std::move(buffer)), gradients_(std::move(gradients)),
        parameters_(std::move(parameters)) {}

  // The bucket's position in launch order (the same on every rank).
  size_t index() const { return index_; }
  // True for the last bucket of the backward pass.
  bool is_last() const { return is_last_; }
  // The flat 1-D tensor of the bucket's gradients, back to back.
  const Tensor& buffer() const { return buffer_; }
  // Each parameter's gradient as a view into buffer(), and the parameters, in the same order.
  const std::vector<Tensor>& gradients() const { return gradients_; }
  const std::vector<Tensor>& parameters() const { return parameters_; }

 private:
  size_t index_;
  bool is_last_;
  Tensor buffer_;
  std::vector<Tensor> gradients_;
  std::vector<Tensor> parameters_;
};

// What the Reducer calls per bucket (the state bound in already, see DistributedDataParallel).
using CommHook = std::function<std::shared_ptr<Future>(GradBucket&)>;

namespace default_hooks {

std::shared_ptr<Future> allreduce_hook(const std::shared_ptr<ProcessGroup>& process_group, GradBucket& bucket);
std::shared_ptr<Future> fp16_compress_hook(const std::shared_ptr<ProcessGroup>& process_group, GradBucket& bucket);
std::shared_ptr<Future> bf16_compress_hook(const std::shared_ptr<ProcessGroup>& process_group, GradBucket& bucket);

}  // namespace default_hooks

}  // namespace lockstep::dist
