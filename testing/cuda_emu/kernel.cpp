// The CUDA emulator's kernel executor. A launch is queued on its stream; the stream's worker runs the
// grid one block at a time, each GPU thread of the block as a fiber on the worker's OS thread (on
// x86-64 a six-register stack switch, elsewhere ucontext, whose swapcontext makes a system call per
// switch). Fibers switch only at __syncthreads: the scheduler resumes every thread of the block, round
// by round, until all of them have returned. Checked: the launch configuration (as CUDA checks it),
// the stream's device, and that every thread of a block reaches each __syncthreads (a thread that
// returns while others wait at one is a divergent barrier: undefined behaviour on a GPU, a device
// fault here).
#include <sys/mman.h>
#include <ucontext.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "emu.h"

// Sanitizers follow the fibers through their fiber APIs: ASan so that each fiber's stack is its own,
// TSan so that a switch orders the fibers' accesses (a block's threads synchronize at each switch, as
// at the barrier that causes it) instead of reading as a race between unrelated stacks.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define EMU_TSAN 1
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace lockstep_emu {
namespace {

#if defined(EMU_ASAN) || defined(EMU_TSAN)
constexpr size_t kStack = 512 << 10;  // sanitized frames are several times larger
#else
constexpr size_t kStack = 128 << 10;
#endif
constexpr size_t kGuard = 4096;  // a PROT_NONE page under each stack: an overflow faults at once

enum class State { Ready, AtBarrier, Done };

void fiber_main();

#if defined(__x86_64__)
// switch_stack(&from, to): saves the callee-saved registers and the FPU/SSE control words on the
// current stack, stores its pointer in *from, and resumes the stack `to` (saved the same way).
extern "C" void lockstep_emu_switch_stack(void** from, void* to);
asm(R"(
  .pushsection .text
  .globl lockstep_emu_switch_stack
  .type lockstep_emu_switch_stack,@function
lockstep_emu_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  fnstcw (%rsp)
  stmxcsr 8(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size lockstep_emu_switch_stack,.-lockstep_emu_switch_stack
  .popsection
)");

extern "C" [[noreturn]] void lockstep_emu_fiber_entry() {
  fiber_main();
  __builtin_unreachable();
}

struct Context {
  void* sp = nullptr;
  // A fresh stack [base, base + size) whose first switch enters fiber_main.
  void prepare(char* base, size_t size) {
    auto top = reinterpret_cast<uintptr_t>(base + size) & ~uintptr_t{15};
    auto* slot = reinterpret_cast<uint64_t*>(top);
    slot[-1] = 0;                                                      // fiber_main never returns
    slot[-2] = reinterpret_cast<uint64_t>(&lockstep_emu_fiber_entry);  // popped by ret
    for (int i = 3; i <= 8; ++i) slot[-i] = 0;                         // rbp, rbx, r12-r15
    slot[-10] = 0x037f;                                                // x87 control word
    slot[-9] = 0x1f80;                                                 // MXCSR
    sp = &slot[-10];
  }
  static void swap(Context& from, Context& to) { lockstep_emu_switch_stack(&from.sp, to.sp); }
};
#else
struct Context {
  ucontext_t uc;
  bool init = false;
  void prepare(char* base, size_t size) {
    if (!init) getcontext(&uc), init = true;
    uc.uc_stack.ss_sp = base;
    uc.uc_stack.ss_size = size;
    uc.uc_link = nullptr;
    makecontext(&uc, fiber_main, 0);
  }
  static void swap(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
};
#endif

struct Fiber {
  Context ctx;
  char* stack = nullptr;  // kGuard + kStack bytes, the guard page first
  State state = State::Ready;
  uint3 idx{};
#ifdef EMU_ASAN
  void* fake_stack = nullptr;
#endif
#ifdef EMU_TSAN
  void* tsan = nullptr;
#endif
};

// One per worker thread: the fibers of the block it is running.
struct Executor {
  std::vector<Fiber> fibers;
  Context main;
  size_t current = 0;
  void (*run)(void*) = nullptr;
  void* args = nullptr;
  std::string error;  // set by a fiber whose body threw
#ifdef EMU_ASAN
  void* main_fake = nullptr;
  const void* main_bottom = nullptr;
  size_t main_size = 0;
#endif
#ifdef EMU_TSAN
  void* main_tsan = nullptr;
#endif

  void ensure(size_t n) {
    while (fibers.size() < n) {
      Fiber& f = fibers.emplace_back();
      void* mem =
          mmap(nullptr, kGuard + kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (mem == MAP_FAILED) {
        std::perror("cuda_emu: mmap of a fiber stack");
        std::abort();
      }
      mprotect(mem, kGuard, PROT_NONE);
      f.stack = static_cast<char*>(mem);
#ifdef EMU_TSAN
      f.tsan = __tsan_create_fiber(0);
#endif
    }
  }
};

thread_local Executor* tl_exec = nullptr;

// Switches from fiber `f` back to the scheduler; returns when the scheduler resumes it.
void to_scheduler(Executor& ex, Fiber& f) {
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(f.state == State::Done ? nullptr : &f.fake_stack, ex.main_bottom, ex.main_size);
#endif
#ifdef EMU_TSAN
  __tsan_switch_to_fiber(ex.main_tsan, 0);
#endif
  Context::swap(f.ctx, ex.main);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, nullptr, nullptr);
#endif
}

void fiber_main() {
  Executor& ex = *tl_exec;
  Fiber& f = ex.fibers[ex.current];
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &ex.main_bottom, &ex.main_size);
#endif
  try {
    ex.run(ex.args);
  } catch (const std::exception& e) {
    ex.error = e.what();
  } catch (...) {
    ex.error = "an exception";
  }
  f.state = State::Done;
  to_scheduler(ex, f);  // never resumed
}

void resume(Executor& ex, size_t i) {
  Fiber& f = ex.fibers[i];
  ex.current = i;
  threadIdx = f.idx;
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(&ex.main_fake, f.stack + kGuard, kStack);
#endif
#ifdef EMU_TSAN
  ex.main_tsan = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(f.tsan, 0);
#endif
  Context::swap(ex.main, f.ctx);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(ex.main_fake, nullptr, nullptr);
#endif
}

// Runs one block; returns "" or what went wrong.
std::string run_block(Executor& ex, const dim3& block) {
  const size_t n = size_t{block.x} * block.y * block.z;
  ex.ensure(n);
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = ex.fibers[i];
    f.idx = uint3{static_cast<unsigned>(i % block.x), static_cast<unsigned>(i / block.x % block.y),
                  static_cast<unsigned>(i / (size_t{block.x} * block.y))};
    f.state = State::Ready;
    f.ctx.prepare(f.stack + kGuard, kStack);
  }
  for (;;) {
    size_t done = 0, waiting = 0;
    for (size_t i = 0; i < n; ++i) {
      if (ex.fibers[i].state == State::Done) {
        ++done;
        continue;
      }
      ex.fibers[i].state = State::Ready;
      resume(ex, i);
      if (!ex.error.empty()) return "a GPU thread threw " + ex.error;
      ex.fibers[i].state == State::Done ? ++done : ++waiting;
    }
    if (waiting == 0) return {};
    if (done > 0)
      return "divergent __syncthreads: " + std::to_string(waiting) + " of " + std::to_string(n) +
             " threads of a block wait at a barrier that " + std::to_string(done) + " never reach";
  }
}

}  // namespace

void syncthreads() {
  Executor* ex = tl_exec;
  if (!ex || !ex->run) {
    std::fprintf(stderr, "cuda_emu: __syncthreads() called outside a kernel\n");
    std::abort();
  }
  Fiber& f = ex->fibers[ex->current];
  f.state = State::AtBarrier;
  to_scheduler(*ex, f);
}

void launch(const char* name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, void (*run)(void*),
            void* args, void (*destroy)(void*), const void* const* pointers, size_t n_pointers) {
  // Owned by the queued work from here on, so that it is freed even when the work is dropped (after a
  // device fault) rather than run.
  std::shared_ptr<void> owned(args, destroy);
  auto refuse = [&](cudaError_t err, const std::string& why) { fail(err, std::string("launch of ") + name + ": " + why); };
  if (sticky_error() != cudaSuccess) return;
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535 || shared_bytes > 48 * 1024)
    return refuse(cudaErrorInvalidConfiguration, "grid (" + std::to_string(grid.x) + ", " + std::to_string(grid.y) +
                                                     ", " + std::to_string(grid.z) + "), block (" +
                                                     std::to_string(block.x) + ", " + std::to_string(block.y) + ", " +
                                                     std::to_string(block.z) + ")");
  CUstream_st* s = resolve(stream);
  if (!s) return refuse(cudaErrorInvalidResourceHandle, "not a live stream");
  const int device = stream_device(s);
  if (device != current_device())
    return refuse(cudaErrorInvalidResourceHandle, "the stream belongs to device " + std::to_string(device) +
                                                      ", the current device is " + std::to_string(current_device()));
  // A pointer argument must be null, memory of this device (a cudaMalloc allocation, or one past its end)
  // or pinned host memory. Anything else (pageable host memory, freed memory, another device's memory) is
  // an illegal address on a GPU: a device fault here too, naming the argument.
  for (size_t i = 0; i < n_pointers; ++i) {
    const void* p = pointers[i];
    if (!p || device_of(p, 0) == device || is_pinned(p, 0)) continue;
    const int other = device_of(p, 0);
    device_fault(cudaErrorIllegalAddress,
                 std::string(name) + ": pointer argument " + std::to_string(i) + " is " +
                     (other >= 0 ? "memory of device " + std::to_string(other) : std::string("not device memory")) +
                     ", the kernel runs on device " + std::to_string(device));
    return;
  }
  std::string kernel = name;
  enqueue(s, [kernel, grid, block, run, owned] {
    if (!tl_exec) tl_exec = new Executor;  // one per worker thread, kept for its life
    Executor& ex = *tl_exec;
    ex.run = run, ex.args = owned.get(), ex.error.clear();
    gridDim = grid, blockDim = block;
    std::string err;
    for (unsigned z = 0; z < grid.z && err.empty(); ++z)
      for (unsigned y = 0; y < grid.y && err.empty(); ++y)
        for (unsigned x = 0; x < grid.x && err.empty(); ++x) {
          blockIdx = uint3{x, y, z};
          err = run_block(ex, block);
        }
    ex.run = nullptr;
    if (!err.empty()) device_fault(cudaErrorLaunchFailure, kernel + ": " + err);
  });
}

}  // namespace lockstep_emu
