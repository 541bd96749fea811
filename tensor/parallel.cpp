// The intra-op thread pool behind parallel_for (see parallel.h).
//
// One pool per process holds get_num_threads() - 1 workers; the caller of parallel_for is the
// remaining thread. A call publishes the job in the pool, wakes the workers that sleep (idle
// workers spin a little first) and runs chunks itself. Chunks are claimed one at a time, so a
// worker that wakes late (the machine is busy) finds them done by the others instead of holding up
// the call, and the caller waits only for chunks that have started.
#include "tensor/parallel.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "common/check.h"
#include "common/env.h"

namespace lockstep {
namespace {

thread_local bool t_in_parallel = false;

constexpr int kMaxThreads = 0xffff;  // a job's chunk count fits the 16 bits of its claim word

// 0 until first read: the default is computed then, so a malformed OMP_NUM_THREADS is reported by
// the first op that asks, not from a static initializer.
std::atomic<int> g_num_threads{0};
std::once_flag g_default_once;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() or `us` microseconds have passed; true when done() held.
template <typename Done>
bool spin_for(int us, const Done& done) {
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= until) return false;
  }
}

// How long an idle worker, or a caller waiting for workers, spins before it sleeps. An op's
// kernels follow each other within tens of microseconds, and waking a sleeping thread costs about
// as much (a futex wake, longer in a VM), so a short spin keeps the hand-off off the critical path
// while a process between ops does not burn a core for long.
constexpr int kSpinMicroseconds = 200;

// The job's claim word: generation (32 bits) | next chunk (16) | chunk count (16). Claiming a chunk
// is a compare-and-swap on the whole word, so a worker that wakes late and still holds an older
// word can never claim a chunk of a newer job; a successful claim also makes the job's fields,
// written before the word was published, visible and stable until the chunk is counted done.
constexpr uint64_t kNextOne = uint64_t(1) << 16;
inline uint32_t gen_of(uint64_t w) { return uint32_t(w >> 32); }
inline int64_t next_of(uint64_t w) { return int64_t((w >> 16) & 0xffff); }
inline int64_t count_of(uint64_t w) { return int64_t(w & 0xffff); }

class Pool {
 public:
  explicit Pool(int workers) {
    threads_.reserve(workers);
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  }
  ~Pool() {
    stop_.store(true);
    publish(0);
    for (auto& t : threads_) t.join();
  }
  int workers() const { return int(threads_.size()); }

  // Runs f on `chunks` equal chunks of [begin, end) on the workers and the calling thread; returns
  // when every chunk has finished, rethrowing the first exception.
  void run(int64_t begin, int64_t end, int64_t chunks, detail::ChunkFn fn, const void* ctx) {
    begin_ = begin;
    end_ = end;
    fn_ = fn;
    ctx_ = ctx;
    error_ = nullptr;
    failed_.store(false, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    publish(chunks);
    claim_and_run();
    auto all_done = [&] { return done_.load() == chunks; };
    if (!spin_for(kSpinMicroseconds, all_done)) {
      std::unique_lock<std::mutex> lk(mu_);
      caller_sleeps_.store(true);  // seq_cst: the last chunk's worker sees it, or all_done() below sees its count
      done_cv_.wait(lk, all_done);
      caller_sleeps_.store(false);
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // A new claim word (the next generation, chunk 0 of `chunks`), then a wake-up for sleepers.
  void publish(int64_t chunks) {
    uint64_t w = word_.load(std::memory_order_relaxed);
    word_.store((uint64_t(gen_of(w) + 1) << 32) | uint64_t(chunks));  // seq_cst: ordered with sleepers_
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lk(mu_);  // a worker between its last check and its wait holds mu_
      wake_.notify_all();
    }
  }

  // Claims and runs chunks of the current job until none is left; returns the word last seen.
  uint64_t claim_and_run() {
    bool outer = t_in_parallel;
    t_in_parallel = true;
    uint64_t w = word_.load(std::memory_order_acquire);
    while (next_of(w) < count_of(w)) {
      if (!word_.compare_exchange_weak(w, w + kNextOne, std::memory_order_acq_rel, std::memory_order_acquire))
        continue;
      int64_t i = next_of(w), n = count_of(w);
      if (!failed_.load(std::memory_order_relaxed)) {
        int64_t b = begin_ + int64_t(__int128(end_ - begin_) * i / n);
        int64_t e = begin_ + int64_t(__int128(end_ - begin_) * (i + 1) / n);
        try {
          fn_(ctx_, b, e);
        } catch (...) {
          std::lock_guard<std::mutex> lk(error_mu_);
          if (!error_) error_ = std::current_exception();
          failed_.store(true, std::memory_order_relaxed);
        }
      }
      // The last chunk done lets the caller return and publish the next job: touch none of this
      // job's fields after it (the pool's own members stay).
      if (done_.fetch_add(1) + 1 == n && caller_sleeps_.load()) {
        std::lock_guard<std::mutex> lk(mu_);  // the caller between its last check and its wait holds mu_
        done_cv_.notify_one();
      }
      w = word_.load(std::memory_order_acquire);
    }
    t_in_parallel = outer;
    return w;
  }

  void work() {
    t_in_parallel = true;  // anything a worker runs outside a job is nested by definition
    uint32_t seen = 0;  // the generation at construction: a thread that starts late misses no job
    // stop_ is part of the wake-up condition, not only checked after it: the destructor's publish(0)
    // is a generation like any other, and a worker that saw the job before it (stop_ still false)
    // takes that generation as seen in claim_and_run(), so waiting for a fresh one would never end.
    for (;;) {
      auto fresh = [&] { return stop_.load() || gen_of(word_.load(std::memory_order_acquire)) != seen; };
      if (!spin_for(kSpinMicroseconds, fresh)) {
        std::unique_lock<std::mutex> lk(mu_);
        sleepers_.fetch_add(1);  // seq_cst: publish() sees it, or fresh() below sees stop_ and the new word
        wake_.wait(lk, fresh);
        sleepers_.fetch_sub(1);
      }
      if (stop_.load()) return;
      seen = gen_of(claim_and_run());
    }
  }

  // The current job (written by the caller before publish(), read after a successful claim).
  int64_t begin_ = 0, end_ = 0;
  detail::ChunkFn fn_ = nullptr;
  const void* ctx_ = nullptr;
  std::exception_ptr error_;  // the first exception (guarded by error_mu_)
  std::mutex error_mu_;
  std::atomic<bool> failed_{false};  // an exception was thrown: skip the chunks not yet run
  std::atomic<int64_t> done_{0};     // chunks finished
  std::atomic<uint64_t> word_{0};    // see kNextOne

  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};          // workers waiting on wake_
  std::atomic<bool> caller_sleeps_{false};  // the caller waits on done_cv_
  std::mutex mu_;
  std::condition_variable wake_, done_cv_;
  std::vector<std::thread> threads_;
};

// One user of the pool at a time: a second thread calling parallel_for meanwhile runs inline.
// Both are never freed: ops may still run from static destructors at exit.
std::mutex* g_pool_mu = new std::mutex;
Pool* g_pool = nullptr;  // guarded by *g_pool_mu; rebuilt when the thread count changes

// A forked child has none of the parent's workers, and *g_pool_mu may be held by a thread that
// does not exist there: start over with a fresh lock and pool (the old ones are leaked).
void after_fork_in_child() {
  g_pool_mu = new std::mutex;
  g_pool = nullptr;
}

int cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

int default_num_threads() {
  return int(env_int("OMP_NUM_THREADS", cores_available(), 1, kMaxThreads));
}

int get_num_threads() {
  int n = g_num_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  std::call_once(g_default_once, [] {
    int d = default_num_threads();
    int expected = 0;
    g_num_threads.compare_exchange_strong(expected, d);  // a set_num_threads() meanwhile wins
  });
  return g_num_threads.load(std::memory_order_relaxed);
}

void set_num_threads(int n) {
  LOCKSTEP_CHECK(n >= 1 && n <= kMaxThreads, "set_num_threads: expected a number of threads in [1, ", kMaxThreads,
                 "], got ", n);
  g_num_threads.store(n, std::memory_order_relaxed);
}

bool in_parallel_region() { return t_in_parallel; }

namespace detail {

[[noreturn]] void bad_grain(int64_t grain) { fail("parallel_for: grain must be >= 0, got ", grain); }

void parallel_run(int64_t begin, int64_t end, int64_t grain, ChunkFn fn, const void* ctx) {
  int threads = get_num_threads();
  int64_t range = end - begin;
  int64_t g = std::max<int64_t>(grain, 1);
  // Equal chunks (sizes differ by at most one) of at least `grain` indices each.
  int64_t tasks = std::min<int64_t>(threads, range / g);
  if (tasks <= 1) return fn(ctx, begin, end);
  std::unique_lock<std::mutex> pool_lk(*g_pool_mu, std::try_to_lock);
  if (!pool_lk.owns_lock()) return fn(ctx, begin, end);
  static const bool fork_handler = [] { return pthread_atfork(nullptr, nullptr, after_fork_in_child) == 0; }();
  (void)fork_handler;
  if (!g_pool || g_pool->workers() != threads - 1) {
    delete g_pool;
    g_pool = new Pool(threads - 1);
  }
  g_pool->run(begin, end, tasks, fn, ctx);
}

}  // namespace detail
}  // namespace lockstep
