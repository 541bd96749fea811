// The CUDA backend's kernels, method by method (tensor/backend.h), against the CPU backend's on the same
// inputs and layouts: every elementwise table row and dtype on transposed, sliced and broadcast operands
// into strided outputs (the general path) and on contiguous ones (the flat path), copy_ between every
// dtype pair, strided batched GEMM with shared operands, every reduction on both reduce layouts and the
// split paths, softmax, every scan in both directions on rows and columns, the index kernels with
// repeated indices, stable sort with ties and NaN, and the errors the device raises at the next
// synchronization.
//
// Calls the backends directly (plans from internal::make_plan), so no ops-layer choice (making an
// operand contiguous first, say) can hide a kernel's handling of strides. Without a CUDA device every
// case skips and the binary prints "SKIPPED: no CUDA device".
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

using lockstep::testing::contains;
using lockstep::testing::error_of;

const Device kGpu = Device::cuda(0);
Backend& cpu_backend() { return backend_for(DeviceType::CPU); }
Backend& gpu_backend() { return backend_for(DeviceType::CUDA); }

const Dtype kComputeDtypes[] = {kFloat32, kFloat64, kInt64, kBool, kUInt8, kInt8, kInt16, kInt32};
const Dtype kEveryDtype[] = {kFloat32, kFloat64, kInt64, kBool, kUInt8, kInt8, kInt16, kInt32, kBFloat16, kFloat16};

const UnaryOp kUnaryOps[] = {
#define LOCKSTEP_ROW(Name, str, kinds) UnaryOp::Name,
    LOCKSTEP_UNARY_OPS(LOCKSTEP_ROW)
#undef LOCKSTEP_ROW
};
const BinaryOp kBinaryOps[] = {
#define LOCKSTEP_ROW(Name, str, kinds) BinaryOp::Name,
    LOCKSTEP_BINARY_OPS(LOCKSTEP_ROW)
#undef LOCKSTEP_ROW
};

// The rows' parameters (elu's alpha, scale and input_scale, softplus's beta and threshold, hardtanh's
// bounds, ...), the same for every row: each reads what it has, and none of them is degenerate.
const OpScalars kScalars{0.5, 2.0, 1.5};

bool accepts(OpDtypes kinds, Dtype dt) {
  if (kinds == OpDtypes::kFloating) return is_floating_point(dt);
  if (kinds == OpDtypes::kNumeric) return dt != kBool;
  return true;
}

// Fresh random values of any dtype: floating uniform in [lo, hi), integers in [lo, hi) (uint8 clamped to
// [0, 256)), bool about half true.
Tensor random(const Shape& s, Dtype dt, double lo = -3, double hi = 3) {
  if (dt == kBool) return internal::binary_scalar(BinaryOp::Gt, uniform(s, -1, 1), 0.0);
  if (is_floating_point(dt)) return internal::to_dtype(uniform(s, lo, hi, kFloat64), dt);
  if (dt == kUInt8) lo = std::max(lo, 0.0), hi = std::min(std::max(hi, 1.0), 256.0);
  return internal::to_dtype(randint(static_cast<int64_t>(lo), static_cast<int64_t>(std::ceil(hi)), s), dt);
}

// One tensor on both devices, with the same layout (the view is taken on each copy of one base). Outputs
// are compared through their bases, so a write outside the view shows too.
struct Both {
  Tensor cpu, gpu, cpu_base, gpu_base;
};
using View = std::function<Tensor(const Tensor&)>;
Tensor same(const Tensor& t) { return t; }
Both both(const Tensor& base, const View& view = same) {
  Tensor on_gpu = internal::to_device(base, kGpu);
  return {view(base), view(on_gpu), base, on_gpu};
}
// An output of `dt` with base shape `shape`, viewed through `view` (its elements start as 0).
Both output(const Shape& shape, Dtype dt, const View& view = same) { return both(zeros(shape, dt), view); }

View transposed = [](const Tensor& t) { return internal::transpose(t, 0, 1); };

// Math functions may differ by an ulp or two between the host's libm and the device's; a 16-bit result
// (computed in float32, rounded once) then by one unit of its format where the float32 values straddle a
// rounding boundary.
double rtol(Dtype dt) {
  return dt == kFloat32 ? 1e-5 : dt == kFloat64 ? 1e-12 : dt == kBFloat16 ? 0x1p-7 : dt == kFloat16 ? 0x1p-10 : 0.0;
}
double atol(Dtype dt) { return dt == kFloat32 ? 1e-6 : dt == kFloat64 ? 1e-12 : is_reduced_floating_point(dt) ? 1e-6 : 0.0; }

// x[i, j] (and x[i, j, :]) = NaN.
void set_nan(Tensor& x, int64_t i, int64_t j) {
  Tensor at = internal::narrow(internal::narrow(x, 0, i, 1), 1, j, 1);
  internal::fill_(at, NAN);
}

// The error the device recorded, raised at the next synchronization ("" when none).
std::string error_at_sync() {
  return error_of([] { gpu_backend().synchronize(kGpu); });
}

}  // namespace

// --- elementwise -----------------------------------------------------------------------------------

namespace {

View sliced = [](const Tensor& t) { return internal::slice(t, 1, 1, t.size(1), 2); };  // every other column

// The layouts each elementwise kernel runs on: an input's and the output's base shape and view.
struct Layout {
  const char* name;
  Shape in_base;
  View in;
  Shape out_base;
  View out;
};
const Layout kLayouts[] = {
    {"transposed into transposed (general path)", {5, 7}, transposed, {5, 7}, transposed},
    {"sliced into contiguous", {5, 13}, sliced, {5, 6}, same},
    {"contiguous into sliced", {5, 6}, same, {5, 13}, sliced},
    {"flat", {35}, same, {35}, same},
    {"broadcast scalar (stride 0), flat", {1}, [](const Tensor& t) { return internal::expand(t, {9}); }, {9}, same},
};

}  // namespace

TEST_CASE("unary: every table row and dtype (bfloat16 and float16 included), on every layout") {
  REQUIRE_DEVICE();
  manual_seed(1);
  for (UnaryOp op : kUnaryOps)
    for (Dtype dt : kEveryDtype) {
      if (!accepts(op_dtypes(op), dt)) continue;
      CAPTURE(op_name(op));
      CAPTURE(dt);
      for (const Layout& l : kLayouts) {
        CAPTURE(l.name);
        Both a = both(random(l.in_base, dt), l.in);
        Both out = output(l.out_base, op_returns_bool(op) ? kBool : dt, l.out);
        REQUIRE(out.cpu.shape() == a.cpu.shape());
        cpu_backend().unary(op, internal::make_plan(out.cpu, {&a.cpu}, "test"), out.cpu, a.cpu, kScalars);
        gpu_backend().unary(op, internal::make_plan(out.gpu, {&a.gpu}, "test"), out.gpu, a.gpu, kScalars);
        CHECK_MATCH(out.gpu_base, out.cpu_base, rtol(dt), atol(dt));
      }
    }
}

namespace {

// A second operand for `op`: nonzero for an integer divisor (a zero one is its own case below).
Tensor operand(BinaryOp op, const Shape& s, Dtype dt) {
  if (divides_integers(op) && !is_floating_point(dt)) return random(s, dt, 1, 6);
  return random(s, dt);
}

}  // namespace

TEST_CASE("binary and binary_scalar: every table row and dtype (bfloat16 and float16 included), on every layout, b broadcast") {
  REQUIRE_DEVICE();
  manual_seed(2);
  for (BinaryOp op : kBinaryOps)
    for (Dtype dt : kEveryDtype) {
      if (!accepts(op_dtypes(op), dt)) continue;
      CAPTURE(op_name(op));
      CAPTURE(dt);
      const Dtype out_dt = op_returns_bool(op) ? kBool : dt;
      for (const Layout& l : kLayouts) {
        CAPTURE(l.name);
        Both a = both(operand(op, l.in_base, dt), l.in);
        const Shape shape = a.cpu.shape();
        // b: one row broadcast down the first dimension (stride 0), or the same layout as a.
        Both b = shape.size() == 2 ? both(operand(op, {1, shape[1]}, dt),
                                          [&](const Tensor& t) { return internal::expand(t, shape); })
                                   : both(operand(op, l.in_base, dt), l.in);
        Both out = output(l.out_base, out_dt, l.out);
        cpu_backend().binary(op, internal::make_plan(out.cpu, {&a.cpu, &b.cpu}, "test"), out.cpu, a.cpu, b.cpu,
                             kScalars);
        gpu_backend().binary(op, internal::make_plan(out.gpu, {&a.gpu, &b.gpu}, "test"), out.gpu, a.gpu, b.gpu,
                             kScalars);
        CHECK_MATCH(out.gpu_base, out.cpu_base, rtol(dt), atol(dt));
        for (bool reverse : {false, true}) {
          CAPTURE(reverse);
          const double s = is_floating_point(dt) ? 1.75 : dt == kBool ? 1.0 : 3.0;
          Both o = output(l.out_base, out_dt, l.out);
          cpu_backend().binary_scalar(op, internal::make_plan(o.cpu, {&b.cpu}, "test"), o.cpu, b.cpu, s, reverse,
                                      kScalars);
          gpu_backend().binary_scalar(op, internal::make_plan(o.gpu, {&b.gpu}, "test"), o.gpu, b.gpu, s, reverse,
                                      kScalars);
          CHECK_MATCH(o.gpu_base, o.cpu_base, rtol(dt), atol(dt));
        }
      }
    }
  CHECK(error_at_sync().empty());
}

TEST_CASE("where: broadcast condition and operands, strided output, every dtype") {
  REQUIRE_DEVICE();
  manual_seed(3);
  for (Dtype dt : kEveryDtype) {
    CAPTURE(dt);
    Both cond = both(random({6, 1}, kBool), [](const Tensor& t) { return internal::expand(t, {6, 5}); });
    Both a = both(random({5, 6}, dt), transposed);
    Both b = both(random({5}, dt));
    Both out = output({6, 11}, dt, sliced);
    cpu_backend().where(internal::make_plan(out.cpu, {&cond.cpu, &a.cpu, &b.cpu}, "test"), out.cpu, cond.cpu, a.cpu,
                        b.cpu);
    gpu_backend().where(internal::make_plan(out.gpu, {&cond.gpu, &a.gpu, &b.gpu}, "test"), out.gpu, cond.gpu, a.gpu,
                        b.gpu);
    CHECK_MATCH(out.gpu_base, out.cpu_base);
  }
}

TEST_CASE("copy_ between every pair of dtypes (bfloat16 and float16 included), strided both ways; fill on every dtype") {
  REQUIRE_DEVICE();
  manual_seed(4);
  for (Dtype from : kEveryDtype)
    for (Dtype to : kEveryDtype) {
      CAPTURE(from);
      CAPTURE(to);
      // Values every dtype holds (no negative number into uint8: that conversion is undefined).
      Both a = both(random({4, 9}, from, 0, 100), transposed);
      for (bool strided_out : {true, false}) {
        Both out = strided_out ? output({4, 9}, to, transposed) : output({9, 4}, to);
        cpu_backend().copy_(internal::make_plan(out.cpu, {&a.cpu}, "test"), out.cpu, a.cpu);
        gpu_backend().copy_(internal::make_plan(out.gpu, {&a.gpu}, "test"), out.gpu, a.gpu);
        CHECK_MATCH(out.gpu_base, out.cpu_base);
      }
    }
  for (Dtype dt : kEveryDtype) {
    CAPTURE(dt);
    Both out = output({5, 13}, dt, sliced);
    cpu_backend().fill(internal::make_plan(out.cpu, {}, "test"), out.cpu, 2.5);
    gpu_backend().fill(internal::make_plan(out.gpu, {}, "test"), out.gpu, 2.5);
    CHECK_MATCH(out.gpu_base, out.cpu_base);  // the columns the slice skips stay 0
  }
}

TEST_CASE("an integer division by zero is recorded on the device and raised at the next synchronization") {
  REQUIRE_DEVICE();
  for (Dtype dt : {kInt64, kUInt8}) {
    CAPTURE(dt);
    Tensor a = internal::to_device(internal::to_dtype(tensor(std::vector<int64_t>{7, 8, 9}), dt), kGpu);
    Tensor b = internal::to_device(internal::to_dtype(tensor(std::vector<int64_t>{2, 0, 3}), dt), kGpu);
    Tensor out = empty({3}, {dt, kGpu});
    gpu_backend().binary(BinaryOp::Div, internal::make_plan(out, {&a, &b}, "test"), out, a, b);
    CHECK(contains(error_at_sync(), detail::kIntegerDivisionByZero));
    CHECK(error_at_sync().empty());  // raised once
    gpu_backend().binary_scalar(BinaryOp::Div, internal::make_plan(out, {&b}, "test"), out, b, 6, /*reverse=*/true);
    CHECK(contains(error_at_sync(), detail::kIntegerDivisionByZero));
    gpu_backend().binary_scalar(BinaryOp::Div, internal::make_plan(out, {&a}, "test"), out, a, 0, false);
    CHECK(contains(error_at_sync(), detail::kIntegerDivisionByZero));
  }
}

// --- GEMM ------------------------------------------------------------------------------------------

TEST_CASE("gemm: batched with a shared operand (batch stride 0), transposes, C with ldc > n, k == 0") {
  REQUIRE_DEVICE();
  manual_seed(5);
  const int64_t batch = 3, m = 4, n = 5, k = 6, ldc = 7;
  for (Dtype dt : {kFloat32, kFloat64})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        CAPTURE(dt);
        CAPTURE(ta);
        CAPTURE(tb);
        // A: one matrix per product; B: one matrix for all; C: [batch, m, ldc], the last columns padding.
        Both a = both(random({batch, ta ? k : m, ta ? m : k}, dt));
        Both b = both(random({tb ? n : k, tb ? k : n}, dt));
        GemmArgs g;
        g.batch = batch, g.m = m, g.n = n, g.k = k, g.trans_a = ta, g.trans_b = tb;
        g.lda = ta ? m : k, g.ldb = tb ? k : n, g.ldc = ldc;
        g.batch_stride_a = m * k, g.batch_stride_b = 0, g.batch_stride_c = m * ldc;
        g.alpha = 1.5, g.beta = 0.5;
        Both c = both(random({batch, m, ldc}, dt));
        cpu_backend().gemm(c.cpu, a.cpu, b.cpu, g);
        gpu_backend().gemm(c.gpu, a.gpu, b.gpu, g);
        CHECK_MATCH(c.gpu_base, c.cpu_base, dt == kFloat32 ? 1e-5 : 1e-12, dt == kFloat32 ? 1e-5 : 1e-12);
        // k == 0: out = beta * out, padding untouched; beta == 0 writes zeros.
        for (double beta : {0.5, 0.0}) {
          GemmArgs z = g;
          z.k = 0, z.beta = beta;
          Both c0 = both(random({batch, m, ldc}, dt));
          cpu_backend().gemm(c0.cpu, a.cpu, b.cpu, z);
          gpu_backend().gemm(c0.gpu, a.gpu, b.gpu, z);
          CHECK_MATCH(c0.gpu_base, c0.cpu_base);
        }
      }
  // Products that would write the same C concurrently are refused.
  Tensor a = zeros({2, 2}, {kFloat32, kGpu}), c = zeros({2, 2}, {kFloat32, kGpu});
  GemmArgs g;
  g.batch = 2, g.m = g.n = g.k = 2, g.lda = g.ldb = g.ldc = 2;
  CHECK(contains(error_of([&] { gpu_backend().gemm(c, a, a, g); }), "matmul: output matrices overlap"));
}

TEST_CASE("gemm in bfloat16 (cublasGemmEx, float32 accumulation): the float32 product of the same values, rounded once") {
  REQUIRE_DEVICE();
  manual_seed(9);
  const int64_t batch = 2, m = 5, n = 7, k = 33;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      Tensor a = internal::to_dtype(random({batch, ta ? k : m, ta ? m : k}, kFloat32), kBFloat16);
      Tensor b = internal::to_dtype(random({batch, tb ? n : k, tb ? k : n}, kFloat32), kBFloat16);
      Tensor c = internal::to_dtype(random({batch, m, n}, kFloat32), kBFloat16);
      GemmArgs g;
      g.batch = batch, g.m = m, g.n = n, g.k = k, g.trans_a = ta, g.trans_b = tb;
      g.lda = ta ? m : k, g.ldb = tb ? k : n, g.ldc = n;
      g.batch_stride_a = m * k, g.batch_stride_b = k * n, g.batch_stride_c = m * n;
      g.alpha = 1.5, g.beta = 0.5;
      // The reference: float32 on the bf16 values, rounded to bf16 at the end.
      Tensor want = internal::to_dtype(c, kFloat32);
      cpu_backend().gemm(want, internal::to_dtype(a, kFloat32), internal::to_dtype(b, kFloat32), g);
      want = internal::to_dtype(want, kBFloat16);
      Tensor got = internal::to_device(c, kGpu);
      gpu_backend().gemm(got, internal::to_device(a, kGpu), internal::to_device(b, kGpu), g);
      // Float32 sums in another order may round to the neighbouring bf16 value: one ulp is 2^-8 relative.
      CHECK_MATCH(internal::to_dtype(internal::to_device(got, Device::cpu()), kFloat32),
                  internal::to_dtype(want, kFloat32), 8e-3, 1e-2);
    }
}

// --- reductions, softmax ---------------------------------------------------------------------------

TEST_CASE("reduce: every op and dtype, rows (inner 1) and columns, split and unsplit, NaN and ties") {
  REQUIRE_DEVICE();
  manual_seed(6);
  const struct {
    int64_t outer, n, inner;
  } shapes[] = {{3, 10, 4}, {6, 50, 1}, {1, 9000, 1}, {2, 3000, 3}, {1, 1, 1}};
#define LOCKSTEP_ROW(Name, str, kinds) Reduction::Name,
  const Reduction every[] = {LOCKSTEP_REDUCTIONS(LOCKSTEP_ROW)};  // every row of tensor/reduce_ops.h
#undef LOCKSTEP_ROW
  for (Dtype dt : kComputeDtypes)
    for (Reduction op : every) {
      const OpDtypes kinds = reduction_info(op).dtypes;
      if (kinds == OpDtypes::kNumeric && dt == kBool) continue;
      if (kinds == OpDtypes::kFloating && !is_floating_point(dt)) continue;
      for (const auto& s : shapes) {
        // A long product leaves the range (inf, then inf * 0 = NaN in one order and 0 in another).
        if (op == Reduction::Prod && s.n > 50) continue;
        CAPTURE(dt);
        CAPTURE(int(op));
        CAPTURE(s.n);
        // Integers from a small range, so that extremes tie; a NaN in some rows of floating inputs.
        Tensor x = random({s.outer, s.n, s.inner}, dt, -4, 4);
        if (is_floating_point(dt) && s.n > 3) {
          set_nan(x, 0, 2);
          set_nan(x, s.outer - 1, s.n - 1);
        }
        Both a = both(x);
        Both out = output({s.outer, s.inner}, reduction_info(op).index ? kInt64 : dt);
        cpu_backend().reduce(op, out.cpu, a.cpu, s.outer, s.n, s.inner);
        gpu_backend().reduce(op, out.gpu, a.gpu, s.outer, s.n, s.inner);
        // Both accumulate float32 in double (tensor/reduce_ops.h), in different orders.
        CHECK_MATCH(out.gpu_base, out.cpu_base, dt == kFloat32 ? 1e-5 : rtol(dt), dt == kFloat32 ? 1e-3 : 0.0);
      }
    }
}

TEST_CASE("softmax and log_softmax, forward and backward, along rows and columns") {
  REQUIRE_DEVICE();
  manual_seed(7);
  const struct {
    int64_t outer, n, inner;
  } shapes[] = {{4, 33, 1}, {3, 7, 5}, {1, 300, 1}};
  for (Dtype dt : {kFloat32, kFloat64})
    for (bool log : {false, true})
      for (const auto& s : shapes) {
        CAPTURE(dt);
        CAPTURE(log);
        CAPTURE(s.n);
        Both a = both(random({s.outer, s.n, s.inner}, dt, -10, 10));
        Both y = output({s.outer, s.n, s.inner}, dt);
        cpu_backend().softmax(y.cpu, a.cpu, s.outer, s.n, s.inner, log);
        gpu_backend().softmax(y.gpu, a.gpu, s.outer, s.n, s.inner, log);
        CHECK_MATCH(y.gpu_base, y.cpu_base, rtol(dt), atol(dt));
        Both g = both(random({s.outer, s.n, s.inner}, dt));
        Both gi = output({s.outer, s.n, s.inner}, dt);
        cpu_backend().softmax_backward(gi.cpu, g.cpu, y.cpu, s.outer, s.n, s.inner, log);
        gpu_backend().softmax_backward(gi.gpu, g.gpu, y.gpu, s.outer, s.n, s.inner, log);
        CHECK_MATCH(gi.gpu_base, gi.cpu_base, dt == kFloat32 ? 1e-4 : 1e-10, dt == kFloat32 ? 1e-5 : 1e-12);
      }
}

// --- scans -----------------------------------------------------------------------------------------

TEST_CASE("scan: every row and dtype, rows (inner 1) and columns, forward and reversed, NaN and ties") {
  REQUIRE_DEVICE();
  manual_seed(11);
  const struct {
    int64_t outer, n, inner;
  } shapes[] = {{3, 10, 4}, {9, 50, 1}, {1, 300, 1}, {2, 7, 300}, {1, 1, 1}};
#define LOCKSTEP_ROW(Name, str, kinds) Scan::Name,
  const Scan every[] = {LOCKSTEP_SCANS(LOCKSTEP_ROW)};  // every row of tensor/scan_ops.h
#undef LOCKSTEP_ROW
  for (Dtype dt : kEveryDtype)
    for (Scan op : every) {
      if (!accepts(scan_info(op).dtypes, dt)) continue;
      for (const auto& s : shapes)
        for (bool reverse : {false, true}) {
          CAPTURE(dt);
          CAPTURE(scan_name(op));
          CAPTURE(s.n);
          CAPTURE(s.inner);
          CAPTURE(reverse);
          // Floating products of values near 1 stay in range; integers from a small range tie (and
          // their products wrap, the same way on both devices); a NaN in some columns.
          const bool product = op == Scan::Cumprod && is_floating_point(dt);
          Tensor x = random({s.outer, s.n, s.inner}, dt, product ? 0.5 : -4, product ? 1.5 : 4);
          if (is_floating_point(dt) && s.n > 3) {
            set_nan(x, 0, 2);
            set_nan(x, s.outer - 1, s.n - 1);
          }
          Both a = both(x);
          Both out = output({s.outer, s.n, s.inner}, dt);
          Both idx = output({s.outer, s.n, s.inner}, kInt64);
          Tensor no_cpu, no_gpu;
          const bool index = scan_info(op).index;
          cpu_backend().scan(op, out.cpu, index ? idx.cpu : no_cpu, a.cpu, s.outer, s.n, s.inner, reverse);
          gpu_backend().scan(op, out.gpu, index ? idx.gpu : no_gpu, a.gpu, s.outer, s.n, s.inner, reverse);
          // One order, one accumulator on both (tensor/scan_ops.h); logcumsumexp's exp and log1p are
          // each device's own.
          CHECK_MATCH(out.gpu_base, out.cpu_base, rtol(dt), atol(dt));
          if (index) CHECK_MATCH(idx.gpu_base, idx.cpu_base);
        }
    }
  // Through the ops layer, on transposed and sliced inputs along every dimension.
  for (Scan op : every)
    for (int64_t dim : {0, 1, 2, -1}) {
      CAPTURE(scan_name(op));
      CAPTURE(dim);
      Both a = both(random({4, 6, 5}, kFloat32), [](const Tensor& t) {
        return internal::slice(internal::transpose(t, 0, 2), 1, 1, 6, 2);  // [5, 3, 4], non-contiguous
      });
      const internal::ScanResult want = internal::scan(op, a.cpu, dim), got = internal::scan(op, a.gpu, dim);
      CHECK_MATCH(got.values, want.values, rtol(kFloat32), atol(kFloat32));
      if (want.indices.defined()) CHECK_MATCH(got.indices, want.indices);
    }
  CHECK(error_at_sync().empty());
}

// --- indexing, sort --------------------------------------------------------------------------------

TEST_CASE("index_select, index_add, gather, scatter_add over [outer, n, inner] with repeated indices") {
  REQUIRE_DEVICE();
  manual_seed(8);
  const int64_t outer = 3, n = 6, inner = 4, k = 5;
  Both index = both(tensor(std::vector<int64_t>{5, 0, 2, 2, 5}));
  Both positions = both(randint(0, n, {outer, k, inner}));
  for (Dtype dt : kEveryDtype) {
    CAPTURE(dt);
    Both a = both(random({outer, n, inner}, dt, 0, 50));
    Both sel = output({outer, k, inner}, dt);
    cpu_backend().index_select(sel.cpu, a.cpu, index.cpu, outer, n, inner);
    gpu_backend().index_select(sel.gpu, a.gpu, index.gpu, outer, n, inner);
    CHECK_MATCH(sel.gpu_base, sel.cpu_base);
    Both gat = output({outer, k, inner}, dt);
    cpu_backend().gather(gat.cpu, a.cpu, positions.cpu, outer, n, inner);
    gpu_backend().gather(gat.gpu, a.gpu, positions.gpu, outer, n, inner);
    CHECK_MATCH(gat.gpu_base, gat.cpu_base);
    // The CPU's adds take no 16-bit destination (its ops layer adds in a float32 copy):
    // cuda_half_kernels_test checks CUDA's against float32.
    if (is_reduced_floating_point(dt)) continue;
    Both src = both(random({outer, k, inner}, dt, 0, 50));
    Both added = both(random({outer, n, inner}, dt, 0, 50));
    cpu_backend().index_add(added.cpu, index.cpu, src.cpu, outer, n, inner);
    gpu_backend().index_add(added.gpu, index.gpu, src.gpu, outer, n, inner);
    CHECK_MATCH(added.gpu_base, added.cpu_base, rtol(dt));
    Both scattered = both(random({outer, n, inner}, dt, 0, 50));
    cpu_backend().scatter_add(scattered.cpu, positions.cpu, src.cpu, outer, n, inner);
    gpu_backend().scatter_add(scattered.gpu, positions.gpu, src.gpu, outer, n, inner);
    CHECK_MATCH(scattered.gpu_base, scattered.cpu_base, rtol(dt));
  }
  CHECK(error_at_sync().empty());
}

TEST_CASE("scatter's rows (assign, multiply, amax, amin) over [outer, n, inner] with repeated indices") {
  REQUIRE_DEVICE();
  manual_seed(10);
  const int64_t outer = 3, n = 6, inner = 4, k = 5;
  Both positions = both(randint(0, n, {outer, k, inner}));
  // For assign, no position twice (a repeated one keeps any of its values): column (o, i) takes rows
  // (j + o + i) % n, distinct for j < k <= n.
  std::vector<int64_t> distinct;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < inner; ++i) distinct.push_back((j + o + i) % n);
  Both unique_positions = both(tensor(distinct, {outer, k, inner}));
  const Scatter rows[] = {Scatter::Assign, Scatter::Multiply, Scatter::Amax, Scatter::Amin};
  for (Dtype dt : kEveryDtype)
    for (Scatter op : rows) {
      CAPTURE(dt);
      CAPTURE(scatter_name(op));
      if (op != Scatter::Assign && dt == kBool) continue;  // kNumeric rows
      // A 16-bit product rounds once per factor, in an order the device does not fix.
      if (op == Scatter::Multiply && is_reduced_floating_point(dt)) continue;
      const bool mul = op == Scatter::Multiply;
      Both src = both(mul && is_floating_point(dt) ? random({outer, k, inner}, dt, 0.5, 1.5)
                                                   : random({outer, k, inner}, dt, 0, 50));
      Both out = both(mul && is_floating_point(dt) ? random({outer, n, inner}, dt, 0.5, 1.5)
                                                   : random({outer, n, inner}, dt, 0, 50));
      const Both& at = op == Scatter::Assign ? unique_positions : positions;
      cpu_backend().scatter(op, out.cpu, at.cpu, src.cpu, outer, n, inner);
      gpu_backend().scatter(op, out.gpu, at.gpu, src.gpu, outer, n, inner);
      CHECK_MATCH(out.gpu_base, out.cpu_base, mul ? rtol(dt) : 0.0);
    }
  // NaN stays, scattered or already there, on both devices.
  const double nan = std::nan("");
  Both out = both(tensor(std::vector<float>{1, nan, 3}));
  Both src = both(tensor(std::vector<float>{nan, 5, 2, 7}));
  Both at = both(tensor(std::vector<int64_t>{0, 1, 2, 2}));
  cpu_backend().scatter(Scatter::Amax, out.cpu, at.cpu, src.cpu, 1, 3, 1);
  gpu_backend().scatter(Scatter::Amax, out.gpu, at.gpu, src.gpu, 1, 3, 1);
  CHECK_MATCH(out.gpu_base, out.cpu_base);
  const std::vector<float> got = out.gpu_base.to_vector<float>();
  CHECK((std::isnan(got[0]) && std::isnan(got[1]) && got[2] == 7));
  CHECK(error_at_sync().empty());
}

TEST_CASE("an index out of range is raised at the next synchronization, naming the op, index and bound") {
  REQUIRE_DEVICE();
  Tensor a = zeros({2, 4, 3}, {kFloat32, kGpu}), out = zeros({2, 2, 3}, {kFloat32, kGpu});
  Tensor bad = internal::to_device(tensor(std::vector<int64_t>{1, 4}), kGpu);
  gpu_backend().index_select(out, a, bad, 2, 4, 3);
  CHECK(contains(error_at_sync(), "index_select: index 4 at position 1 is out of range for a dimension of size 4"));
  gpu_backend().index_add(a, bad, out, 2, 4, 3);
  CHECK(contains(error_at_sync(), "index_add_: index 4 at position 1 is out of range for a dimension of size 4"));
  Tensor positions = internal::to_device(tensor(std::vector<int64_t>{0, 1, 2, 3, -1, 0}, {2, 1, 3}), kGpu);
  Tensor small = zeros({2, 1, 3}, {kFloat32, kGpu});
  gpu_backend().gather(small, a, positions, 2, 4, 3);
  CHECK(contains(error_at_sync(), "gather: index -1 at position 4 is out of range for a dimension of size 4"));
  gpu_backend().scatter_add(a, positions, small, 2, 4, 3);
  CHECK(contains(error_at_sync(), "scatter_add_: index -1 at position 4 is out of range for a dimension of size 4"));
  gpu_backend().scatter(Scatter::Assign, a, positions, small, 2, 4, 3);
  CHECK(contains(error_at_sync(), "scatter_: index -1 at position 4 is out of range for a dimension of size 4"));
  gpu_backend().scatter(Scatter::Amax, a, positions, small, 2, 4, 3);
  CHECK(contains(error_at_sync(), "scatter_reduce_: index -1 at position 4 is out of range for a dimension of size 4"));
  CHECK(error_at_sync().empty());
}

TEST_CASE("sort: stable, ascending and descending, ties and NaN, rows longer than a block") {
  REQUIRE_DEVICE();
  manual_seed(9);
  for (Dtype dt : kComputeDtypes)
    for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{300}})
      for (bool descending : {false, true}) {
        CAPTURE(dt);
        CAPTURE(n);
        CAPTURE(descending);
        const int64_t rows = 3;
        Tensor x = random({rows, n}, dt, -4, 4);  // integers: many ties
        if (is_floating_point(dt) && n > 2) {
          set_nan(x, 1, 1);
          set_nan(x, 1, n - 1);
        }
        Both a = both(x);
        Both values = output({rows, n}, dt), indices = output({rows, n}, kInt64);
        cpu_backend().sort(values.cpu, indices.cpu, a.cpu, rows, n, descending);
        gpu_backend().sort(values.gpu, indices.gpu, a.gpu, rows, n, descending);
        CHECK_MATCH(values.gpu_base, values.cpu_base);
        CHECK_MATCH(indices.gpu_base, indices.cpu_base);
      }
}

TEST_CASE("sgd_step: momentum, dampening, weight decay, nesterov") {
  REQUIRE_DEVICE();
  manual_seed(10);
  for (Dtype dt : {kFloat32, kFloat64}) {
    Both p = both(random({1000}, dt)), g = both(random({1000}, dt)), m = both(zeros({1000}, dt));
    for (bool first : {true, false}) {
      cpu_backend().sgd_step(p.cpu, g.cpu, m.cpu, 0.1, 0.9, 0.1, 0.01, true, first);
      gpu_backend().sgd_step(p.gpu, g.gpu, m.gpu, 0.1, 0.9, 0.1, 0.01, true, first);
    }
    CHECK_MATCH(p.gpu_base, p.cpu_base, rtol(dt));
    CHECK_MATCH(m.gpu_base, m.cpu_base, rtol(dt));
  }
}
