// The CUDA emulator's runtime: configuration, errors, devices and memory (streams and events are in
// stream.cpp, kernels in kernel.cpp).
#include <cuda_runtime_api.h>
#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "emu.h"

namespace lockstep_emu {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end || x < 0) {
    std::fprintf(stderr, "cuda_emu: ignoring %s=%s (expected a non-negative integer)\n", name, v);
    return fallback;
  }
  return static_cast<int>(x);
}

namespace {

struct Config {
  // A test meant for the emulator names its devices in its BUILD rule (env), which Bazel's --test_env
  // cannot override; CI's sanitizer stage hides the devices from every other test with
  // --test_env=LOCKSTEP_CUDA_EMU_DEVICES=0, so they take their CPU paths there as elsewhere.
  int devices = env_int("LOCKSTEP_CUDA_EMU_TEST_DEVICES", env_int("LOCKSTEP_CUDA_EMU_DEVICES", 2));
  int sms = std::max(1, env_int("LOCKSTEP_CUDA_EMU_SMS", 2));
  size_t memory = size_t(env_int("LOCKSTEP_CUDA_EMU_MEMORY_MB", 4096)) << 20;
  bool verbose = std::getenv("LOCKSTEP_CUDA_EMU_VERBOSE") != nullptr;
};
const Config& config() {
  static const Config c;
  return c;
}

thread_local int tl_device = 0;
thread_local cudaError_t tl_last_error = cudaSuccess;
std::atomic<cudaError_t> g_sticky{cudaSuccess};

struct Block {
  size_t size;
  int device;  // -1: pinned host memory
};

// Live allocations by start address; used bytes per device.
struct Memory {
  std::mutex mu;
  std::map<uintptr_t, Block> blocks;
  std::vector<size_t> used;
};
Memory& memory() {
  static Memory* m = [] {
    auto* r = new Memory;
    r->used.assign(64, 0);
    return r;
  }();
  return *m;
}

// The allocation holding [p, p + bytes), or nullptr.
const Block* find_locked(const void* p, size_t bytes, uintptr_t* base = nullptr) {
  Memory& m = memory();
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = m.blocks.upper_bound(a);
  if (it == m.blocks.begin()) return nullptr;
  --it;
  if (a + bytes > it->first + it->second.size) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

#define EMU_ENTER()                                                 \
  do {                                                              \
    if (cudaError_t s = sticky_error(); s != cudaSuccess) return s; \
  } while (0)

}  // namespace

int device_count() { return std::min(config().devices, 64); }
int sm_count() { return config().sms; }
size_t device_memory() { return config().memory; }
int current_device() { return tl_device; }

void note(const std::string& why) {
  if (config().verbose && !why.empty()) std::fprintf(stderr, "cuda_emu: %s\n", why.c_str());
}

cudaError_t fail(cudaError_t err, const std::string& why) {
  tl_last_error = err;
  note(why);
  return err;
}

void device_fault(cudaError_t err, const std::string& what) {
  std::fprintf(stderr, "cuda_emu: device fault: %s\n", what.c_str());
  cudaError_t none = cudaSuccess;
  g_sticky.compare_exchange_strong(none, err);
}

cudaError_t sticky_error() { return g_sticky.load(); }

namespace {

// A process forked after it used CUDA cannot use CUDA (the driver refuses with
// cudaErrorInitializationError); here the child would have the parent's streams but none of their
// worker threads, and its first wait would hang. So a child forked after any CUDA call gets that
// error, sticky, from every call.
std::atomic<bool> g_used{false};
const bool fork_guard = [] {
  pthread_atfork(nullptr, nullptr, [] {
    if (g_used) g_sticky = cudaErrorInitializationError;
  });
  return true;
}();

}  // namespace

void mark_used() { g_used = true; }

int device_of(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(memory().mu);
  const Block* b = find_locked(p, bytes);
  return b ? b->device : -1;
}

bool is_pinned(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(memory().mu);
  const Block* b = find_locked(p, bytes);
  return b && b->device == -1;
}

}  // namespace lockstep_emu

using namespace lockstep_emu;

// --- errors ---------------------------------------------------------------------------------------

cudaError_t cudaGetLastError() {
  cudaError_t e = tl_last_error;
  tl_last_error = cudaSuccess;
  return e != cudaSuccess ? e : sticky_error();
}

cudaError_t cudaPeekAtLastError() { return tl_last_error != cudaSuccess ? tl_last_error : sticky_error(); }

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
#define EMU_NAME(e) \
  case e: return #e;
    EMU_NAME(cudaSuccess)
    EMU_NAME(cudaErrorInvalidValue)
    EMU_NAME(cudaErrorMemoryAllocation)
    EMU_NAME(cudaErrorInitializationError)
    EMU_NAME(cudaErrorInvalidConfiguration)
    EMU_NAME(cudaErrorInvalidDevice)
    EMU_NAME(cudaErrorNoDevice)
    EMU_NAME(cudaErrorInvalidResourceHandle)
    EMU_NAME(cudaErrorNotReady)
    EMU_NAME(cudaErrorIllegalAddress)
    EMU_NAME(cudaErrorLaunchFailure)
#undef EMU_NAME
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

// --- devices --------------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return *count == 0 ? fail(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  EMU_ENTER();
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  *device = tl_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  EMU_ENTER();
  if (device < 0 || device >= device_count())
    return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + "): no such device");
  tl_device = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  EMU_ENTER();
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = sm_count(); return cudaSuccess;
  }
  return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute not emulated");
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;  // an H100/H200's range
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  EMU_ENTER();
  wait_all_streams(tl_device);
  return sticky_error();
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  EMU_ENTER();
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  *total = device_memory();
  *free = device_memory() - m.used[tl_device];
  return cudaSuccess;
}

// --- memory ---------------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** ptr, size_t size) {
  EMU_ENTER();
  if (!ptr) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  if (size > device_memory() - m.used[tl_device])
    return fail(cudaErrorMemoryAllocation, "cudaMalloc(" + std::to_string(size) + "): emulated device full");
  mark_used();
  // cudaMalloc's 256-byte alignment, at the exact size: under ASan the first byte past it is poisoned.
  void* p = nullptr;
  if (posix_memalign(&p, 256, size) != 0) return fail(cudaErrorMemoryAllocation);
  // Fresh device memory is not zero on a GPU either: all-ones bytes (NaN, -1) expose reads of it.
  std::memset(p, 0xff, size);
  m.blocks[reinterpret_cast<uintptr_t>(p)] = Block{size, tl_device};
  m.used[tl_device] += size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  EMU_ENTER();
  if (!ptr) return cudaSuccess;
  wait_all_streams(-1);  // cudaFree synchronizes: no queued work may still use the block
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.blocks.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == m.blocks.end() || it->second.device < 0)
    return fail(cudaErrorInvalidValue, "cudaFree: not a pointer returned by cudaMalloc");
  m.used[it->second.device] -= it->second.size;
  m.blocks.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  EMU_ENTER();
  mark_used();
  *ptr = nullptr;
  if (posix_memalign(ptr, 256, std::max<size_t>(size, 1)) != 0) return fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(memory().mu);
  memory().blocks[reinterpret_cast<uintptr_t>(*ptr)] = Block{size, -1};
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  EMU_ENTER();
  if (!ptr) return cudaSuccess;
  wait_all_streams(-1);
  std::lock_guard<std::mutex> lock(memory().mu);
  auto it = memory().blocks.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == memory().blocks.end() || it->second.device != -1)
    return fail(cudaErrorInvalidValue, "cudaFreeHost: not a pointer returned by cudaMallocHost");
  memory().blocks.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

namespace {

// Checks that the side of a copy that `kind` says is on a device is inside one allocation.
cudaError_t check_copy(const char* call, void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyDefault || kind == cudaMemcpyHostToHost)
    return fail(cudaErrorInvalidValue, std::string(call) + ": only host<->device and device copies are emulated");
  if (count == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue, std::string(call) + ": null pointer");
  if (dst_dev && device_of(dst, count) < 0)
    return fail(cudaErrorInvalidValue,
                std::string(call) + ": destination is not " + std::to_string(count) + " bytes of device memory");
  if (src_dev && device_of(src, count) < 0)
    return fail(cudaErrorInvalidValue,
                std::string(call) + ": source is not " + std::to_string(count) + " bytes of device memory");
  if (!dst_dev && device_of(dst, count) >= 0)
    return fail(cudaErrorInvalidValue, std::string(call) + ": destination is device memory, kind says host");
  if (!src_dev && device_of(src, count) >= 0)
    return fail(cudaErrorInvalidValue, std::string(call) + ": source is device memory, kind says host");
  return cudaSuccess;
}

// A copy queued on `stream`, with CUDA's rules for pageable host memory: a copy from it reads the
// source before returning; a copy to it returns only when done (both are synchronous for the host).
cudaError_t copy_async(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: not a live stream");
  if (count == 0) return cudaSuccess;
  if (kind == cudaMemcpyHostToDevice && !is_pinned(src, count)) {
    auto staged =
        std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + count);
    enqueue(s, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
    return cudaSuccess;
  }
  const uint64_t t = enqueue(s, [dst, src, count] { std::memcpy(dst, src, count); });
  if (kind == cudaMemcpyDeviceToHost && !is_pinned(dst, count)) wait(s, t);
  return sticky_error();
}

}  // namespace

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  EMU_ENTER();
  if (cudaError_t e = check_copy("cudaMemcpyAsync", dst, src, count, kind); e != cudaSuccess) return e;
  return copy_async(dst, src, count, kind, stream);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  EMU_ENTER();
  if (cudaError_t e = check_copy("cudaMemcpy", dst, src, count, kind); e != cudaSuccess) return e;
  if (cudaError_t e = copy_async(dst, src, count, kind, 0); e != cudaSuccess) return e;
  CUstream_st* s = resolve(0);
  wait(s, enqueue(s, [] {}));
  return sticky_error();
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                                cudaStream_t stream) {
  EMU_ENTER();
  if (count == 0) return cudaSuccess;
  if (device_of(dst, count) != dst_device || device_of(src, count) != src_device)
    return fail(cudaErrorInvalidValue, "cudaMemcpyPeerAsync: a pointer is not on the device named for it");
  return copy_async(dst, src, count, cudaMemcpyDeviceToDevice, stream);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  EMU_ENTER();
  if (count == 0) return cudaSuccess;
  if (device_of(ptr, count) < 0)
    return fail(cudaErrorInvalidValue, "cudaMemsetAsync: not " + std::to_string(count) + " bytes of device memory");
  CUstream_st* s = resolve(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaMemsetAsync: not a live stream");
  enqueue(s, [ptr, value, count] { std::memset(ptr, value, count); });
  return cudaSuccess;
}
