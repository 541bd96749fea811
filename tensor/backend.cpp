// The registry of device backends. The CPU backend registers itself from tensor/cpu/; the CUDA
// backend from tensor/cuda/ when lockstep is built with the CUDA toolkit.
#include "tensor/backend.h"

#include "common/check.h"

namespace lockstep {

static Backend*& slot(DeviceType t) {
  static Backend* backends[2] = {nullptr, nullptr};
  return backends[static_cast<int>(t)];
}

void register_backend(DeviceType type, Backend* backend) { slot(type) = backend; }

// The optional kernels' defaults: reached only by a caller that did not ask supports() first.
namespace {
[[noreturn]] void no_kernel(const char* op) {
  fail("Backend::", op, ": this backend has no such kernel (ask supports() first; the ops layer composes it)");
}
}  // namespace

void FusedKernels::avg_pool2d(Tensor&, const Tensor&, const AvgPool2dArgs&) { no_kernel("avg_pool2d"); }
void FusedKernels::avg_pool2d_backward(Tensor&, const Tensor&, const AvgPool2dArgs&) {
  no_kernel("avg_pool2d_backward");
}
void FusedKernels::resample(Tensor&, const Tensor&, const ResampleArgs&) { no_kernel("resample"); }
void FusedKernels::resample_backward(Tensor&, const Tensor&, const ResampleArgs&) { no_kernel("resample_backward"); }
void FusedKernels::conv2d(Tensor&, const Tensor&, const Tensor&, const Tensor&, const internal::Conv2dParams&) {
  no_kernel("conv2d");
}
void FusedKernels::conv2d_backward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                   const internal::Conv2dParams&) {
  no_kernel("conv2d_backward");
}
bool has_backend(DeviceType type) { return slot(type) != nullptr; }

Backend& backend_for(DeviceType type) {
  Backend* b = slot(type);
  if (!b) {
    if (type == DeviceType::CUDA) fail("lockstep was built without CUDA: cannot use a cuda device");
    fail("backend_for: no CPU backend registered (link //tensor:cpu)");
  }
  return *b;
}

StridedPlan gemm_c_plan(const GemmArgs& g) {
  StridedPlan p;
  p.nd = 3;
  p.numel = g.batch * g.m * g.n;
  const int64_t shape[3] = {g.batch, g.m, g.n}, stride[3] = {g.batch_stride_c, g.ldc, 1};
  for (int d = 0; d < 3; ++d) {
    p.shape[d] = shape[d];
    for (int k = 0; k < StridedPlan::kMaxOperands; ++k) p.stride[k][d] = stride[d];
  }
  return p;
}

GemmArgs Backend::gemm_bias_first(Tensor& out, const GemmArgs& g) {
  StridedPlan p = gemm_c_plan(g);  // operands: C, C again, the bias broadcast over batches and rows
  p.stride[2][0] = p.stride[2][1] = 0;
  p.stride[2][2] = 1;
  if (g.beta == 0) {
    StridedPlan copy = p;  // operands: out, bias
    for (int d = 0; d < 3; ++d) copy.stride[1][d] = p.stride[2][d];
    copy_(copy, out, *g.bias);
  } else {
    if (g.beta != 1) binary_scalar(BinaryOp::Mul, p, out, out, g.beta, false);
    binary(BinaryOp::Add, p, out, out, *g.bias);
  }
  GemmArgs rest = g;
  rest.beta = 1;
  rest.bias = nullptr;
  return rest;
}

}  // namespace lockstep
