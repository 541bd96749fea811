// lockstep::cuda: the CUDA devices as the rest of lockstep sees them (as torch.cuda). This header has
// no CUDA includes and is there in every build: where lockstep is built without CUDA (no toolkit, or
// --config=nocuda) is_available() is false, device_count() is 0 and the calls that need a device throw
// "lockstep was built without CUDA". LOCKSTEP_WITH_CUDA is defined when the CUDA backend is linked in.
//
// Execution model: one non-blocking stream per device; every op on a cuda tensor is queued on it and
// returns at once. A device->host copy (to(cpu), item(), to_vector()) waits for the stream, and so does
// synchronize(). Errors that only the device can see (an nll_loss target or an index out of range, an
// int64 division by a divisor tensor holding 0) skip the bad write or division and are raised as
// lockstep::Error, with the CPU backend's message, at the next of those synchronizations.
#pragma once

#include <cstddef>
#include <string>

namespace lockstep::cuda {

// True when at least one CUDA device is visible and usable.
bool is_available();
// Visible devices (honours CUDA_VISIBLE_DEVICES); 0 without a driver or GPU. Never throws.
int device_count();
// Why is_available() is false ("" when it is true), e.g. the driver's error or "built without CUDA".
std::string unavailable_reason();

// The calling thread's current device, as torch.cuda.set_device / current_device. Ops run on their
// tensors' device regardless; this picks the device for current_stream() and synchronize() defaults.
void set_device(int device);
int current_device();

// Waits for everything queued on `device` (-1: the current device), then raises any error the device
// recorded (see above).
void synchronize(int device = -1);

// The stream lockstep queues work on for `device` (-1: the current device), a cudaStream_t. Work that
// shares lockstep's buffers (NCCL collectives) goes on this stream to stay ordered with the ops.
void* current_stream(int device = -1);

// Lets cuBLAS use TF32 tensor cores for float32 GEMMs (faster, ~10-bit mantissa products). Off by
// default, as torch.backends.cuda.matmul.allow_tf32.
void set_allow_tf32(bool allow);
bool allow_tf32();

// The caching allocator (tensor/cuda/allocator.h), as torch.cuda.memory_allocated / memory_reserved /
// empty_cache: bytes in live tensors (rounded up to the allocator's size classes), bytes held from CUDA
// (live plus cached), and returning every cached block to CUDA. 0 / no-op without a device.
size_t memory_allocated(int device = -1);
size_t memory_reserved(int device = -1);
void empty_cache();

}  // namespace lockstep::cuda
