// AdamW's step on the CPU for a ~1M-parameter model (an MLP's weights: 1024x512, 512, 512x1024,
// 1024): the fused kernel (Backend::adam_step, what optim::AdamW runs) against the same update composed
// from lockstep::internal ops, one op per line of PyTorch's _single_tensor_adam; and the fused step on
// bfloat16 parameters and state (float32 math, each element rounded once). With `gpt`, the parameters
// are the GPT example's 6 layers x 384 wide (10.7M: per layer qkv, projection and MLP weights and
// biases and two LayerNorms, plus a 256 x 384 position table). Prints "BENCH <name> <value> <unit>"
// lines; bench/torch_adam.py [gpt] prints PyTorch's. With `optims`: the step of Adagrad, RMSprop,
// NAdam, Adamax and RAdam (default options) on the GPT's 10.7M parameters, which `torch_adam.py optims`
// times in PyTorch (single-tensor, foreach and, where PyTorch has one, fused).
//   tools/bazel run //bench:adam_bench [-- gpt | optims]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/adamax.h"
#include "optim/nadam.h"
#include "optim/radam.h"
#include "optim/rmsprop.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

using namespace lockstep;

namespace {

// One AdamW step of one parameter from internal ops (no amsgrad).
void composed_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, double step, const optim::AdamOptions& o) {
  using namespace internal;
  const double b1 = o.betas()[0], b2 = o.betas()[1];
  mul_(p, 1 - o.lr() * o.weight_decay());                    // param.mul_(1 - lr * wd)
  add_(m, sub(g, m), 1 - b1);                            // exp_avg.lerp_(grad, 1 - beta1)
  mul_(v, b2);                                           // exp_avg_sq.mul_(beta2)
  add_(v, mul(g, g), 1 - b2);                            //   .addcmul_(grad, grad, 1 - beta2)
  const double step_size = o.lr() / (1 - std::pow(b1, step));
  const double bc2_sqrt = std::sqrt(1 - std::pow(b2, step));
  Tensor denom = add(mul(sqrt(v), 1 / bc2_sqrt), o.eps());  // exp_avg_sq.sqrt() / bc2_sqrt + eps
  add_(p, div(m, denom), -step_size);                    // param.addcdiv_(exp_avg, denom, -step_size)
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<Shape> gpt_shapes() {
  const int64_t d = 384;
  std::vector<Shape> s = {{256, d}};
  for (int layer = 0; layer < 6; ++layer)
    for (Shape t : std::vector<Shape>{{d}, {d}, {3 * d, d}, {3 * d}, {d, d}, {d}, {d}, {d}, {4 * d, d}, {4 * d},
                                      {d, 4 * d}, {d}})
      s.push_back(t);
  return s;
}

// ms per step of optimizer O (default options) over `steps` steps after one warm-up step.
template <typename O>
double ms_per_step(const std::vector<Tensor>& params, int steps) {
  O opt(params);
  opt.step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) opt.step();
  return seconds(t0) / steps * 1e3;
}

int optimizer_steps() {
  std::vector<Tensor> params;
  for (const auto& s : gpt_shapes()) params.push_back(randn(s).set_requires_grad()), params.back().set_grad(randn(s));
  const int steps = 20;
  std::printf("BENCH adagrad_step %.3f ms\n", ms_per_step<optim::Adagrad>(params, steps));
  std::printf("BENCH rmsprop_step %.3f ms\n", ms_per_step<optim::RMSprop>(params, steps));
  std::printf("BENCH nadam_step %.3f ms\n", ms_per_step<optim::NAdam>(params, steps));
  std::printf("BENCH adamax_step %.3f ms\n", ms_per_step<optim::Adamax>(params, steps));
  std::printf("BENCH radam_step %.3f ms\n", ms_per_step<optim::RAdam>(params, steps));
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "optims") == 0) return optimizer_steps();
  const bool gpt = argc > 1 && std::strcmp(argv[1], "gpt") == 0;
  const std::vector<Shape> shapes = gpt ? gpt_shapes() : std::vector<Shape>{{1024, 512}, {512}, {512, 1024}, {1024}};
  std::vector<Tensor> params, grads;
  int64_t n = 0;
  for (const auto& s : shapes) {
    params.push_back(randn(s).set_requires_grad());
    grads.push_back(randn(s));
    n += params.back().numel();
  }
  const optim::AdamOptions o = optim::AdamWOptions(1e-3).weight_decay(0.1);
  const int steps = gpt ? 20 : 200;

  // Fused: optim::AdamW itself.
  optim::AdamW adamw(params, o);
  for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(grads[i]);
  adamw.step();  // warm-up: allocates the state
  auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) adamw.step();
  const double fused = seconds(t0) / steps;

  // Composed from internal ops.
  std::vector<Tensor> m, v;
  for (auto& p : params) m.push_back(zeros_like(p)), v.push_back(zeros_like(p));
  auto run = [&](double step) {
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor p = params[i];
      composed_step(p, grads[i], m[i], v[i], step, o);
    }
  };
  run(1);
  t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) run(s + 2);
  const double composed = seconds(t0) / steps;

  // Fused on bfloat16 parameters, gradients and state.
  std::vector<Tensor> params16;
  for (size_t i = 0; i < params.size(); ++i) {
    params16.push_back(internal::to_dtype(params[i].detach(), kBFloat16).set_requires_grad());
    params16.back().set_grad(internal::to_dtype(grads[i], kBFloat16));
  }
  optim::AdamW adamw16(params16, o);
  adamw16.step();
  t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) adamw16.step();
  const double fused16 = seconds(t0) / steps;

  std::printf("BENCH adamw_params %lld count\n", static_cast<long long>(n));
  std::printf("BENCH adamw_step_fused_bf16 %.3f ms\n", fused16 * 1e3);
  std::printf("BENCH adamw_step_fused %.3f ms\n", fused * 1e3);
  std::printf("BENCH adamw_step_composed %.3f ms\n", composed * 1e3);
  std::printf("BENCH adamw_fused_speedup %.2f x\n", composed / fused);
  return 0;
}
