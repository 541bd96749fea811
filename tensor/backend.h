// Backend: the short list of kernels a device must implement. Everything else in lockstep (autograd,
// nn, optim) is built from these, so a new device is a list to fill, not a second framework.
//
// Contract for every kernel: shapes, dtypes and devices were already checked by tensor/ops.cpp;
// outputs are preallocated, contiguous and on the backend's device; inputs are contiguous.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"

namespace lockstep {

class Tensor;

enum class UnaryOp : uint8_t { Neg, Exp, Log, Relu, Sqrt, Abs };
// ReluBackward: a * (b > 0), the gradient of relu given the upstream gradient a and the input b.
// Eq writes 1 or 0 into an int64 output.
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Eq, ReluBackward, Maximum };
enum class ReduceOp : uint8_t { Sum, Mean, Max, Argmax };

// A broadcast binary op after shape checking: the output's shape with adjacent dimensions merged
// where both inputs allow it, and per input the element strides over those dimensions (0 where the
// input is broadcast). A same-shape op is one dimension with both strides 1.
struct BroadcastPlan {
  std::vector<int64_t> shape;
  std::vector<int64_t> stride_a, stride_b;
  int64_t numel = 1;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Memory. Blocks from allocate() are at least 64-byte aligned.
  virtual void* allocate(size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, Device device) = 0;
  // Copies between this backend's device and the host or itself (same dtype and numel).
  virtual void copy(Tensor& dst, const Tensor& src) = 0;
  // Waits for every queued kernel on `device`.
  virtual void synchronize(Device device) = 0;

  virtual void fill(Tensor& out, double value) = 0;
  virtual void cast(Tensor& out, const Tensor& a) = 0;  // dtype conversion, same numel
  virtual void unary(UnaryOp op, Tensor& out, const Tensor& a) = 0;
  virtual void binary(BinaryOp op, Tensor& out, const Tensor& a, const Tensor& b, const BroadcastPlan& plan) = 0;
  // out = a (op) s, elementwise; for Sub and Div with `reverse`, out = s (op) a.
  virtual void binary_scalar(BinaryOp op, Tensor& out, const Tensor& a, double s, bool reverse) = 0;
  // out = alpha * op(a) @ op(b) + beta * out, op = transpose when the flag is set; a, b, out 2-D.
  virtual void gemm(Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, double alpha,
                    double beta) = 0;
  virtual void transpose2d(Tensor& out, const Tensor& a) = 0;
  // a viewed as [outer, n, inner], reduced over n into out [outer, inner]. Argmax writes int64.
  virtual void reduce(ReduceOp op, Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner) = 0;
  // Along the middle dimension of [outer, n, inner].
  virtual void log_softmax(Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner) = 0;
  // grad_in = grad_out - exp(output) * sum(grad_out) along the softmax dimension.
  virtual void log_softmax_backward(Tensor& grad_in, const Tensor& grad_out, const Tensor& output, int64_t outer,
                                    int64_t n, int64_t inner) = 0;
  // out (one element) = -scale * sum_i logp[i, target[i]]; logp [N, C], target int64 [N].
  // A target outside [0, C) is an error.
  virtual void nll_loss(Tensor& out, const Tensor& logp, const Tensor& target, double scale) = 0;
  // grad_logp (zero-filled here) [i, target[i]] = -scale * grad_out[0].
  virtual void nll_loss_backward(Tensor& grad_logp, const Tensor& grad_out, const Tensor& target, double scale) = 0;
  // Rows of a (viewed as [rows, inner]) picked by int64 `index`: out[i] = a[index[i]].
  virtual void index_select(Tensor& out, const Tensor& a, const Tensor& index) = 0;
  // out[index[i]] += src[i] over rows (the gradient of index_select).
  virtual void index_add(Tensor& out, const Tensor& index, const Tensor& src) = 0;
  // torch.optim.SGD's update for one parameter, in place (see optim/sgd.h for the rule).
  virtual void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr, double momentum,
                        double dampening, double weight_decay, bool nesterov, bool first_step) = 0;
};

// The backend for a device type. CUDA registers itself when lockstep is built with it; asking for
// it otherwise throws "lockstep was built without CUDA".
Backend& backend_for(DeviceType type);
inline Backend& backend_for(Device d) { return backend_for(d.type); }
void register_backend(DeviceType type, Backend* backend);
bool has_backend(DeviceType type);

}  // namespace lockstep
