// The intra-op thread pool behind parallel_for (see parallel.h).
//
// One pool per process holds get_num_threads() - 1 workers; the caller of parallel_for is the
// remaining thread. A call publishes a Job that lives on the caller's stack, wakes the workers and
// runs chunks itself; chunks are claimed from an atomic counter, so a worker that wakes late (the
// machine is busy) finds the chunks done by the others instead of holding up the call. The caller
// then waits until no worker holds the job, and the job can leave its stack.
#include "tensor/parallel.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
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

// 0 until first read: the default is computed then, so a malformed OMP_NUM_THREADS is reported by
// the first op that asks, not from a static initializer.
std::atomic<int> g_num_threads{0};
std::once_flag g_default_once;

struct Job {
  int64_t begin, end, num_chunks;
  detail::ChunkFn fn;
  const void* ctx;
  std::atomic<int64_t> next{0};       // the next chunk to claim
  std::atomic<bool> failed{false};    // set with `error`: stop claiming chunks
  std::exception_ptr error;           // the first exception; written once, before `failed`
  std::mutex error_mu;
  int holders = 0;                    // workers inside run_chunks (guarded by Pool::mu)
};

void run_chunks(Job& j) {
  bool outer = t_in_parallel;
  t_in_parallel = true;
  for (int64_t i; !j.failed.load(std::memory_order_relaxed) && (i = j.next.fetch_add(1)) < j.num_chunks;) {
    int64_t b = j.begin + int64_t(__int128(j.end - j.begin) * i / j.num_chunks);
    int64_t e = j.begin + int64_t(__int128(j.end - j.begin) * (i + 1) / j.num_chunks);
    try {
      j.fn(j.ctx, b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lk(j.error_mu);
      if (!j.error) j.error = std::current_exception();
      j.failed.store(true);
    }
  }
  t_in_parallel = outer;
}

class Pool {
 public:
  explicit Pool(int workers) {
    threads_.reserve(workers);
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int workers() const { return int(threads_.size()); }

  // Runs the job on the workers and the calling thread; returns when every chunk has finished.
  void run(Job& j) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &j;
      ++generation_;
    }
    // Only as many workers as there are chunks besides the caller's.
    if (j.num_chunks - 1 >= workers()) wake_.notify_all();
    else for (int64_t i = 0; i < j.num_chunks - 1; ++i) wake_.notify_one();
    run_chunks(j);
    std::unique_lock<std::mutex> lk(mu_);
    job_ = nullptr;  // workers that have not picked the job up yet never will
    done_.wait(lk, [&] { return j.holders == 0; });
  }

 private:
  void work() {
    t_in_parallel = true;  // anything a worker runs outside a job is nested by definition
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      wake_.wait(lk, [&] { return stop_ || (job_ && generation_ != seen); });
      if (stop_) return;
      seen = generation_;
      Job& j = *job_;
      ++j.holders;
      lk.unlock();
      run_chunks(j);
      lk.lock();
      if (--j.holders == 0) done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_, done_;
  Job* job_ = nullptr;
  uint64_t generation_ = 0;
  bool stop_ = false;
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
  return int(env_int("OMP_NUM_THREADS", cores_available(), 1, 1 << 16));
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
  LOCKSTEP_CHECK(n >= 1, "set_num_threads: expected a positive number of threads, got ", n);
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
  Job j;
  j.begin = begin;
  j.end = end;
  j.num_chunks = tasks;
  j.fn = fn;
  j.ctx = ctx;
  g_pool->run(j);
  if (j.error) std::rethrow_exception(j.error);
}

}  // namespace detail
}  // namespace lockstep
