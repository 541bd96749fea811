// Differentiable ops. Each records its backward in autograd/functions.cpp right beside its forward.
// Inputs that do not require a gradient (and everything under NoGradGuard) cost nothing extra.
#pragma once

#include "tensor/tensor.h"

namespace lockstep {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor rsub(const Tensor& a, double s);  // s - a
Tensor rdiv(const Tensor& a, double s);  // s / a
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor relu(const Tensor& a);

Tensor matmul(const Tensor& a, const Tensor& b);  // 2-D
// y = x @ weight^T + bias, as torch.nn.functional.linear: x [B, in], weight [out, in], bias [out] or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
Tensor transpose(const Tensor& a);  // 2-D
Tensor reshape(const Tensor& a, const Shape& shape);

Tensor sum(const Tensor& a);
Tensor sum(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& a, int64_t dim, bool keepdim = false);

Tensor log_softmax(const Tensor& a, int64_t dim);
// Mean over the batch of -logp[i, target[i]].
Tensor nll_loss(const Tensor& logp, const Tensor& target);
Tensor index_select(const Tensor& a, const Tensor& index);
Tensor to(const Tensor& a, Device device);
Tensor to(const Tensor& a, Dtype dtype);
Tensor clone(const Tensor& a);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(const Tensor& a, double s);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(const Tensor& a, double s);
Tensor operator/(double s, const Tensor& a);

}  // namespace lockstep
