// Intra-op parallelism for CPU kernels: the thread count (PyTorch's set_num_threads /
// get_num_threads) and parallel_for over a persistent pool of our own threads (no OpenMP).
//
// Contract of parallel_for(begin, end, grain, f):
// - f(chunk_begin, chunk_end) is called on disjoint chunks that together cover [begin, end) exactly
//   once; nothing is called when begin >= end.
// - It runs f(begin, end) on the calling thread alone, with no hand-off, when end - begin < grain,
//   when get_num_threads() == 1, or when called from inside another parallel_for (nesting runs
//   inline), or while another thread is using the pool. Otherwise it splits the range into at most
//   get_num_threads() equal chunks of at least `grain` indices each (so a range below 2 * grain
//   also runs as one call); the caller runs chunks too.
// - It returns when every chunk has finished. If f throws, the first exception is rethrown on the
//   caller once the chunks already started have finished (chunks not yet started are skipped).
// - No allocation per call; f is called through a function pointer, not std::function.
#pragma once

#include <cstdint>

namespace lockstep {

// Threads used by CPU kernels within one op, >= 1. Starts at default_num_threads().
int get_num_threads();

// Sets the thread count for all later ops (n >= 1). The pool is resized at its next use.
void set_num_threads(int n);

// What get_num_threads() starts from: OMP_NUM_THREADS when set (a positive integer; anything else
// is an error naming it), else the number of cores this process may run on (sched_getaffinity).
// Read afresh on every call; the launcher sets OMP_NUM_THREADS=1 for its ranks unless the user did.
int default_num_threads();

// True on a thread that is running a parallel_for chunk (where nested calls run inline).
bool in_parallel_region();

namespace detail {
using ChunkFn = void (*)(const void* ctx, int64_t begin, int64_t end);
// The type-erased core of parallel_for, for ranges that are worth splitting.
void parallel_run(int64_t begin, int64_t end, int64_t grain, ChunkFn fn, const void* ctx);
[[noreturn]] void bad_grain(int64_t grain);
}  // namespace detail

template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  if (grain < 0) detail::bad_grain(grain);
  if (begin >= end) return;
  if (end - begin < grain || end - begin == 1 || in_parallel_region() || get_num_threads() == 1) {
    f(begin, end);
    return;
  }
  detail::parallel_run(
      begin, end, grain, [](const void* ctx, int64_t b, int64_t e) { (*static_cast<const F*>(ctx))(b, e); }, &f);
}

}  // namespace lockstep
