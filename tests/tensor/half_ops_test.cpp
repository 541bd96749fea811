// bfloat16 and float16 in the CPU kernels that once took float32 copies (index_add_, scatter_add_,
// batch_norm, nll_loss / cross_entropy, avg_pool2d) and in the optimizer steps: each against float64
// on the same 16-bit values, within a few units of the 16-bit format, through autograd where the op has
// a backward, with non-contiguous operands; and the adds' rounding rule worked out by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/api.h"
#include "nn/functional.h"
#include "tensor/api.h"
#include "tensor/optim_step.h"
#include "tests/util/half_match.h"
#include "tests/util/test_util.h"

using namespace lockstep;
namespace F = lockstep::nn::functional;

namespace {

using lockstep::testing::expect_error;
using lockstep::testing::kHalves;
using lockstep::testing::ulp;

// Normal values scaled by `scale`, shifted by `shift`, rounded to dt (so float64 copies hold them exactly).
Tensor draw(const Shape& shape, Dtype dt, double scale = 1.0, double shift = 0.0, uint64_t seed = 3) {
  manual_seed(seed);
  return (randn(shape) * scale + shift).to(dt);
}

// a (16-bit) within ulps units of dt of the float64 reference b, at the larger of |b| and `floor`.
void check_near(const Tensor& a, const Tensor& b, double ulps, const std::string& what, double floor = 1.0) {
  INFO(what);
  REQUIRE(a.shape() == b.shape());
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  const double u = ulp(a.dtype());
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double err = std::abs(x[i] - y[i]) / (u * std::max(std::abs(y[i]), floor));
    if (!(err <= ulps)) {
      if (bad < 5) MESSAGE("element ", i, ": ", x[i], " vs ", y[i]);
      ++bad;
    }
  }
  CHECK(bad == 0);
}

// float(a) + float(b) rounded to T: the adds' rule, element by element.
template <typename T>
double add_rounded(double a, double b) {
  return static_cast<float>(T(static_cast<float>(a) + static_cast<float>(b)));
}
double add_rounded(Dtype dt, double a, double b) {
  return dt == kBFloat16 ? add_rounded<BFloat16>(a, b) : add_rounded<Float16>(a, b);
}

}  // namespace

TEST_CASE("index_add_ and scatter_add_ into 16-bit tensors round each add, as PyTorch") {
  // By hand: bfloat16 has 8 significant bits, so next to 256 the spacing is 2, and 256 + 1 is a tie that
  // rounds to the even 256. Two adds of 1 at one index leave 256 (a float32 copy would give 258).
  Tensor d = full({2}, 256.0, {kBFloat16});
  internal::index_add_(d, 0, tensor(std::vector<int64_t>{0, 0, 1}), tensor(std::vector<float>{1, 1, 3}).to(kBFloat16));
  CHECK(d.to_vector<double>() == std::vector<double>{256, 260});  // 256 + 3 = 259 rounds to 260
  Tensor s = full({2}, 256.0, {kBFloat16});
  internal::scatter_add_(s, 0, tensor(std::vector<int64_t>{1, 1}), tensor(std::vector<float>{1, 1}).to(kBFloat16));
  CHECK(s.to_vector<double>() == std::vector<double>{256, 256});

  for (Dtype dt : kHalves) {
    INFO(dtype_name(dt));
    // index_add_ along dim 1 of [4, 6, 5] with repeated indices, into a transposed (non-contiguous)
    // destination, from a non-contiguous source: the result is the rule applied in index order.
    Tensor base = draw({4, 5, 6}, dt, 4.0, 0.0, 1);
    Tensor out = transpose(base.clone(), 1, 2);  // [4, 6, 5], strided
    REQUIRE(!out.is_contiguous());
    const std::vector<int64_t> idx = {2, 0, 2, 5, 2, 1, 0};
    Tensor src = transpose(draw({4, 5, 7}, dt, 3.0, 0.0, 2), 1, 2);  // [4, 7, 5], strided
    std::vector<double> want = contiguous(out).to_vector<double>();
    const std::vector<double> sv = contiguous(src).to_vector<double>();
    for (int64_t o = 0; o < 4; ++o)
      for (size_t j = 0; j < idx.size(); ++j)
        for (int64_t i = 0; i < 5; ++i) {
          double& w = want[(o * 6 + idx[j]) * 5 + i];
          w = add_rounded(dt, w, sv[(o * 7 + j) * 5 + i]);
        }
    internal::index_add_(out, 1, tensor(idx), src);
    CHECK(out.dtype() == dt);
    CHECK(contiguous(out).to_vector<double>() == want);
    // Against float64: each element is within one unit per add of the exact sum.
    Tensor exact = transpose(base.to(kFloat64), 1, 2).clone();
    internal::index_add_(exact, 1, tensor(idx), src.to(kFloat64));
    check_near(out, exact, 4, "index_add_ against float64", 4.0);

    // scatter_add_ along dim 0 of [3, 8] from a [5, 8] index (every row hit more than once).
    Tensor t = draw({3, 8}, dt, 2.0, 0.0, 4);
    Tensor sidx = tensor(std::vector<int64_t>(40, 0), {5, 8});
    std::vector<int64_t> iv(40);
    for (int64_t k = 0; k < 40; ++k) iv[k] = (k * 7 + k / 8) % 3;
    sidx = tensor(iv, {5, 8});
    Tensor ssrc = draw({5, 8}, dt, 1.0, 0.0, 5);
    std::vector<double> swant = t.to_vector<double>();
    const std::vector<double> ssv = ssrc.to_vector<double>();
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c = 0; c < 8; ++c) {
        double& w = swant[iv[r * 8 + c] * 8 + c];
        w = add_rounded(dt, w, ssv[r * 8 + c]);
      }
    Tensor st = t.clone();
    internal::scatter_add_(st, 0, sidx, ssrc);
    CHECK(st.to_vector<double>() == swant);
    // Through autograd: scatter_add's gradient for src is a gather of the upstream gradient, exactly.
    Tensor srcg = ssrc.detach().requires_grad_();
    Tensor y = scatter_add(t, 0, sidx, srcg);
    Tensor g = draw({3, 8}, dt, 1.0, 0.0, 6);
    y.backward(g);
    CHECK(srcg.grad().dtype() == dt);
    CHECK(srcg.grad().to_vector<double>() == gather(g.to(kFloat64), 0, sidx).to_vector<double>());
  }
}

TEST_CASE("batch_norm on 16-bit input: float32 math, forward and backward against float64") {
  for (Dtype dt : kHalves) {
    INFO(dtype_name(dt));
    // [N, C, H, W] = [3, 4, 5, 6] made from a channels-last tensor: non-contiguous; mean far from 0.
    Tensor x = permute(draw({3, 5, 6, 4}, dt, 2.0, 3.0, 7), {0, 3, 1, 2}).detach().requires_grad_();
    REQUIRE(!x.is_contiguous());
    Tensor w = draw({4}, kFloat32, 0.5, 1.0, 8).to(dt).requires_grad_();
    Tensor b = draw({4}, kFloat32, 0.5, 0.0, 9).to(dt).requires_grad_();
    Tensor xd = x.detach().to(kFloat64).requires_grad_();
    Tensor wd = w.detach().to(kFloat64).requires_grad_(), bd = b.detach().to(kFloat64).requires_grad_();
    Tensor rm = zeros({4}), rv = ones({4}), rmd = zeros({4}, {kFloat64}), rvd = ones({4}, {kFloat64});
    Tensor y = F::batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5);
    Tensor yd = F::batch_norm(xd, rmd, rvd, wd, bd, true, 0.1, 1e-5);
    CHECK(y.dtype() == dt);
    check_near(y, yd, 1.5, "batch_norm forward");  // float32 math, one rounding
    check_near(rm.to(dt), rmd, 1, "running mean");
    check_near(rv.to(dt), rvd, 1, "running var");
    Tensor g = draw({3, 4, 5, 6}, dt, 1.0, 0.0, 10);
    y.backward(g);
    yd.backward(g.to(kFloat64));
    CHECK(x.grad().dtype() == dt);
    check_near(x.grad(), xd.grad(), 3, "batch_norm grad input");
    check_near(w.grad(), wd.grad(), 2, "batch_norm grad weight");
    check_near(b.grad(), bd.grad(), 1, "batch_norm grad bias");
    // Evaluation mode: the running statistics, float32 in the module.
    Tensor e = F::batch_norm(x.detach(), rm, rv, w.detach(), b.detach(), false);
    Tensor ed = F::batch_norm(xd.detach(), rmd, rvd, wd.detach(), bd.detach(), false);
    check_near(e, ed, 1.5, "batch_norm eval");
  }
}

TEST_CASE("nll_loss and cross_entropy on 16-bit log-probabilities: summed in double, rounded once") {
  for (Dtype dt : kHalves) {
    INFO(dtype_name(dt));
    Tensor logits = draw({37, 11}, dt, 3.0, 0.0, 11);
    std::vector<int64_t> tv(37);
    for (int64_t i = 0; i < 37; ++i) tv[i] = (i * 5) % 11;
    Tensor target = tensor(tv);
    // nll_loss on a non-contiguous [37, 11] (a transposed [11, 37]).
    Tensor lp = transpose(contiguous(transpose(log_softmax(logits, 1), 0, 1)), 0, 1).detach().requires_grad_();
    REQUIRE(!lp.is_contiguous());
    Tensor lpd = lp.detach().to(kFloat64).requires_grad_();
    for (bool mean : {true, false}) {
      Tensor l = internal::nll_loss(lp.detach(), target, mean);
      Tensor ld = internal::nll_loss(lpd.detach(), target, mean);
      CHECK(l.dtype() == dt);
      check_near(l, ld, 0.5, mean ? "nll_loss mean" : "nll_loss sum");  // the double sum rounded once
    }
    Tensor l = F::nll_loss(lp, target);
    Tensor ld = F::nll_loss(lpd, target);
    l.backward();
    ld.backward();
    CHECK(lp.grad().dtype() == dt);
    check_near(lp.grad(), lpd.grad(), 0.5, "nll_loss grad", 1.0 / 37);
    // cross_entropy end to end: log_softmax in 16 bits, then nll_loss.
    Tensor x = logits.detach().requires_grad_(), xd = logits.to(kFloat64).requires_grad_();
    Tensor ce = F::cross_entropy(x, target), ced = F::cross_entropy(xd, target);
    check_near(ce, ced, 2, "cross_entropy");
    ce.backward();
    ced.backward();
    check_near(x.grad(), xd.grad(), 3, "cross_entropy grad", 1.0 / 37);
  }
}

TEST_CASE("avg_pool2d on 16-bit input: each window summed in float32, the average rounded once") {
  for (Dtype dt : kHalves) {
    INFO(dtype_name(dt));
    // [2, 3, 9, 8] from a transposed [2, 3, 8, 9]: non-contiguous; 3x3 windows, stride 2, padding 1.
    Tensor x = transpose(draw({2, 3, 8, 9}, dt, 2.0, 5.0, 12), 2, 3).detach().requires_grad_();
    Tensor xd = x.detach().to(kFloat64).requires_grad_();
    for (bool include_pad : {true, false}) {
      Tensor y = F::avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, true, include_pad);
      Tensor yd = F::avg_pool2d(xd, {3, 3}, {2, 2}, {1, 1}, true, include_pad);
      CHECK(y.dtype() == dt);
      check_near(y, yd, 0.5 + 1e-3, include_pad ? "avg_pool2d forward" : "avg_pool2d forward, pad excluded");
    }
    Tensor y = F::avg_pool2d(x, {3, 3}, {2, 2}, {1, 1});
    Tensor yd = F::avg_pool2d(xd, {3, 3}, {2, 2}, {1, 1});
    Tensor g = draw(y.shape(), dt, 1.0, 0.0, 13);
    y.backward(g);
    yd.backward(g.to(kFloat64));
    CHECK(x.grad().dtype() == dt);
    // Overlapping windows (stride 2, size 3) give a cell up to 4 shares, added in float32 and rounded once.
    check_near(x.grad(), xd.grad(), 0.5 + 1e-3, "avg_pool2d grad", 0.25);
  }
}

TEST_CASE("avg_pool2d's fused CPU kernel (float32, 16-bit): every window geometry, against float64") {
  struct Case {
    const char* what;
    Shape x;
    std::vector<int64_t> k, s, p;
    bool ceil_mode, include_pad;
  };
  // Widths past 16 and 32 run the vector loops and their tails; a 3-D input has no batch dimension.
  const Case cases[] = {
      {"3x3 stride 2 padding 1", {2, 3, 9, 8}, {3, 3}, {2, 2}, {1, 1}, false, true},
      {"3x2 stride 2x1 padding 1, pad excluded", {2, 3, 7, 6}, {3, 2}, {2, 1}, {1, 1}, false, false},
      {"2x2 stride 2 padding 1, ceil_mode", {1, 2, 5, 7}, {2, 2}, {2, 2}, {1, 1}, true, true},
      {"2x2 stride 2 padding 1, ceil_mode, pad excluded", {1, 2, 5, 7}, {2, 2}, {2, 2}, {1, 1}, true, false},
      {"2x2 stride 2, ResNet-ish width", {2, 4, 56, 56}, {2, 2}, {2, 2}, {0, 0}, false, true},
      {"3x3 stride 2 padding 1, odd width", {1, 3, 35, 67}, {3, 3}, {2, 2}, {1, 1}, true, false},
      {"5x3 stride 1 padding 2x1", {1, 2, 11, 40}, {5, 3}, {1, 1}, {2, 1}, false, true},
      {"1x1 stride 3", {1, 2, 10, 10}, {1, 1}, {3, 3}, {0, 0}, true, true},
      {"3-D input", {3, 12, 19}, {3, 3}, {2, 2}, {1, 1}, false, true},
  };
  for (Dtype dt : {kBFloat16, kFloat16, kFloat32})
    for (const Case& c : cases) {
      INFO(dtype_name(dt), " ", c.what);
      // 16 bits: summed in float32, divided and rounded once, so within half a unit (plus float32's part).
      // float32: up to 15 float32 adds and a division, each within half a float32 unit of its result.
      const double ulps = dt == kFloat32 ? 16.0 : 0.5 + 1e-3;
      Tensor x = draw(c.x, dt, 2.0, 1.0, 21).requires_grad_();
      Tensor xd = x.detach().to(kFloat64).requires_grad_();
      Tensor y = F::avg_pool2d(x, {c.k[0], c.k[1]}, {c.s[0], c.s[1]}, {c.p[0], c.p[1]}, c.ceil_mode, c.include_pad);
      Tensor yd = F::avg_pool2d(xd, {c.k[0], c.k[1]}, {c.s[0], c.s[1]}, {c.p[0], c.p[1]}, c.ceil_mode, c.include_pad);
      CHECK(y.dtype() == dt);
      check_near(y, yd, ulps, "forward", 0.25);
      Tensor g = draw(y.shape(), dt, 1.0, 0.0, 22);
      y.backward(g);
      yd.backward(g.to(kFloat64));
      REQUIRE(x.grad().dtype() == dt);
      check_near(x.grad(), xd.grad(), ulps, "backward", 0.25);
    }
  // By hand: [[1, 2, 3], [4, 5, 6]], 2x2 windows, stride 1, padding (0, 1): the four windows cover
  // columns {0}, {0, 1}, {1, 2}, {2} of both rows (with count_include_pad, 4 cells each).
  for (Dtype dt : kHalves) {
    Tensor x = tensor(std::vector<double>{1, 2, 3, 4, 5, 6}, {1, 1, 2, 3}).to(dt).requires_grad_();
    Tensor y = F::avg_pool2d(x, {2, 2}, {1, 1}, {0, 1}, false, false);
    CHECK(y.to(kFloat64).to_vector<double>() == std::vector<double>{2.5, 3, 4, 4.5});
    Tensor y_pad = F::avg_pool2d(x, {2, 2}, {1, 1}, {0, 1}, false, true);  // every window counts 4 cells
    CHECK(y_pad.to(kFloat64).to_vector<double>() == std::vector<double>{1.25, 3, 4, 2.25});
    y.backward(ones_like(y));
    // Cell (r, 0) is in windows 0 and 1 (1/2 + 1/4), (r, 1) in 1 and 2 (1/4 + 1/4), (r, 2) in 2 and 3.
    CHECK(x.grad().to(kFloat64).to_vector<double>() == std::vector<double>{0.75, 0.5, 0.75, 0.75, 0.5, 0.75});
  }
}

TEST_CASE("avg_pool2d's fused CPU kernel rejects what it cannot pool, naming the op") {
  AvgPool2dArgs a;
  a.planes = 2, a.H = 4, a.W = 4, a.OH = 2, a.OW = 2, a.kh = a.kw = 2, a.sh = a.sw = 2;
  expect_error("float64", [&] { internal::avg_pool2d_fused(zeros({2, 4, 4}, kFloat64), a); },
               {"avg_pool2d", "float32, bfloat16 or float16", "float64"});
  expect_error("shape", [&] { internal::avg_pool2d_fused(zeros({2, 4, 5}, kBFloat16), a); },
               {"avg_pool2d", "[2, 4, 5]", "2 planes of 4x4"});
  AvgPool2dArgs too_big = a;
  too_big.OW = 3;
  expect_error("windows", [&] { internal::avg_pool2d_fused(zeros({2, 4, 4}, kFloat16), too_big); },
               {"avg_pool2d", "2x3 output", "4x4 input"});
  AvgPool2dArgs wide_pad = a;
  wide_pad.pw = 2;
  expect_error("padding", [&] { internal::avg_pool2d_fused(zeros({2, 4, 4}, kFloat16), wide_pad); },
               {"avg_pool2d", "padding 0x2"});
  expect_error("grad shape", [&] { internal::avg_pool2d_fused_backward(zeros({2, 3, 2}, kBFloat16), a); },
               {"avg_pool2d_backward", "grad_output", "[2, 3, 2]"});
}

namespace {

// The float64 reference for one Adam step from 16-bit state: optim_step.h's rule in double, then each
// of p, m, v (and vmax) rounded to dt, as the kernel rounds its float32 results.
void adam_reference(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m,
                    std::vector<double>& v, std::vector<double>& vmax, const AdamStepArgs& a) {
  for (size_t i = 0; i < p.size(); ++i) {
    double gi = a.maximize ? -g[i] : g[i];
    if (a.weight_decay != 0) {
      if (a.decoupled_weight_decay) p[i] *= 1 - a.lr * a.weight_decay;
      else gi += a.weight_decay * p[i];
    }
    m[i] += (1 - a.beta1) * (gi - m[i]);
    v[i] = v[i] * a.beta2 + (1 - a.beta2) * gi * gi;
    double second = v[i];
    if (a.amsgrad) second = vmax[i] = std::max(vmax[i], v[i]);
    p[i] -= a.step_size * m[i] / (std::sqrt(second) / a.bias_correction2_sqrt + a.eps);
  }
}

std::vector<double> rounded(const std::vector<double>& x, Dtype dt) {
  return tensor(x).to(dt).to_vector<double>();  // float64 -> float32 -> 16 bits: within half a unit and a bit
}

AdamStepArgs adam_args(int step, bool adamw, bool amsgrad, bool maximize) {
  AdamStepArgs a;
  a.lr = 1e-2, a.beta1 = 0.9, a.beta2 = 0.999, a.eps = 1e-8, a.weight_decay = adamw ? 0.1 : 0.01;
  a.step_size = a.lr / (1 - std::pow(a.beta1, step));
  a.bias_correction2_sqrt = std::sqrt(1 - std::pow(a.beta2, step));
  a.decoupled_weight_decay = adamw, a.amsgrad = amsgrad, a.maximize = maximize;
  return a;
}

}  // namespace

TEST_CASE("the Adam and AdamW steps on 16-bit parameters and state, step by step against float64") {
  // 1000 elements: whole AVX-512 vectors, blocks and a ragged tail.
  const int64_t n = 1000;
  for (Dtype dt : {kBFloat16, kFloat16, kFloat32}) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool adamw = variant != 1, amsgrad = variant == 2, maximize = variant == 3;
      const std::string what = std::string(dtype_name(dt)) + (adamw ? " AdamW" : " Adam") +
                               (amsgrad ? " amsgrad" : "") + (maximize ? " maximize" : "");
      INFO(what);
      Tensor p = draw({n}, dt, 1.0, 0.0, 20), m = zeros({n}, {dt}), v = zeros({n}, {dt}), vmax = zeros({n}, {dt});
      for (int step = 1; step <= 4; ++step) {
        Tensor g = draw({n}, dt, step == 3 ? 100.0 : 0.5, 0.0, 20 + step);  // one step with large gradients
        const AdamStepArgs a = adam_args(step, adamw, amsgrad, maximize);
        std::vector<double> rp = p.to_vector<double>(), rm = m.to_vector<double>(), rv = v.to_vector<double>(),
                            rvmax = vmax.to_vector<double>();
        adam_reference(rp, g.to_vector<double>(), rm, rv, rvmax, a);
        internal::adam_step_(p, g, m, v, vmax, a);
        CHECK(p.dtype() == dt);
        CHECK(m.dtype() == dt);  // the state keeps the parameter's dtype, as PyTorch's for bfloat16 params
        // float32 math against float64: the same rounding but for results within float32's error of a
        // tie, so one unit at most (the reference is rounded through float32 too).
        const double tol = dt == kFloat32 ? 64 : 1;
        check_near(p, tensor(rounded(rp, dt)), tol, what + " param step " + std::to_string(step), 1e-2);
        check_near(m, tensor(rounded(rm, dt)), tol, what + " exp_avg", 1e-3);
        check_near(v, tensor(rounded(rv, dt)), tol, what + " exp_avg_sq", 1e-6);
        if (amsgrad) check_near(vmax, tensor(rounded(rvmax, dt)), tol, what + " max_exp_avg_sq", 1e-6);
      }
    }
  }
}

TEST_CASE("the SGD step on 16-bit parameters, with momentum and nesterov, against float64") {
  const int64_t n = 1000;
  const double lr = 0.05, momentum = 0.9, dampening = 0.1, wd = 0.01;
  for (Dtype dt : kHalves) {
    for (bool nesterov : {false, true}) {
      const std::string what = std::string(dtype_name(dt)) + (nesterov ? " nesterov" : "");
      INFO(what);
      Tensor p = draw({n}, dt, 1.0, 0.0, 30), buf = zeros({n}, {dt});
      for (int step = 1; step <= 3; ++step) {
        Tensor g = draw({n}, dt, 0.5, 0.0, 30 + step);
        std::vector<double> rp = p.to_vector<double>(), rb = buf.to_vector<double>();
        const std::vector<double> gv = g.to_vector<double>();
        for (int64_t i = 0; i < n; ++i) {
          double d = gv[i] + wd * rp[i];
          rb[i] = step == 1 ? d : momentum * rb[i] + (1 - dampening) * d;
          d = nesterov ? d + momentum * rb[i] : rb[i];
          rp[i] -= lr * d;
        }
        internal::sgd_step_(p, g, buf, lr, momentum, dampening, wd, nesterov, step == 1);
        check_near(p, tensor(rounded(rp, dt)), 1, what + " param step " + std::to_string(step), 1e-2);
        check_near(buf, tensor(rounded(rb, dt)), 1, what + " momentum buffer", 1e-2);
      }
    }
  }
}

TEST_CASE("16-bit ops name the op and the offending dtypes or shapes") {
  Tensor x = zeros({2, 3}, {kBFloat16});
  CHECK(testing::contains(testing::error_of([&] { internal::nll_loss(x, zeros({3}, {kInt64}), true); }),
                          "nll_loss: target [3] does not match input [2, 3]"));
  CHECK(testing::contains(testing::error_of([&] { internal::nll_loss(x, zeros({2}, {kFloat32}), true); }),
                          "expected int64 class targets, got float32"));
  Tensor p = zeros({4}, {kBFloat16}), g = zeros({4}, {kFloat16}), m = zeros({4}, {kBFloat16});
  CHECK(testing::contains(testing::error_of([&] { internal::adam_step_(p, g, m, m, m, adam_args(1, true, false, false)); }),
                          "adam_step_: gradient [4] does not match parameter [4] bfloat16"));
  Tensor out = zeros({3}, {kBFloat16});
  CHECK(testing::contains(
      testing::error_of([&] { internal::index_add_(out, 0, tensor(std::vector<int64_t>{3}), ones({1}, {kBFloat16})); }),
      "index_add_: index 3 at position 0 is out of range for a dimension of size 3"));
}
