// gelu_linear(x, weight, bias) = linear(gelu(x), weight, bias), recorded as one op that keeps x for
// backward and not gelu(x): the GELU's backward needs x anyway, and the product's weight gradient gets
// gelu(x) again from one elementwise pass. A transformer MLP (c_fc, GELU, c_proj) then keeps one
// [rows, 4C] activation instead of two; under autocast that is nanoGPT's largest saved tensor. Values
// and gradients are those of the two ops run one after the other (the same kernels in the same order),
// casts under autocast included.
#pragma once

#include <string>

#include "tensor/tensor.h"

namespace lockstep {

// x: [..., in]; weight: [out, in]; bias: [out] or undefined. approximate: "none" (erf) or "tanh".
Tensor gelu_linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   const std::string& approximate = "none");

}  // namespace lockstep
