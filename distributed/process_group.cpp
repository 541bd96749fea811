// ProcessGroup: argument checks shared by every backend.
#include "distributed/process_group.h"

#include "distributed/debug.h"
#include "distributed/reduce_kernels.h"
#include "common/check.h"
#include "tensor/ops.h"

namespace lockstep::dist {

namespace {

void check_defined(const Tensor& t, const char* op, const char* what) {
  LOCKSTEP_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

void check_like(const Tensor& t, const Tensor& ref, const char* op, const char* what, size_t i, const char* ref_what) {
  check_defined(t, op, what);
  LOCKSTEP_CHECK(t.dtype() == ref.dtype(), op, ": ", what, "[", i, "] is ", dtype_name(t.dtype()), " but ", ref_what,
                 " is ", dtype_name(ref.dtype()), " (every tensor of a collective has one dtype)");
  LOCKSTEP_CHECK(t.shape() == ref.shape(), op, ": ", what, "[", i, "] has shape ", t.shape(), " but ", ref_what,
                 " has shape ", ref.shape());
  LOCKSTEP_CHECK(t.device() == ref.device(), op, ": ", what, "[", i, "] is on ", t.device(), " but ", ref_what,
                 " is on ", ref.device());
}

// A blocking call (async_op false) returns the finished Work, or throws its error.
std::shared_ptr<Work> settle(std::shared_ptr<Work> work, bool async_op) {
  if (!async_op) work->wait();
  return work;
}

// Collectives with nothing to move between ranks finish here, the same way for every backend: zero
// elements, or a group of one, whose gathers and scatters leave its own input in its output (ops'
// copy_, in stream order on a device) and whose reductions and broadcasts leave the tensor as it is.
// Returns null when the backend has work to do.
std::shared_ptr<Work> finish_locally(const char* op, int64_t numel, int size, Tensor* dst = nullptr,
                                     const Tensor* src = nullptr) {
  if (numel != 0 && size != 1) return nullptr;
  if (size == 1 && dst && dst->data_ptr() != src->data_ptr()) internal::copy_(*dst, *src);
  auto work = std::make_shared<Work>(op, 0);
  work->finish();
  return work;
}

// AVG where the backend does not compute it: the backend sums, then `result` is divided by the world size
// (truncating for integers, as ncclAvg; a bool's SUM is already its AVG, the or of the ranks).
ReduceOp sum_for_avg(ReduceOp op, bool backend_averages) {
  return op == ReduceOp::AVG && !backend_averages ? ReduceOp::SUM : op;
}
std::shared_ptr<Work> average(std::shared_ptr<Work> work, ReduceOp asked, ReduceOp sent, Tensor result, int size) {
  if (asked == sent || result.dtype() == Dtype::Bool) return work;
  work->then([result, size] {
    dispatch(result.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, bool>) detail::divide(static_cast<T*>(result.data_ptr()), result.numel(), size);
    });
  });
  return work;
}

}  // namespace

ProcessGroup::ProcessGroup(int rank, int size) : rank_(rank), size_(size) {
  LOCKSTEP_CHECK(size >= 1, "ProcessGroup: world size must be at least 1, got ", size);
  LOCKSTEP_CHECK(rank >= 0 && rank < size, "ProcessGroup: rank ", rank, " is out of range for world size ", size,
                 " (ranks are 0..", size - 1, ")");
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::enable_debug_checks(std::shared_ptr<Store> store, std::chrono::milliseconds timeout) {
  if (debug_level() == DebugLevel::Detail)
    checker_ = std::make_unique<detail::CollectiveChecker>(std::move(store), rank_, size_, timeout);
}

std::shared_ptr<Work> ProcessGroup::all_reduce(Tensor& tensor, ReduceOp op, bool async_op) {
  check_defined(tensor, "all_reduce", "the tensor");
  check_tensor(tensor, "all_reduce");
  if (checker_) checker_->check(detail::fingerprint("all_reduce", &tensor, reduce_op_name(op)));
  if (auto done = finish_locally("all_reduce", tensor.numel(), size_)) return done;
  const ReduceOp sent = sum_for_avg(op, reduces_avg());
  return settle(average(do_all_reduce(tensor, sent, async_op), op, sent, tensor, size_), async_op);
}

std::shared_ptr<Work> ProcessGroup::broadcast(Tensor& tensor, int root, bool async_op) {
  check_defined(tensor, "broadcast", "the tensor");
  LOCKSTEP_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is out of range for world size ", size_,
                 " (ranks are 0..", size_ - 1, ")");
  check_tensor(tensor, "broadcast");
  if (checker_) checker_->check(detail::fingerprint("broadcast", &tensor, nullptr, root));
  if (auto done = finish_locally("broadcast", tensor.numel(), size_)) return done;
  return settle(do_broadcast(tensor, root, async_op), async_op);
}

std::shared_ptr<Work> ProcessGroup::all_gather(std::vector<Tensor>& outputs, const Tensor& input, bool async_op) {
  check_defined(input, "all_gather", "the input");
  LOCKSTEP_CHECK(outputs.size() == static_cast<size_t>(size_), "all_gather: expected one output tensor per rank (",
                 size_, "), got ", outputs.size());
  check_tensor(input, "all_gather");
  for (size_t i = 0; i < outputs.size(); ++i) check_like(outputs[i], input, "all_gather", "outputs", i, "the input");
  if (checker_) checker_->check(detail::fingerprint("all_gather", &input));
  if (auto done = finish_locally("all_gather", input.numel(), size_, &outputs[0], &input)) return done;
  return settle(do_all_gather(outputs, input, async_op), async_op);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                                   bool async_op) {
  check_defined(output, "reduce_scatter", "the output");
  LOCKSTEP_CHECK(inputs.size() == static_cast<size_t>(size_), "reduce_scatter: expected one input tensor per rank (",
                 size_, "), got ", inputs.size());
  check_tensor(output, "reduce_scatter");
  for (size_t i = 0; i < inputs.size(); ++i) check_like(inputs[i], output, "reduce_scatter", "inputs", i, "the output");
  if (checker_) checker_->check(detail::fingerprint("reduce_scatter", &output, reduce_op_name(op)));
  if (auto done = finish_locally("reduce_scatter", output.numel(), size_, &output, &inputs[0])) return done;
  const ReduceOp sent = sum_for_avg(op, reduces_avg());
  return settle(average(do_reduce_scatter(output, inputs, sent, async_op), op, sent, output, size_), async_op);
}

// The flat forms: checked here, then handed to the backend's flat hook as one-dimensional views.
namespace {
void check_flat(const Tensor& flat, const Tensor& like, int size, const char* op, const char* what) {
  check_defined(flat, op, what);
  check_defined(like, op, "the per-rank tensor");
  LOCKSTEP_CHECK(flat.is_contiguous(), op, ": ", what, " must be contiguous, got shape ", flat.shape(), " with strides ",
                 flat.strides());
  LOCKSTEP_CHECK(flat.numel() == like.numel() * size, op, ": ", what, " has ", flat.numel(), " elements (shape ",
                 flat.shape(), "); expected world size ", size, " x ", like.numel(), " (shape ", like.shape(), ")");
  LOCKSTEP_CHECK(flat.dtype() == like.dtype() && flat.device() == like.device(), op, ": ", what, " is ", flat.dtype(),
                 " on ", flat.device(), " but the per-rank tensor is ", like.dtype(), " on ", like.device());
}

std::vector<Tensor> flat_chunks(const Tensor& flat, int size) {
  const int64_t n = flat.numel() / size;
  std::vector<Tensor> chunks;
  for (int r = 0; r < size; ++r) chunks.push_back(internal::view_range(flat, r * n, {n}));
  return chunks;
}
}  // namespace

std::shared_ptr<Work> ProcessGroup::all_gather_into_tensor(Tensor& output, const Tensor& input, bool async_op) {
  check_flat(output, input, size_, "all_gather_into_tensor", "the output");
  check_tensor(input, "all_gather_into_tensor");
  if (checker_) checker_->check(detail::fingerprint("all_gather_into_tensor", &input));
  Tensor flat_out = internal::view(output, {output.numel()});
  // A contiguous input is viewed, never copied: it may be chunk rank() of the output (in place).
  Tensor flat_in = internal::reshape(input, {input.numel()});
  if (auto done = finish_locally("all_gather_into_tensor", input.numel(), size_, &flat_out, &flat_in)) return done;
  return settle(do_all_gather_into_tensor(flat_out, flat_in, async_op), async_op);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op,
                                                          bool async_op) {
  check_flat(input, output, size_, "reduce_scatter_tensor", "the input");
  LOCKSTEP_CHECK(output.is_contiguous(), "reduce_scatter_tensor: the output must be contiguous, got shape ",
                 output.shape(), " with strides ", output.strides());
  check_tensor(output, "reduce_scatter_tensor");
  if (checker_) checker_->check(detail::fingerprint("reduce_scatter_tensor", &output, reduce_op_name(op)));
  Tensor flat_out = internal::view(output, {output.numel()});
  Tensor flat_in = internal::view(input, {input.numel()});
  if (auto done = finish_locally("reduce_scatter_tensor", output.numel(), size_, &flat_out, &flat_in)) return done;
  const ReduceOp sent = sum_for_avg(op, reduces_avg());
  return settle(average(do_reduce_scatter_tensor(flat_out, flat_in, sent, async_op), op, sent, flat_out, size_),
                async_op);
}

std::shared_ptr<Work> ProcessGroup::do_all_gather_into_tensor(Tensor& output, const Tensor& input, bool async_op) {
  auto outputs = flat_chunks(output, size_);
  return do_all_gather(outputs, input, async_op);
}

std::shared_ptr<Work> ProcessGroup::do_reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op,
                                                             bool async_op) {
  return do_reduce_scatter(output, flat_chunks(input, size_), op, async_op);
}

std::shared_ptr<Work> ProcessGroup::barrier(bool async_op) {
  if (checker_) checker_->check(detail::fingerprint("barrier", nullptr));
  return settle(do_barrier(async_op), async_op);
}

namespace detail {

void* contiguous_base(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return nullptr;
  auto* base = static_cast<char*>(tensors[0].data_ptr());
  size_t nbytes = tensors[0].nbytes();
  for (size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].data_ptr() != base + i * nbytes) return nullptr;
  }
  return base;
}

}  // namespace detail
}  // namespace lockstep::dist
