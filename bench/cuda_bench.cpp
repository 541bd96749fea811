// cuda_bench: throughput of the CUDA backend's main kernels on cuda:0. Prints one line per measurement,
//   BENCH <name> <value> <unit>
// which tools/gpu/gpu_check.sh gathers into its table. Without a device it prints "SKIPPED: ..." and exits 0.
// tools/gpu/torch_cuda_bench.py prints the same names for torch.matmul, raw cuBLAS and SDPA.
//   cuda_bench [--bf16-only] [--gemm-n 4096] [--tokens 8192] [--seq 1024 4096]
// --bf16-only and small sizes run the bfloat16 rows alone, e.g. on the CUDA emulator.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "nn/functional.h"
#include "tensor/api.h"
#include "tensor/cuda/cuda.h"

using namespace lockstep;

namespace {

const Device kGpu = Device::cuda(0);

// Seconds per call of `fn`: two warm-up calls, then repeats until 0.3 s have passed (at least 3).
double seconds_per_call(const std::function<void()>& fn) {
  fn();
  fn();
  cuda::synchronize();
  using Clock = std::chrono::steady_clock;
  int calls = 0;
  auto start = Clock::now();
  double elapsed = 0;
  do {
    fn();
    ++calls;
    if (calls % 4 == 0 || calls < 4) {
      cuda::synchronize();
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    }
  } while (calls < 3 || elapsed < 0.3);
  cuda::synchronize();
  return std::chrono::duration<double>(Clock::now() - start).count() / calls;
}

void report(const std::string& name, double value, const char* unit) {
  std::printf("BENCH %-28s %10.2f %s\n", name.c_str(), value, unit);
  std::fflush(stdout);
}

void bench_gemm(int64_t n, Dtype dt, bool tf32) {
  // Drawn in float32 and rounded: the 16-bit types take the same values as the float32 row.
  Tensor a = internal::to_dtype(randn({n, n}, {kFloat32, kGpu}), dt);
  Tensor b = internal::to_dtype(randn({n, n}, {kFloat32, kGpu}), dt), c = empty({n, n}, {dt, kGpu});
  cuda::set_allow_tf32(tf32);
  double s = seconds_per_call([&] { internal::gemm_(c, a, false, b, false, 1.0, 0.0); });
  cuda::set_allow_tf32(false);
  std::string name = "gemm_" + std::to_string(n) + "_" + dtype_name(dt) + (tf32 ? "_tf32" : "");
  report(name, 2.0 * n * n * n / s / 1e12, "TFLOP/s");
}

// Fused causal attention forward + backward in bfloat16 on GPT-2 small's heads (12 x 64), B x T fixed at
// `tokens` (8192): q, k, v [B, 12, T, 64], the output's gradient given (no sum kernel timed). FLOPs as
// FlashAttention counts them for a causal mask: 2 products forward, 5 backward, each 2 B H T^2 D / 2.
void bench_attention(int64_t T, int64_t tokens) {
  const int64_t B = std::max<int64_t>(1, tokens / T), H = 12, D = 64;
  auto input = [&] { return internal::to_dtype(randn({B, H, T, D}, {kFloat32, kGpu}), kBFloat16).set_requires_grad(); };
  Tensor q = input(), k = input(), v = input();
  Tensor gy = internal::to_dtype(randn({B, H, T, D}, {kFloat32, kGpu}), kBFloat16);
  double s = seconds_per_call([&] {
    for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
    nn::functional::scaled_dot_product_attention(q, k, v, Tensor(), 0.0, /*is_causal=*/true).backward(gy);
  });
  const std::string name = "sdpa_causal_fwd_bwd_T" + std::to_string(T) + "_bf16";
  report(name, s * 1e3, "ms");
  report(name + "_tflops", 7.0 * B * H * T * T * D / s / 1e12, "TFLOP/s");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"throughput of the CUDA backend's main kernels on cuda:0"};
  bool bf16_only = false;
  int64_t gemm_n = 4096, tokens = 8192;
  std::vector<int64_t> seqs = {1024, 4096};
  app.add_flag("--bf16-only", bf16_only, "only the bfloat16 GEMM and attention rows");
  app.add_option("--gemm-n", gemm_n, "size of the bfloat16 GEMM")->capture_default_str();
  app.add_option("--tokens", tokens, "B * T of the attention rows")->capture_default_str();
  app.add_option("--seq", seqs, "attention sequence lengths")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (cuda::device_count() == 0) {
    std::printf("SKIPPED: no CUDA device (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  manual_seed(0);
  bench_gemm(gemm_n, kBFloat16, false);  // tensor cores, float32 accumulation (cublasGemmEx)
  for (int64_t T : seqs) bench_attention(T, tokens);
  if (bf16_only) return 0;
  bench_gemm(4096, kFloat32, false);
  bench_gemm(4096, kFloat32, true);
  bench_gemm(4096, kFloat64, false);
  bench_gemm(1024, kFloat32, false);

  const int64_t n = int64_t{1} << 26;  // 64 Mi floats, 256 MiB
  const double bytes = 4.0 * n;
  Tensor x = randn({n}, {kFloat32, kGpu}), y = randn({n}, {kFloat32, kGpu});
  report("add_64M_f32", 3 * bytes / seconds_per_call([&] { internal::add(x, y); }) / 1e9, "GB/s");
  Tensor row = randn({8192}, {kFloat32, kGpu});
  Tensor xm = internal::reshape(x, {n / 8192, 8192});
  report("add_broadcast_row_f32", 2 * bytes / seconds_per_call([&] { internal::add(xm, row); }) / 1e9, "GB/s");
  report("sum_all_64M_f32", bytes / seconds_per_call([&] { internal::sum(x); }) / 1e9, "GB/s");
  report("sum_dim0_8192x8192_f32", bytes / seconds_per_call([&] { internal::sum(xm, 0); }) / 1e9, "GB/s");
  report("sum_dim1_8192x8192_f32", bytes / seconds_per_call([&] { internal::sum(xm, 1); }) / 1e9, "GB/s");
  Tensor logits = internal::reshape(x, {n / 1024, 1024});
  report("log_softmax_65536x1024_f32", 2 * bytes / seconds_per_call([&] { internal::log_softmax(logits, 1); }) / 1e9,
         "GB/s");
  report("transpose_8192x8192_f32", 2 * bytes / seconds_per_call([&] { internal::contiguous(internal::transpose(xm)); }) / 1e9, "GB/s");

  // The same reductions and rows at bfloat16: read at 16 bits, computed in float32 (no float32 copy), so
  // GB/s counts 2 bytes an element and should approach the float32 rows' figures.
  const double bytes16 = 2.0 * n;
  Tensor x16 = internal::to_dtype(x, kBFloat16), xm16 = internal::reshape(x16, {n / 8192, 8192});
  report("sum_all_64M_bf16", bytes16 / seconds_per_call([&] { internal::sum(x16); }) / 1e9, "GB/s");
  report("sum_dim0_8192x8192_bf16", bytes16 / seconds_per_call([&] { internal::sum(xm16, 0); }) / 1e9, "GB/s");
  report("sum_dim1_8192x8192_bf16", bytes16 / seconds_per_call([&] { internal::sum(xm16, 1); }) / 1e9, "GB/s");
  report("max_dim1_8192x8192_bf16", bytes16 / seconds_per_call([&] { internal::max(xm16, 1); }) / 1e9, "GB/s");
  Tensor logits16 = internal::reshape(x16, {n / 1024, 1024});
  report("log_softmax_65536x1024_bf16",
         2 * bytes16 / seconds_per_call([&] { internal::log_softmax(logits16, 1); }) / 1e9, "GB/s");
  report("layer_norm_65536x1024_bf16",
         2 * bytes16 / seconds_per_call([&] { internal::layer_norm(logits16, 1024, Tensor(), Tensor(), 1e-5); }) / 1e9,
         "GB/s");
  {
    Tensor p = internal::clone(x16), g = internal::to_dtype(y, kBFloat16), m = zeros({n}, {kBFloat16, kGpu}),
           v = zeros({n}, {kBFloat16, kGpu}), none;
    AdamStepArgs a;
    a.lr = 1e-3, a.beta1 = 0.9, a.beta2 = 0.999, a.eps = 1e-8, a.step_size = 1e-2, a.bias_correction2_sqrt = 0.1;
    // Reads p, g, m, v and writes p, m, v.
    report("adam_step_64M_bf16", 7 * bytes16 / seconds_per_call([&] { internal::adam_step_(p, g, m, v, none, a); }) / 1e9,
           "GB/s");
  }

  Tensor host = randn({n});
  report("copy_h2d_256MiB", bytes / seconds_per_call([&] { internal::to_device(host, kGpu); }) / 1e9, "GB/s");
  report("copy_d2h_256MiB", bytes / seconds_per_call([&] { internal::to_device(x, Device::cpu()); }) / 1e9, "GB/s");

  // The caching allocator's steady state: allocate and free a 1 MiB tensor.
  double s = seconds_per_call([&] {
    for (int i = 0; i < 1000; ++i) empty({1 << 18}, {kFloat32, kGpu});
  });
  report("alloc_free_1MiB", s / 1000 * 1e6, "us");
  report("memory_reserved", cuda::memory_reserved(0) / double(1 << 20), "MiB");
  return 0;
}
