// ShmGroup: the segment's layout, arrival and waiting (spin, then futex), and the collectives.
#include "distributed/shm/shm_group.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "common/env.h"
#include "distributed/reduce_kernels.h"
#include "distributed/shm/fold.h"

namespace lockstep::dist::shm {

using std::chrono::milliseconds;

// One per rank, on cache lines of its own: written by its rank, read by the others.
struct alignas(128) ShmGroup::Control {
  std::atomic<uint32_t> arrived;   // steps this rank has arrived at
  std::atomic<uint32_t> sleepers;  // ranks in a futex wait on `arrived`
  // What the rank's step s is, at [s & 1] (two, so a rank may announce step s + 1 while others still
  // read step s): the collective's code and byte count.
  std::atomic<uint64_t> what[2];
  // An address in the rank's process that the others may read at step s, at [s & 1] (direct reads).
  std::atomic<uint64_t> addr[2];
  // 1 + the local rank this rank found dead, 0 while none: a rank that fails because a peer died says
  // which, so that the ranks still waiting for it, once it has gone too, name the first to die.
  std::atomic<int32_t> found_dead;
};

namespace {

constexpr size_t kControlBytes = 128;
// How often a sleeping waiter looks at the peer and the clock.
constexpr milliseconds kPollPeriod{20};

// The collectives' codes in a step's `what` (shm_direct.cpp uses all_gather's and reduce_scatter's, and
// 16 and 17 for the setup's probe of direct reads).
enum Code : uint64_t { kAllReduce = 1, kBroadcast, kAllGather, kReduceScatter, kBarrier };
uint64_t what(Code code, size_t bytes) { return (uint64_t{code} << 56) | (bytes & ((uint64_t{1} << 56) - 1)); }
const char* code_name(uint64_t w) {
  switch (w >> 56) {
    case kAllReduce: return "all_reduce";
    case kBroadcast: return "broadcast";
    case kAllGather: return "all_gather";
    case kReduceScatter: return "reduce_scatter";
    case kBarrier: return "barrier";
    case 16:
    case 17: return "the group's setup";
  }
  return "an unknown step";
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

int pidfd_open(int pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

ShmGroup::ShmGroup(Store& store, std::vector<int> ranks, int local, ShmOptions options)
    : ranks_(std::move(ranks)), local_(local), options_(options) {
  static_assert(sizeof(Control) <= kControlBytes && alignof(Control) <= kControlBytes);
  const int W = size();
  LOCKSTEP_CHECK(W >= 2, "shared memory: a group needs at least 2 ranks, got ", W);
  LOCKSTEP_CHECK(local_ >= 0 && local_ < W, "shared memory: local rank ", local_, " is out of range for ", W, " ranks");
  LOCKSTEP_CHECK(options_.slot_bytes >= 4096 && options_.slot_bytes % 4096 == 0,
                 "shared memory: slot_bytes must be a positive multiple of 4096, got ", options_.slot_bytes);
  LOCKSTEP_CHECK(options_.timeout.count() > 0, "shared memory: the timeout must be positive");
  const size_t bytes = ShmSegment::kHeaderBytes + W * kControlBytes + size_t(W) * 2 * options_.slot_bytes;
  std::string name;
  try {
    uint64_t nonce[2];
    if (local_ == 0) {
      std::random_device rd;
      for (auto& x : nonce) x = (uint64_t{rd()} << 32) | rd();
      name = "/lockstep-" + hex(nonce[0]) + hex(nonce[1]);
      // The name first: should this rank die before the others attach, they can still remove it.
      store.set("shm/name", name);
      try {
        segment_ = ShmSegment::create(name, bytes, static_cast<uint32_t>(W), nonce, options_.token);
      } catch (const Error& e) {
        store.set("shm/ready", std::string("error: ") + e.what());
        throw;
      }
      store.set("shm/ready", "ok");
    } else {
      store.wait({"shm/name"}, options_.timeout);
      name = store.get_string("shm/name");
      LOCKSTEP_CHECK(name.size() == 10 + 32, "shared memory: malformed segment name \"", name, "\" in the store");
      nonce[0] = std::stoull(name.substr(10, 16), nullptr, 16);
      nonce[1] = std::stoull(name.substr(26, 16), nullptr, 16);
      store.wait({"shm/ready"}, options_.timeout);
      const std::string ready = store.get_string("shm/ready");
      LOCKSTEP_CHECK(ready == "ok", "shared memory: rank ", ranks_[0], " could not create the segment: ", ready);
      segment_ = ShmSegment::attach(name, bytes, static_cast<uint32_t>(W), nonce, options_.token);
    }
    segment_.count_attached();  // the last to attach removes the name
    store.set("shm/attached/" + std::to_string(local_), std::to_string(::getpid()));
    for (int k = 0; k < W; ++k) {
      const std::string key = "shm/attached/" + std::to_string(k);
      store.wait({key}, options_.timeout);
      pids_.push_back(std::stoi(store.get_string(key)));
      pidfds_.push_back(k == local_ ? -1 : pidfd_open(pids_.back()));
    }
  } catch (const std::exception& e) {
    ShmSegment::unlink(name);  // whoever fails removes the name: nothing stays in /dev/shm
    for (int fd : pidfds_) {
      if (fd >= 0) ::close(fd);
    }
    fail("shared memory: rank ", ranks_[local_], " could not set up the segment", name.empty() ? "" : " " + name,
         " for the ", W, " ranks of its host: ", e.what());
  }
  // Once every rank has counted itself the name is gone; make sure of it before the first collective.
  ShmSegment::unlink(name);
  deadline_ = deadline_after(options_.timeout);
  direct_ = probe_direct_reads();
}

ShmGroup::~ShmGroup() {
  if (env_string("LOCKSTEP_SHM_STATS") == "1") {
    std::fprintf(stderr,
                 "shm stats, rank %d: waits %llu at once, %llu while yielding, %llu after sleeping (%.3f s asleep, "
                 "%llu sleeps timed out)\n",
                 ranks_[local_], static_cast<unsigned long long>(stats_.at_once),
                 static_cast<unsigned long long>(stats_.after_yield), static_cast<unsigned long long>(stats_.after_sleep),
                 stats_.slept_s, static_cast<unsigned long long>(stats_.sleep_timeouts));
  }
  for (int fd : pidfds_) {
    if (fd >= 0) ::close(fd);
  }
}

ShmGroup::Control& ShmGroup::control(int local) const {
  return *reinterpret_cast<Control*>(segment_.data() + local * kControlBytes);
}

char* ShmGroup::slot(int local, int buffer) const {
  return segment_.data() + size() * kControlBytes + (size_t(local) * 2 + buffer) * options_.slot_bytes;
}

bool ShmGroup::alive(int local) const {
  if (pidfds_[local] >= 0) {
    pollfd p{pidfds_[local], POLLIN, 0};
    return !(::poll(&p, 1, 0) == 1 && (p.revents & POLLIN));  // readable: the process has exited
  }
  return ::kill(pids_[local], 0) == 0 || errno == EPERM;
}

void ShmGroup::sync(const char* op, uint64_t step_what) {
  arrive(step_what);
  wait_all(op, step_what);
}

void ShmGroup::arrive(uint64_t step_what, uint64_t addr) {
  ++arrivals_;
  Control& me = control(local_);
  me.what[arrivals_ & 1].store(step_what, std::memory_order_relaxed);
  me.addr[arrivals_ & 1].store(addr, std::memory_order_relaxed);
  me.arrived.store(arrivals_, std::memory_order_seq_cst);  // publishes the slot and `what` too
  if (me.sleepers.load(std::memory_order_seq_cst) > 0) futex(&me.arrived, FUTEX_WAKE, INT32_MAX, nullptr);
}

void ShmGroup::wait_all(const char* op, uint64_t step_what) {
  for (int k = 0; k < size(); ++k) {
    if (k == local_) continue;
    wait_for(k, arrivals_, op);
    const uint64_t theirs = control(k).what[arrivals_ & 1].load(std::memory_order_relaxed);
    if (theirs != step_what) {
      throw ShmError(lockstep::detail::str_cat(
          "shared memory: rank ", ranks_[k], " is in ", code_name(theirs), " of ", theirs & ((uint64_t{1} << 56) - 1),
          " bytes at this step, rank ", ranks_[local_], " in ", code_name(step_what), " of ",
          step_what & ((uint64_t{1} << 56) - 1), " bytes (every rank must issue the same collectives, with the same "
          "sizes, in the same order)"));
    }
  }
}

void ShmGroup::peer_gone(int k, const char* op) {
  // Where an earlier rank found another dead (and has since exited itself), that one is the cause.
  for (int j = 0; j < size(); ++j) {
    const int32_t dead = j == local_ ? 0 : control(j).found_dead.load(std::memory_order_acquire);
    if (dead > 0 && dead - 1 != local_ && dead - 1 != j && (j == k || !alive(dead - 1))) {
      k = dead - 1;
      break;
    }
  }
  control(local_).found_dead.store(k + 1, std::memory_order_release);
  throw ShmError(lockstep::detail::str_cat("shared memory: rank ", ranks_[k], " (pid ", pids_[k], ") exited during ",
                                           op, " (its process died or failed)"));
}

uint64_t ShmGroup::published_addr(int k) const {
  return control(k).addr[arrivals_ & 1].load(std::memory_order_relaxed);  // published by its `arrived` store
}

void ShmGroup::wait_for(int k, uint32_t target, const char* op) {
  Control& c = control(k);
  auto reached = [&](uint32_t seen) { return static_cast<int32_t>(seen - target) >= 0; };
  // A few pauses (the peer is usually a moment away), then yields until `spin` has passed:
  // where the peer waits for this rank's core (an oversubscribed host), a pause loop would keep it off
  // for the whole spin, a yield lets it run at once.
  for (int i = 0; i < 32; ++i) {
    if (reached(c.arrived.load(std::memory_order_acquire))) {
      ++stats_.at_once;
      return;
    }
    _mm_pause();
  }
  const auto spin_until = Clock::now() + options_.spin;
  while (Clock::now() < spin_until) {
    if (reached(c.arrived.load(std::memory_order_acquire))) {
      ++stats_.after_yield;
      return;
    }
    ::sched_yield();
  }
  const timespec period{0, std::chrono::duration_cast<std::chrono::nanoseconds>(kPollPeriod).count()};
  for (;;) {
    c.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = c.arrived.load(std::memory_order_seq_cst);
    if (!reached(seen)) {
      const auto slept = Clock::now();
      if (futex(&c.arrived, FUTEX_WAIT, seen, &period) != 0 && errno == ETIMEDOUT) ++stats_.sleep_timeouts;
      stats_.slept_s += std::chrono::duration<double>(Clock::now() - slept).count();
    }
    c.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(c.arrived.load(std::memory_order_acquire))) {
      ++stats_.after_sleep;
      return;
    }
    if (!alive(k)) peer_gone(k, op);
    // A peer that found another dead has stopped: name that one now, not when this peer exits too.
    for (int j = 0; j < size(); ++j) {
      const int32_t dead = j == local_ ? 0 : control(j).found_dead.load(std::memory_order_acquire);
      if (dead > 0 && dead - 1 != local_) peer_gone(dead - 1, op);
    }
    if (Clock::now() >= deadline_) {
      throw ShmError(lockstep::detail::str_cat(
          "shared memory: timed out after ", format_seconds(options_.timeout), " in ", op, " waiting for rank ",
          ranks_[k], " (pid ", pids_[k], "; it may be hung or not calling this collective; "
          "LOCKSTEP_DISTRIBUTED_DEBUG=DETAIL names it)"));
    }
  }
}

void ShmGroup::all_reduce(void* data, size_t n, Dtype dtype, ReduceOp op, int avg_divisor) {
  deadline_ = deadline_after(options_.timeout);
  const int W = size();
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* x = static_cast<T*>(data);
    const size_t bytes = n * sizeof(T);
    std::vector<const T*> src(W);
    const size_t per_step = options_.slot_bytes / sizeof(T);
    if (bytes <= kSmallBytes) {
      // Every rank folds the whole step itself: one synchronization a step, the fewest wake-ups.
      for (size_t off = 0; off < n; off += per_step) {
        const size_t m = std::min(per_step, n - off);
        const int b = next_buffer();
        std::memcpy(slot(local_, b), x + off, m * sizeof(T));
        sync("all_reduce", what(kAllReduce, bytes));
        for (int k = 0; k < W; ++k) src[k] = reinterpret_cast<const T*>(slot(k, b));
        fold<T>(x + off, src, m, op, nullptr, op == ReduceOp::AVG ? avg_divisor : 0);
      }
      return;
    }
    // Reduce-scatter then all-gather, a step of up to slot_bytes at a time. Rank i reduces slice i:
    // it stages only the other slices (the ones the other ranks reduce), reads its own slice of its
    // input in place, and writes the result both into its input and into its slot, for the others to
    // copy out. Per rank and step of S bytes that moves S (W-1)/W in, reads the others' slices of its
    // own, and copies S (W-1)/W out: for two ranks 4 S of memory traffic against 5 S for folding the
    // whole step on every rank, and half the arithmetic. Slices start on 64-byte boundaries, so that
    // no two ranks write one cache line.
    constexpr size_t kAlign = 64 / sizeof(T);
    fold_tmp_.resize(kFoldBlock * sizeof(T));
    for (size_t off = 0; off < n; off += per_step) {
      const size_t m = std::min(per_step, n - off);
      auto begin = [&](int i) { return i == W ? m : (m * i / W) / kAlign * kAlign; };
      const int b = next_buffer();
      T* mine = reinterpret_cast<T*>(slot(local_, b));
      const size_t lo = begin(local_), hi = begin(local_ + 1);
      std::memcpy(mine, x + off, lo * sizeof(T));
      std::memcpy(mine + hi, x + off + hi, (m - hi) * sizeof(T));
      sync("all_reduce", what(kAllReduce, bytes));
      for (int k = 0; k < W; ++k) src[k] = k == local_ ? x + off + lo : reinterpret_cast<const T*>(slot(k, b)) + lo;
      fold<T>(x + off + lo, src, hi - lo, op, reinterpret_cast<T*>(fold_tmp_.data()),
              op == ReduceOp::AVG ? avg_divisor : 0, mine + lo);
      sync("all_reduce", what(kAllReduce, bytes));
      for (int k = 0; k < W; ++k) {
        if (k == local_) continue;
        std::memcpy(x + off + begin(k), reinterpret_cast<const T*>(slot(k, b)) + begin(k),
                    (begin(k + 1) - begin(k)) * sizeof(T));
      }
    }
  });
}

void ShmGroup::broadcast(void* data, size_t bytes, int root) {
  LOCKSTEP_CHECK(root >= 0 && root < size(), "shared memory: broadcast root ", root, " out of range");
  deadline_ = deadline_after(options_.timeout);
  char* x = static_cast<char*>(data);
  for (size_t off = 0; off < bytes; off += options_.slot_bytes) {
    const size_t m = std::min(options_.slot_bytes, bytes - off);
    const int b = next_buffer();
    if (local_ == root) std::memcpy(slot(root, b), x + off, m);
    sync("broadcast", what(kBroadcast, bytes));
    if (local_ != root) std::memcpy(x + off, slot(root, b), m);
  }
}

void ShmGroup::all_gather(const void* input, const std::vector<void*>& outputs, size_t bytes) {
  LOCKSTEP_CHECK(static_cast<int>(outputs.size()) == size(), "shared memory: all_gather needs ", size(), " outputs");
  deadline_ = deadline_after(options_.timeout);
  if (direct_ && bytes >= direct_min_bytes_) return all_gather_direct(input, outputs, bytes);
  const char* in = static_cast<const char*>(input);
  char* own = static_cast<char*>(outputs[local_]);
  for (size_t off = 0; off < bytes; off += options_.slot_bytes) {
    const size_t m = std::min(options_.slot_bytes, bytes - off);
    const int b = next_buffer();
    std::memcpy(slot(local_, b), in + off, m);
    arrive(what(kAllGather, bytes));
    // This rank's own piece while the others arrive: straight from its input.
    if (own != in) std::memcpy(own + off, in + off, m);
    wait_all("all_gather", what(kAllGather, bytes));
    for (int k = 0; k < size(); ++k) {
      if (k != local_) std::memcpy(static_cast<char*>(outputs[k]) + off, slot(k, b), m);
    }
  }
}

void ShmGroup::reduce_scatter(const std::vector<const void*>& inputs, void* output, size_t n, Dtype dtype, ReduceOp op,
                              int avg_divisor) {
  const int W = size();
  LOCKSTEP_CHECK(static_cast<int>(inputs.size()) == W, "shared memory: reduce_scatter needs ", W, " inputs");
  deadline_ = deadline_after(options_.timeout);
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = static_cast<T*>(output);
    // Rank i reduces the output of rank i: it stages, per step, `per_step` elements of each of its W - 1
    // inputs the others reduce (input k at piece k, or k - 1 above this rank: no gap for its own), and
    // reads its own input in place. Per rank and step that is one copy of the others' pieces in and one
    // read of every piece in the fold: bandwidth-optimal on one host. Pieces start on 64-byte
    // boundaries, so that no two ranks' reads of one another's pieces share a cache line with a write.
    constexpr size_t kAlign = 64 / sizeof(T) > 0 ? 64 / sizeof(T) : 1;
    const size_t fit = options_.slot_bytes / ((W - 1) * sizeof(T));
    const size_t per_step = std::max<size_t>(1, fit >= kAlign ? fit / kAlign * kAlign : fit);
    auto piece = [&](int of, int owner) { return static_cast<size_t>(of < owner ? of : of - 1); };
    const T* own_in = static_cast<const T*>(inputs[local_]);
    // The output may be this rank's own input (in place): the fold then keeps its block's partial
    // result aside until the block is done.
    const bool in_place = out + n > own_in && own_in + n > out;
    if (in_place) fold_tmp_.resize(kFoldBlock * sizeof(T));
    std::vector<const T*> src(W);
    for (size_t off = 0; off < n; off += per_step) {
      const size_t m = std::min(per_step, n - off);
      const int b = next_buffer();
      T* mine = reinterpret_cast<T*>(slot(local_, b));
      for (int k = 0; k < W; ++k) {
        if (k != local_) std::memcpy(mine + piece(k, local_) * per_step, static_cast<const T*>(inputs[k]) + off, m * sizeof(T));
      }
      sync("reduce_scatter", what(kReduceScatter, n * sizeof(T)));
      for (int k = 0; k < W; ++k) {
        src[k] = k == local_ ? own_in + off : reinterpret_cast<const T*>(slot(k, b)) + piece(local_, k) * per_step;
      }
      fold<T>(out + off, src, m, op, in_place ? reinterpret_cast<T*>(fold_tmp_.data()) : nullptr,
              op == ReduceOp::AVG ? avg_divisor : 0);
    }
  });
}

void ShmGroup::reduce_scatter_flat(const void* input, void* output, size_t n, Dtype dtype, ReduceOp op,
                                   int avg_divisor) {
  const int W = size();
  const size_t bytes = n * element_size(dtype);
  if (direct_ && bytes >= direct_min_bytes_) {
    deadline_ = deadline_after(options_.timeout);
    return reduce_scatter_direct(input, output, n, dtype, op, avg_divisor);
  }
  std::vector<const void*> inputs(W);
  for (int r = 0; r < W; ++r) inputs[r] = static_cast<const char*>(input) + r * bytes;
  reduce_scatter(inputs, output, n, dtype, op, avg_divisor);
}

void ShmGroup::barrier() {
  deadline_ = deadline_after(options_.timeout);
  sync("barrier", what(kBarrier, 0));
}

}  // namespace lockstep::dist::shm
