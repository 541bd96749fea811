// The default DDP communication hooks, as PyTorch's default_hooks.py.
#include "distributed/comm_hooks.h"

#include "distributed/init.h"
#include "tensor/ops.h"

namespace lockstep::dist::default_hooks {

namespace {

std::shared_ptr<ProcessGroup> group_or_default(const std::shared_ptr<ProcessGroup>& pg, const char* hook) {
  if (pg) return pg;
  LOCKSTEP_CHECK(is_initialized(), hook, ": no process group given and no default group (call init_process_group)");
  return default_pg();
}

// Casts the bucket to `dtype`, divides by the world size there (as PyTorch's hooks: before the sum, so
// that it cannot overflow float16), all-reduces and casts the result back into the bucket's buffer.
std::shared_ptr<Future> compress_hook(const std::shared_ptr<ProcessGroup>& pg_in, GradBucket& bucket, Dtype dtype,
                                      const char* hook) {
  const auto pg = group_or_default(pg_in, hook);
  Tensor buffer = bucket.buffer();
  LOCKSTEP_CHECK(is_floating_point(buffer.dtype()), hook, ": expected floating-point gradients, got a ",
                 buffer.dtype(), " bucket");
  Tensor compressed = internal::to_dtype(buffer, dtype);
  if (compressed.data_ptr() == buffer.data_ptr()) compressed = internal::clone(buffer);
  internal::mul_(compressed, 1.0 / pg->size());
  auto sent = std::make_shared<Future>(pg->all_reduce(compressed, ReduceOp::SUM), compressed);
  return sent->then([buffer](Future& f) mutable {
    internal::copy_(buffer, f.value());
    return buffer;
  });
}

}  // namespace

std::shared_ptr<Future> allreduce_hook(const std::shared_ptr<ProcessGroup>& process_group, GradBucket& bucket) {
  const auto pg = group_or_default(process_group, "allreduce_hook");
  Tensor buffer = bucket.buffer();
  internal::mul_(buffer, 1.0 / pg->size());
  return std::make_shared<Future>(pg->all_reduce(buffer, ReduceOp::SUM), buffer);
}

std::shared_ptr<Future> fp16_compress_hook(const std::shared_ptr<ProcessGroup>& process_group, GradBucket& bucket) {
  return compress_hook(process_group, bucket, kFloat16, "fp16_compress_hook");
}

std::shared_ptr<Future> bf16_compress_hook(const std::shared_ptr<ProcessGroup>& process_group, GradBucket& bucket) {
  return compress_hook(process_group, bucket, kBFloat16, "bf16_compress_hook");
}

}  // namespace lockstep::dist::default_hooks
