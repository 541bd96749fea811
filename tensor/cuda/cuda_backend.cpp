// CudaBackend's memory, copies and synchronization, and its registration as the CUDA backend.
#include "tensor/cuda/cuda_backend.h"

#include <limits>

#include "tensor/cuda/allocator.h"
#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {

void* CudaBackend::allocate(size_t nbytes, Device device) {
  return CachingAllocator::instance().allocate(nbytes, device.index);
}

void CudaBackend::deallocate(void* ptr, size_t nbytes, Device device) {
  CachingAllocator::instance().deallocate(ptr, nbytes, device.index);
}

// Host->device copies are queued (CUDA stages pageable host memory before returning, so the source may
// change or be freed at once); device->host copies wait for the stream and raise recorded errors.
void CudaBackend::copy(Tensor& dst, const Tensor& src) {
  const size_t n = dst.nbytes();
  const Device d = dst.device(), s = src.device();
  if (s.is_cpu()) {
    OnDevice on(d);
    LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyHostToDevice, on.stream()));
  } else if (d.is_cpu()) {
    OnDevice on(s);
    LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyDeviceToHost, on.stream()));
    on.ctx.synchronize();
  } else if (d == s) {
    OnDevice on(d);
    LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyDeviceToDevice, on.stream()));
  } else {
    // Between devices: on the destination's stream, after the source's queued work; the source's
    // stream then waits for the copy, so a later reuse of the source's memory cannot overtake it.
    DeviceContext& from = context(s);
    // An event must be recorded on a stream of the device it was created on (else cudaEventRecord
    // fails with cudaErrorInvalidResourceHandle): src_ready is created and recorded with the source
    // device current, `copied` with the destination current. Waiting on an event of another device
    // is allowed.
    cudaEvent_t src_ready, copied;
    {
      DeviceGuard on_src(s.index);
      LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&src_ready, cudaEventDisableTiming));
      LOCKSTEP_CUDA_CHECK(cudaEventRecord(src_ready, from.stream()));
    }
    OnDevice on(d);
    LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    LOCKSTEP_CUDA_CHECK(cudaStreamWaitEvent(on.stream(), src_ready, 0));
    LOCKSTEP_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data_ptr(), d.index, src.data_ptr(), s.index, n, on.stream()));
    LOCKSTEP_CUDA_CHECK(cudaEventRecord(copied, on.stream()));
    LOCKSTEP_CUDA_CHECK(cudaStreamWaitEvent(from.stream(), copied, 0));
    // Destroying a recorded event is safe: CUDA releases it once the work it marks has completed.
    LOCKSTEP_CUDA_CHECK(cudaEventDestroy(src_ready));
    LOCKSTEP_CUDA_CHECK(cudaEventDestroy(copied));
  }
}

void CudaBackend::synchronize(Device device) { context(device).synchronize(/*whole_device=*/true); }
void CudaBackend::empty_cache(Device) { CachingAllocator::instance().empty_cache(); }

// Every kernel takes 16-bit tensors as they are and draws on the device; there is no direct convolution
// or average pooling kernel (im2col over cuBLAS and strided adds compose them), and reading a value back
// costs a synchronization, so the kernels check their inputs themselves.
bool CudaBackend::supports(Capability c, Dtype dtype) const {
  switch (c) {
    case Capability::kGemm: return is_floating_point(dtype);
    case Capability::kSoftmaxAnyDim: return true;
    case Capability::kPhiloxRandom: return is_floating_point(dtype);
    case Capability::kMixedWithFloat32:
    case Capability::kAvgPool2d:
    case Capability::kConv2d:
    case Capability::kResample:
    case Capability::kHostReadable: return false;
  }
  return false;
}

// Attention holds a row in registers: heads up to kAttentionMaxHead wide (attention.cu). Composed convolution takes
// the whole batch in one chunk: launches cost more than memory traffic.
BackendLimits CudaBackend::limits() const {
  return {.attention_head_dim = kAttentionMaxHead, .im2col_chunk_elements = std::numeric_limits<int64_t>::max()};
}

namespace {

// Registered before main(); //tensor/cuda:cuda_backend is alwayslink so this survives static linking.
const bool registered = [] {
  static CudaBackend backend;
  register_backend(DeviceType::CUDA, &backend);
  return true;
}();

}  // namespace
}  // namespace lockstep::cuda::detail
