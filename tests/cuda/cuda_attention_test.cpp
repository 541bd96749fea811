// Fused attention's CUDA kernels (tensor/cuda/attention.cu) against the CPU's (tensor/cpu/attention.cpp):
// values and the gradients of q, k and v, float32 and float64 (and bfloat16, float16 against the CPU in float32),
// with a causal mask over a GPT's strided views,
// bool and additive masks, GQA, L != S and dropout (both devices draw the same Philox mask).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/api.h"
#include "tests/cuda/cuda_test_util.h"

using namespace lockstep;
namespace F = nn::functional;

namespace {

struct Run {
  Tensor out, dq, dk, dv;
};

// out and the gradients of sum(out * g) on `device`, the operands copied there from the CPU ones.
template <typename Sdpa>
Run run(const Sdpa& sdpa, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, Device device) {
  Tensor a = q.to(device).detach(), b = k.to(device).detach(), c = v.to(device).detach();
  for (Tensor* t : {&a, &b, &c}) t->set_requires_grad(true);
  Tensor out = sdpa(a, b, c);
  sum(out * g.to(device)).backward();
  return {out.detach().cpu(), a.grad().cpu(), b.grad().cpu(), c.grad().cpu()};
}

void check_close(const Run& got, const Run& want, double tol, const char* what) {
  const char* names[] = {"out", "grad q", "grad k", "grad v"};
  const Tensor* g[] = {&got.out, &got.dq, &got.dk, &got.dv};
  const Tensor* w[] = {&want.out, &want.dq, &want.dk, &want.dv};
  for (int i = 0; i < 4; ++i) {
    REQUIRE(g[i]->shape() == w[i]->shape());
    const double diff = (*g[i] - *w[i]).abs().max().item<double>();
    CHECK_MESSAGE(diff <= tol, what, ", ", names[i], ": largest difference ", diff);
  }
}

}  // namespace

TEST_CASE("fused attention on the GPU equals the CPU's: causal over strided views, masks, GQA, L != S, dropout") {
  REQUIRE_DEVICE();
  const Device gpu = Device::cuda(0);
  manual_seed(0);
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const double tol = dtype == kFloat32 ? 2e-5 : 1e-12;
    {  // a GPT's q, k, v: views into one projection, causal
      const int64_t B = 2, H = 2, T = 70, D = 16;
      Tensor qkv = randn({B, T, 3 * H * D}, dtype);
      auto views = [&](const Tensor& x) {
        std::vector<Tensor> s = x.split(H * D, 2);
        for (Tensor& t : s) t = t.view({B, T, H, D}).transpose(1, 2);
        return s;
      };
      auto causal = [&](const Tensor& q, const Tensor& k, const Tensor& v) {
        return F::scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
      };
      const Tensor g = randn({B, H, T, D}, dtype);
      // Views on each device: the kernels read the strides.
      auto on = [&](Device d) {
        Tensor x = qkv.to(d).detach();
        x.set_requires_grad(true);
        std::vector<Tensor> s = views(x);
        Tensor out = causal(s[0], s[1], s[2]);
        sum(out * g.to(d)).backward();
        return std::pair<Tensor, Tensor>{out.detach().cpu(), x.grad().cpu()};
      };
      auto [out_cpu, grad_cpu] = on(Device::cpu());
      auto [out_gpu, grad_gpu] = on(gpu);
      CHECK((out_gpu - out_cpu).abs().max().item<double>() <= tol);
      CHECK((grad_gpu - grad_cpu).abs().max().item<double>() <= tol);
    }
    const int64_t B = 2, Hq = 4, Hkv = 2, L = 67, S = 45, E = 8, Ev = 12;
    Tensor q = randn({B, Hq, L, E}, dtype), k = randn({B, Hkv, S, E}, dtype), v = randn({B, Hkv, S, Ev}, dtype);
    const Tensor g = randn({B, Hq, L, Ev}, dtype);
    const Tensor bool_mask = rand({L, S}) > 0.3, add_mask = randn({B, 1, L, S}, dtype);
    for (const Tensor& mask : {bool_mask, add_mask}) {
      auto sdpa = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
        return F::scaled_dot_product_attention(a, b, c, mask.to(a.device()), 0.0, false, 0.4, true);
      };
      check_close(run(sdpa, q, k, v, g, gpu), run(sdpa, q, k, v, g, Device::cpu()), tol,
                  mask.dtype() == kBool ? "bool mask, GQA" : "additive mask, GQA");
    }
    auto dropout = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
      return F::scaled_dot_product_attention(a, b, c, Tensor(), 0.25, true, std::nullopt, true);
    };
    manual_seed(7);
    const Run on_gpu = run(dropout, q, k, v, g, gpu);
    manual_seed(7);
    const Run on_cpu = run(dropout, q, k, v, g, Device::cpu());
    check_close(on_gpu, on_cpu, tol, "dropout, causal, GQA");
  }
}

TEST_CASE("fused attention on the GPU in bfloat16 and float16 equals the CPU's float32 on the same values") {
  REQUIRE_DEVICE();
  const Device gpu = Device::cuda(0);
  manual_seed(1);
  const int64_t B = 2, Hq = 4, Hkv = 2, L = 67, S = 45, E = 8, Ev = 12;
  for (Dtype dtype : {kBFloat16, kFloat16}) {
    // The GPU computes in float32 and rounds each result once: a step of the 16-bit type, relative to the
    // largest magnitude (a gradient element is a sum of larger terms).
    const double tol = dtype == kBFloat16 ? 1.2e-2 : 2e-3;
    const Tensor q = randn({B, Hq, L, E}).to(dtype), k = randn({B, Hkv, S, E}).to(dtype),
                 v = randn({B, Hkv, S, Ev}).to(dtype), g = randn({B, Hq, L, Ev}).to(dtype);
    const Tensor add_mask = randn({B, 1, L, S}).to(dtype), bool_mask = rand({L, S}) > 0.3;
    struct Case {
      const char* name;
      Tensor mask;
      double dropout_p;
      bool causal;
    };
    for (const Case& c : {Case{"additive mask, GQA", add_mask, 0.0, false}, Case{"bool mask, GQA", bool_mask, 0.0, false},
                          Case{"dropout, causal, GQA", Tensor(), 0.25, true}}) {
      INFO(c.name, " ", dtype_name(dtype));
      auto sdpa = [&](const Tensor& a, const Tensor& b, const Tensor& d) {
        const Tensor m = !c.mask.defined() ? c.mask : c.mask.dtype() == kBool ? c.mask.to(a.device())
                                                                              : c.mask.to(a.device()).to(a.dtype());
        return F::scaled_dot_product_attention(a, b, d, m, c.dropout_p, c.causal, 0.4, true);
      };
      manual_seed(7);
      const Run half = run(sdpa, q, k, v, g, gpu);
      manual_seed(7);
      const Run ref = run(sdpa, q.to(kFloat32), k.to(kFloat32), v.to(kFloat32), g.to(kFloat32), Device::cpu());
      const Tensor* got[] = {&half.out, &half.dq, &half.dk, &half.dv};
      const Tensor* want[] = {&ref.out, &ref.dq, &ref.dk, &ref.dv};
      for (int i = 0; i < 4; ++i) {
        CHECK(got[i]->dtype() == dtype);
        const double scale = std::max(1.0, want[i]->abs().max().item<double>());
        const double diff = (got[i]->to(kFloat32) - *want[i]).abs().max().item<double>();
        CHECK_MESSAGE(diff <= tol * scale, "result ", i, ": largest difference ", diff, " of max ", scale);
      }
    }
  }
}
