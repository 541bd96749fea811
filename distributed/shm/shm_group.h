// ShmGroup: collectives among the ranks of one host through one shared-memory segment (segment.h).
//
// Layout: after the segment header, one control line per rank (its arrival counter and pid), then two
// buffers of `slot_bytes` per rank. A step of a collective is: every rank writes into its own slot of
// the current buffer, announces its arrival (bumping its counter, waking sleepers by futex), waits for
// every other rank's arrival, then reads the others' slots. Buffers alternate from one step to the
// next, so a rank may write the next step's slot while slower ranks still read the last one: one
// synchronization per step, none to release a buffer.
//
// all_reduce of more than kSmallBytes: reduce-scatter then all-gather through the segment. Rank i
// stages the slices the others reduce; after a synchronization it folds slice i, its own copy read in
// place and the others' from their slots, in rank order, into its input and its slot; after a second
// synchronization every rank copies the other reduced slices out. The ranks reduce disjoint slices in
// parallel, every element is reduced once in a fixed order, so every rank ends with the same bits.
// Smaller ones: one synchronization a step, then every rank folds the whole step, in rank order.
//
// Direct reads (shm_direct.cpp): where the kernel lets one rank read another's memory
// (process_vm_readv, Linux's cross-memory attach, which Open MPI's shared-memory transport uses too; on
// by default in Linux, off under a strict Yama ptrace policy or a seccomp filter, LOCKSTEP_SHM_CMA=0 on
// any rank), checked once when the group is set up, large all-gathers and flat reduce-scatters skip the
// segment: each rank publishes its input's address, reads its share of every other rank's input
// straight into its output (all_gather) or into a block it folds at once (reduce_scatter), and a final
// synchronization keeps every input alive until the others have read it. One copy instead of two, and
// two synchronizations for the whole collective instead of one per slot.
//
// Waiting: a short spin, then futex waits of kPollPeriod, between which a waiter looks whether the
// rank it waits for is still alive (pidfd) and whether the timeout has passed. Errors (ShmError) name
// the rank: "rank 1 (pid 4242) exited ..." or "timed out after 30s waiting for rank 1".
//
// Not thread-safe: the process group calls it from one thread at a time, in the same order on every
// local rank.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/deadline.h"
#include "distributed/shm/segment.h"
#include "distributed/store/store.h"
#include "distributed/work.h"
#include "tensor/dtype.h"

namespace lockstep::dist::shm {

// A fault of a peer or the timeout, with the message naming the rank: reported as is.
class ShmError : public Error {
 public:
  using Error::Error;
};

struct ShmOptions {
  // Bytes each rank stages per step (each of its two buffers). Larger steps synchronize less often.
  size_t slot_bytes = size_t{1} << 20;
  std::chrono::milliseconds timeout{30 * 60 * 1000};
  // How long a waiting rank spins before it sleeps on a futex.
  std::chrono::microseconds spin{50};
  // With a token, the segment carries its tag and a rank attaches only to a segment that proves it.
  JobToken token{};
};

class ShmGroup {
 public:
  // all_reduce up to this size folds everything on every rank (one synchronization).
  static constexpr size_t kSmallBytes = 16 << 10;
  // all_gather and reduce_scatter_flat read the others' memory directly (when the group can) from this
  // many bytes per rank (LOCKSTEP_SHM_DIRECT_MIN_BYTES on the host's first rank overrides it). Measured
  // at 2 ranks (BENCHMARKS.md): 2.5-3.9x faster than the segment from 32 KiB per rank up, and no slower
  // at 16 KiB; below, one synchronization costs less than two and a system call per peer.
  static constexpr size_t kDirectMinBytes = 16 << 10;

  // Collective among `ranks` (global rank numbers, ascending; this process is ranks[local]) through
  // `store` (a prefix of this group alone): ranks[0] creates the segment, the others attach. Throws
  // naming the step that failed; no segment name is left behind.
  ShmGroup(Store& store, std::vector<int> ranks, int local, ShmOptions options);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int size() const { return static_cast<int>(ranks_.size()); }
  int local_rank() const { return local_; }
  const std::string& segment_name() const { return segment_.name(); }

  // data[0..n) = op over the local ranks, in place. AVG sums, then divides by `avg_divisor`.
  void all_reduce(void* data, size_t n, Dtype dtype, ReduceOp op, int avg_divisor);
  // data[0..bytes) = local rank `root`'s.
  void broadcast(void* data, size_t bytes, int root);
  // outputs[r][0..bytes) = local rank r's input.
  void all_gather(const void* input, const std::vector<void*>& outputs, size_t bytes);
  // output[0..n) = op over local ranks of their inputs[local_rank()]; `inputs` has size() pointers.
  void reduce_scatter(const std::vector<const void*>& inputs, void* output, size_t n, Dtype dtype, ReduceOp op,
                      int avg_divisor);
  // The same with every rank's inputs one run: input[0..size() * n), chunk r for local rank r. `output`
  // may be chunk local_rank() of it.
  void reduce_scatter_flat(const void* input, void* output, size_t n, Dtype dtype, ReduceOp op, int avg_divisor);
  // Whether this group reads the other ranks' memory directly (see above).
  bool direct_reads() const { return direct_; }
  void barrier();

  // How this rank's waits for the others ended, for profiles (LOCKSTEP_SHM_STATS=1 prints them to
  // stderr when the group is destroyed).
  struct WaitStats {
    uint64_t at_once = 0;        // the peer had arrived already, or within the pause loop
    uint64_t after_yield = 0;    // within the spin, while yielding
    uint64_t after_sleep = 0;    // after one or more futex sleeps
    uint64_t sleep_timeouts = 0; // futex sleeps that ran out (kPollPeriod) instead of being woken
    double slept_s = 0;          // time in futex sleeps
  };
  const WaitStats& wait_stats() const { return stats_; }

 private:
  struct Control;
  Control& control(int local) const;
  char* slot(int local, int buffer) const;
  // Announces this rank's arrival at the next step and waits for every other rank's.
  // `what` (the collective and its byte count) must match every other rank's for this step.
  void sync(const char* op, uint64_t what);
  // sync's two halves, for work that fits between them: announce this rank's arrival (with `addr`, an
  // address of this process the others may read at this step); wait for the others'.
  void arrive(uint64_t what, uint64_t addr = 0);
  void wait_all(const char* op, uint64_t what);
  // What local rank k published with its arrival at the step just synchronized.
  uint64_t published_addr(int k) const;
  // Direct reads (shm_direct.cpp): whether every rank can read every other's memory (collective);
  // `bytes` from address `from` of local rank k into `to`, throwing ShmError naming k.
  bool probe_direct_reads();
  void read_peer(int k, void* to, uint64_t from, size_t bytes, const char* op);
  void all_gather_direct(const void* input, const std::vector<void*>& outputs, size_t bytes);
  void reduce_scatter_direct(const void* input, void* output, size_t n, Dtype dtype, ReduceOp op, int avg_divisor);
  void wait_for(int local, uint32_t target, const char* op);
  bool alive(int local) const;
  // Throws the ShmError for local rank k found dead during `op`, or for the rank an earlier failure
  // found dead (see Control::found_dead), and marks it in this rank's control line.
  [[noreturn]] void peer_gone(int k, const char* op);
  // The buffer of the next step (alternating).
  int next_buffer() { return static_cast<int>(step_++ & 1); }

  std::vector<int> ranks_;
  int local_;
  ShmOptions options_;
  ShmSegment segment_;
  std::vector<int> pidfds_;  // [local rank]: -1 for this rank, or where pidfd_open is not available
  std::vector<int> pids_;
  std::vector<char> fold_tmp_;  // a block of partial results, when the output is one of the inputs
  std::vector<char> peer_blocks_;  // direct reduce-scatter: the block read from each other rank
  bool direct_ = false;
  size_t direct_min_bytes_ = kDirectMinBytes;  // LOCKSTEP_SHM_DIRECT_MIN_BYTES on local rank 0
  uint32_t arrivals_ = 0;  // this rank's arrival counter, as published
  uint64_t step_ = 0;
  Deadline deadline_{};  // of the collective in progress
  WaitStats stats_;
};

}  // namespace lockstep::dist::shm
