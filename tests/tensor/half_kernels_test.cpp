// bfloat16 and float16 kernels that read and write 16-bit tensors as they are (tensor/dtype.h's
// compute_t): every op family against the float32 kernel run on the same values and rounded once,
// mixed 16-bit / float32 operands, gradients through 16-bit ops, and the dtype errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "autograd/api.h"
#include "nn/functional.h"
#include "tensor/api.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::contains;
using lockstep::testing::error_of;

namespace {

// Normal values with a few exact edge cases mixed in (0, -0, a tie in both formats, large values).
Tensor values(const Shape& shape, double scale = 2.0, uint64_t seed = 7) {
  manual_seed(seed);
  Tensor t = randn(shape) * scale;
  std::vector<float> v = t.to_vector<float>();
  if (v.size() > 4) v[0] = 0.0f, v[1] = -0.0f, v[2] = 1.0f + 0x1p-9f, v[3] = 100.5f;
  return tensor(v, shape);
}

// a and b hold the same values, element by element, at most `ulps` units of their 16-bit format apart
// (units at the larger magnitude, or at `floor` where that is larger), NaN where the other is NaN.
void check_close(const Tensor& a, const Tensor& b, double ulps, const std::string& what, double floor = 1e-30) {
  INFO(what);
  REQUIRE(a.shape() == b.shape());
  REQUIRE(a.dtype() == b.dtype());
  const double eps = a.dtype() == kBFloat16 ? 0x1p-7 : a.dtype() == kFloat16 ? 0x1p-10 : 0x1p-23;  // one unit at 1
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) {
      bad += std::isnan(x[i]) != std::isnan(y[i]);
      continue;
    }
    if (std::isinf(x[i]) || std::isinf(y[i])) {
      bad += x[i] != y[i];
      continue;
    }
    const double tol = ulps * eps * std::max({std::abs(x[i]), std::abs(y[i]), floor});
    if (std::abs(x[i] - y[i]) > tol) {
      if (bad < 5) MESSAGE("element ", i, ": ", x[i], " vs ", y[i]);
      ++bad;
    }
  }
  CHECK(bad == 0);
}

const Dtype kHalves[] = {kBFloat16, kFloat16};

}  // namespace

TEST_CASE("unary ops on 16-bit tensors: the float32 result rounded once, bit for bit") {
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops = {
      {"neg", [](const Tensor& t) { return neg(t); }},
      {"abs", [](const Tensor& t) { return abs(t); }},
      {"relu", [](const Tensor& t) { return relu(t); }},
      {"exp", [](const Tensor& t) { return exp(t); }},
      {"log", [](const Tensor& t) { return log(abs(t)); }},
      {"sqrt", [](const Tensor& t) { return sqrt(abs(t)); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
      {"silu", [](const Tensor& t) { return silu(t); }},
      {"gelu", [](const Tensor& t) { return gelu(t); }},
      {"gelu_tanh", [](const Tensor& t) { return gelu(t, "tanh"); }},
  };
  const Tensor x32 = values({3, 67});
  for (Dtype dt : kHalves) {
    const Tensor x = x32.to(dt);
    const Tensor xf = x.to(kFloat32);  // the 16-bit values, exactly
    for (const auto& [name, op] : ops) {
      Tensor y = op(x);
      CHECK(y.dtype() == dt);
      check_close(y, op(xf).to(dt), 0, std::string(name) + " " + dtype_name(dt));
      // A strided (transposed) operand takes the same path through the loop.
      check_close(op(x.transpose(0, 1)), op(xf.transpose(0, 1)).to(dt), 0, std::string(name) + " transposed");
    }
  }
}

TEST_CASE("binary ops on 16-bit tensors, with broadcasting and scalars held in float32") {
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(abs(a), b); }},
  };
  const Tensor a32 = values({4, 33}), b32 = values({4, 33}, 0.5, 8) + 0.25, row32 = values({33}, 3.0, 14);
  for (Dtype dt : kHalves) {
    const Tensor a = a32.to(dt), b = b32.to(dt), row = row32.to(dt);
    const Tensor af = a.to(kFloat32), bf = b.to(kFloat32), rowf = row.to(kFloat32);
    for (const auto& [name, op] : ops) {
      const std::string what = std::string(name) + " " + dtype_name(dt);
      CHECK(op(a, b).dtype() == dt);
      check_close(op(a, b), op(af, bf).to(dt), 0, what);
      check_close(op(a, row), op(af, rowf).to(dt), 0, what + " broadcast row");
    }
    // Comparisons return bool.
    CHECK(lt(a, b).to_vector<double>() == lt(af, bf).to_vector<double>());
    // x * 0.1 multiplies by float32's 0.1, as PyTorch does, not by 0.1 rounded to 16 bits first.
    check_close(a * 0.1, (af * 0.1).to(dt), 0, std::string("mul scalar ") + dtype_name(dt));
    check_close(rsub(a, 0.3), rsub(af, 0.3).to(dt), 0, std::string("rsub scalar ") + dtype_name(dt));
    CHECK((full({1}, 1.0, {dt}) * 0.1).item<double>() == double(dt == kBFloat16 ? float(BFloat16(0.1f))
                                                                              : float(Float16(0.1f))));
    // where selects 16-bit values as they are.
    Tensor w = where(gt(a, b), a, b);
    CHECK(w.dtype() == dt);
    check_close(w, where(gt(af, bf), af, bf).to(dt), 0, "where");
  }
}

TEST_CASE("a 16-bit operand beside a float32 one is read as it is, into float32") {
  const Tensor a32 = values({5, 40}), r32 = values({5, 40}, 1.0, 9);
  for (Dtype dt : kHalves) {
    const Tensor h = a32.to(dt), hf = h.to(kFloat32);
    Tensor y = r32 + h;  // the residual stream under autocast
    CHECK(y.dtype() == kFloat32);
    CHECK(y.to_vector<float>() == (r32 + hf).to_vector<float>());
    CHECK((h * r32).to_vector<float>() == (hf * r32).to_vector<float>());
    CHECK((h.transpose(0, 1) - r32.transpose(0, 1)).to_vector<float>() ==
          (hf.transpose(0, 1) - r32.transpose(0, 1)).to_vector<float>());
    CHECK(gt(h, r32).to_vector<double>() == gt(hf, r32).to_vector<double>());
    // In place: float32 += 16-bit stays float32; 16-bit += float32 rounds the float32 sum once.
    Tensor acc = r32.clone();
    acc.add_(h);
    CHECK(acc.to_vector<float>() == (r32 + hf).to_vector<float>());
    Tensor hacc = h.clone();
    hacc.add_(r32);
    CHECK(hacc.dtype() == dt);
    check_close(hacc, (hf + r32).to(dt), 0, "16-bit += float32");
    Tensor hh = h.clone();
    hh.add_(h, 0.5);
    check_close(hh, (hf + (hf * 0.5).to(dt).to(kFloat32)).to(dt), 0, "16-bit += 16-bit * alpha");
    hh.mul_(3.0);
    CHECK(hh.dtype() == dt);
  }
}

TEST_CASE("conversions to and from 16 bits round as BFloat16 and Float16 do, bit for bit, in every block") {
  // Edge values (ties, subnormals of both formats, the overflow thresholds, inf, NaN) and a spread of
  // bit patterns over the whole float32 range; 1573 elements: three whole blocks of the CPU's
  // conversion loop and a ragged tail.
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f800fffu,
                                0x3f801000u, 0x3f803000u, 0x477fefffu, 0x477ff000u, 0x477fe000u, 0x33000000u,
                                0x33000001u, 0x33c00000u, 0x387fc000u, 0x38800000u, 0x00000001u, 0x007fffffu,
                                0x7f7fffffu, 0x7f7f8000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                0xffc12345u, 0x7f7fffffu, 0xc7800000u};
  for (uint32_t i = 0; bits.size() < 1573; ++i) bits.push_back(i * 0x9e3779b1u);
  std::vector<float> v(bits.size());
  std::memcpy(v.data(), bits.data(), bits.size() * 4);
  const Tensor f = tensor(v, {int64_t(v.size())});
  for (Dtype dt : kHalves) {
    INFO(dtype_name(dt));
    const Tensor h = f.to(dt);
    const auto* hb = static_cast<const uint16_t*>(h.data_ptr());
    int bad = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t want = dt == kBFloat16 ? BFloat16(v[i]).bits : Float16(v[i]).bits;
      if (hb[i] != want && bad++ < 5) MESSAGE("element ", i, " (", bits[i], "): ", hb[i], " vs ", want);
    }
    CHECK(bad == 0);
    // Back to float32: exact, NaN stays NaN.
    const std::vector<float> back = h.to(kFloat32).to_vector<float>();
    bad = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const float want = dt == kBFloat16 ? float(BFloat16(v[i])) : float(Float16(v[i]));
      const bool same = std::isnan(want) ? std::isnan(back[i]) : back[i] == want;
      if (!same && bad++ < 5) MESSAGE("element ", i, ": ", back[i], " vs ", want);
    }
    CHECK(bad == 0);
    // Strided both ways (a column of a [1573, 2] view), and to the other 16-bit format and to float64.
    const Tensor col = stack({f, f * 2.0}, 1).narrow(1, 1, 1).squeeze(1);
    CHECK(!col.is_contiguous());
    check_close(col.to(dt), (f * 2.0).to(dt), 0, "strided float32 -> 16 bits");
    const Tensor hcol = stack({h, h}, 1).narrow(1, 1, 1).squeeze(1);
    CHECK(hcol.to(kFloat64).to_vector<double>().size() == v.size());
    check_close(hcol.to(kFloat32), h.to(kFloat32), 0, "strided 16 bits -> float32");
    const Dtype other = dt == kBFloat16 ? kFloat16 : kBFloat16;
    check_close(h.to(other), h.to(kFloat32).to(other), 0, "16 bits -> the other 16-bit dtype");
  }
}

TEST_CASE("16-bit ops over several blocks, broadcast and strided, equal float32's rounded once") {
  const Tensor a32 = values({3, 1100}), col32 = values({3, 1}, 1.0, 21);
  for (Dtype dt : kHalves) {
    const Tensor a = a32.to(dt), col = col32.to(dt), af = a.to(kFloat32), colf = col.to(kFloat32);
    const std::string what = dtype_name(dt);
    check_close(gelu(a), gelu(af).to(dt), 0, "gelu " + what);
    check_close(a * col, (af * colf).to(dt), 0, "broadcast column " + what);
    const Tensor mixed = a.transpose(0, 1) + a32.transpose(0, 1);
    CHECK(mixed.dtype() == kFloat32);
    CHECK(mixed.to_vector<float>() == (af.transpose(0, 1) + a32.transpose(0, 1)).to_vector<float>());
    CHECK(gt(a, col).to_vector<double>() == gt(af, colf).to_vector<double>());
    CHECK(gt(a.transpose(0, 1), col.transpose(0, 1)).to_vector<double>() ==
          gt(af.transpose(0, 1), colf.transpose(0, 1)).to_vector<double>());
  }
}

TEST_CASE("sum and mean of 16-bit tensors accumulate in double and round once") {
  const Tensor x32 = values({6, 50, 7});
  for (Dtype dt : kHalves) {
    const Tensor x = x32.to(dt);
    const Tensor xd = x.to(kFloat64);
    for (int64_t dim : {0, 1, 2}) {
      const std::string what = std::string("sum dim ") + std::to_string(dim) + " " + dtype_name(dt);
      CHECK(x.sum(dim).dtype() == dt);
      // Rounded from double once (through float32: a second rounding can move a tie by one unit).
      check_close(x.sum(dim), xd.sum(dim).to(dt), 1, what);
      check_close(x.mean(dim, true), xd.mean(dim, true).to(dt), 1, what + " mean");
    }
    check_close(x.sum(), xd.sum().to(dt), 1, "sum of all");
    check_close(x.sum({0, 2}), xd.sum({0, 2}).to(dt), 1, "sum over two dimensions");
  }
  // 256 + 1 + ... + 1 (256 ones) in bfloat16: 512 exactly; summed in bfloat16 it would stay 256.
  Tensor t = ones({257}, {kBFloat16});
  t.narrow(0, 0, 1).fill_(256.0);
  CHECK(t.sum().item<double>() == 512.0);
  CHECK(t.mean().item<double>() == double(BFloat16(512.0f / 257)));
}

TEST_CASE("max, min, their positions, sort and max_pool2d of 16-bit tensors: the 16-bit values, exactly") {
  // Whole numbers from a small range: every dimension has ties, so the first-extreme rule is exercised.
  Tensor x32 = values({6, 50, 7}, 3.0).to(kInt64).to(kFloat32);
  for (Dtype dt : kHalves) {
    const Tensor x = x32.to(dt), xd = x.to(kFloat64);
    for (int64_t dim : {0, 1, 2}) {
      const std::string what = std::string("dim ") + std::to_string(dim) + " " + dtype_name(dt);
      INFO(what);
      auto [mx, imx] = max(x, dim);
      auto [mxd, imxd] = max(xd, dim);
      CHECK(mx.dtype() == dt);
      CHECK(mx.to_vector<double>() == mxd.to_vector<double>());
      CHECK(imx.to_vector<int64_t>() == imxd.to_vector<int64_t>());
      auto [mn, imn] = min(x, dim, true);
      auto [mnd, imnd] = min(xd, dim, true);
      CHECK(mn.shape() == mnd.shape());
      CHECK(mn.to_vector<double>() == mnd.to_vector<double>());
      CHECK(argmax(x, dim).to_vector<int64_t>() == argmax(xd, dim).to_vector<int64_t>());
      CHECK(argmin(x, dim).to_vector<int64_t>() == argmin(xd, dim).to_vector<int64_t>());
      auto [sv, si] = sort(x, dim, dim == 1);
      auto [svd, sid] = sort(xd, dim, dim == 1);
      CHECK(sv.dtype() == dt);
      CHECK(sv.to_vector<double>() == svd.to_vector<double>());
      CHECK(si.to_vector<int64_t>() == sid.to_vector<int64_t>());  // stable: ties keep their order
    }
    CHECK(max(x).item<double>() == max(xd).item<double>());
    // NaN: max and min propagate it, argmax and argmin point at the first one, sort puts it last.
    Tensor y = x.clone();
    y.narrow(1, 9, 1).fill_(NAN);
    y.narrow(1, 30, 1).fill_(NAN);
    auto [ymax, yi] = max(y, 1);
    for (double v : ymax.to_vector<double>()) CHECK(std::isnan(v));
    for (int64_t i : yi.to_vector<int64_t>()) CHECK(i == 9);
    for (int64_t i : argmin(y, 1).to_vector<int64_t>()) CHECK(i == 9);
    const std::vector<double> sorted = sort(y, 1).first.narrow(1, 48, 2).to_vector<double>();
    for (double v : sorted) CHECK(std::isnan(v));
    // max_pool2d, padded, strided and dilated, forward and backward, against float64 on the same values.
    Tensor img = x.reshape({6, 1, 50, 7}).detach().requires_grad_();
    Tensor imgd = img.detach().to(kFloat64).requires_grad_();
    Tensor p = nn::functional::max_pool2d(img, {3, 2}, {2, 1}, {1, 1}, {1, 2});
    Tensor pd = nn::functional::max_pool2d(imgd, {3, 2}, {2, 1}, {1, 1}, {1, 2});
    CHECK(p.dtype() == dt);
    CHECK(p.to_vector<double>() == pd.to_vector<double>());
    p.sum().backward();
    pd.sum().backward();
    CHECK(img.grad().dtype() == dt);
    CHECK(img.grad().to_vector<double>() == imgd.grad().to_vector<double>());  // small counts: exact
  }
}

TEST_CASE("softmax and log_softmax rows in 16 bits, forward and backward") {
  Tensor x32 = values({6, 77}, 3.0);
  for (Dtype dt : kHalves) {
    for (bool log_form : {false, true}) {
      const std::string what = std::string(log_form ? "log_softmax " : "softmax ") + dtype_name(dt);
      Tensor x = x32.to(dt).requires_grad_();
      Tensor xf = x.detach().to(kFloat32).requires_grad_();
      Tensor y = log_form ? log_softmax(x, 1) : softmax(x, 1);
      Tensor yf = log_form ? log_softmax(xf, 1) : softmax(xf, 1);
      CHECK(y.dtype() == dt);
      check_close(y, yf.to(dt), 1, what);
      // Backward from the same upstream gradient, with the 16-bit output the 16-bit kernel saved.
      Tensor g32 = values({6, 77}, 1.0, 10), g = g32.to(dt);
      y.backward(g);
      Tensor ref = lockstep::internal::softmax_backward(g.to(kFloat32), y.detach().to(kFloat32), 1, log_form);
      CHECK(x.grad().dtype() == dt);
      check_close(x.grad(), ref.to(dt), 1, what + " backward");
    }
    // Along a middle dimension the 16-bit tensor takes a float32 copy: same values.
    Tensor m = values({3, 5, 4}).to(dt);
    check_close(softmax(m, 1), softmax(m.to(kFloat32), 1).to(dt), 1, "softmax along dim 1");
  }
}

TEST_CASE("layer_norm on 16-bit rows: float32 statistics, gradients rounded once") {
  const int64_t n = 96;
  Tensor x32 = values({5, n}, 2.0) + 1.5, w32 = values({n}, 0.5, 12) + 1.0, b32 = values({n}, 0.1, 13), g32 = values({5, n}, 1.0, 11);
  for (Dtype dt : kHalves) {
    Tensor x = x32.to(dt).requires_grad_(), w = w32.to(dt).requires_grad_(), b = b32.to(dt).requires_grad_();
    Tensor y = nn::functional::layer_norm(x, {n}, w, b, 1e-5);
    CHECK(y.dtype() == dt);
    // float32 on the 16-bit values.
    Tensor xf = x.detach().to(kFloat32).requires_grad_(), wf = w.detach().to(kFloat32).requires_grad_(),
           bf = b.detach().to(kFloat32).requires_grad_();
    Tensor yf = nn::functional::layer_norm(xf, {n}, wf, bf, 1e-5);
    check_close(y, yf.to(dt), 1, std::string("layer_norm ") + dtype_name(dt));
    y.backward(g32.to(dt));
    yf.backward(g32.to(dt).to(kFloat32));
    check_close(x.grad(), xf.grad().to(dt), 2, "layer_norm grad x");
    check_close(w.grad(), wf.grad().to(dt), 2, "layer_norm grad weight");
    check_close(b.grad(), bf.grad().to(dt), 1, "layer_norm grad bias");
    auto r = lockstep::internal::layer_norm(x.detach(), n, w.detach(), b.detach(), 1e-5);
    CHECK(r.mean.dtype() == kFloat32);
    CHECK(r.rstd.dtype() == kFloat32);
  }
}

TEST_CASE("gradients through 16-bit elementwise ops and sums match float32's, rounded") {
  Tensor x32 = values({4, 29});
  for (Dtype dt : kHalves) {
    Tensor x = x32.to(dt).requires_grad_();
    Tensor xf = x.detach().to(kFloat32).requires_grad_();
    auto f = [](const Tensor& t) { return (gelu(t) * t + tanh(t)).sum(1).sum(); };
    f(x).backward();
    f(xf).backward();
    CHECK(x.grad().dtype() == dt);
    // Each op rounds its result once, and the gradient adds three terms of order 1 that partly cancel:
    // a few units of the terms' size, not of the sum's.
    check_close(x.grad(), xf.grad().to(dt), 4, std::string("grad ") + dtype_name(dt), 1.0);
  }
}

TEST_CASE("bad dtype mixes name the op and the dtypes") {
  Tensor x = ones({2, 4}, {kBFloat16});
  CHECK(contains(error_of([&] { nn::functional::layer_norm(x, {4}, ones({4}, {kFloat16})); }),
                 "layer_norm: weight/bias of dtype float16 for a bfloat16 input"));
  CHECK(contains(error_of([&] { exp(ones({2}, {kInt64})); }), "exp: expected a floating-point tensor, got int64"));
  CHECK(contains(error_of([&] { x + ones({3}, {kFloat16}); }), "add: shapes [2, 4] and [3]"));
}
