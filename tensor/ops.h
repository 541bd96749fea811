// Raw tensor operations: check their inputs (shapes, dtypes, devices), allocate the result and run
// the device's kernel (tensor/backend.h). Not differentiable: autograd/ builds its ops on these.
// Every result is a new contiguous tensor unless the name ends in an underscore (in place).
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace lockstep::ops {

// The broadcast shape of a and b by NumPy's rules; `op` names the caller in the error.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);  // int64 0/1
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
// a (op) s; with `reverse`, s (op) a.
Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool reverse = false);
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);

Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor unary(UnaryOp op, const Tensor& a);
Tensor relu_backward(const Tensor& grad, const Tensor& input);

// 2-D matrix product; trans_a / trans_b use a or b transposed without copying it:
// matmul(x [B, in], w [out, in], false, true) is x @ w^T.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// out = alpha * op(a) @ op(b) + beta * out, in place (beta = 1 accumulates into out).
void gemm_(Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, double alpha, double beta);
Tensor transpose(const Tensor& a);  // 2-D

// Reductions. Over all elements the result has shape [] (one element).
Tensor sum(const Tensor& a);
Tensor sum(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);  // int64
// Sums `a` down to `shape`, undoing a broadcast (the gradient of a broadcast input).
Tensor sum_to(const Tensor& a, const Shape& shape);

Tensor log_softmax(const Tensor& a, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& output, int64_t dim);
// Mean (or sum) over the batch of -logp[i, target[i]]; logp [N, C] floating, target int64 [N].
Tensor nll_loss(const Tensor& logp, const Tensor& target, bool mean = true);
Tensor nll_loss_backward(const Tensor& grad_out, const Tensor& logp, const Tensor& target, bool mean = true);

// Rows of a picked by an int64 index: index_select(a [R, ...], idx [K]) -> [K, ...].
Tensor index_select(const Tensor& a, const Tensor& index);
// out[index[i]] += src[i] for each row i, in place.
void index_add_(Tensor& out, const Tensor& index, const Tensor& src);
// Stacks equally shaped tensors along a new first dimension.
Tensor stack(const std::vector<Tensor>& tensors);

Tensor to_dtype(const Tensor& a, Dtype dtype);  // returns a itself when the dtype already matches
Tensor to_device(const Tensor& a, Device device);  // returns a itself when already there
Tensor clone(const Tensor& a);
Tensor reshape(const Tensor& a, const Shape& shape);  // shares storage
// A contiguous view of `base`'s elements [offset, offset + numel(shape)), shaped `shape` (shares
// storage). DistributedDataParallel's buckets hand out such views of one flat buffer.
Tensor view_range(const Tensor& base, int64_t offset, const Shape& shape);
void copy_(Tensor& dst, const Tensor& src);  // same shape and dtype; any devices
void fill_(Tensor& t, double value);
// a += alpha * b, b broadcast to a's shape.
void add_(Tensor& a, const Tensor& b, double alpha = 1.0);
void mul_(Tensor& a, double s);

// torch.optim.SGD's update of one parameter in place (optim/sgd.h states the rule). The momentum
// buffer is used only when momentum != 0; `first_step` initialises it with the gradient.
void sgd_step_(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr, double momentum,
               double dampening, double weight_decay, bool nesterov, bool first_step);

// True when every element differs by at most atol + rtol * |b| (compared on the host).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

// Resolves a negative dimension and checks the range; `op` names the caller in the error.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// The [outer, n, inner] view of `shape` around dimension `dim`.
void split_dim(const Shape& shape, int64_t dim, int64_t& outer, int64_t& n, int64_t& inner);

}  // namespace lockstep::ops
