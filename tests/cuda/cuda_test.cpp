// Tests of the CUDA backend: every kernel against the CPU backend on fresh random data (every dtype,
// broadcast shapes, transposed GEMMs, the split-reduction paths), copies for every dtype, the errors
// the device raises at synchronization, and the caching allocator (reuse, out-of-memory message).
//
// Without a visible CUDA device (as on a build machine) the GPU cases skip with a message, the binary
// prints "SKIPPED: no CUDA device" once, and the cases about having no device run instead.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "tensor/api.h"
#include "tensor/cuda/cuda.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/util/tensor_match.h"
#include "tests/util/test_util.h"

using namespace lockstep;

namespace {

using lockstep::testing::error_of;

const Device kGpu = Device::cuda(0);

Tensor gpu(const Tensor& t) { return internal::to_device(t, kGpu); }

// Fresh random values: uniform in [lo, hi) for floating dtypes, integers in [lo, hi) for int64.
Tensor random(const Shape& s, Dtype dt, double lo = -2, double hi = 2) {
  if (dt == kInt64) return randint(static_cast<int64_t>(lo), static_cast<int64_t>(hi), s);
  return uniform(s, lo, hi, dt);
}

// The relative tolerance for elementwise results: rounding differences only.
double tol(Dtype dt) { return dt == kFloat32 ? 1e-5 : dt == kFloat64 ? 1e-12 : 0.0; }

const Dtype kAllDtypes[] = {kFloat32, kFloat64, kInt64};
const Dtype kFloatDtypes[] = {kFloat32, kFloat64};

}  // namespace

// --- without a device ------------------------------------------------------------------------------

TEST_CASE("without a device: cuda tensors are a clear error and device_count() is 0") {
  if (testing::kHaveCudaDevice) return;
  CHECK(cuda::device_count() == 0);
  CHECK_FALSE(cuda::is_available());
  CHECK_FALSE(cuda::unavailable_reason().empty());
  CHECK(cuda::memory_allocated() == 0);
  CHECK(cuda::memory_reserved() == 0);
  cuda::empty_cache();
  std::string e = error_of([] { zeros({2}, Device::cuda(0)); });
#ifdef LOCKSTEP_WITH_CUDA
  CHECK(e.find("cuda:0 is not available: no CUDA device is visible (") == 0);
#else
  CHECK(e.find("lockstep was built without CUDA") == 0);
#endif
  CHECK_FALSE(error_of([] { cuda::current_device(); }).empty());
  CHECK_FALSE(error_of([] { cuda::synchronize(); }).empty());
  CHECK_FALSE(error_of([] { cuda::set_device(0); }).empty());
}

// The questions the ops and layers ask instead of testing the device (tensor/backend.h's Capability).
TEST_CASE("the CUDA backend's capabilities and limits; its missing optional kernels are a clear error") {
  REQUIRE_DEVICE();
  const Device d = Device::cuda(0);
  CHECK(supports(d, Capability::kGemm, kFloat16));
  CHECK(supports(d, Capability::kSoftmaxAnyDim, kBFloat16));
  CHECK(supports(d, Capability::kPhiloxRandom, kBFloat16));
  CHECK_FALSE(supports(d, Capability::kPhiloxRandom, kInt64));
  CHECK_FALSE(supports(d, Capability::kConv2d, kFloat32));
  CHECK_FALSE(supports(d, Capability::kAvgPool2d, kFloat32));
  CHECK_FALSE(supports(d, Capability::kMixedWithFloat32, kBFloat16));
  CHECK_FALSE(supports(d, Capability::kHostReadable, kFloat32));
  CHECK(backend_for(d).limits().attention_head_dim == 128);
  Tensor y = zeros({1, 2, 2}, TensorOptions(kFloat32, d)), x = zeros({1, 4, 4}, TensorOptions(kFloat32, d));
  AvgPool2dArgs a;
  a.planes = 1, a.H = a.W = 4, a.OH = a.OW = 2, a.kh = a.kw = a.sh = a.sw = 2;
  CHECK(error_of([&] { backend_for(d).avg_pool2d(y, x, a); }) ==
        "Backend::avg_pool2d: this backend has no such kernel (ask supports() first; the ops layer composes it)");
  CHECK_FALSE(internal::avg_pool2d_fused_applies(x));  // nn's pooling composes it from strided adds instead
}

// --- devices and copies ----------------------------------------------------------------------------

TEST_CASE("device queries") {
  REQUIRE_DEVICE();
  CHECK(cuda::is_available());
  CHECK(cuda::unavailable_reason().empty());
  cuda::set_device(0);
  CHECK(cuda::current_device() == 0);
  CHECK(cuda::current_stream() != nullptr);
  CHECK(cuda::current_stream(0) == cuda::current_stream());
  cuda::synchronize();
  const int n = cuda::device_count();
  CHECK(error_of([n] { zeros({2}, Device::cuda(n)); }).find("cuda:" + std::to_string(n) + " is not available") == 0);
  CHECK_FALSE(error_of([n] { cuda::set_device(n); }).empty());
}

TEST_CASE("to(device) round trips every dtype and size") {
  REQUIRE_DEVICE();
  manual_seed(10);
  for (Dtype dt : kAllDtypes)
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1} << 20 | 3}) {
      Tensor h = random({n}, dt, -1000, 1000);
      Tensor d = gpu(h);
      CHECK(d.device() == kGpu);
      CHECK(d.dtype() == dt);
      CHECK_MATCH(internal::to_device(d, Device::cpu()), h, 0.0);
      CHECK_MATCH(internal::clone(d), h, 0.0);  // device -> device
      Tensor d2 = empty({n}, {dt, kGpu});
      internal::copy_(d2, d);
      CHECK_MATCH(d2, h, 0.0);
    }
  if (cuda::device_count() >= 2) {
    Tensor h = random({1000}, kFloat32);
    Tensor on1 = internal::to_device(gpu(h), Device::cuda(1));
    CHECK(on1.device() == Device::cuda(1));
    CHECK_MATCH(on1, h, 0.0);
    CHECK_MATCH(internal::to_device(on1, kGpu), h, 0.0);
    // Straight after queued work on the source device (the copy waits for it through an event that
    // must belong to the source device), and from a thread whose current device is the destination.
    cuda::set_device(1);
    Tensor doubled = internal::to_device(internal::mul(gpu(h), 2.0), Device::cuda(1));
    CHECK_MATCH(doubled, internal::mul(h, 2.0), 0.0);
    CHECK_MATCH(internal::to_device(internal::mul(doubled, 0.5), kGpu), h, 0.0);
    CHECK(cuda::current_device() == 1);  // the copies restored the caller's device
    cuda::set_device(0);
  }
}

TEST_CASE("factories and fill on the device") {
  REQUIRE_DEVICE();
  for (Dtype dt : kAllDtypes) {
    CHECK_MATCH(zeros({3, 5}, {dt, kGpu}), zeros({3, 5}, dt), 0.0);
    CHECK_MATCH(ones({1000}, {dt, kGpu}), ones({1000}, dt), 0.0);
    CHECK_MATCH(full({2, 2}, -3.0, {dt, kGpu}), full({2, 2}, -3.0, dt), 0.0);
    CHECK_MATCH(arange(5, 105, 3, {dt, kGpu}), arange(5, 105, 3, dt), 0.0);
  }
  // randn for a device is drawn there, from its own Philox stream (cuda_random_test).
  CHECK(scalar_tensor(2.5, {kFloat64, kGpu}).item<double>() == 2.5);
}

TEST_CASE("rand on the device: Philox draws made there, equal to the CPU backend's, repeatable, uniform") {
  REQUIRE_DEVICE();
  manual_seed(7);
  Tensor a = rand({1000}, {kFloat32, kGpu});            // counters 0..999
  Tensor b = uniform({10}, -2.0, 3.0, {kFloat64, kGpu});  // counters 1000..1009
  Tensor want_a = empty({1000}), want_b = empty({10}, kFloat64);
  backend_for(Device::cpu()).uniform(want_a, 0.0, 1.0, 7, 0);
  backend_for(Device::cpu()).uniform(want_b, -2.0, 3.0, 7, 1000);
  CHECK_MATCH(a, want_a, 0.0);
  CHECK_MATCH(b, want_b, 0.0);
  manual_seed(7);  // the same seed: the same tensors
  CHECK_MATCH(rand({1000}, {kFloat32, kGpu}), want_a, 0.0);
  // 10^5 draws: in [0, 1), mean within 0.005 of 1/2 (the seed is fixed: the same values every run).
  Tensor many = internal::to_device(rand({100000}, {kFloat32, kGpu}), Device::cpu());
  std::vector<double> v = many.to_vector<double>();
  double sum = 0;
  for (double x : v) {
    CHECK_MESSAGE((x >= 0 && x < 1), x);
    sum += x;
  }
  CHECK(std::abs(sum / v.size() - 0.5) < 0.005);
  // Host draws are their own stream, untouched by device draws.
  manual_seed(7);
  Tensor host = rand({5});
  manual_seed(7);
  rand({5}, {kFloat32, kGpu});
  CHECK_MATCH(rand({5}), host, 0.0);
}

TEST_CASE("cast between every pair of dtypes") {
  REQUIRE_DEVICE();
  manual_seed(11);
  for (Dtype from : kAllDtypes)
    for (Dtype to : kAllDtypes) {
      Tensor h = random({3001}, from, -100, 100);
      CHECK_MATCH(internal::to_dtype(gpu(h), to), internal::to_dtype(h, to), 0.0);
    }
}

// --- elementwise -----------------------------------------------------------------------------------

TEST_CASE("unary ops") {
  REQUIRE_DEVICE();
  manual_seed(12);
  for (Dtype dt : kAllDtypes)
    for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Exp, UnaryOp::Log, UnaryOp::Relu, UnaryOp::Sqrt, UnaryOp::Abs}) {
      if (dt == kInt64 && (op == UnaryOp::Exp || op == UnaryOp::Log || op == UnaryOp::Sqrt)) continue;
      const bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt;
      Tensor h = positive ? random({4099}, dt, 0.01, 10) : random({4099}, dt, -5, 5);
      CAPTURE(int(op));
      CAPTURE(dt);
      CHECK_MATCH(internal::unary(op, gpu(h)), internal::unary(op, h), tol(dt));
    }
}

namespace {

// Operands suited to each op: a divisor away from zero; small integers so that Eq finds equal pairs.
Tensor operand(BinaryOp op, const Shape& s, Dtype dt, bool divisor) {
  if (op == BinaryOp::Eq) return internal::to_dtype(randint(0, 3, s), dt);
  if (op == BinaryOp::Div && divisor) return dt == kInt64 ? randint(1, 20, s) : random(s, dt, 0.5, 4);
  return random(s, dt, -50, 50);
}

const BinaryOp kBinaryOps[] = {BinaryOp::Add, BinaryOp::Sub,          BinaryOp::Mul,    BinaryOp::Div,
                               BinaryOp::Eq,  BinaryOp::ReluBackward, BinaryOp::Maximum};

}  // namespace

TEST_CASE("binary ops, same shape and broadcast (fast and general paths)") {
  REQUIRE_DEVICE();
  manual_seed(13);
  const std::pair<Shape, Shape> shapes[] = {
      {{7, 13}, {7, 13}},             // one flat loop
      {{1 << 20 | 5}, {1 << 20 | 5}}, // many blocks
      {{}, {3, 4}},                   // scalar broadcast: stride 0
      {{4, 5}, {5}},                  // row vector
      {{4, 1}, {1, 5}},               // outer product
      {{2, 3, 4}, {3, 1}},
      {{6, 1, 5}, {1, 7, 1}},
      {{3, 1, 4, 1, 2}, {1, 5, 1, 6, 2}},
  };
  for (Dtype dt : kAllDtypes)
    for (BinaryOp op : kBinaryOps)
      for (auto& [sa, sb] : shapes) {
        Tensor a = operand(op, sa, dt, false), b = operand(op, sb, dt, true);
        CAPTURE(int(op));
        CAPTURE(dt);
        CAPTURE(sa);
        CAPTURE(sb);
        CHECK_MATCH(internal::binary(op, gpu(a), gpu(b)), internal::binary(op, a, b), tol(dt));
        if (op != BinaryOp::Div) CHECK_MATCH(internal::binary(op, gpu(b), gpu(a)), internal::binary(op, b, a), tol(dt));
      }
}

TEST_CASE("binary ops with a scalar, both orders; in-place add_ and mul_") {
  REQUIRE_DEVICE();
  manual_seed(14);
  for (Dtype dt : kAllDtypes)
    for (BinaryOp op : kBinaryOps)
      for (bool reverse : {false, true}) {
        Tensor a = operand(op, {999}, dt, reverse);
        const double s = op == BinaryOp::Eq ? 1.0 : 3.0;
        CAPTURE(int(op));
        CAPTURE(dt);
        CAPTURE(reverse);
        CHECK_MATCH(internal::binary_scalar(op, gpu(a), s, reverse), internal::binary_scalar(op, a, s, reverse), tol(dt));
      }
  for (Dtype dt : kFloatDtypes) {
    Tensor a = random({5, 7}, dt), b = random({5, 7}, dt);
    Tensor ga = gpu(a), gb = gpu(b);
    internal::add_(ga, gb, 0.5);
    internal::add_(a, b, 0.5);
    CHECK_MATCH(ga, a, tol(dt));
    internal::mul_(ga, -2.0);
    internal::mul_(a, -2.0);
    CHECK_MATCH(ga, a, tol(dt));
  }
}

TEST_CASE("sgd_step matches the CPU update for every option") {
  REQUIRE_DEVICE();
  manual_seed(15);
  Backend& cpu = backend_for(Device::cpu());
  Backend& dev = backend_for(kGpu);
  for (Dtype dt : kFloatDtypes)
    for (double momentum : {0.0, 0.9})
      for (bool nesterov : {false, true})
        for (double wd : {0.0, 1e-2})
          for (bool first : {true, false}) {
            if (nesterov && momentum == 0) continue;
            Tensor p = random({3000}, dt), g = random({3000}, dt), m = random({3000}, dt);
            Tensor gp = gpu(p), gg = gpu(g), gm = gpu(m);
            cpu.sgd_step(p, g, m, 0.1, momentum, 0.25, wd, nesterov, first);
            dev.sgd_step(gp, gg, gm, 0.1, momentum, 0.25, wd, nesterov, first);
            CAPTURE(momentum);
            CAPTURE(nesterov);
            CAPTURE(wd);
            CAPTURE(first);
            CHECK_MATCH(gp, p, tol(dt), tol(dt));
            CHECK_MATCH(gm, m, tol(dt), tol(dt));
          }
}

// --- GEMM and transpose ----------------------------------------------------------------------------

TEST_CASE("matmul against the CPU: every transpose, alpha/beta, odd sizes, TF32 opt-in") {
  REQUIRE_DEVICE();
  manual_seed(16);
  const int64_t sizes[][3] = {{1, 1, 1},    {1, 7, 1},       {3, 1, 5},    {7, 13, 5},
                              {64, 33, 17}, {256, 512, 384}, {1000, 10, 3}};
  for (Dtype dt : kFloatDtypes)
    for (auto& s : sizes) {
      const int64_t m = s[0], k = s[1], n = s[2];
      const double rtol = dt == kFloat32 ? 1e-4 : 1e-10;
      Tensor a = randn({m, k}, dt), b = randn({k, n}, dt), at = internal::transpose(a), bt = internal::transpose(b);
      Tensor ga = gpu(a), gb = gpu(b), gat = gpu(at), gbt = gpu(bt);
      CAPTURE(m);
      CAPTURE(k);
      CAPTURE(n);
      CAPTURE(dt);
      Tensor want = internal::matmul(a, b);
      CHECK_MATCH(internal::matmul(ga, gb), want, rtol, rtol);
      CHECK_MATCH(internal::matmul(gat, gb, true, false), want, rtol, rtol);
      CHECK_MATCH(internal::matmul(ga, gbt, false, true), want, rtol, rtol);
      CHECK_MATCH(internal::matmul(gat, gbt, true, true), want, rtol, rtol);
      Tensor c = randn({m, n}, dt), gc = gpu(c);
      internal::gemm_(c, a, false, bt, true, 2.0, 0.5);
      internal::gemm_(gc, ga, false, gbt, true, 2.0, 0.5);
      CHECK_MATCH(gc, c, rtol, rtol);
    }
  // An empty inner dimension: out = beta * out.
  Tensor c = ones({3, 4}), gc = gpu(c);
  internal::gemm_(gc, gpu(zeros({3, 0})), false, gpu(zeros({0, 4})), false, 1.0, 2.0);
  CHECK_MATCH(gc, full({3, 4}, 2.0), 0.0);
  CHECK_MATCH(internal::matmul(gpu(zeros({3, 0})), gpu(zeros({0, 4}))), zeros({3, 4}), 0.0);
  // TF32 products keep about 10 mantissa bits: opt-in, and visibly close.
  Tensor a = randn({128, 256}), b = randn({256, 64});
  cuda::set_allow_tf32(true);
  CHECK(cuda::allow_tf32());
  Tensor fast = internal::matmul(gpu(a), gpu(b));
  cuda::set_allow_tf32(false);
  CHECK_MATCH(fast, internal::matmul(a, b), 1e-2, 5e-2);
}

TEST_CASE("gemm_ with a bias and batched products against the CPU: small ones in one kernel, large through cuBLAS") {
  REQUIRE_DEVICE();
  manual_seed(17);
  // Below 2^20 multiply-adds and k <= 1024 (small_gemm.cu), and above either bound (cuBLAS, the bias first).
  const int64_t sizes[][3] = {{8, 5, 2}, {1, 1, 1}, {33, 17, 65}, {4, 2000, 3}, {300, 200, 100}};
  for (Dtype dt : kFloatDtypes)
    for (auto& s : sizes)
      for (double beta : {0.0, 1.0, 0.5}) {
        const int64_t m = s[0], k = s[1], n = s[2];
        const double rtol = dt == kFloat32 ? 1e-4 : 1e-10;
        CAPTURE(m);
        CAPTURE(k);
        CAPTURE(n);
        CAPTURE(dt);
        CAPTURE(beta);
        Tensor a = randn({m, k}, dt), w = randn({n, k}, dt), bias = randn({n}, dt);
        // beta 0 must not read C: start it as NaN on both sides.
        Tensor c = beta == 0 ? full({m, n}, std::nan(""), dt) : randn({m, n}, dt), gc = gpu(c);
        internal::gemm_(c, a, false, w, true, 1.5, beta, bias);
        internal::gemm_(gc, gpu(a), false, gpu(w), true, 1.5, beta, gpu(bias));
        CHECK_MATCH(gc, c, rtol, rtol);
        // The CPU result is alpha a w^T + beta c + bias, by the definition (c0 is c's old value).
        if (beta == 0) CHECK_MATCH(c, internal::add(internal::mul(internal::matmul(a, w, false, true), 1.5), bias),
                                   rtol, rtol);
      }
  // Batched small products: own batch strides, a broadcast operand (batch stride 0), strided views.
  for (Dtype dt : kFloatDtypes) {
    const double rtol = dt == kFloat32 ? 1e-4 : 1e-10;
    Tensor q = randn({2, 3, 6, 4}, dt), kt = randn({2, 3, 4, 6}, dt), shared = randn({4, 5}, dt);
    CHECK_MATCH(internal::matmul(gpu(q), gpu(kt)), internal::matmul(q, kt), rtol, rtol);
    CHECK_MATCH(internal::matmul(gpu(q), gpu(shared)), internal::matmul(q, shared), rtol, rtol);
    Tensor st = internal::transpose(shared);  // [5, 4], read through its transpose
    CHECK_MATCH(internal::matmul(internal::transpose(gpu(shared)), gpu(kt)), internal::matmul(st, kt), rtol, rtol);
    Tensor qt = internal::transpose(q, -1, -2);  // [2, 3, 4, 6]
    CHECK_MATCH(internal::matmul(internal::transpose(gpu(q), -1, -2), gpu(q)), internal::matmul(qt, q), rtol, rtol);
  }
}

TEST_CASE("transpose of every dtype, tile edges included") {
  REQUIRE_DEVICE();
  manual_seed(17);
  for (Dtype dt : kAllDtypes)
    for (auto s : {Shape{1, 1}, Shape{33, 65}, Shape{1000, 3}, Shape{3, 1000}, Shape{512, 256}}) {
      Tensor a = random(s, dt, -100, 100);
      CHECK_MATCH(internal::transpose(gpu(a)), internal::transpose(a), 0.0);
    }
}

// --- reductions ------------------------------------------------------------------------------------

namespace {

// The CPU reference for sums and means, computed in float64 so that it is exact enough to judge the
// device's (double-accumulated) float32 result.
Tensor reference(Reduction op, const Tensor& a, int64_t dim) {
  const bool wide = a.dtype() == kFloat32 && (op == Reduction::Sum || op == Reduction::Mean);
  Tensor x = wide ? internal::to_dtype(a, kFloat64) : a;
  Tensor r;
  switch (op) {
    case Reduction::Sum: r = dim < 0 ? internal::sum(x) : internal::sum(x, dim); break;
    case Reduction::Mean: r = dim < 0 ? internal::mean(x) : internal::mean(x, dim); break;
    case Reduction::Max: r = internal::max(x, dim); break;
    case Reduction::Argmax: r = internal::argmax(x, dim); break;
    case Reduction::Prod:
    case Reduction::Min:
    case Reduction::Argmin: r = internal::reduce(op, x, dim, false, "reference"); break;
  }
  return wide ? internal::to_dtype(r, kFloat32) : r;
}

Tensor on_device(Reduction op, const Tensor& a, int64_t dim) {
  switch (op) {
    case Reduction::Sum: return dim < 0 ? internal::sum(a) : internal::sum(a, dim);
    case Reduction::Mean: return dim < 0 ? internal::mean(a) : internal::mean(a, dim);
    case Reduction::Max: return internal::max(a, dim);
    case Reduction::Argmax: return internal::argmax(a, dim);
    case Reduction::Prod:
    case Reduction::Min:
    case Reduction::Argmin: return internal::reduce(op, a, dim, false, "on_device");
  }
  return Tensor();
}

}  // namespace

TEST_CASE("sum and mean of all elements, up to the split (two-pass) sizes") {
  REQUIRE_DEVICE();
  manual_seed(18);
  for (Dtype dt : kAllDtypes)
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{65537}, int64_t{1} << 22 | 7}) {
      Tensor a = random({n}, dt, -10, 10);
      CAPTURE(n);
      CAPTURE(dt);
      CHECK_MATCH(internal::sum(gpu(a)), reference(Reduction::Sum, a, -1), dt == kInt64 ? 0.0 : 1e-4, tol(dt));
      if (dt != kInt64) CHECK_MATCH(internal::mean(gpu(a)), reference(Reduction::Mean, a, -1), 1e-4, tol(dt));
    }
}

TEST_CASE("reductions over one dimension: rows, columns, split rows and split columns") {
  REQUIRE_DEVICE();
  manual_seed(19);
  const std::pair<Shape, int64_t> cases[] = {
      {{37, 1001}, 1},  {{37, 1001}, 0},   // rows; columns
      {{2000, 3}, 1},   {{3, 5000, 7}, 1}, // many short rows; columns with a middle dimension
      {{5, 100000}, 1}, {{100000, 5}, 0},  // long rows, split; long columns, split
      {{1, 1}, 0},      {{4, 1, 6}, 1},    // n = 1
  };
  for (Dtype dt : kAllDtypes)
    for (Reduction op : {Reduction::Sum, Reduction::Mean, Reduction::Max, Reduction::Min, Reduction::Argmax, Reduction::Argmin})
      for (auto& [shape, dim] : cases) {
        if (op == Reduction::Mean && dt == kInt64) continue;
        Tensor a = random(shape, dt, -1000, 1000);
        CAPTURE(int(op));
        CAPTURE(dt);
        CAPTURE(shape);
        CAPTURE(dim);
        const bool exact = (op != Reduction::Sum && op != Reduction::Mean) || dt == kInt64;
        CHECK_MATCH(on_device(op, gpu(a), dim), reference(op, a, dim), exact ? 0.0 : 1e-4, tol(dt));
      }
}

TEST_CASE("argmax picks the first of equal maxima") {
  REQUIRE_DEVICE();
  Tensor a = tensor(std::vector<int64_t>{1, 7, 3, 7, 7, 0}, {2, 3});
  CHECK_MATCH(internal::argmax(gpu(a), 1), internal::argmax(a, 1), 0.0);
  Tensor z = zeros({5, 70000});  // all ties, across split blocks
  CHECK_MATCH(internal::argmax(gpu(z), 1), zeros({5}, kInt64), 0.0);
}

TEST_CASE("max and maximum propagate NaN, as torch.max and torch.maximum (and the CPU backend)") {
  REQUIRE_DEVICE();
  const double nan = std::nan("");
  Tensor a = tensor({1.0, nan, 3.0, nan, 5.0, 6.0}, {2, 3});
  const std::vector<double> rows = internal::to_device(internal::max(gpu(a), 1), Device::cpu()).to_vector<double>();
  CHECK((std::isnan(rows[0]) && std::isnan(rows[1])));
  const std::vector<double> m =
      internal::to_device(internal::maximum(gpu(tensor({1.0, nan, 2.0})), gpu(tensor({nan, 1.0, 1.0}))), Device::cpu())
          .to_vector<double>();
  CHECK((std::isnan(m[0]) && std::isnan(m[1]) && m[2] == 2));
}

// --- softmax and loss ------------------------------------------------------------------------------

TEST_CASE("log_softmax and its backward along rows and columns") {
  REQUIRE_DEVICE();
  manual_seed(20);
  const std::pair<Shape, int64_t> cases[] = {
      {{64, 10}, 1}, {{3, 1000}, 1}, {{5, 7, 3}, 1}, {{5, 7, 3}, 0}, {{4, 1}, 1},
  };
  for (Dtype dt : kFloatDtypes)
    for (auto& [shape, dim] : cases) {
      Tensor x = random(shape, dt, -20, 20), g = random(shape, dt);
      Tensor y = internal::log_softmax(x, dim), gy = internal::log_softmax(gpu(x), dim);
      CAPTURE(shape);
      CAPTURE(dim);
      CHECK_MATCH(gy, y, tol(dt), tol(dt));
      CHECK_MATCH(internal::softmax_backward(gpu(g), gy, dim, true), internal::softmax_backward(g, y, dim, true), tol(dt) * 10,
                  tol(dt));
    }
}

TEST_CASE("nll_loss and its backward, mean and sum") {
  REQUIRE_DEVICE();
  manual_seed(21);
  for (Dtype dt : kFloatDtypes)
    for (int64_t n : {int64_t{1}, int64_t{1000}}) {
      Tensor lp = internal::log_softmax(random({n, 10}, dt, -5, 5), 1), t = randint(0, 10, {n});
      Tensor glp = gpu(lp), gt = gpu(t);
      for (bool mean : {true, false}) {
        CHECK_MATCH(internal::nll_loss(glp, gt, mean), internal::nll_loss(lp, t, mean), 1e-5, tol(dt));
        Tensor go = scalar_tensor(0.75, dt);
        CHECK_MATCH(internal::nll_loss_backward(gpu(go), glp, gt, mean), internal::nll_loss_backward(go, lp, t, mean), tol(dt));
      }
    }
}

TEST_CASE("out-of-range targets and indices are raised at the next synchronization, then cleared") {
  REQUIRE_DEVICE();
  Tensor lp = gpu(internal::log_softmax(zeros({4, 10}), 1));
  Tensor bad = gpu(tensor(std::vector<int64_t>{1, 2, 3, 12}));
  Tensor loss = internal::nll_loss(lp, bad);  // queued; the device records the bad target
  CHECK(error_of([&] { loss.item<float>(); })
            .find("cross_entropy: target 12 at position 3 is out of range for 10 classes") == 0);
  CHECK(error_of([&] { internal::nll_loss(lp, gpu(tensor(std::vector<int64_t>{1, 2, 3, 4}))).item<float>(); }).empty());
  CHECK(error_of([&] { internal::nll_loss_backward(gpu(scalar_tensor(1.0)), lp, bad); cuda::synchronize(); })
            .find("cross_entropy backward: target 12 at position 3") == 0);
  Tensor a = gpu(internal::reshape(arange(6, kFloat32), {3, 2}));
  Tensor bad_rows = gpu(tensor(std::vector<int64_t>{0, -1}));
  CHECK(error_of([&] { internal::index_select(a, bad_rows).to_vector<float>(); })
            .find("index_select: index -1 at position 1 is out of range for a dimension of size 3") == 0);
  Tensor acc = gpu(zeros({3, 2}));
  CHECK(error_of([&] {
          internal::index_add_(acc, gpu(tensor(std::vector<int64_t>{5})), gpu(ones({1, 2})));
          cuda::synchronize();
        }).find("index_add_: index 5 at position 0 is out of range for a dimension of size 3") == 0);
  CHECK(acc.to_vector<float>() == std::vector<float>(6, 0.f));  // the bad row was skipped, not written
  CHECK(internal::sum(a).item<float>() == 15.f);                      // and the device works on
}

TEST_CASE("int64 division by zero is raised at the next synchronization with the CPU's message, then cleared") {
  REQUIRE_DEVICE();
  const std::string cpu_message =
      "div: integer division by zero (a divisor element is 0; divide floating-point tensors for inf/nan)";
  const std::string device_message =
      cpu_message + " (detected on cuda:0 at a synchronization after the op was queued)";
  auto ints = [](std::vector<int64_t> v, Shape s = {}) { return tensor(std::move(v), std::move(s)); };
  CHECK(error_of([&] { internal::div(ints({7, 0}), ints({1, 0})); }) == cpu_message);  // the CPU's, for reference

  Tensor a = gpu(ints({7, -7, 5, 9})), good = gpu(ints({2, 1, 3, -2}));
  // tensor / tensor, same shape (the flat kernel): queued without a word, raised at to_vector.
  Tensor q = internal::div(a, gpu(ints({2, 0, 3, 0})));
  CHECK(error_of([&] { q.to_vector<int64_t>(); }) == device_message);
  // Raised once, then cleared: the same output reads back (the skipped divisions wrote 0), and a valid
  // division and its sync work.
  CHECK(q.to_vector<int64_t>() == std::vector<int64_t>{3, 0, 1, 0});
  CHECK(internal::div(a, good).to_vector<int64_t>() == std::vector<int64_t>{3, -7, 1, -4});

  // A broadcast zero (stride 0, still the flat kernel) and a broadcast column (the strided kernel),
  // raised at cuda::synchronize().
  CHECK(error_of([&] { internal::div(a, gpu(scalar_tensor(0.0, kInt64))); cuda::synchronize(); }) == device_message);
  Tensor m = gpu(internal::reshape(arange(-3, 3), {2, 3}));
  CHECK(error_of([&] { internal::div(m, gpu(ints({2, 0}, {2, 1}))); cuda::synchronize(); }) == device_message);
  CHECK(error_of([] { cuda::synchronize(); }).empty());
  CHECK(internal::div(m, gpu(ints({2, -1}, {2, 1}))).to_vector<int64_t>() == std::vector<int64_t>{-1, -1, 0, 0, -1, -2});

  // scalar / tensor (reverse: the tensor is the divisor).
  CHECK(error_of([&] { internal::binary_scalar(BinaryOp::Div, gpu(ints({3, 0, -4})), 6.0, true).to_vector<int64_t>(); }) ==
        device_message);
  CHECK(internal::binary_scalar(BinaryOp::Div, gpu(ints({3, -4, 7})), 6.0, true).to_vector<int64_t>() ==
        std::vector<int64_t>{2, -1, 0});

  // tensor / 0: the divisor is a host value, so internal::binary_scalar refuses it at the call, as on the CPU.
  CHECK(error_of([&] { internal::binary_scalar(BinaryOp::Div, a, 0.0); }) == cpu_message);
  // A fractional scalar computes in float32, as PyTorch's true division: no integer division at all.
  CHECK(internal::binary_scalar(BinaryOp::Div, a, 0.5).dtype() == kFloat32);
  // Handed to the backend anyway, the kernel checks it like a tensor divisor.
  Tensor out(a.shape(), kInt64, kGpu);
  backend_for(kGpu).binary_scalar(BinaryOp::Div, internal::make_plan(out, {&a}, "div"), out, a, 0.0, false);
  CHECK(error_of([] { cuda::synchronize(); }) == device_message);
  CHECK(internal::binary_scalar(BinaryOp::Div, a, -2.0).to_vector<int64_t>() == std::vector<int64_t>{-3, 3, -2, -4});

  // Floating-point division stays unchecked: inf and nan, as on the CPU, and nothing at the sync.
  std::vector<float> f = internal::div(gpu(tensor({1.f, -1.f, 0.f})), gpu(zeros({3}))).to_vector<float>();
  CHECK(std::isinf(f[0]));
  CHECK(f[0] > 0);
  CHECK(std::isinf(f[1]));
  CHECK(f[1] < 0);
  CHECK(std::isnan(f[2]));
}

TEST_CASE("int64 division truncates toward zero, as the CPU backend, on every kernel path") {
  REQUIRE_DEVICE();
  manual_seed(23);
  auto nonzero = [](const Shape& s) {  // divisors of both signs in [-20, 20), 0 made 1
    std::vector<int64_t> v = randint(-20, 20, s).to_vector<int64_t>();
    for (int64_t& d : v) d = d == 0 ? 1 : d;
    return tensor(v, s);
  };
  const std::pair<Shape, Shape> shapes[] = {
      {{1000}, {1000}}, {{1000}, {}}, {{}, {1000}}, {{4, 5}, {5}}, {{6, 1, 5}, {1, 7, 1}},
  };
  for (auto& [sa, sb] : shapes) {
    Tensor x = randint(-100, 100, sa), y = nonzero(sb);
    CAPTURE(sa);
    CAPTURE(sb);
    CHECK_MATCH(internal::div(gpu(x), gpu(y)), internal::div(x, y), 0.0);
  }
  Tensor x = randint(-100, 100, {999}), y = nonzero({999});
  for (double s : {7.0, -7.0, 1.0, -1.0}) {
    CAPTURE(s);
    CHECK_MATCH(internal::binary_scalar(BinaryOp::Div, gpu(x), s), internal::binary_scalar(BinaryOp::Div, x, s), 0.0);
    CHECK_MATCH(internal::binary_scalar(BinaryOp::Div, gpu(y), s, true), internal::binary_scalar(BinaryOp::Div, y, s, true), 0.0);
  }
  CHECK(internal::div(gpu(tensor(std::vector<int64_t>{7, -7, 7, -7})), gpu(tensor(std::vector<int64_t>{2, 2, -2, -2})))
            .to_vector<int64_t>() == std::vector<int64_t>{3, -3, -3, 3});
  CHECK(error_of([] { cuda::synchronize(); }).empty());
}

// --- indexing --------------------------------------------------------------------------------------

TEST_CASE("index_select and index_add_ with repeated indices, every dtype") {
  REQUIRE_DEVICE();
  manual_seed(22);
  for (Dtype dt : kAllDtypes) {
    Tensor a = random({50, 3, 4}, dt, -100, 100), idx = randint(0, 50, {200});
    Tensor sel = internal::index_select(a, idx);
    CHECK_MATCH(internal::index_select(gpu(a), gpu(idx)), sel, 0.0);
    Tensor acc = random({50, 3, 4}, dt, -100, 100), gacc = gpu(acc);
    internal::index_add_(acc, idx, sel);
    internal::index_add_(gacc, gpu(idx), gpu(sel));
    CHECK_MATCH(gacc, acc, tol(dt), tol(dt));  // float atomics add in any order
  }
  Tensor empty_rows = gpu(zeros({4, 0}));
  CHECK(internal::index_select(empty_rows, gpu(tensor(std::vector<int64_t>{3, 0}))).shape() == Shape{2, 0});
}

// --- the caching allocator -------------------------------------------------------------------------

TEST_CASE("the caching allocator reuses freed blocks without growing") {
  REQUIRE_DEVICE();
  cuda::synchronize();
  const size_t live = cuda::memory_allocated();
  void* first = nullptr;
  size_t reserved = 0;
  {
    Tensor t = empty({1 << 20}, {kFloat32, kGpu});
    first = t.data_ptr();
    reserved = cuda::memory_reserved();
    CHECK(cuda::memory_allocated() >= live + (4u << 20));
  }
  CHECK(cuda::memory_allocated() == live);
  CHECK(cuda::memory_reserved() == reserved);  // cached, not returned
  for (int i = 0; i < 100; ++i) {
    Tensor t = empty({1 << 20}, {kFloat32, kGpu});
    CHECK(t.data_ptr() == first);
  }
  CHECK(cuda::memory_reserved() == reserved);
  // A slightly smaller request lands in the same size class.
  {
    Tensor t = empty({(1 << 20) - 100}, {kFloat32, kGpu});
    CHECK(t.data_ptr() == first);
  }
  cuda::empty_cache();
  CHECK(cuda::memory_reserved() <= reserved - (4u << 20));
  CHECK(cuda::memory_allocated() == live);
}

TEST_CASE("out of memory names the request and what lockstep holds, and leaves the device usable") {
  REQUIRE_DEVICE();
  Tensor keep = empty({1 << 20}, {kFloat32, kGpu});
  std::string e = error_of([] { empty({int64_t{1} << 48}, {kFloat32, kGpu}); });  // 1 PiB
  CHECK(e.find("CUDA out of memory: tried to allocate 1073741824.00 MiB; lockstep holds ") == 0);
  CHECK(e.find(" MiB cached) on cuda:0") != std::string::npos);
  Tensor after = ones({1000}, {kFloat32, kGpu});
  CHECK(internal::sum(after).item<float>() == 1000.f);
}
