// The CPU backend's elementwise kernels (tensor/backend.h states their contract).
#pragma once

#include "tensor/backend.h"

namespace lockstep::cpu {

void fill(const StridedPlan& p, Tensor& out, double value);
void copy_(const StridedPlan& p, Tensor& out, const Tensor& a);
void unary(UnaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a);
void binary(BinaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, const Tensor& b);
void binary_scalar(BinaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, double s, bool reverse);
void where(const StridedPlan& p, Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);

}  // namespace lockstep::cpu
