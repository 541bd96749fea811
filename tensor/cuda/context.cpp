// Device discovery, per-device contexts (stream, properties, IndexError record), DeviceGuard, the CUDA
// error messages, and the device half of tensor/cuda/cuda.h.
#include "tensor/cuda/context.h"

#include <array>

#include "common/check.h"
#include "tensor/cuda/cuda.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/int_div.h"

namespace lockstep::cuda {
namespace detail {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // clear the last-error slot (sticky errors stay sticky regardless)
  fail("CUDA error: ", call, " failed at ", file, ":", line, ": ", cudaGetErrorString(err), " (",
       cudaGetErrorName(err), ")");
}

std::string describe(const IndexError& e) {
  const char* op = "?";
  switch (static_cast<IndexErrorKind>(e.kind)) {
    case IndexErrorKind::DivisionByZero: return ::lockstep::detail::kIntegerDivisionByZero;  // the CPU's words
    case IndexErrorKind::NllTarget: op = "cross_entropy"; break;
    case IndexErrorKind::NllBackwardTarget: op = "cross_entropy backward"; break;
    case IndexErrorKind::IndexSelect: op = "index_select"; break;
    case IndexErrorKind::IndexAdd: op = "index_add_"; break;
    case IndexErrorKind::Gather: op = "gather"; break;
    case IndexErrorKind::ScatterAdd: op = "scatter_add_"; break;
    case IndexErrorKind::Scatter: op = "scatter_"; break;
    case IndexErrorKind::ScatterReduce: op = "scatter_reduce_"; break;
    case IndexErrorKind::None: break;
  }
  const bool target = e.kind == static_cast<int32_t>(IndexErrorKind::NllTarget) ||
                      e.kind == static_cast<int32_t>(IndexErrorKind::NllBackwardTarget);
  if (target)
    return ::lockstep::detail::str_cat(op, ": target ", e.value, " at position ", e.position, " is out of range for ",
                                       e.limit, " classes");
  return ::lockstep::detail::str_cat(op, ": index ", e.value, " at position ", e.position,
                                     " is out of range for a dimension of size ", e.limit);
}

namespace {

constexpr int kMaxDevices = 64;

struct Discovery {
  int count = 0;
  std::string reason;  // why count is 0
};

// Asked once: the driver's answer does not change while the process runs.
const Discovery& discovery() {
  static const Discovery d = [] {
    Discovery r;
    cudaError_t err = cudaGetDeviceCount(&r.count);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      r.count = 0;
      r.reason = ::lockstep::detail::str_cat("cudaGetDeviceCount: ", cudaGetErrorString(err), " (",
                                             cudaGetErrorName(err), ")");
    } else if (r.count == 0) {
      r.reason = "the CUDA driver reports no devices";
    } else if (r.count > kMaxDevices) {
      r.count = kMaxDevices;
    }
    return r;
  }();
  return d;
}

}  // namespace

int checked_device(int device) {
  const Discovery& d = discovery();
  LOCKSTEP_CHECK(d.count > 0, "cuda", device >= 0 ? ::lockstep::detail::str_cat(":", device) : std::string(),
                 " is not available: no CUDA device is visible (", d.reason, ")");
  if (device < 0) LOCKSTEP_CUDA_CHECK(cudaGetDevice(&device));
  LOCKSTEP_CHECK(device < d.count, "cuda:", device, " is not available: ", d.count, " CUDA device",
                 d.count == 1 ? " is" : "s are", " visible (cuda:0 to cuda:", d.count - 1, ")");
  return device;
}

DeviceGuard::DeviceGuard(int device) : device_(device) {
  LOCKSTEP_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device_) LOCKSTEP_CUDA_CHECK(cudaSetDevice(device_));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ != device_) (void)cudaSetDevice(previous_);  // a destructor must not throw
}

DeviceContext::DeviceContext(int device) : device_(device) {
  DeviceGuard guard(device);
  LOCKSTEP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  LOCKSTEP_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  LOCKSTEP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_record_), sizeof(IndexError)));
  LOCKSTEP_CUDA_CHECK(cudaMemsetAsync(device_record_, 0, sizeof(IndexError), stream_));
  LOCKSTEP_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_record_), sizeof(IndexError)));
  *host_record_ = IndexError{};
}

void DeviceContext::synchronize(bool whole_device) {
  std::lock_guard<std::mutex> lock(mu_);
  DeviceGuard guard(device_);
  const bool check = armed_;
  if (check)
    LOCKSTEP_CUDA_CHECK(
        cudaMemcpyAsync(host_record_, device_record_, sizeof(IndexError), cudaMemcpyDeviceToHost, stream_));
  if (whole_device) LOCKSTEP_CUDA_CHECK(cudaDeviceSynchronize());
  else LOCKSTEP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (!check) return;
  armed_ = false;
  if (host_record_->kind == 0) return;
  IndexError e = *host_record_;
  *host_record_ = IndexError{};
  LOCKSTEP_CUDA_CHECK(cudaMemsetAsync(device_record_, 0, sizeof(IndexError), stream_));
  fail(describe(e), " (detected on cuda:", device_, " at a synchronization after the op was queued)");
}

DeviceContext& context(int device) {
  device = checked_device(device);
  static std::array<std::once_flag, kMaxDevices> once;
  // Never destroyed: tensors may still be freed, and kernels queued, while static destructors run.
  static std::array<DeviceContext*, kMaxDevices> contexts{};
  std::call_once(once[device], [&] { contexts[device] = new DeviceContext(device); });
  return *contexts[device];
}

}  // namespace detail

bool is_available() { return detail::discovery().count > 0; }
int device_count() { return detail::discovery().count; }
std::string unavailable_reason() { return detail::discovery().reason; }

void set_device(int device) {
  LOCKSTEP_CHECK(device >= 0, "cuda::set_device: expected a device index, got ", device);
  LOCKSTEP_CUDA_CHECK(cudaSetDevice(detail::checked_device(device)));
}

int current_device() { return detail::checked_device(-1); }

void synchronize(int device) { detail::context(device).synchronize(/*whole_device=*/true); }

void* current_stream(int device) { return detail::context(device).stream(); }

}  // namespace lockstep::cuda
