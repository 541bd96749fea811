// Memory accounting for finding what is resident at a step's peak: with LOCKSTEP_MEMORY_STATS=1 every
// Storage reports its bytes here, under a label and its tensor's dtype, and the totals per (label,
// dtype) are copied whenever the live bytes reach a new peak. The label is the op whose recorded
// output first took the storage (autograd's record: "linear", "gelu", "to_dtype"), else the innermost
// Scope open when it was allocated ("backward linear" inside a node's backward, "optimizer" ...), else
// "other". The CPU allocator also reports what its block cache holds (tensor/cpu/block_cache.h), so
// the peak of live + cached bytes is the part of the resident set tensors account for.
//
// Off (the default) each allocation and free costs one test of a cached flag. The report goes to
// stderr at exit, largest rows first; report() returns it, reset_peak() starts a new window.
//
//   LOCKSTEP_MEMORY_STATS=1 bazel-bin/examples/gpt --dtype bfloat16 ...
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace lockstep {
class Storage;
}

namespace lockstep::memory_stats {

namespace detail {
extern const bool on;  // LOCKSTEP_MEMORY_STATS, read once at start-up
void allocated(const Storage* s, size_t nbytes, bool is_cpu);
void freed(const Storage* s);
void set_dtype(const Storage* s, Dtype dtype);
void set_op(const Storage* s, const std::string& op);
void push_scope(const char* label);
void push_scope(const std::string& label);  // interned: labels outlive the scope
void pop_scope();
}  // namespace detail

inline bool enabled() { return detail::on; }

// Called by Storage and Tensor (tensor.cpp) and by autograd's record; cheap no-ops when off.
inline void on_allocate(const Storage* s, size_t nbytes, bool is_cpu) {
  if (detail::on) detail::allocated(s, nbytes, is_cpu);
}
inline void on_free(const Storage* s) {
  if (detail::on) detail::freed(s);
}
inline void tag_dtype(const Storage* s, Dtype dtype) {
  if (detail::on) detail::set_dtype(s, dtype);
}
// Labels `s` with `op` (interned) unless an op already did (a view's output shares its input's storage).
inline void tag_op(const Storage* s, const std::string& op) {
  if (detail::on) detail::set_op(s, op);
}
// The CPU block cache's held bytes, after each change.
void set_cached_bytes(size_t bytes);

// Labels the storages allocated on this thread while it is open (innermost wins). `label` must outlive it.
class Scope {
 public:
  explicit Scope(const char* label) {
    if (detail::on) detail::push_scope(label);
  }
  ~Scope() {
    if (detail::on) detail::pop_scope();
  }
  explicit Scope(const std::string& label) {
    if (detail::on) detail::push_scope(label);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
};

struct Row {
  std::string label;
  Dtype dtype;
  bool is_cpu;
  size_t bytes, count;
};
struct Snapshot {
  size_t live = 0, peak = 0;             // bytes held by storages now, and at most since reset_peak
  size_t cached_at_peak = 0;             // CPU block cache at that peak
  size_t peak_with_cache = 0;            // the largest live + cached
  std::vector<Row> at_peak;              // the live bytes at `peak`, by label and dtype, largest first
  std::vector<Row> now;                  // the live bytes now, the same way
  // Live bytes now (or at the peak) under `label` (every label when null) and `dtype`.
  size_t bytes(const char* label, Dtype dtype, bool at_the_peak = false) const;
};
Snapshot snapshot();
void reset_peak();
std::string report();

}  // namespace lockstep::memory_stats
