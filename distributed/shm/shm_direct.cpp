// ShmGroup's direct reads: each rank reads the others' inputs through process_vm_readv (cross-memory
// attach) instead of staging them in the segment. See shm_group.h for when they are used.
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "common/env.h"
#include "distributed/shm/fold.h"
#include "distributed/shm/shm_group.h"

namespace lockstep::dist::shm {

namespace {
// The steps' codes in `what` (shm_group.cpp numbers the collectives from 1; these follow them).
constexpr uint64_t kProbe = uint64_t{16} << 56;
constexpr uint64_t kProbeAgree = uint64_t{17} << 56;
// Elements of each other rank's input read per system call in the direct reduce-scatter: the blocks
// of all ranks stay in L2 while they are folded.
constexpr size_t kDirectBlockBytes = 128 << 10;
}  // namespace

bool ShmGroup::probe_direct_reads() {
  // Every rank publishes the address of a word holding its rank, reads every other rank's, and then all
  // agree: direct reads only where every rank could read every other (and none has them turned off).
  const bool wanted = env_string("LOCKSTEP_SHM_CMA").value_or("1") != "0";
  const uint64_t word = 0x6c6f636b73746570ULL ^ static_cast<uint64_t>(local_);
  arrive(kProbe, reinterpret_cast<uint64_t>(&word));
  wait_all("setup", kProbe);
  bool ok = wanted;
  for (int k = 0; k < size() && ok; ++k) {
    if (k == local_) continue;
    uint64_t theirs = 0;
    iovec to{&theirs, sizeof(theirs)}, from{reinterpret_cast<void*>(published_addr(k)), sizeof(theirs)};
    ok = ::process_vm_readv(pids_[k], &to, 1, &from, 1, 0) == sizeof(theirs) &&
         theirs == (0x6c6f636b73746570ULL ^ static_cast<uint64_t>(k));
  }
  // The second step also keeps `word` alive until every rank has read it, and agrees on the threshold:
  // local rank 0's LOCKSTEP_SHM_DIRECT_MIN_BYTES (all ranks must take the same path).
  const uint64_t threshold = static_cast<uint64_t>(
      env_int("LOCKSTEP_SHM_DIRECT_MIN_BYTES", static_cast<long long>(kDirectMinBytes), 1, 1LL << 40));
  arrive(kProbeAgree, ok ? (threshold << 1) | 1 : 0);
  wait_all("setup", kProbeAgree);
  for (int k = 0; k < size(); ++k) {
    if (k != local_ && published_addr(k) == 0) ok = false;
  }
  direct_min_bytes_ = local_ == 0 ? threshold : published_addr(0) >> 1;
  return ok;
}

void ShmGroup::read_peer(int k, void* to, uint64_t from, size_t bytes, const char* op) {
  char* dst = static_cast<char*>(to);
  while (bytes > 0) {
    iovec local{dst, bytes}, remote{reinterpret_cast<void*>(from), bytes};
    const ssize_t got = ::process_vm_readv(pids_[k], &local, 1, &remote, 1, 0);
    if (got <= 0) {
      const int err = got < 0 ? errno : EIO;
      if (err == ESRCH || !alive(k)) peer_gone(k, op);
      throw ShmError(lockstep::detail::str_cat("shared memory: reading ", bytes, " bytes of rank ", ranks_[k],
                                               " (pid ", pids_[k], ") in ", op, " failed: ", std::strerror(err)));
    }
    dst += got;
    from += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
}

// All-gather: publish the input, copy this rank's own chunk, read every other's straight into its place,
// then one more synchronization, after which every input may change again.
void ShmGroup::all_gather_direct(const void* input, const std::vector<void*>& outputs, size_t bytes) {
  const uint64_t step = (uint64_t{3} << 56) | bytes;  // all_gather's code (shm_group.cpp), its size
  arrive(step, reinterpret_cast<uint64_t>(input));
  if (outputs[local_] != input) std::memcpy(outputs[local_], input, bytes);
  wait_all("all_gather", step);
  for (int k = 0; k < size(); ++k) {
    if (k != local_) read_peer(k, outputs[k], published_addr(k), bytes, "all_gather");
  }
  sync("all_gather", step);
}

// Reduce-scatter: publish the whole input; per block, read chunk local_rank() of every other rank's into
// a buffer of its own and fold the W blocks in rank order (this rank's own read in place), as the
// segment's path folds them; then one more synchronization.
void ShmGroup::reduce_scatter_direct(const void* input, void* output, size_t n, Dtype dtype, ReduceOp op,
                                     int avg_divisor) {
  const int W = size();
  const uint64_t step = (uint64_t{4} << 56) | (n * element_size(dtype));  // reduce_scatter's code, its size
  arrive(step, reinterpret_cast<uint64_t>(input));
  wait_all("reduce_scatter", step);
  std::vector<uint64_t> base(W);
  for (int k = 0; k < W; ++k) base[k] = published_addr(k);
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* own = static_cast<const T*>(input) + static_cast<size_t>(local_) * n;
    T* out = static_cast<T*>(output);
    const bool in_place = out == own;
    const size_t block = std::max<size_t>(1, kDirectBlockBytes / sizeof(T));
    peer_blocks_.resize(static_cast<size_t>(W) * block * sizeof(T));
    if (in_place) fold_tmp_.resize(kFoldBlock * sizeof(T));
    T* blocks = reinterpret_cast<T*>(peer_blocks_.data());
    std::vector<const T*> src(W);
    for (size_t off = 0; off < n; off += block) {
      const size_t m = std::min(block, n - off);
      for (int k = 0; k < W; ++k) {
        if (k == local_) {
          src[k] = own + off;
          continue;
        }
        T* into = blocks + static_cast<size_t>(k) * block;
        read_peer(k, into, base[k] + (static_cast<size_t>(local_) * n + off) * sizeof(T), m * sizeof(T),
                  "reduce_scatter");
        src[k] = into;
      }
      fold<T>(out + off, src, m, op, in_place ? reinterpret_cast<T*>(fold_tmp_.data()) : nullptr,
              op == ReduceOp::AVG ? avg_divisor : 0);
    }
  });
  sync("reduce_scatter", step);
}

}  // namespace lockstep::dist::shm
