// The CUDA emulator's internals shared by its runtime, kernel executor, cuBLAS and NCCL: devices,
// memory bookkeeping, per-thread errors, and streams (one worker thread each, executing queued work in
// order, as a GPU does; see README.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>

namespace lockstep_emu {

// Configuration, read once from the environment: devices from LOCKSTEP_CUDA_EMU_TEST_DEVICES, else
// LOCKSTEP_CUDA_EMU_DEVICES (default 2); LOCKSTEP_CUDA_EMU_SMS (multiprocessors per device, default 2);
// LOCKSTEP_CUDA_EMU_MEMORY_MB (per device, default 4096).
int device_count();
// The environment variable `name` as a non-negative integer; `fallback` when unset, or (with a warning
// on stderr) when it is not one.
int env_int(const char* name, int fallback);
int sm_count();
size_t device_memory();

int current_device();  // the calling thread's, as cudaSetDevice left it (0 at first)

// Records `err` as the calling thread's last error (cudaGetLastError) and returns it. With a message,
// the message is printed to stderr when LOCKSTEP_CUDA_EMU_VERBOSE is set: the emulator says why it
// refused a call where CUDA only gives a code.
cudaError_t fail(cudaError_t err, const std::string& why = {});

// Prints `why` to stderr when LOCKSTEP_CUDA_EMU_VERBOSE is set.
void note(const std::string& why);

// A failure inside a kernel or other queued work: made sticky (every later call returns it, as after a
// device fault) and always printed, since it is a bug the real GPU would hit too.
void device_fault(cudaError_t err, const std::string& what);
cudaError_t sticky_error();

// Records that this process has a CUDA context (a stream or an allocation): a child forked after that
// gets cudaErrorInitializationError from every call, as from the CUDA driver.
void mark_used();

// Device memory bookkeeping. Returns the device holding [p, p + bytes), or -1 if that range is not
// inside one live cudaMalloc allocation.
int device_of(const void* p, size_t bytes);
bool is_pinned(const void* p, size_t bytes);

// Streams. resolve() maps 0 to the current device's default stream and returns nullptr for a handle that
// is not a live stream. enqueue() queues work and returns its ticket; wait() blocks until the stream has
// executed every ticket up to `ticket`; stream_device() names its device.
CUstream_st* resolve(cudaStream_t s);
uint64_t enqueue(CUstream_st* s, std::function<void()> work);
void wait(CUstream_st* s, uint64_t ticket);
int stream_device(const CUstream_st* s);
void wait_all_streams(int device);  // -1: every device

}  // namespace lockstep_emu
