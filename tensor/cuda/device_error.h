// IndexError: how kernels that index with tensor data (nll_loss targets, the positions of index_select,
// index_add, gather and scatter_add) report a bad index without a synchronization per op, and how
// integer division reports a zero divisor.
//
// The choice: such a kernel never trusts an index. An out-of-range one skips its read or write (no
// memory is corrupted) and the first offender is recorded in a small per-device record in device
// memory (device_error.cuh). The record is copied back only at synchronization points (a device->host
// copy such as item(), or synchronize()), and only when a checking kernel ran since the last one: one
// 32-byte copy on the stream, no extra synchronization. The error is then raised there as
// lockstep::Error, with the CPU backend's message plus where it was detected. Until then the op's
// output is unspecified, as after any failed op.
//
// Integer division by zero is the same kind of mistake: the CPU backend raises (it would trap), a GPU
// gives an unspecified value without a word, and only the device sees the divisor. So an integer div
// skips the division where the divisor is 0 (writing 0) and records DivisionByZero here.
#pragma once

#include <cstdint>
#include <string>

namespace lockstep::cuda::detail {

enum class IndexErrorKind : int32_t {
  None = 0,
  NllTarget,
  NllBackwardTarget,
  IndexSelect,
  IndexAdd,
  Gather,
  ScatterAdd,
  Scatter,        // scatter_ (tensor/scatter_ops.h's Assign row)
  ScatterReduce,  // its other rows
  DivisionByZero,  // position: the output element; value: the dividend; limit unused
};

// Written by the device (first reporter wins), read by the host after a synchronization.
struct IndexError {
  int32_t kind;  // an IndexErrorKind; 0: nothing recorded
  int32_t unused;
  int64_t position;  // which element of the index / target tensor (row-major)
  int64_t value;     // the bad index
  int64_t limit;     // the valid range is [0, limit)
};

// The CPU backend's message for the same mistake, e.g.
// "cross_entropy: target 12 at position 3 is out of range for 10 classes", or for DivisionByZero
// exactly tensor/ops.cpp's (which names no position, so neither does this).
std::string describe(const IndexError& e);

}  // namespace lockstep::cuda::detail
