// The CPU backend's core kernels (cpu/cpu_backend.h says where the other families are): the allocator,
// copies, and the dispatch of elementwise ops (cpu/elementwise.cpp), GEMM (cpu/gemm.h), reductions
// (cpu/reduce.cpp) and scans (cpu/scan.cpp) to the processor's widest ISA build; and the backend's
// registration.
#include "tensor/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>

#include "common/env.h"
#include "tensor/cpu/conv2d_onednn.h"
#include "tensor/cpu/cpu.h"
#include "tensor/cpu/elementwise.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/isa.h"
#include "tensor/cpu/reduce.h"
#include "tensor/cpu/scan.h"
#include "tensor/memory_stats.h"
#include "tensor/tensor.h"

namespace lockstep::cpu {

CpuBackend::CpuBackend() : cache_(size_t(env_int("LOCKSTEP_CPU_CACHE_MB", 1024, 0, 1 << 20)) << 20) {}
void* CpuBackend::allocate(size_t nbytes, Device) {
  size_t rounded = (nbytes + 63) / 64 * 64;
  if (void* p = cache_.take(rounded)) {
    if (memory_stats::enabled()) memory_stats::set_cached_bytes(cache_.cached_bytes());
    return p;
  }
  void* p = std::aligned_alloc(64, rounded);
  LOCKSTEP_CHECK(p, "CPU allocator: out of memory allocating ", nbytes, " bytes");
  return p;
}
void CpuBackend::deallocate(void* p, size_t nbytes, Device) {
  if (!p || !cache_.put(p, (nbytes + 63) / 64 * 64)) std::free(p);
  else if (memory_stats::enabled()) memory_stats::set_cached_bytes(cache_.cached_bytes());
}

void CpuBackend::copy(Tensor& dst, const Tensor& src) {
  LOCKSTEP_CHECK(dst.device().is_cpu() && src.device().is_cpu(), "copy: CPU backend asked to copy ", src.device(),
                 " to ", dst.device());
  std::memmove(dst.data_ptr(), src.data_ptr(), dst.nbytes());
}

// Elementwise kernels: tensor/cpu/elementwise.cpp, in the processor's widest ISA build.
void CpuBackend::fill(const StridedPlan& p, Tensor& out, double v) {
  LOCKSTEP_CPU_ISA_CALL(fill, p, out.dtype(), out.data_ptr(), v);
}
void CpuBackend::copy_(const StridedPlan& p, Tensor& out, const Tensor& a) {
  LOCKSTEP_CPU_ISA_CALL(copy_, p, out.dtype(), out.data_ptr(), a.dtype(), a.data_ptr());
}
void CpuBackend::unary(UnaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, const OpScalars& params) {
  LOCKSTEP_CPU_ISA_CALL(unary, op, params, p, out.data_ptr(), a.dtype(), a.data_ptr());
}
void CpuBackend::binary(BinaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, const Tensor& b,
                        const OpScalars& params) {
  LOCKSTEP_CPU_ISA_CALL(binary, op, params, p, out.dtype(), out.data_ptr(), a.dtype(), a.data_ptr(), b.dtype(),
                        b.data_ptr());
}
// The scalar becomes an operand of stride 0, so binary's kernels serve (one instantiation per op and
// dtype instead of three); it lives on the stack, as wide as the widest dtype. Beside a bfloat16 or
// float16 tensor it is held in float32 (PyTorch's opmath rule), not rounded to 16 bits first.
void CpuBackend::binary_scalar(BinaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, double s,
                               bool reverse, const OpScalars& params) {
  alignas(8) unsigned char scalar[8];
  const Dtype s_dt = is_reduced_floating_point(a.dtype()) ? kFloat32 : a.dtype();
  dispatch(s_dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    static_assert(sizeof(T) <= sizeof scalar);
    *reinterpret_cast<T*>(scalar) = static_cast<T>(s);
  });
  StridedPlan q = p;
  for (int d = 0; d < q.nd; ++d) {
    q.stride[2][d] = reverse ? p.stride[1][d] : 0;
    q.stride[1][d] = reverse ? 0 : p.stride[1][d];
  }
  if (reverse)
    LOCKSTEP_CPU_ISA_CALL(binary, op, params, q, out.dtype(), out.data_ptr(), s_dt, scalar, a.dtype(), a.data_ptr());
  else
    LOCKSTEP_CPU_ISA_CALL(binary, op, params, q, out.dtype(), out.data_ptr(), a.dtype(), a.data_ptr(), s_dt, scalar);
}
void CpuBackend::where(const StridedPlan& p, Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  LOCKSTEP_CPU_ISA_CALL(where, p, out.data_ptr(), a.dtype(), cond.data<bool>(), a.data_ptr(), b.data_ptr());
}

// One row per operand dtype: float32 and float64 products in their own type; bfloat16 operands
// accumulated in float32 into a bfloat16 C (matmul's result) or a float32 one (autocast's outputs).
void CpuBackend::gemm(Tensor& out, const Tensor& a, const Tensor& b, const GemmArgs& args) {
  const GemmArgs g = args.bias ? gemm_bias_first(out, args) : args;
  auto run = [&](auto scalar, auto* pa, auto* pb, auto* pc) {
    using S = decltype(scalar);
    for (int64_t i = 0; i < g.batch; ++i)
      cpu::gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, static_cast<S>(g.alpha), pa + i * g.batch_stride_a, g.lda,
                pb + i * g.batch_stride_b, g.ldb, static_cast<S>(g.beta), pc + i * g.batch_stride_c, g.ldc);
  };
  if (a.dtype() == kBFloat16) {
    LOCKSTEP_CHECK(b.dtype() == kBFloat16 && (out.dtype() == kBFloat16 || out.dtype() == kFloat32),
                   "matmul: bfloat16 products take bfloat16 operands into a bfloat16 or float32 result, got ",
                   a.dtype(), " x ", b.dtype(), " -> ", out.dtype());
    if (out.dtype() == kBFloat16) return run(0.f, a.data<BFloat16>(), b.data<BFloat16>(), out.data<BFloat16>());
    return run(0.f, a.data<BFloat16>(), b.data<BFloat16>(), out.data<float>());
  }
  dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    run(T(0), a.data<T>(), b.data<T>(), out.data<T>());
  });
}

// tensor/cpu/reduce.cpp, by the rules of tensor/reduce_ops.h.
void CpuBackend::reduce(Reduction op, Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner) {
  LOCKSTEP_CPU_ISA_CALL(reduce, op, a.dtype(), a.data_ptr(), out.data_ptr(), outer, n, inner);
}

// tensor/cpu/scan.cpp, by the rules of tensor/scan_ops.h.
void CpuBackend::scan(Scan op, Tensor& out, Tensor& indices, const Tensor& a, int64_t outer, int64_t n,
                      int64_t inner, bool reverse) {
  int64_t* idx = indices.defined() ? indices.data<int64_t>() : nullptr;
  LOCKSTEP_CPU_ISA_CALL(scan, op, a.dtype(), a.data_ptr(), out.data_ptr(), idx, outer, n, inner, reverse);
}

namespace {

// Never destroyed: tensors in static storage may free their blocks into it at exit.
CpuBackend& instance() {
  static CpuBackend* cpu = new CpuBackend;
  return *cpu;
}

// Registered before main(); //tensor:cpu is alwayslink so this survives static linking.
const bool registered = [] {
  register_backend(DeviceType::CPU, &instance());
  return true;
}();

}  // namespace

size_t memory_cached() { return instance().cache().cached_bytes(); }

void empty_cache() {
  instance().cache().release();
  if (memory_stats::enabled()) memory_stats::set_cached_bytes(0);
}

void CpuBackend::empty_cache(Device) { cpu::empty_cache(); }

bool CpuBackend::supports(Capability c, Dtype dtype) const {
  const bool half = is_reduced_floating_point(dtype);
  switch (c) {
    case Capability::kGemm: return dtype != kFloat16;  // float16 goes through float32 copies
    case Capability::kMixedWithFloat32: return half;
    case Capability::kSoftmaxAnyDim: return !half;     // 16-bit rows along the last dimension only
    case Capability::kAvgPool2d: return dtype == kFloat32 || half;
    case Capability::kConv2d: return onednn_conv2d_supports(dtype);
    case Capability::kResample: return is_floating_point(dtype);
    case Capability::kPhiloxRandom: return false;     // the host generator's stream, as seeds always gave
    case Capability::kHostReadable: return true;
  }
  return false;
}

// Composed convolution keeps a chunk's columns near 1 MiB of float32, in the cache between im2col and
// the GEMM (the whole batch's were tens of MB, written and read back through memory); attention's
// kernels tile any head width.
BackendLimits CpuBackend::limits() const { return {.attention_head_dim = 0, .im2col_chunk_elements = 1 << 18}; }
}  // namespace lockstep::cpu
