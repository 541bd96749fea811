// Tests of the CUDA emulator (testing/cuda_emu) on its own, in the normal CPU build: kernels written as
// CUDA (shared memory, __syncthreads, 1-3-D coordinates) and the launch checks; the divergent-barrier
// device fault; stream order, events and the legacy default stream; copy semantics for pageable and
// pinned memory; memory accounting; cuBLAS GEMM values and argument checks; NCCL collectives between 2
// and 3 processes (integers wrapping), ncclCommAbort and the peer timeout, ranks that disagree on a
// collective, issue order across streams, and collectives after a device fault. Every check is on values
// the real APIs define (or, where real NCCL would hang or corrupt memory, on the emulator's report).
//
// Cases that need a process of their own (a sticky device fault, other emulator settings, NCCL ranks)
// run this binary again: the parent forks and at once execs /proc/self/exe for one "child: ..." case,
// which is skipped in normal runs. A plain fork would not do: doctest runs every case in one process,
// so by then the emulator has stream worker threads, which a forked child lacks (as real CUDA forbids
// CUDA in a forked child); an exec'd child starts with no CUDA state whatever ran before.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <nccl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// --- helpers --------------------------------------------------------------------------------------

#define CUDA_REQUIRE(call)                                                        \
  do {                                                                            \
    const cudaError_t e_ = (call);                                                \
    REQUIRE_MESSAGE(e_ == cudaSuccess, #call " returned ", cudaGetErrorName(e_)); \
  } while (0)

#define NCCL_REQUIRE(call)                                                          \
  do {                                                                              \
    const ncclResult_t r_ = (call);                                                 \
    REQUIRE_MESSAGE(r_ == ncclSuccess, #call " returned ", ncclGetErrorString(r_)); \
  } while (0)

// The child cases run only in a process started by run_children, which sets this variable.
constexpr char kChildVar[] = "LOCKSTEP_CUDA_EMU_TEST_CHILD";
const bool kInChild = std::getenv(kChildVar) != nullptr;

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Sets the calling thread's device and restores device 0 at the end of the scope.
struct OnDevice {
  explicit OnDevice(int d) { CUDA_REQUIRE(cudaSetDevice(d)); }
  ~OnDevice() { cudaSetDevice(0); }
};

void require_devices(int n) {
  int count = 0;
  CUDA_REQUIRE(cudaGetDeviceCount(&count));
  REQUIRE_MESSAGE(count >= n, "the emulator shows ", count, " devices, this case needs ", n);
}

template <typename T>
T* device_alloc(size_t n) {
  void* p = nullptr;
  CUDA_REQUIRE(cudaMalloc(&p, n * sizeof(T)));
  REQUIRE(p != nullptr);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> h(n);
  CUDA_REQUIRE(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

template <typename T>
void to_device(T* d, const std::vector<T>& h) {
  CUDA_REQUIRE(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// Streams that skip the legacy default stream's implicit synchronization, so a stream held at a gate
// never blocks cudaMemcpy (which runs on the legacy stream).
cudaStream_t make_stream() {
  cudaStream_t s = nullptr;
  CUDA_REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

// "" when got == expected element by element (bitwise equal values), else the first difference.
template <typename T>
std::string mismatch(const std::vector<T>& got, const std::vector<T>& expected) {
  if (got.size() != expected.size())
    return "size " + std::to_string(got.size()) + ", expected " + std::to_string(expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == expected[i])) {
      std::ostringstream s;
      s << "element " << i << ": got " << got[i] << ", expected " << expected[i];
      return s.str();
    }
  return "";
}

// --- kernels --------------------------------------------------------------------------------------

// Spins until the host sets *flag (pinned memory): holds its stream at a known point, so what runs
// after it on that stream is known not to have run yet.
__global__ void wait_for_flag(int* flag) {
  while (atomicAdd(flag, 0) == 0) {
  }
}

// Holds a stream until open() (or the end of the scope, so a failed check leaves no stream stuck).
// The destructor only opens: it must not wait for anything, since a failed REQUIRE can unwind it while
// another gate, destroyed after it, still holds a stream that the wait would need (cudaFreeHost, for
// one, waits for every stream), and it cannot know that its own gate kernel is not queued behind that
// other gate. So flags are never freed: each gate takes its own from a pinned block that lives as long
// as the process, and a gate kernel still running after its gate's scope reads valid memory.
struct Gate {
  static constexpr int kFlags = 64;
  int* flag = nullptr;
  Gate() {
    static int* flags = nullptr;  // reachable until the process ends: no leak for LeakSanitizer
    static int used = 0;
    if (!flags) CUDA_REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&flags), kFlags * sizeof(int)));
    REQUIRE_MESSAGE(used < kFlags, "more than ", kFlags, " gates in one process");
    flag = flags + used++;
    *flag = 0;
  }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  void hold(cudaStream_t s) {
    lockstep_emu::launch_kernel("wait_for_flag", wait_for_flag, dim3(1), dim3(1), 0, s, flag);
    CUDA_REQUIRE(cudaGetLastError());
  }
  void open() { std::atomic_ref<int>(*flag).store(1); }
  ~Gate() { open(); }
};

// Each block reduces its blockDim.x (a power of two, at most 256) elements of x in shared memory;
// block b's sum goes to block_sums[b] and into *total.
__global__ void block_sum(const int64_t* x, int n, int64_t* block_sums, unsigned long long* total) {
  __shared__ int64_t partial[256];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  partial[threadIdx.x] = i < n ? x[i] : 0;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    block_sums[blockIdx.x] = partial[0];
    atomicAdd(total, static_cast<unsigned long long>(partial[0]));
  }
}

// Records every thread's coordinates at its slot (the linear block index times the block size plus the
// linear thread index, x fastest, as CUDA orders them), and whether threadIdx was the same after a
// __syncthreads as before it.
constexpr int kCoordWords = 13;
__global__ void record_coords(unsigned* out) {
  const uint3 before = threadIdx;
  __syncthreads();
  const unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const unsigned thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  unsigned* o = out + (size_t(block) * blockDim.x * blockDim.y * blockDim.z + thread) * kCoordWords;
  const unsigned words[kCoordWords] = {threadIdx.x, threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y,
                                       blockIdx.z,  blockDim.x,  blockDim.y,  blockDim.z, gridDim.x,
                                       gridDim.y,   gridDim.z,
                                       before.x == threadIdx.x && before.y == threadIdx.y && before.z == threadIdx.z};
  for (int w = 0; w < kCoordWords; ++w) o[w] = words[w];
}

__global__ void count_threads(unsigned long long* counter) { atomicAdd(counter, 1ull); }

__global__ void set_value(int* p, int v) { *p = v; }

__global__ void twice(int* out, const int* in) { *out = 2 * *in; }

__global__ void fill(int* p, int n, int v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

// One thread: log[(*next)++] = value, so the log shows the order the launches ran in.
__global__ void append(int* log, int* next, int value) { log[(*next)++] = value; }

// Threads 16..31 return while threads 0..15 wait at the barrier: undefined on a GPU, a fault here.
__global__ void divergent_barrier(int* out) {
  if (threadIdx.x >= 16) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

// Every thread reaches every barrier, a different number of loop trips apart: no divergence.
__global__ void uniform_barriers(int* out) {
  __shared__ int sum;
  if (threadIdx.x == 0) sum = 0;
  __syncthreads();
  for (int round = 0; round < 3; ++round) {
    atomicAdd(&sum, 1);
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sum;
}

// --- child processes ------------------------------------------------------------------------------

struct ChildResult {
  int exit_code = -1;  // -1: killed by a signal or by the timeout
  bool timed_out = false;
  std::string output;  // its stdout and stderr
};

// Runs this binary again once per entry of `envs`, all at once, each executing only the doctest case
// `test_case` with the variables of its entry added to this process's environment; waits for all of
// them (killing those still running after `timeout`) and returns how each ended.
std::vector<ChildResult> run_children(const std::string& test_case,
                                      const std::vector<std::vector<std::pair<std::string, std::string>>>& envs,
                                      std::chrono::seconds timeout = std::chrono::seconds(30)) {
  char exe[4096];
  const ssize_t len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  REQUIRE(len > 0);
  exe[len] = '\0';
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp && *tmp ? tmp : "/tmp";

  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (size_t c = 0; c < envs.size(); ++c) {
    // Everything the child needs is built before fork: between fork and exec it may only make
    // async-signal-safe calls (the parent has other threads).
    std::vector<std::string> vars;
    for (char** e = environ; *e; ++e) {
      const std::string v = *e;
      bool replaced = v.rfind(std::string(kChildVar) + "=", 0) == 0;
      for (const auto& [k, x] : envs[c]) replaced = replaced || v.rfind(k + "=", 0) == 0;
      if (!replaced) vars.push_back(v);
    }
    vars.push_back(std::string(kChildVar) + "=1");
    for (const auto& [k, x] : envs[c]) vars.push_back(k + "=" + x);
    std::vector<char*> envp;
    for (auto& v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
    std::string filter = "--test-case=" + test_case;
    char* argv[] = {exe, filter.data(), nullptr};

    std::string log = dir + "/cuda_emu_child_XXXXXX";
    const int fd = ::mkstemp(log.data());
    REQUIRE(fd >= 0);
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execve(exe, argv, envp.data());
      ::_exit(127);
    }
    ::close(fd);
    pids.push_back(pid);
    logs.push_back(log);
  }

  std::vector<ChildResult> results(pids.size());
  const auto deadline = Clock::now() + timeout;
  for (size_t c = 0; c < pids.size(); ++c) {
    int status = 0;
    for (;;) {
      const pid_t r = ::waitpid(pids[c], &status, WNOHANG);
      if (r == pids[c]) break;
      if (Clock::now() > deadline) {
        ::kill(pids[c], SIGKILL);
        ::waitpid(pids[c], &status, 0);
        results[c].timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!results[c].timed_out && WIFEXITED(status)) results[c].exit_code = WEXITSTATUS(status);
    std::ifstream in(logs[c]);
    results[c].output.assign(std::istreambuf_iterator<char>(in), {});
    std::remove(logs[c].c_str());
  }
  return results;
}

// What a child case prints last: its presence says the case ran to its end (and was not filtered out).
constexpr char kChildDone[] = "cuda_emu_test child case finished";
void child_done() {
  std::printf("%s\n", kChildDone);
  std::fflush(stdout);
}

void check_children(const std::vector<ChildResult>& results) {
  for (size_t c = 0; c < results.size(); ++c) {
    const ChildResult& r = results[c];
    INFO("child ", c, " output:\n", r.output);
    CHECK_FALSE(r.timed_out);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find(kChildDone) != std::string::npos);
  }
}

std::string hex(const void* data, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<const unsigned char*>(data)[i];
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

ncclUniqueId unhex_id(const char* s) {
  ncclUniqueId id;
  REQUIRE(s != nullptr);
  REQUIRE(std::strlen(s) == 2 * sizeof id.internal);
  for (size_t i = 0; i < sizeof id.internal; ++i)
    id.internal[i] = static_cast<char>(std::stoi(std::string(s + 2 * i, 2), nullptr, 16));
  return id;
}

// The rendezvous folder nccl.cpp makes for `id` under $TMPDIR.
fs::path nccl_folder(const ncclUniqueId& id) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string token(id.internal, strnlen(id.internal, sizeof id.internal));
  return fs::path(tmp && *tmp ? tmp : "/tmp") / ("lockstep-nccl-emu-" + token.substr(token.find(':') + 1));
}

// One environment per rank: its rank, the world size and the ids (hex) the ranks share.
std::vector<std::vector<std::pair<std::string, std::string>>> rank_envs(
    int nranks, const std::vector<ncclUniqueId>& ids, std::vector<std::pair<std::string, std::string>> extra = {}) {
  std::vector<std::vector<std::pair<std::string, std::string>>> envs;
  for (int r = 0; r < nranks; ++r) {
    auto env = extra;
    env.emplace_back("CUDA_EMU_TEST_RANK", std::to_string(r));
    env.emplace_back("CUDA_EMU_TEST_NRANKS", std::to_string(nranks));
    for (size_t i = 0; i < ids.size(); ++i)
      env.emplace_back("CUDA_EMU_TEST_ID" + std::to_string(i), hex(ids[i].internal, sizeof ids[i].internal));
    envs.push_back(env);
  }
  return envs;
}

ncclUniqueId new_id() {
  ncclUniqueId id;
  NCCL_REQUIRE(ncclGetUniqueId(&id));
  return id;
}

}  // namespace

// === kernels ========================================================================================

TEST_CASE("kernels: a shared-memory tree reduction with __syncthreads gives each block's exact sum") {
  cudaStream_t s = make_stream();
  const int n = 1000, threads = 256, blocks = (n + threads - 1) / threads;  // the last block is partial
  std::vector<int64_t> x(n);
  for (int i = 0; i < n; ++i) x[i] = int64_t(i) * i % 1009 - 300 + (int64_t(i % 3) << 33);
  int64_t* dx = device_alloc<int64_t>(n);
  int64_t* dsums = device_alloc<int64_t>(blocks);
  auto* dtotal = device_alloc<unsigned long long>(1);
  to_device(dx, x);
  CUDA_REQUIRE(cudaMemsetAsync(dtotal, 0, sizeof(unsigned long long), s));
  lockstep_emu::launch_kernel("block_sum", block_sum, dim3(blocks), dim3(threads), 0, s, dx, n, dsums, dtotal);
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaStreamSynchronize(s));

  std::vector<int64_t> expected(blocks, 0);
  int64_t total = 0;
  for (int i = 0; i < n; ++i) expected[i / threads] += x[i], total += x[i];
  const std::string diff = mismatch(to_host(dsums, blocks), expected);
  CHECK_MESSAGE(diff.empty(), diff);
  CHECK(static_cast<int64_t>(to_host(dtotal, 1)[0]) == total);

  // Two streams run the kernel at once on two worker threads: each has its own shared memory.
  cudaStream_t s2 = make_stream();
  std::vector<int64_t> y(n);
  for (int i = 0; i < n; ++i) y[i] = 7 - i;
  int64_t* dy = device_alloc<int64_t>(n);
  int64_t* dsums2 = device_alloc<int64_t>(blocks);
  auto* dtotal2 = device_alloc<unsigned long long>(1);
  to_device(dy, y);
  CUDA_REQUIRE(cudaMemsetAsync(dtotal, 0, sizeof(unsigned long long), s));
  CUDA_REQUIRE(cudaMemsetAsync(dtotal2, 0, sizeof(unsigned long long), s2));
  for (int rep = 0; rep < 20; ++rep) {
    lockstep_emu::launch_kernel("block_sum", block_sum, dim3(blocks), dim3(threads), 0, s, dx, n, dsums, dtotal);
    lockstep_emu::launch_kernel("block_sum", block_sum, dim3(blocks), dim3(threads), 0, s2, dy, n, dsums2, dtotal2);
  }
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CUDA_REQUIRE(cudaStreamSynchronize(s2));
  int64_t total_y = 0;
  for (int i = 0; i < n; ++i) total_y += y[i];
  CHECK(static_cast<int64_t>(to_host(dtotal, 1)[0]) == 20 * total);
  CHECK(static_cast<int64_t>(to_host(dtotal2, 1)[0]) == 20 * total_y);
  for (void* p : {(void*)dx, (void*)dsums, (void*)dtotal, (void*)dy, (void*)dsums2, (void*)dtotal2})
    CUDA_REQUIRE(cudaFree(p));
}

TEST_CASE("kernels: 2-D and 3-D thread and block coordinates are CUDA's, and survive __syncthreads") {
  cudaStream_t s = make_stream();
  struct Shape {
    dim3 grid, block;
  };
  for (const Shape& shape : {Shape{dim3(3, 2, 2), dim3(4, 3, 2)}, Shape{dim3(5, 3), dim3(8, 4)},
                             Shape{dim3(1, 1, 3), dim3(1, 1, 64)}, Shape{dim3(2), dim3(1024)}}) {
    const dim3 g = shape.grid, b = shape.block;
    const size_t per_block = size_t(b.x) * b.y * b.z, total = per_block * g.x * g.y * g.z;
    INFO("grid (", g.x, ", ", g.y, ", ", g.z, "), block (", b.x, ", ", b.y, ", ", b.z, ")");
    unsigned* out = device_alloc<unsigned>(total * kCoordWords);  // fresh: 0xffffffff where unwritten
    lockstep_emu::launch_kernel("record_coords", record_coords, g, b, 0, s, out);
    CUDA_REQUIRE(cudaGetLastError());
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    const std::vector<unsigned> got = to_host(out, total * kCoordWords);
    std::vector<unsigned> expected;
    for (unsigned bz = 0; bz < g.z; ++bz)
      for (unsigned by = 0; by < g.y; ++by)
        for (unsigned bx = 0; bx < g.x; ++bx)
          for (unsigned tz = 0; tz < b.z; ++tz)
            for (unsigned ty = 0; ty < b.y; ++ty)
              for (unsigned tx = 0; tx < b.x; ++tx)
                expected.insert(expected.end(), {tx, ty, tz, bx, by, bz, b.x, b.y, b.z, g.x, g.y, g.z, 1u});
    const std::string diff = mismatch(got, expected);
    CHECK_MESSAGE(diff.empty(), diff, " (", kCoordWords, " words per thread)");
    CUDA_REQUIRE(cudaFree(out));
  }
}

// === launch checks ==================================================================================

TEST_CASE("launch: an invalid configuration is cudaErrorInvalidConfiguration, once, and runs nothing") {
  cudaStream_t s = make_stream();
  auto* counter = device_alloc<unsigned long long>(1);
  CUDA_REQUIRE(cudaMemsetAsync(counter, 0, sizeof *counter, s));
  struct Bad {
    const char* what;
    dim3 grid, block;
  };
  for (const Bad& bad : {Bad{"1025 threads", dim3(1), dim3(1025)}, Bad{"32 x 32 x 2 threads", dim3(1), dim3(32, 32, 2)},
                         Bad{"block.z 65", dim3(1), dim3(1, 1, 65)}, Bad{"grid.y 65536", dim3(1, 65536), dim3(1)},
                         Bad{"grid.z 65536", dim3(1, 1, 65536), dim3(1)}, Bad{"grid.x 0", dim3(0), dim3(32)},
                         Bad{"grid.y 0", dim3(2, 0, 1), dim3(32)}, Bad{"block.x 0", dim3(1), dim3(0)},
                         Bad{"block.z 0", dim3(1), dim3(4, 4, 0)}}) {
    CAPTURE(bad.what);
    lockstep_emu::launch_kernel("count_threads", count_threads, bad.grid, bad.block, 0, s, counter);
    CHECK(cudaPeekAtLastError() == cudaErrorInvalidConfiguration);  // peeking leaves it
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    CHECK(cudaGetLastError() == cudaSuccess);  // reading it cleared it
  }
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CHECK(to_host(counter, 1)[0] == 0);  // none of them ran

  // The limits themselves are valid, and every thread runs once.
  struct Good {
    dim3 grid, block;
    unsigned long long threads;
  };
  for (const Good& good : {Good{dim3(1), dim3(1024), 1024}, Good{dim3(1), dim3(1, 1, 64), 64},
                           Good{dim3(1, 65535), dim3(1), 65535}, Good{dim3(2, 3, 4), dim3(2, 3, 4), 24 * 24}}) {
    CUDA_REQUIRE(cudaMemsetAsync(counter, 0, sizeof *counter, s));
    lockstep_emu::launch_kernel("count_threads", count_threads, good.grid, good.block, 0, s, counter);
    CUDA_REQUIRE(cudaGetLastError());
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    CHECK(to_host(counter, 1)[0] == good.threads);
  }
  CUDA_REQUIRE(cudaFree(counter));
}

TEST_CASE("launch: on a stream of another device than the current one is cudaErrorInvalidResourceHandle") {
  require_devices(2);
  cudaStream_t s1;
  {
    OnDevice d(1);
    s1 = make_stream();
  }
  auto* counter = device_alloc<unsigned long long>(1);  // device 0
  to_device(counter, std::vector<unsigned long long>{0});
  lockstep_emu::launch_kernel("count_threads", count_threads, dim3(1), dim3(1), 0, s1, counter);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  CHECK(cudaGetLastError() == cudaSuccess);
  {
    OnDevice d(1);
    CUDA_REQUIRE(cudaStreamSynchronize(s1));
  }
  CHECK(to_host(counter, 1)[0] == 0);
  CUDA_REQUIRE(cudaFree(counter));
}

TEST_CASE("launch: a divergent __syncthreads is a sticky device fault with a message (in a child process)") {
  const auto results = run_children("child: divergent __syncthreads", {{}});
  check_children(results);
  const std::string& out = results[0].output;
  CHECK_MESSAGE(out.find("divergent __syncthreads") != std::string::npos, out);
  CHECK_MESSAGE(out.find("divergent_barrier") != std::string::npos, out);  // names the kernel
  CHECK_MESSAGE(out.find("16 of 32 threads") != std::string::npos, out);
}

TEST_CASE("child: divergent __syncthreads" * doctest::skip(!kInChild)) {
  if (!kInChild) return;
  cudaStream_t s = make_stream();
  int* out = device_alloc<int>(32);
  // Barriers every thread reaches are fine.
  lockstep_emu::launch_kernel("uniform_barriers", uniform_barriers, dim3(2), dim3(64), 0, s, out);
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CHECK(to_host(out, 1)[0] == 3 * 64);

  Gate gate;  // so the launch is checked before the kernel can have run
  gate.hold(s);
  lockstep_emu::launch_kernel("divergent_barrier", divergent_barrier, dim3(1), dim3(32), 0, s, out);
  CHECK(cudaGetLastError() == cudaSuccess);  // the launch itself is valid; the fault comes when it runs
  gate.open();
  CHECK(cudaStreamSynchronize(s) == cudaErrorLaunchFailure);
  // Sticky for the rest of the process, as after a fault on a GPU.
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 16) == cudaErrorLaunchFailure);
  std::vector<int> host(32, 7);
  CHECK(cudaMemcpy(host.data(), out, sizeof(int) * 32, cudaMemcpyDeviceToHost) == cudaErrorLaunchFailure);
  CHECK(host[0] == 7);
  child_done();
}

// Writes 1 through every pointer it is given (thread 0 only).
__global__ void write_ones(int* a, int* b) {
  if (threadIdx.x == 0) {
    if (a) *a = 1;
    if (b) *b = 1;
  }
}

TEST_CASE("launch: pointer arguments must be null, the kernel's device memory or pinned memory (in a child process)") {
  const auto results = run_children("child: kernel pointer arguments", {{}});
  check_children(results);
  const std::string& out = results[0].output;
  CHECK_MESSAGE(out.find("write_ones: pointer argument 1 is not device memory, the kernel runs on device 0") !=
                    std::string::npos,
                out);
}

TEST_CASE("child: kernel pointer arguments" * doctest::skip(!kInChild)) {
  if (!kInChild) return;
  cudaStream_t s = make_stream();
  int* dev = device_alloc<int>(4);
  int* pinned = nullptr;
  CUDA_REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), sizeof(int)));
  *pinned = 0;
  // Null, device memory (also one past the end of it) and pinned memory are all fine.
  lockstep_emu::launch_kernel("write_ones", write_ones, dim3(1), dim3(32), 0, s, dev, pinned);
  lockstep_emu::launch_kernel("write_ones", write_ones, dim3(1), dim3(32), 0, s, dev + 3, static_cast<int*>(nullptr));
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CHECK(to_host(dev, 1)[0] == 1);
  CHECK(*pinned == 1);
  // Pageable host memory (a CPU tensor's data, say) is an illegal address on a GPU: a device fault.
  std::vector<int> host(4, 0);
  lockstep_emu::launch_kernel("write_ones", write_ones, dim3(1), dim3(32), 0, s, dev, host.data());
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  CHECK(cudaStreamSynchronize(s) == cudaErrorIllegalAddress);
  CHECK(host[0] == 0);  // the kernel never ran
  child_done();
}

// === streams and events =============================================================================

TEST_CASE("streams: kernels, memsets and copies on one stream run in the order they were queued") {
  cudaStream_t s = make_stream();
  const int n = 100;
  int* log = device_alloc<int>(n);
  int* log_copy = device_alloc<int>(n);
  int* next = device_alloc<int>(1);  // fresh: -1, so the memset below must come first
  Gate gate;
  gate.hold(s);
  CUDA_REQUIRE(cudaMemsetAsync(next, 0, sizeof(int), s));
  for (int i = 0; i < n; ++i) lockstep_emu::launch_kernel("append", append, dim3(1), dim3(1), 0, s, log, next, i);
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaMemcpyAsync(log_copy, log, n * sizeof(int), cudaMemcpyDeviceToDevice, s));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(cudaStreamQuery(s) == cudaErrorNotReady);  // all of it waits behind the gate
  gate.open();
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  std::vector<int> expected(n);
  for (int i = 0; i < n; ++i) expected[i] = i;
  const std::string diff = mismatch(to_host(log_copy, n), expected);
  CHECK_MESSAGE(diff.empty(), diff);
  CHECK(to_host(next, 1)[0] == n);
}

TEST_CASE("streams: cudaStreamWaitEvent makes stream B see what stream A wrote before the event") {
  cudaStream_t a = make_stream(), b = make_stream(), c = make_stream();
  int* value = device_alloc<int>(1);  // fresh: -1
  int* out_b = device_alloc<int>(1);
  int* out_c = device_alloc<int>(1);
  cudaEvent_t written;
  CUDA_REQUIRE(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
  Gate gate;  // A's "slow kernel": A writes the value only once the gate opens
  gate.hold(a);
  lockstep_emu::launch_kernel("set_value", set_value, dim3(1), dim3(1), 0, a, value, 21);
  CUDA_REQUIRE(cudaEventRecord(written, a));
  CUDA_REQUIRE(cudaStreamWaitEvent(b, written, 0));
  lockstep_emu::launch_kernel("twice", twice, dim3(1), dim3(1), 0, b, out_b, value);
  // Stream C does not wait: it reads the value before A writes it.
  lockstep_emu::launch_kernel("twice", twice, dim3(1), dim3(1), 0, c, out_c, value);
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaStreamSynchronize(c));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(cudaEventQuery(written) == cudaErrorNotReady);
  CHECK(cudaStreamQuery(b) == cudaErrorNotReady);
  gate.open();
  CUDA_REQUIRE(cudaStreamSynchronize(b));
  CHECK(cudaEventQuery(written) == cudaSuccess);
  CHECK(to_host(out_b, 1)[0] == 42);
  CHECK(to_host(out_c, 1)[0] == -2);
  CUDA_REQUIRE(cudaEventDestroy(written));
}

TEST_CASE("events: one never recorded is complete; one of device 1 cannot be recorded on device 0's stream") {
  require_devices(2);
  cudaStream_t a = make_stream(), b = make_stream();
  cudaEvent_t never;
  CUDA_REQUIRE(cudaEventCreate(&never));
  CHECK(cudaEventQuery(never) == cudaSuccess);
  CHECK(cudaEventSynchronize(never) == cudaSuccess);
  // Waiting on it holds nothing up, even while another stream is held.
  Gate gate;
  gate.hold(a);
  int* value = device_alloc<int>(1);
  CUDA_REQUIRE(cudaStreamWaitEvent(b, never, 0));
  lockstep_emu::launch_kernel("set_value", set_value, dim3(1), dim3(1), 0, b, value, 5);
  CUDA_REQUIRE(cudaStreamSynchronize(b));
  CHECK(to_host(value, 1)[0] == 5);
  CHECK(cudaStreamQuery(a) == cudaErrorNotReady);
  gate.open();
  CUDA_REQUIRE(cudaStreamSynchronize(a));

  cudaEvent_t on1;
  cudaStream_t s1;
  {
    OnDevice d(1);
    CUDA_REQUIRE(cudaEventCreate(&on1));
    s1 = make_stream();
  }
  CHECK(cudaEventRecord(on1, a) == cudaErrorInvalidResourceHandle);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaEventRecord(on1, 0) == cudaErrorInvalidResourceHandle);  // device 0's default stream
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  CHECK(cudaEventQuery(on1) == cudaSuccess);  // the refused records left it never recorded
  // On its own device's stream it records, and another device's stream may wait for it.
  {
    OnDevice d(1);
    CUDA_REQUIRE(cudaEventRecord(on1, s1));
    CUDA_REQUIRE(cudaEventSynchronize(on1));
  }
  CUDA_REQUIRE(cudaStreamWaitEvent(a, on1, 0));
  CUDA_REQUIRE(cudaStreamSynchronize(a));
  CUDA_REQUIRE(cudaEventDestroy(never));
  CUDA_REQUIRE(cudaEventDestroy(on1));
  CHECK(cudaEventDestroy(on1) == cudaErrorInvalidResourceHandle);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
}

TEST_CASE("streams: the legacy default stream waits for blocking streams, not for non-blocking ones") {
  cudaStream_t blocking, nonblocking = make_stream();
  CUDA_REQUIRE(cudaStreamCreate(&blocking));
  int* value = device_alloc<int>(1);
  to_device(value, std::vector<int>{0});
  {
    Gate gate;
    gate.hold(nonblocking);
    lockstep_emu::launch_kernel("set_value", set_value, dim3(1), dim3(1), 0, nonblocking, value, 1);
    CHECK(to_host(value, 1)[0] == 0);  // cudaMemcpy (the legacy stream) did not wait for it
    gate.open();
    CUDA_REQUIRE(cudaStreamSynchronize(nonblocking));
  }
  Gate gate;
  gate.hold(blocking);
  lockstep_emu::launch_kernel("set_value", set_value, dim3(1), dim3(1), 0, blocking, value, 2);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    gate.open();
  });
  int got = 0;  // cudaMemcpy on the legacy stream waits for the blocking stream's kernel
  const cudaError_t e = cudaMemcpy(&got, value, sizeof(int), cudaMemcpyDeviceToHost);
  opener.join();
  CUDA_REQUIRE(e);
  CHECK(got == 2);

  // And the other way: work on a blocking stream waits for the legacy stream's, a non-blocking
  // stream's does not.
  Gate legacy_gate;
  legacy_gate.hold(0);
  int* seen = device_alloc<int>(2);
  lockstep_emu::launch_kernel("set_value", set_value, dim3(1), dim3(1), 0, nonblocking, seen, 1);
  lockstep_emu::launch_kernel("set_value", set_value, dim3(1), dim3(1), 0, blocking, seen + 1, 1);
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaStreamSynchronize(nonblocking));  // returns while the legacy stream is held
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(cudaStreamQuery(blocking) == cudaErrorNotReady);
  legacy_gate.open();
  CUDA_REQUIRE(cudaStreamSynchronize(blocking));
  CHECK(to_host(seen, 2) == std::vector<int>{1, 1});
  CUDA_REQUIRE(cudaStreamDestroy(blocking));
  CHECK(cudaStreamDestroy(blocking) == cudaErrorInvalidResourceHandle);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
}

TEST_CASE("events: cudaEventElapsedTime measures the time between the two markers' execution") {
  cudaStream_t s = make_stream();
  cudaEvent_t start, end, untimed;
  CUDA_REQUIRE(cudaEventCreate(&start));
  CUDA_REQUIRE(cudaEventCreate(&end));
  CUDA_REQUIRE(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  Gate gate;
  CUDA_REQUIRE(cudaEventRecord(start, s));
  gate.hold(s);
  CUDA_REQUIRE(cudaEventRecord(end, s));
  CUDA_REQUIRE(cudaEventRecord(untimed, s));
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, end) == cudaErrorNotReady);  // end has not executed
  CUDA_REQUIRE(cudaEventSynchronize(start));  // from here the end marker is at least 50 ms away
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  gate.open();
  CUDA_REQUIRE(cudaEventSynchronize(end));
  CUDA_REQUIRE(cudaEventElapsedTime(&ms, start, end));
  CHECK(ms >= 45.0f);  // the stream was held that long between them
  CHECK(ms < 10000.0f);
  CHECK(cudaEventElapsedTime(&ms, start, untimed) == cudaErrorInvalidResourceHandle);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  for (cudaEvent_t e : {start, end, untimed}) CUDA_REQUIRE(cudaEventDestroy(e));
}

TEST_CASE("gates: unwinding past two closed gates opens both and does not deadlock (in a child process)") {
  // In a child with a time bound: a deadlock there fails this case instead of hanging the suite.
  check_children(run_children("child: gates unwinding", {{}}, std::chrono::seconds(20)));
}

TEST_CASE("child: gates unwinding" * doctest::skip(!kInChild)) {
  if (!kInChild) return;
  cudaStream_t a = make_stream(), b = make_stream();
  int* value = device_alloc<int>(2);
  bool unwound = false;
  try {
    Gate first, second;
    first.hold(a);
    second.hold(b);
    lockstep_emu::launch_kernel("set_value", set_value, dim3(1), dim3(1), 0, a, value, 1);
    lockstep_emu::launch_kernel("set_value", set_value, dim3(1), dim3(1), 0, b, value + 1, 2);
    CUDA_REQUIRE(cudaGetLastError());
    throw std::runtime_error("a failed REQUIRE");  // second's destructor runs while first still holds a
  } catch (const std::runtime_error&) {
    unwound = true;
  }
  CHECK(unwound);
  CUDA_REQUIRE(cudaStreamSynchronize(a));
  CUDA_REQUIRE(cudaStreamSynchronize(b));
  CHECK(to_host(value, 2) == std::vector<int>{1, 2});  // both streams went on past their gates
  CUDA_REQUIRE(cudaFree(value));
  child_done();
}

TEST_CASE("devices: the count, the current device and the attributes the emulator's settings give") {
  int count = 0, device = -1, value = 0;
  CUDA_REQUIRE(cudaGetDeviceCount(&count));
  CHECK(count == 2);  // LOCKSTEP_CUDA_EMU_TEST_DEVICES=2, which testing/cuda_emu/BUILD sets for this test
  CUDA_REQUIRE(cudaGetDevice(&device));
  CHECK(device == 0);
  CHECK(cudaSetDevice(count) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(cudaSetDevice(-1) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  {
    OnDevice d(count - 1);
    CUDA_REQUIRE(cudaGetDevice(&device));
    CHECK(device == count - 1);
    // The current device is per host thread, as in CUDA.
    int other = -1;
    std::thread([&] { cudaGetDevice(&other); }).join();
    CHECK(other == 0);
  }
  CUDA_REQUIRE(cudaDeviceGetAttribute(&value, cudaDevAttrMaxThreadsPerBlock, 0));
  CHECK(value == 1024);
  CUDA_REQUIRE(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 1));
  CHECK(value == 2);  // LOCKSTEP_CUDA_EMU_SMS's default
  CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, count) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(std::string(cudaGetErrorName(cudaErrorLaunchFailure)) == "cudaErrorLaunchFailure");
  CHECK(std::string(cudaGetErrorString(cudaErrorMemoryAllocation)) == "out of memory");
}

// === copies and memory ==============================================================================

TEST_CASE("copies: H2D from pageable memory snapshots it; from pinned memory it reads at execution") {
  cudaStream_t s = make_stream();
  const int n = 64;
  int* d = device_alloc<int>(n);
  {
    std::vector<int> pageable(n, 1);
    Gate gate;
    gate.hold(s);
    CUDA_REQUIRE(cudaMemcpyAsync(d, pageable.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
    std::fill(pageable.begin(), pageable.end(), 2);  // after the call: the copy already has the 1s
    gate.open();
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    CHECK(to_host(d, n) == std::vector<int>(n, 1));
  }
  {
    int* pinned = nullptr;
    CUDA_REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), n * sizeof(int)));
    std::fill(pinned, pinned + n, 3);
    Gate gate;
    gate.hold(s);
    CUDA_REQUIRE(cudaMemcpyAsync(d, pinned, n * sizeof(int), cudaMemcpyHostToDevice, s));
    std::fill(pinned, pinned + n, 4);  // before the copy runs: it reads these
    CHECK(cudaStreamQuery(s) == cudaErrorNotReady);
    gate.open();
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    CHECK(to_host(d, n) == std::vector<int>(n, 4));
    CUDA_REQUIRE(cudaFreeHost(pinned));
  }
  CUDA_REQUIRE(cudaFree(d));
}

TEST_CASE("copies: D2H into pageable memory returns with the data; into pinned memory it returns at once") {
  cudaStream_t s = make_stream();
  const int n = 300;
  int* d = device_alloc<int>(n);
  {
    Gate gate;
    gate.hold(s);
    lockstep_emu::launch_kernel("fill", fill, dim3(3), dim3(128), 0, s, d, n, 8);
    CUDA_REQUIRE(cudaGetLastError());
    std::vector<int> pageable(n, 0);
    const auto t0 = Clock::now();  // before the opener starts: the gate opens 30 ms after it at the earliest
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      gate.open();
    });
    const cudaError_t e = cudaMemcpyAsync(pageable.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s);
    const double waited = seconds_since(t0);
    const std::vector<int> at_return = pageable;  // before anything else could synchronize
    opener.join();
    CUDA_REQUIRE(e);
    CHECK(at_return == std::vector<int>(n, 8));  // no synchronization needed
    CHECK(waited >= 0.02);  // it waited for the gate, the fill and the copy
  }
  {
    int* pinned = nullptr;
    CUDA_REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), n * sizeof(int)));
    std::fill(pinned, pinned + n, 0);
    Gate gate;
    gate.hold(s);
    lockstep_emu::launch_kernel("fill", fill, dim3(3), dim3(128), 0, s, d, n, 9);
    CUDA_REQUIRE(cudaMemcpyAsync(pinned, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamQuery(s) == cudaErrorNotReady);  // returned with the copy still queued
    CHECK(pinned[0] == 0);
    CHECK(pinned[n - 1] == 0);
    gate.open();
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    CHECK(std::vector<int>(pinned, pinned + n) == std::vector<int>(n, 9));
    CUDA_REQUIRE(cudaFreeHost(pinned));
  }
  CUDA_REQUIRE(cudaFree(d));
}

TEST_CASE("copies: a pointer outside every allocation, or past its end, is cudaErrorInvalidValue") {
  cudaStream_t s = make_stream();
  const int n = 16;
  int* d = device_alloc<int>(n);
  int* other = device_alloc<int>(n);
  to_device(d, std::vector<int>(n, 5));
  std::vector<int> host(n, 1);
  const size_t bytes = n * sizeof(int);
  auto refused = [](cudaError_t e) {
    const bool ok = e == cudaErrorInvalidValue && cudaGetLastError() == cudaErrorInvalidValue &&
                    cudaGetLastError() == cudaSuccess;
    return ok;
  };
  // The device side is host memory.
  CHECK(refused(cudaMemcpyAsync(host.data(), host.data() + 1, sizeof(int), cudaMemcpyDeviceToHost, s)));
  CHECK(refused(cudaMemcpy(host.data(), host.data() + 1, sizeof(int), cudaMemcpyHostToDevice)));
  // Past the end of the allocation, or starting before it.
  CHECK(refused(cudaMemcpyAsync(host.data(), d + 1, bytes, cudaMemcpyDeviceToHost, s)));
  CHECK(refused(cudaMemcpyAsync(d + 1, host.data(), bytes, cudaMemcpyHostToDevice, s)));
  CHECK(refused(cudaMemcpyAsync(other, d - 1, sizeof(int), cudaMemcpyDeviceToDevice, s)));
  CHECK(refused(cudaMemsetAsync(d + n, 0, 1, s)));
  // The host side is device memory.
  CHECK(refused(cudaMemcpy(d, other, bytes, cudaMemcpyHostToDevice)));
  // Freed memory.
  int* freed = device_alloc<int>(n);
  CUDA_REQUIRE(cudaFree(freed));
  CHECK(refused(cudaMemcpy(host.data(), freed, bytes, cudaMemcpyDeviceToHost)));
  CHECK(refused(cudaFree(freed)));
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CHECK(host == std::vector<int>(n, 1));  // nothing was copied
  CHECK(to_host(d, n) == std::vector<int>(n, 5));
  // The last byte of an allocation is inside it.
  CUDA_REQUIRE(cudaMemcpyAsync(host.data(), d + n - 1, sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(host[0] == 5);
  CUDA_REQUIRE(cudaFree(d));
  CUDA_REQUIRE(cudaFree(other));
}

TEST_CASE("memory: fresh cudaMalloc memory reads as 0xff bytes; beyond the capacity is cudaErrorMemoryAllocation") {
  const size_t bytes = 1000;
  auto* d = device_alloc<unsigned char>(bytes);
  CHECK(to_host(d, bytes) == std::vector<unsigned char>(bytes, 0xff));
  float* f = device_alloc<float>(4);
  for (float x : to_host(f, 4)) CHECK(std::isnan(x));  // all-ones bytes are a NaN
  CUDA_REQUIRE(cudaFree(d));
  CUDA_REQUIRE(cudaFree(f));

  size_t free_before = 0, total = 0;
  CUDA_REQUIRE(cudaMemGetInfo(&free_before, &total));
  CHECK(total == size_t(4096) << 20);  // LOCKSTEP_CUDA_EMU_MEMORY_MB's default
  void* p = reinterpret_cast<void*>(1);
  CHECK(cudaMalloc(&p, free_before + 1) == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaSuccess);
  size_t free_after = 0;
  CUDA_REQUIRE(cudaMemGetInfo(&free_after, &total));
  CHECK(free_after == free_before);
}

TEST_CASE("memory: each device's capacity is LOCKSTEP_CUDA_EMU_MEMORY_MB (in a child process)") {
  check_children(run_children("child: memory accounting", {{{"LOCKSTEP_CUDA_EMU_MEMORY_MB", "1"}}}));
}

TEST_CASE("child: memory accounting" * doctest::skip(!kInChild)) {
  if (!kInChild) return;
  require_devices(2);
  const size_t mb = size_t(1) << 20;
  size_t free = 0, total = 0;
  CUDA_REQUIRE(cudaMemGetInfo(&free, &total));
  CHECK(total == mb);
  CHECK(free == mb);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  CUDA_REQUIRE(cudaMalloc(&a, mb / 2));
  CUDA_REQUIRE(cudaMalloc(&b, mb / 2));
  CUDA_REQUIRE(cudaMemGetInfo(&free, &total));
  CHECK(free == 0);
  CHECK(cudaMalloc(&c, 1) == cudaErrorMemoryAllocation);
  CHECK(c == nullptr);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  CUDA_REQUIRE(cudaFree(a));
  CUDA_REQUIRE(cudaMemGetInfo(&free, &total));
  CHECK(free == mb / 2);
  CUDA_REQUIRE(cudaMalloc(&c, mb / 2));  // freed memory counts again
  {
    OnDevice d(1);  // device 1 has its own megabyte
    void* e = nullptr;
    CUDA_REQUIRE(cudaMalloc(&e, mb));
    CHECK(cudaMalloc(&a, 1) == cudaErrorMemoryAllocation);
    CUDA_REQUIRE(cudaFree(e));
  }
  CUDA_REQUIRE(cudaFree(b));
  CUDA_REQUIRE(cudaFree(c));
  child_done();
}

// === cuBLAS =========================================================================================

namespace {

template <typename T>
using Gemm = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const T*,
                                const T*, int, const T*, int, const T*, T*, int);

// C = alpha op(A) op(B) + beta C for every pair of transposes, with leading dimensions larger than the
// rows (the padding holds NaN in A and B, which must not be read, and a marker in C, which must not be
// written), against a column-major reference. Small integers keep every value exact.
template <typename T>
void check_gemm(Gemm<T> gemm) {
  cudaStream_t s = make_stream();
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const int m = 5, n = 3, k = 4;
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T})
    for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      INFO("transa ", int(ta), ", transb ", int(tb));
      const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m, lda = a_rows + 3;
      const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k, ldb = b_rows + 2;
      const int ldc = m + 1;
      std::vector<T> A(size_t(lda) * a_cols, nan), B(size_t(ldb) * b_cols, nan), C0(size_t(ldc) * n, T(777));
      for (int c = 0; c < a_cols; ++c)
        for (int r = 0; r < a_rows; ++r) A[r + c * lda] = T((r * 3 + c * 5 + ta) % 7) - 3;
      for (int c = 0; c < b_cols; ++c)
        for (int r = 0; r < b_rows; ++r) B[r + c * ldb] = T((r * 2 + c * 3 + tb) % 5) - 2;
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) C0[i + j * ldc] = T((i + 2 * j) % 5) - 2;
      auto op_a = [&](int i, int l) { return ta == CUBLAS_OP_N ? A[i + l * lda] : A[l + i * lda]; };
      auto op_b = [&](int l, int j) { return tb == CUBLAS_OP_N ? B[l + j * ldb] : B[j + l * ldb]; };
      auto product = [&](int i, int j) {
        T sum = 0;
        for (int l = 0; l < k; ++l) sum += op_a(i, l) * op_b(l, j);
        return sum;
      };
      T* dA = device_alloc<T>(A.size());
      T* dB = device_alloc<T>(B.size());
      T* dC = device_alloc<T>(C0.size());
      to_device(dA, A);
      to_device(dB, B);

      // alpha and beta both used.
      to_device(dC, C0);
      const T alpha = 2, beta = -3;
      REQUIRE(gemm(h, ta, tb, m, n, k, &alpha, dA, lda, dB, ldb, &beta, dC, ldc) == CUBLAS_STATUS_SUCCESS);
      CUDA_REQUIRE(cudaStreamSynchronize(s));
      std::vector<T> expected = C0;  // the padding rows stay 777
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) expected[i + j * ldc] = alpha * product(i, j) + beta * C0[i + j * ldc];
      std::string diff = mismatch(to_host(dC, C0.size()), expected);
      CHECK_MESSAGE(diff.empty(), "alpha 2, beta -3: ", diff);

      // beta == 0: C is not read, so NaN there (fresh memory) gives no NaN; the padding stays NaN.
      CUDA_REQUIRE(cudaMemsetAsync(dC, 0xff, C0.size() * sizeof(T), s));
      const T zero = 0;
      REQUIRE(gemm(h, ta, tb, m, n, k, &alpha, dA, lda, dB, ldb, &zero, dC, ldc) == CUBLAS_STATUS_SUCCESS);
      CUDA_REQUIRE(cudaStreamSynchronize(s));
      const std::vector<T> got = to_host(dC, C0.size());
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < ldc; ++i) {
          INFO("C(", i, ", ", j, ")");
          if (i < m)
            CHECK(got[i + j * ldc] == alpha * product(i, j));
          else
            CHECK(std::isnan(got[i + j * ldc]));
        }

      // k == 0: C = beta C.
      to_device(dC, C0);
      const T half = T(0.5);
      REQUIRE(gemm(h, ta, tb, m, n, 0, &alpha, dA, lda, dB, ldb, &half, dC, ldc) == CUBLAS_STATUS_SUCCESS);
      CUDA_REQUIRE(cudaStreamSynchronize(s));
      expected = C0;
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) expected[i + j * ldc] = half * C0[i + j * ldc];
      diff = mismatch(to_host(dC, C0.size()), expected);
      CHECK_MESSAGE(diff.empty(), "k = 0: ", diff);
      for (T* p : {dA, dB, dC}) CUDA_REQUIRE(cudaFree(p));
    }
  CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

}  // namespace

TEST_CASE("cublas: Sgemm and Dgemm, all four transposes, leading dimensions beyond the rows, alpha and beta") {
  check_gemm<float>(cublasSgemm);
  check_gemm<double>(cublasDgemm);
}

TEST_CASE("cublas: leading dimensions, matrices outside device memory and the handle's device are checked") {
  require_devices(2);
  cudaStream_t s = make_stream();
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);  // on device 0
  REQUIRE(cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS);
  const int m = 5, n = 3, k = 4;
  float* A = device_alloc<float>(m * k);
  float* B = device_alloc<float>(k * n);
  float* C = device_alloc<float>(m * n);
  to_device(A, std::vector<float>(m * k, 1));
  to_device(B, std::vector<float>(k * n, 1));
  to_device(C, std::vector<float>(m * n, 42));
  const float one = 1, zero = 0;
  auto sgemm = [&](cublasOperation_t ta, cublasOperation_t tb, int mm, const float* a, int lda, const float* b,
                   int ldb, float* c, int ldc) {
    return cublasSgemm(h, ta, tb, mm, n, k, &one, a, lda, b, ldb, &zero, c, ldc);
  };
  const auto N = CUBLAS_OP_N, T = CUBLAS_OP_T;
  CHECK(sgemm(N, N, m, A, m - 1, B, k, C, m) == CUBLAS_STATUS_INVALID_VALUE);  // lda < m
  CHECK(sgemm(T, N, m, A, k - 1, B, k, C, m) == CUBLAS_STATUS_INVALID_VALUE);  // op T: lda < k
  CHECK(sgemm(N, N, m, A, m, B, k - 1, C, m) == CUBLAS_STATUS_INVALID_VALUE);  // ldb < k
  CHECK(sgemm(N, T, m, A, m, B, n - 1, C, m) == CUBLAS_STATUS_INVALID_VALUE);  // op T: ldb < n
  CHECK(sgemm(N, N, m, A, m, B, k, C, m - 1) == CUBLAS_STATUS_INVALID_VALUE);  // ldc < m
  CHECK(sgemm(N, N, -1, A, m, B, k, C, m) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSgemm(h, CUBLAS_OP_C, N, m, n, k, &one, A, m, B, k, &zero, C, m) != CUBLAS_STATUS_SUCCESS);
  CHECK(cublasSgemm(nullptr, N, N, m, n, k, &one, A, m, B, k, &zero, C, m) == CUBLAS_STATUS_NOT_INITIALIZED);
  // A valid leading dimension that only spills past the allocation: the matrix is not inside it.
  CHECK(sgemm(N, N, m, A, m + 1, B, k, C, m) == CUBLAS_STATUS_INVALID_VALUE);
  // A host matrix.
  std::vector<float> host_a(m * k, 1);
  CHECK(sgemm(N, N, m, host_a.data(), m, B, k, C, m) == CUBLAS_STATUS_INVALID_VALUE);
  // The handle was created on device 0: used while device 1 is current, or on device 1's memory.
  float* C1;
  {
    OnDevice d(1);
    CHECK(sgemm(N, N, m, A, m, B, k, C, m) != CUBLAS_STATUS_SUCCESS);
    C1 = device_alloc<float>(m * n);
  }
  CHECK(sgemm(N, N, m, A, m, B, k, C1, m) == CUBLAS_STATUS_INVALID_VALUE);
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CHECK(to_host(C, m * n) == std::vector<float>(m * n, 42));  // none of them wrote C
  // The valid call, with A transposed: lda = k < m is right for op T.
  CHECK(sgemm(T, N, m, A, k, B, k, C, m) == CUBLAS_STATUS_SUCCESS);
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CHECK(to_host(C, m * n) == std::vector<float>(m * n, float(k)));
  CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
  for (float* p : {A, B, C, C1}) CUDA_REQUIRE(cudaFree(p));
}

namespace {

template <typename T>
using GemmStridedBatched = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                              const T*, const T*, int, long long, const T*, int, long long, const T*,
                                              T*, int, long long, int);

// C[i] = alpha op(A[i]) op(B) + beta C[i] for 3 products: A's matrices apart by more than their span, B
// shared by all (stride 0), C's with a gap between them that must keep its marker; each product
// against a column-major reference. Then the batch-specific checks: a negative batchCount, the last
// matrix past the allocation, and batchCount 0 (nothing written).
template <typename T>
void check_gemm_strided_batched(GemmStridedBatched<T> gemm) {
  cudaStream_t s = make_stream();
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS);
  const int m = 4, n = 3, k = 2, batch = 3;
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    INFO("transa ", int(ta));
    const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m, lda = a_rows + 1;
    const long long sa = lda * a_cols + 5, sc = m * n + 2;
    const int ldb = k, ldc = m;
    std::vector<T> A(size_t(sa) * batch), B(size_t(k) * n), C0(size_t(sc) * batch, T(777));
    for (size_t i = 0; i < A.size(); ++i) A[i] = T(int(i * 7 % 11) - 5);
    for (size_t i = 0; i < B.size(); ++i) B[i] = T(int(i * 3 % 5) - 2);
    for (int b = 0; b < batch; ++b)
      for (int i = 0; i < m * n; ++i) C0[b * sc + i] = T((i + b) % 4);
    T* dA = device_alloc<T>(A.size());
    T* dB = device_alloc<T>(B.size());
    T* dC = device_alloc<T>(C0.size());
    to_device(dA, A);
    to_device(dB, B);
    to_device(dC, C0);
    const T alpha = 2, beta = -1;
    REQUIRE(gemm(h, ta, CUBLAS_OP_N, m, n, k, &alpha, dA, lda, sa, dB, ldb, 0, &beta, dC, ldc, sc, batch) ==
            CUBLAS_STATUS_SUCCESS);
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    std::vector<T> expected = C0;  // the gaps stay 777
    for (int b = 0; b < batch; ++b)
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
          T sum = 0;
          for (int l = 0; l < k; ++l)
            sum += (ta == CUBLAS_OP_N ? A[b * sa + i + l * lda] : A[b * sa + l + i * lda]) * B[l + j * ldb];
          expected[b * sc + i + j * ldc] = alpha * sum + beta * C0[b * sc + i + j * ldc];
        }
    std::string diff = mismatch(to_host(dC, C0.size()), expected);
    CHECK_MESSAGE(diff.empty(), diff);

    to_device(dC, C0);
    CHECK(gemm(h, ta, CUBLAS_OP_N, m, n, k, &alpha, dA, lda, sa, dB, ldb, 0, &beta, dC, ldc, sc, -1) ==
          CUBLAS_STATUS_INVALID_VALUE);
    // One product more: the last C (and A) would lie past their allocations.
    CHECK(gemm(h, ta, CUBLAS_OP_N, m, n, k, &alpha, dA, lda, sa, dB, ldb, 0, &beta, dC, ldc, sc, batch + 1) ==
          CUBLAS_STATUS_INVALID_VALUE);
    // The leading dimensions are checked as in cublasSgemm.
    CHECK(gemm(h, ta, CUBLAS_OP_N, m, n, k, &alpha, dA, a_rows - 1, sa, dB, ldb, 0, &beta, dC, ldc, sc, batch) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(gemm(h, ta, CUBLAS_OP_N, m, n, k, &alpha, dA, lda, sa, dB, ldb, 0, &beta, dC, ldc, sc, 0) ==
          CUBLAS_STATUS_SUCCESS);
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    CHECK(to_host(dC, C0.size()) == C0);  // none of them wrote C
    for (T* p : {dA, dB, dC}) CUDA_REQUIRE(cudaFree(p));
  }
  CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

}  // namespace

TEST_CASE("cublas: Sgemm/DgemmStridedBatched: strided and shared (stride 0) matrices, gaps untouched, checks") {
  check_gemm_strided_batched<float>(cublasSgemmStridedBatched);
  check_gemm_strided_batched<double>(cublasDgemmStridedBatched);
}

// === NCCL ===========================================================================================

namespace {

template <typename T>
ncclDataType_t nccl_type();
template <>
ncclDataType_t nccl_type<float>() {
  return ncclFloat32;
}
template <>
ncclDataType_t nccl_type<int64_t>() {
  return ncclInt64;
}

// Rank r's element i for `op`: mixed signs, distinct maxima and minima per element, exact sums; for
// products small factors; int64 values beyond a double's 53 bits.
template <typename T>
T contribution(ncclRedOp_t op, int r, int i) {
  if (op == ncclProd) return T((i + r) % 3 + 1) * ((i + r) % 2 ? T(-1) : T(1));
  if constexpr (std::is_same_v<T, float>)
    return float((i * 7 + r * 13) % 17) - 8.0f + 0.5f * float(r);
  else
    return (int64_t(1) << 55) / 7 * (r + 1) * (i % 2 ? -1 : 1) + i * 3 - r * 7;
}

// op over every rank's contribution, folded in rank order as NCCL defines it (avg: the sum divided by
// the rank count).
template <typename T>
T reduced(ncclRedOp_t op, int nranks, int i) {
  T acc = contribution<T>(op, 0, i);
  for (int r = 1; r < nranks; ++r) {
    const T x = contribution<T>(op, r, i);
    switch (op) {
      case ncclSum:
      case ncclAvg: acc = acc + x; break;
      case ncclProd: acc = acc * x; break;
      case ncclMax: acc = std::max(acc, x); break;
      case ncclMin: acc = std::min(acc, x); break;
    }
  }
  return op == ncclAvg ? T(acc / T(nranks)) : acc;
}

// AllReduce with every op, out of place and in place.
template <typename T>
void check_all_reduce(ncclComm_t comm, cudaStream_t s, int rank, int nranks) {
  const int count = 37;
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg}) {
    INFO("op ", int(op));
    std::vector<T> mine(count), expected(count);
    for (int i = 0; i < count; ++i) mine[i] = contribution<T>(op, rank, i), expected[i] = reduced<T>(op, nranks, i);
    T* send = device_alloc<T>(count);
    T* recv = device_alloc<T>(count);
    to_device(send, mine);
    NCCL_REQUIRE(ncclAllReduce(send, recv, count, nccl_type<T>(), op, comm, s));
    NCCL_REQUIRE(ncclAllReduce(send, send, count, nccl_type<T>(), op, comm, s));  // in place
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    std::string diff = mismatch(to_host(recv, count), expected);
    CHECK_MESSAGE(diff.empty(), "out of place: ", diff);
    diff = mismatch(to_host(send, count), expected);
    CHECK_MESSAGE(diff.empty(), "in place: ", diff);
    CUDA_REQUIRE(cudaFree(send));
    CUDA_REQUIRE(cudaFree(recv));
  }
}

ncclComm_t init_comm(const ncclUniqueId& id, int nranks, int rank) {
  ncclComm_t comm = nullptr;
  NCCL_REQUIRE(ncclCommInitRank(&comm, nranks, id, rank));
  int got = -1;
  NCCL_REQUIRE(ncclCommCount(comm, &got));
  CHECK(got == nranks);
  NCCL_REQUIRE(ncclCommUserRank(comm, &got));
  CHECK(got == rank);
  return comm;
}

// The rank's device, as a launcher assigns them: rank % device count.
void set_rank_device(int rank) {
  int count = 0;
  CUDA_REQUIRE(cudaGetDeviceCount(&count));
  REQUIRE(count > 0);
  CUDA_REQUIRE(cudaSetDevice(rank % count));
}

}  // namespace

TEST_CASE("nccl: AllReduce (every op), Broadcast, Reduce, AllGather and ReduceScatter between 2 and 3 processes") {
  for (int nranks : {2, 3}) {
    CAPTURE(nranks);
    // The id is made here: ncclGetUniqueId makes no CUDA call.
    const ncclUniqueId id = new_id();
    check_children(run_children("child: nccl collectives", rank_envs(nranks, {id})));
    // The last rank to destroy its communicator removed the rendezvous folder.
    CHECK_FALSE(fs::exists(nccl_folder(id)));
  }
}

TEST_CASE("child: nccl collectives" * doctest::skip(!kInChild)) {
  if (!kInChild) return;
  const int rank = env_int("CUDA_EMU_TEST_RANK"), nranks = env_int("CUDA_EMU_TEST_NRANKS");
  REQUIRE(rank >= 0);
  REQUIRE(nranks > rank);
  set_rank_device(rank);
  const ncclComm_t comm = init_comm(unhex_id(std::getenv("CUDA_EMU_TEST_ID0")), nranks, rank);
  cudaStream_t s = make_stream();

  check_all_reduce<float>(comm, s, rank, nranks);
  check_all_reduce<int64_t>(comm, s, rank, nranks);

  const int count = 11;
  auto values = [&](int r) {
    std::vector<int64_t> v(count);
    for (int i = 0; i < count; ++i) v[i] = int64_t(r + 1) * 1000 + i - (int64_t(r) << 40);
    return v;
  };

  {  // Broadcast from the last rank (not 0), out of place: every recv gets the root's send.
    const int root = nranks - 1;
    int64_t* send = device_alloc<int64_t>(count);
    int64_t* recv = device_alloc<int64_t>(count);  // fresh: -1s
    to_device(send, values(rank));
    NCCL_REQUIRE(ncclBroadcast(send, recv, count, ncclInt64, root, comm, s));
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    const std::string diff = mismatch(to_host(recv, count), values(root));
    CHECK_MESSAGE(diff.empty(), "broadcast: ", diff);
    CHECK(to_host(send, count) == values(rank));  // send is left alone
    CHECK(ncclBroadcast(send, recv, count, ncclInt64, nranks, comm, s) == ncclInvalidArgument);
    CUDA_REQUIRE(cudaFree(send));
    CUDA_REQUIRE(cudaFree(recv));
  }
  {  // Reduce (sum) to rank 1: only the root's recv is written.
    const int root = 1;
    int64_t* send = device_alloc<int64_t>(count);
    int64_t* recv = device_alloc<int64_t>(count);  // fresh: -1s
    to_device(send, values(rank));
    NCCL_REQUIRE(ncclReduce(send, recv, count, ncclInt64, ncclSum, root, comm, s));
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    std::vector<int64_t> expected(count, -1);
    if (rank == root) {
      expected.assign(count, 0);
      for (int r = 0; r < nranks; ++r)
        for (int i = 0; i < count; ++i) expected[i] += values(r)[i];
    }
    const std::string diff = mismatch(to_host(recv, count), expected);
    CHECK_MESSAGE(diff.empty(), "reduce: ", diff);
    CUDA_REQUIRE(cudaFree(send));
    CUDA_REQUIRE(cudaFree(recv));
  }
  {  // AllGather: rank r's block at r * count.
    int64_t* send = device_alloc<int64_t>(count);
    int64_t* recv = device_alloc<int64_t>(count * nranks);
    to_device(send, values(rank));
    NCCL_REQUIRE(ncclAllGather(send, recv, count, ncclInt64, comm, s));
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    std::vector<int64_t> expected;
    for (int r = 0; r < nranks; ++r) {
      const auto v = values(r);
      expected.insert(expected.end(), v.begin(), v.end());
    }
    const std::string diff = mismatch(to_host(recv, count * nranks), expected);
    CHECK_MESSAGE(diff.empty(), "allgather: ", diff);
    CUDA_REQUIRE(cudaFree(send));
    CUDA_REQUIRE(cudaFree(recv));
  }
  {  // ReduceScatter (sum and max) of nranks * count floats: this rank gets block `rank` reduced.
    std::vector<float> mine(size_t(count) * nranks);
    auto element = [](int r, size_t j) { return float(int(j * 5 + r * 11) % 13) - 6.0f + 0.25f * float(r); };
    for (size_t j = 0; j < mine.size(); ++j) mine[j] = element(rank, j);
    float* send = device_alloc<float>(mine.size());
    float* sum = device_alloc<float>(count);
    float* max = device_alloc<float>(count);
    to_device(send, mine);
    NCCL_REQUIRE(ncclReduceScatter(send, sum, count, ncclFloat32, ncclSum, comm, s));
    NCCL_REQUIRE(ncclReduceScatter(send, max, count, ncclFloat32, ncclMax, comm, s));
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    std::vector<float> expected_sum(count), expected_max(count);
    for (int i = 0; i < count; ++i) {
      const size_t j = size_t(rank) * count + i;
      expected_sum[i] = element(0, j), expected_max[i] = element(0, j);
      for (int r = 1; r < nranks; ++r)
        expected_sum[i] += element(r, j), expected_max[i] = std::max(expected_max[i], element(r, j));
    }
    std::string diff = mismatch(to_host(sum, count), expected_sum);
    CHECK_MESSAGE(diff.empty(), "reducescatter sum: ", diff);
    diff = mismatch(to_host(max, count), expected_max);
    CHECK_MESSAGE(diff.empty(), "reducescatter max: ", diff);
    for (float* p : {send, sum, max}) CUDA_REQUIRE(cudaFree(p));
  }
  {  // Integer sums and products wrap, as NCCL's do (signed overflow in the fold would be undefined
     // behaviour, which CI's UBSan stage aborts on).
    // 2 or 3 of them sum past INT64_MAX (INT32_MAX) and below 2^64 (2^32): the wrapped sum is negative.
    const int64_t big = (int64_t(1) << 62) + 5, factor = (int64_t(1) << 40) + 3;
    const int32_t big32 = (int32_t(1) << 30) + 5;
    int64_t* d = device_alloc<int64_t>(2);
    int32_t* d32 = device_alloc<int32_t>(1);
    to_device(d, std::vector<int64_t>{big - rank, factor});
    to_device(d32, std::vector<int32_t>{big32 - rank});
    NCCL_REQUIRE(ncclAllReduce(d, d, 1, ncclInt64, ncclSum, comm, s));
    NCCL_REQUIRE(ncclAllReduce(d + 1, d + 1, 1, ncclInt64, ncclProd, comm, s));
    NCCL_REQUIRE(ncclAllReduce(d32, d32, 1, ncclInt32, ncclSum, comm, s));
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    uint64_t sum = 0, product = 1;
    uint32_t sum32 = 0;
    for (int r = 0; r < nranks; ++r)
      sum += uint64_t(big - r), product *= uint64_t(factor), sum32 += uint32_t(big32 - r);
    const std::vector<int64_t> got = to_host(d, 2);
    CHECK(got[0] == int64_t(sum));
    CHECK(got[0] < 0);
    CHECK(got[1] == int64_t(product));
    CHECK(to_host(d32, 1)[0] == int32_t(sum32));
    CHECK(to_host(d32, 1)[0] < 0);
    CUDA_REQUIRE(cudaFree(d));
    CUDA_REQUIRE(cudaFree(d32));
  }
  {  // Refused at the call, on this rank alone (nothing is exchanged, so the ranks stay in step).
    std::vector<float> host(4, 1);
    float* d = device_alloc<float>(4);
    CHECK(ncclAllReduce(host.data(), d, 4, ncclFloat32, ncclSum, comm, s) == ncclInvalidArgument);
    CHECK(ncclAllReduce(d, d, 5, ncclFloat32, ncclSum, comm, s) == ncclInvalidArgument);  // past the end
    CUDA_REQUIRE(cudaFree(d));
  }
  {  // And a last collective after the refusals still matches up across the ranks.
    int64_t* d = device_alloc<int64_t>(1);
    to_device(d, std::vector<int64_t>{rank + 1});
    NCCL_REQUIRE(ncclAllReduce(d, d, 1, ncclInt64, ncclSum, comm, s));
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    CHECK(to_host(d, 1)[0] == int64_t(nranks) * (nranks + 1) / 2);
    CUDA_REQUIRE(cudaFree(d));
  }
  ncclResult_t async = ncclInternalError;
  NCCL_REQUIRE(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess);
  NCCL_REQUIRE(ncclCommDestroy(comm));
  child_done();
}

TEST_CASE("nccl: ncclCommAbort unblocks a collective whose peer never calls it; a new communicator works") {
  const ncclUniqueId stuck = new_id(), next = new_id();
  // A long peer timeout: only the abort can end the wait within the case's time bound.
  check_children(
      run_children("child: nccl abort", rank_envs(2, {stuck, next}, {{"LOCKSTEP_CUDA_EMU_NCCL_TIMEOUT_S", "120"}})));
  CHECK_FALSE(fs::exists(nccl_folder(next)));
  std::error_code ec;
  fs::remove_all(nccl_folder(stuck), ec);  // an aborted communicator leaves its folder, as documented
}

TEST_CASE("child: nccl abort" * doctest::skip(!kInChild)) {
  if (!kInChild) return;
  const int rank = env_int("CUDA_EMU_TEST_RANK");
  set_rank_device(rank);
  const ncclComm_t stuck = init_comm(unhex_id(std::getenv("CUDA_EMU_TEST_ID0")), 2, rank);
  cudaStream_t s = make_stream();
  float* buf = device_alloc<float>(8);  // fresh: NaN
  if (rank == 0) {
    to_device(buf, std::vector<float>(8, 1));
    float* recv = device_alloc<float>(8);
    to_device(recv, std::vector<float>(8, -5));
    NCCL_REQUIRE(ncclAllReduce(buf, recv, 8, ncclFloat32, ncclSum, stuck, s));  // rank 1 never calls it
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(cudaStreamQuery(s) == cudaErrorNotReady);  // waiting for rank 1
    ncclResult_t async = ncclInternalError;
    NCCL_REQUIRE(ncclCommGetAsyncError(stuck, &async));
    CHECK(async == ncclSuccess);  // a wait is no error
    const auto t0 = Clock::now();
    NCCL_REQUIRE(ncclCommAbort(stuck));  // frees the communicator: it cannot be asked anything after
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    CHECK(seconds_since(t0) < 5.0);
    // The aborted collective wrote nothing, and the stream is still usable.
    CHECK(to_host(recv, 8) == std::vector<float>(8, -5));
    CUDA_REQUIRE(cudaFree(recv));
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // alive, but never calling it
  }
  // Both ranks go on with a fresh communicator (rank 1 waits in its init until rank 0 has aborted).
  const ncclComm_t comm = init_comm(unhex_id(std::getenv("CUDA_EMU_TEST_ID1")), 2, rank);
  to_device(buf, std::vector<float>(8, float(rank + 1)));
  NCCL_REQUIRE(ncclAllReduce(buf, buf, 8, ncclFloat32, ncclSum, comm, s));
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CHECK(to_host(buf, 8) == std::vector<float>(8, 3.0f));
  NCCL_REQUIRE(ncclCommDestroy(comm));
  if (rank == 1) NCCL_REQUIRE(ncclCommAbort(stuck));
  CUDA_REQUIRE(cudaFree(buf));
  child_done();
}

TEST_CASE("nccl: a peer that never reaches a collective is ncclRemoteError after the emulator's timeout") {
  const ncclUniqueId id = new_id();
  check_children(run_children("child: nccl timeout", rank_envs(2, {id})));
  CHECK_FALSE(fs::exists(nccl_folder(id)));
}

TEST_CASE("child: nccl timeout" * doctest::skip(!kInChild)) {
  if (!kInChild) return;
  const int rank = env_int("CUDA_EMU_TEST_RANK");
  set_rank_device(rank);
  const ncclComm_t comm = init_comm(unhex_id(std::getenv("CUDA_EMU_TEST_ID0")), 2, rank);
  // Short only from here: nccl.cpp reads it at each wait, and the init above must not time out on a busy
  // machine. No other thread reads the environment now.
  ::setenv("LOCKSTEP_CUDA_EMU_NCCL_TIMEOUT_S", "1", 1);
  if (rank == 0) {
    cudaStream_t s = make_stream();
    int64_t* d = device_alloc<int64_t>(4);
    to_device(d, std::vector<int64_t>(4, 3));
    const auto t0 = Clock::now();
    NCCL_REQUIRE(ncclAllReduce(d, d, 4, ncclInt64, ncclSum, comm, s));  // rank 1 never calls it
    CUDA_REQUIRE(cudaStreamSynchronize(s));  // a communicator's error, not a device fault
    const double waited = seconds_since(t0);
    CHECK(waited >= 0.9);
    CHECK(waited < 10.0);
    ncclResult_t async = ncclSuccess;
    NCCL_REQUIRE(ncclCommGetAsyncError(comm, &async));
    CHECK(async == ncclRemoteError);
    const std::string why = ncclGetLastError(comm);
    CHECK_MESSAGE(why.find("rank 1 did not reach") != std::string::npos, why);
    // Later collectives on the failed communicator exchange nothing and change nothing.
    ncclAllReduce(d, d, 4, ncclInt64, ncclSum, comm, s);
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    CHECK(to_host(d, 4) == std::vector<int64_t>(4, 3));
    CUDA_REQUIRE(cudaFree(d));
  }
  NCCL_REQUIRE(ncclCommDestroy(comm));  // returns: nothing left to wait for
  child_done();
}

TEST_CASE("nccl: ranks that issue different collectives at one position get ncclInvalidUsage, with a message") {
  const std::vector<ncclUniqueId> ids = {new_id(), new_id(), new_id(), new_id(), new_id()};
  const auto results = run_children("child: nccl mismatch", rank_envs(2, ids));
  check_children(results);
  // Printed on stderr whatever the verbosity, as a device fault is: a bug in the caller.
  const std::string said[2] = {"ncclAllReduce #2: rank 1 issued ncclAllReduce with count 50, this rank count 100",
                               "ncclAllReduce #2: rank 0 issued ncclAllReduce with count 100, this rank count 50"};
  for (size_t r = 0; r < 2 && r < results.size(); ++r)
    CHECK_MESSAGE(results[r].output.find(said[r]) != std::string::npos, results[r].output);
  for (const ncclUniqueId& id : ids) CHECK_FALSE(fs::exists(nccl_folder(id)));
}

TEST_CASE("child: nccl mismatch" * doctest::skip(!kInChild)) {
  if (!kInChild) return;
  const int rank = env_int("CUDA_EMU_TEST_RANK");
  REQUIRE((rank == 0 || rank == 1));
  set_rank_device(rank);
  cudaStream_t s = make_stream();
  const size_t n = 100;
  int64_t* send = device_alloc<int64_t>(n);
  int64_t* recv = device_alloc<int64_t>(n);
  to_device(send, std::vector<int64_t>(n, rank + 1));
  // On the communicator of id `which`, `issue` queues a collective that the two ranks issue differently:
  // accepted at the call; at execution each rank gets ncclInvalidUsage, `why[rank]` as the last error,
  // and nothing written.
  using Issue = std::function<ncclResult_t(ncclComm_t)>;
  auto mismatch_on = [&](int which, const Issue& issue, const std::string (&why)[2], bool matched_first = false) {
    INFO("communicator ", which, ": ", why[rank]);
    const ncclComm_t comm = init_comm(unhex_id(std::getenv(("CUDA_EMU_TEST_ID" + std::to_string(which)).c_str())), 2, rank);
    if (matched_first) {  // a collective both ranks issue alike works, and numbers the next one #2
      NCCL_REQUIRE(ncclAllReduce(send, recv, n, ncclInt64, ncclSum, comm, s));
      CUDA_REQUIRE(cudaStreamSynchronize(s));
      CHECK(to_host(recv, n) == std::vector<int64_t>(n, 3));
    }
    to_device(recv, std::vector<int64_t>(n, -7));
    NCCL_REQUIRE(issue(comm));
    CUDA_REQUIRE(cudaStreamSynchronize(s));  // a communicator's error, not a device fault
    ncclResult_t async = ncclSuccess;
    NCCL_REQUIRE(ncclCommGetAsyncError(comm, &async));
    CHECK(async == ncclInvalidUsage);
    const std::string last = ncclGetLastError(comm);
    CHECK_MESSAGE(last == why[rank], last);
    CHECK(to_host(recv, n) == std::vector<int64_t>(n, -7));
    if (matched_first) {  // later collectives on the failed communicator exchange nothing and change nothing
      NCCL_REQUIRE(ncclAllReduce(send, recv, n, ncclInt64, ncclSum, comm, s));
      CUDA_REQUIRE(cudaStreamSynchronize(s));
      CHECK(to_host(recv, n) == std::vector<int64_t>(n, -7));
    }
    NCCL_REQUIRE(ncclCommDestroy(comm));
  };
  // Counts: rank 0 would fold past the end of rank 1's 50 elements, rank 1 reduce half the data.
  mismatch_on(
      0, [&](ncclComm_t c) { return ncclAllReduce(send, recv, rank == 0 ? 100 : 50, ncclInt64, ncclSum, c, s); },
      {"ncclAllReduce #2: rank 1 issued ncclAllReduce with count 50, this rank count 100",
       "ncclAllReduce #2: rank 0 issued ncclAllReduce with count 100, this rank count 50"},
      /*matched_first=*/true);
  // Roots: each rank believes itself the root.
  mismatch_on(
      1, [&](ncclComm_t c) { return ncclBroadcast(send, recv, n, ncclInt64, rank, c, s); },
      {"ncclBroadcast #1: rank 1 issued ncclBroadcast with root 1, this rank root 0",
       "ncclBroadcast #1: rank 0 issued ncclBroadcast with root 0, this rank root 1"});
  // Ops.
  mismatch_on(
      2, [&](ncclComm_t c) { return ncclAllReduce(send, recv, n, ncclInt64, rank == 0 ? ncclSum : ncclMax, c, s); },
      {"ncclAllReduce #1: rank 1 issued ncclAllReduce with op ncclMax, this rank op ncclSum",
       "ncclAllReduce #1: rank 0 issued ncclAllReduce with op ncclSum, this rank op ncclMax"});
  // Datatypes.
  mismatch_on(
      3,
      [&](ncclComm_t c) { return ncclAllReduce(send, recv, 8, rank == 0 ? ncclInt64 : ncclFloat64, ncclSum, c, s); },
      {"ncclAllReduce #1: rank 1 issued ncclAllReduce with datatype ncclFloat64, this rank datatype ncclInt64",
       "ncclAllReduce #1: rank 0 issued ncclAllReduce with datatype ncclInt64, this rank datatype ncclFloat64"});
  // Collectives.
  mismatch_on(
      4,
      [&](ncclComm_t c) {
        return rank == 0 ? ncclAllReduce(send, recv, 8, ncclInt64, ncclSum, c, s)
                         : ncclAllGather(send, recv, 8, ncclInt64, c, s);
      },
      {"ncclAllReduce #1: rank 1 issued ncclAllGather, this rank ncclAllReduce",
       "ncclAllGather #1: rank 0 issued ncclAllReduce, this rank ncclAllGather"});
  CUDA_REQUIRE(cudaFree(send));
  CUDA_REQUIRE(cudaFree(recv));
  child_done();
}

TEST_CASE("nccl: a communicator's collectives on two streams execute in issue order; a held-up one times out") {
  const ncclUniqueId id = new_id(), held = new_id();
  check_children(run_children("child: nccl order", rank_envs(2, {id, held})));
  CHECK_FALSE(fs::exists(nccl_folder(id)));
  CHECK_FALSE(fs::exists(nccl_folder(held)));
}

TEST_CASE("child: nccl order" * doctest::skip(!kInChild)) {
  if (!kInChild) return;
  const int rank = env_int("CUDA_EMU_TEST_RANK");
  set_rank_device(rank);
  cudaStream_t a = make_stream(), b = make_stream();
  const int n = 8, collectives = 6;
  // Collective k (1-based) sums buffer k - 1, where rank r holds 10 k + r.
  std::vector<int64_t*> bufs;
  for (int k = 1; k <= collectives; ++k) {
    bufs.push_back(device_alloc<int64_t>(n));
    to_device(bufs.back(), std::vector<int64_t>(n, 10 * k + rank));
  }
  {
    const ncclComm_t comm = init_comm(unhex_id(std::getenv("CUDA_EMU_TEST_ID0")), 2, rank);
    Gate gate;
    gate.hold(a);
    NCCL_REQUIRE(ncclAllReduce(bufs[0], bufs[0], n, ncclInt64, ncclSum, comm, a));  // #1, behind the gate
    NCCL_REQUIRE(ncclAllReduce(bufs[1], bufs[1], n, ncclInt64, ncclSum, comm, b));  // #2
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(cudaStreamQuery(b) == cudaErrorNotReady);  // #2 waits for #1, as under NCCL
    gate.open();
    // Alternating streams: the removal of SEQ-2's files relies on the order too.
    for (int k = 3; k <= collectives; ++k)
      NCCL_REQUIRE(ncclAllReduce(bufs[k - 1], bufs[k - 1], n, ncclInt64, ncclSum, comm, k % 2 ? b : a));
    CUDA_REQUIRE(cudaStreamSynchronize(a));
    CUDA_REQUIRE(cudaStreamSynchronize(b));
    for (int k = 1; k <= collectives; ++k) {
      INFO("collective #", k);
      CHECK(to_host(bufs[k - 1], n) == std::vector<int64_t>(n, 20 * k + 1));
    }
    ncclResult_t async = ncclInternalError;
    NCCL_REQUIRE(ncclCommGetAsyncError(comm, &async));
    CHECK(async == ncclSuccess);
    NCCL_REQUIRE(ncclCommDestroy(comm));
  }
  {  // #1's stream is held past the peer timeout: #2 gives up with ncclRemoteError, and #1 then does nothing.
    const ncclComm_t comm = init_comm(unhex_id(std::getenv("CUDA_EMU_TEST_ID1")), 2, rank);
    // Short only from here (see "child: nccl timeout"); no other thread reads the environment now.
    ::setenv("LOCKSTEP_CUDA_EMU_NCCL_TIMEOUT_S", "1", 1);
    to_device(bufs[0], std::vector<int64_t>(n, 5));
    Gate gate;
    gate.hold(a);
    NCCL_REQUIRE(ncclAllReduce(bufs[0], bufs[0], n, ncclInt64, ncclSum, comm, a));
    NCCL_REQUIRE(ncclAllReduce(bufs[1], bufs[1], n, ncclInt64, ncclSum, comm, b));
    const auto t0 = Clock::now();
    CUDA_REQUIRE(cudaStreamSynchronize(b));
    const double waited = seconds_since(t0);
    CHECK(waited >= 0.9);
    CHECK(waited < 10.0);
    ncclResult_t async = ncclSuccess;
    NCCL_REQUIRE(ncclCommGetAsyncError(comm, &async));
    CHECK(async == ncclRemoteError);
    const std::string why = ncclGetLastError(comm);
    CHECK_MESSAGE(why.find("ncclAllReduce #2: this communicator's collective #1, issued earlier, was not reached") !=
                      std::string::npos,
                  why);
    gate.open();
    CUDA_REQUIRE(cudaStreamSynchronize(a));
    CHECK(to_host(bufs[0], n) == std::vector<int64_t>(n, 5));
    NCCL_REQUIRE(ncclCommDestroy(comm));
  }
  for (int64_t* p : bufs) CUDA_REQUIRE(cudaFree(p));
  child_done();
}

TEST_CASE("nccl: after a device fault, queued collectives are dropped, ncclCommDestroy returns, new ones are refused") {
  const ncclUniqueId id = new_id();
  check_children(run_children("child: nccl device fault", rank_envs(2, {id}), std::chrono::seconds(20)));
  CHECK_FALSE(fs::exists(nccl_folder(id)));
}

TEST_CASE("child: nccl device fault" * doctest::skip(!kInChild)) {
  if (!kInChild) return;
  const int rank = env_int("CUDA_EMU_TEST_RANK");
  set_rank_device(rank);
  const ncclComm_t comm = init_comm(unhex_id(std::getenv("CUDA_EMU_TEST_ID0")), 2, rank);
  if (rank == 0) {
    cudaStream_t s = make_stream();
    int64_t* d = device_alloc<int64_t>(4);
    int* out = device_alloc<int>(32);
    Gate gate;  // so the collective is queued before the kernel faults
    gate.hold(s);
    lockstep_emu::launch_kernel("divergent_barrier", divergent_barrier, dim3(1), dim3(32), 0, s, out);
    CUDA_REQUIRE(cudaGetLastError());
    NCCL_REQUIRE(ncclAllReduce(d, d, 4, ncclInt64, ncclSum, comm, s));  // dropped unrun by the stream
    gate.open();
    CHECK(cudaStreamSynchronize(s) == cudaErrorLaunchFailure);
    CHECK(ncclAllReduce(d, d, 4, ncclInt64, ncclSum, comm, s) == ncclUnhandledCudaError);
    CHECK(ncclBroadcast(d, d, 4, ncclInt64, 0, comm, s) == ncclUnhandledCudaError);
    CHECK(ncclReduce(d, d, 4, ncclInt64, ncclSum, 0, comm, s) == ncclUnhandledCudaError);
    CHECK(ncclAllGather(d, d, 2, ncclInt64, comm, s) == ncclUnhandledCudaError);
    CHECK(ncclReduceScatter(d, d, 2, ncclInt64, ncclSum, comm, s) == ncclUnhandledCudaError);
  }
  const auto t0 = Clock::now();
  NCCL_REQUIRE(ncclCommDestroy(comm));  // nothing pending any more: the dropped collective counts as ended
  CHECK(seconds_since(t0) < 5.0);
  child_done();
}
