// The CUDA kernels that read and write bfloat16 and float16 directly (reductions, softmax and the NLL
// loss, LayerNorm, BatchNorm, max pooling, the index adds, sort, the SGD and Adam steps), each against
// the CPU backend run in float32 on the same 16-bit values and rounded to 16 bits once: the rule the
// kernels follow (load 16 bits, compute in float32, store 16 bits). Odd sizes, both reduce layouts and
// the split paths; then the ops layer on non-contiguous 16-bit tensors, reductions over middle
// dimensions, and the errors for a dtype no kernel takes; last, the random fills, dropout's mask and
// bernoulli, from the float32 Philox draws.
//
// Kernels are called through the backends (tensor/backend.h) so that nothing in the ops layer can hand
// them a float32 copy. Without a CUDA device every case skips and the binary prints "SKIPPED: no CUDA
// device".
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "tensor/api.h"
#include "tensor/batch_norm.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/util/half_match.h"
#include "tests/util/tensor_match.h"
#include "tests/util/test_util.h"

using namespace lockstep;

namespace {

using lockstep::testing::contains;
using lockstep::testing::error_of;

using lockstep::testing::kHalves;
using lockstep::testing::ulp;

const Device kGpu = Device::cuda(0);
Backend& cpu_backend() { return backend_for(DeviceType::CPU); }
Backend& gpu_backend() { return backend_for(DeviceType::CUDA); }

Tensor gpu(const Tensor& t) { return internal::to_device(t, kGpu); }
Tensor host(const Tensor& t) { return internal::to_device(t, Device::cpu()); }
Tensor f32(const Tensor& t) { return t.defined() ? internal::to_dtype(t, kFloat32) : t; }

// Uniform values in [lo, hi), drawn in float64 and rounded to dt (so they are exact in float32 too).
Tensor random(const Shape& s, Dtype dt, double lo = -3, double hi = 3) {
  return internal::to_dtype(uniform(s, lo, hi, kFloat64), dt);
}

// "" when `got` (any device) matches `want` within `ulps` units of want's format (tests/util/half_match.h's
// ulp for 16 bits, where float32 arithmetic in another order may round to the neighbouring value;
// 1e-6 a unit for float32; exact for the rest) of its magnitude plus atol; else the mismatch.
std::string ulps_mismatch(const Tensor& got, const Tensor& want, double ulps = 1, double atol = 0) {
  const double rtol = want.dtype() == kFloat32 ? 1e-6 * ulps
                      : is_reduced_floating_point(want.dtype()) ? ulps * ulp(want.dtype())
                                                                : 0.0;
  return lockstep::testing::mismatch(got, want, rtol, atol);
}
#define CHECK_ULPS(got, want, ...) CHECK_NO_MISMATCH(ulps_mismatch((got), (want) __VA_OPT__(, ) __VA_ARGS__))

// The float32 result rounded to dt once: what a 16-bit kernel should store.
Tensor rounded(const Tensor& t, Dtype dt) { return internal::to_dtype(t, dt); }

// An uninitialised tensor for a kernel to write (on the CPU unless `device` says otherwise).
Tensor out(const Shape& s, Dtype dt, Device device = Device::cpu()) { return Tensor(s, dt, device); }

void set_nan(Tensor& x, int64_t i, int64_t j) {
  Tensor at = internal::narrow(internal::narrow(x, 0, i, 1), 1, j, 1);
  internal::fill_(at, NAN);
}

std::string error_at_sync() {
  return error_of([] { gpu_backend().synchronize(kGpu); });
}

struct Dims {
  int64_t outer, n, inner;
};

}  // namespace

// --- reductions ------------------------------------------------------------------------------------

TEST_CASE("reduce at 16 bits: every row, rows and columns, split and unsplit, odd sizes, NaN and ties") {
  REQUIRE_DEVICE();
  manual_seed(21);
  const Dims shapes[] = {{3, 10, 4}, {6, 50, 1}, {1, 9000, 1}, {2, 3000, 3}, {5, 7, 33}, {1, 1, 1}, {7, 1, 5}};
#define LOCKSTEP_ROW(Name, str, kinds) Reduction::Name,
  const Reduction every[] = {LOCKSTEP_REDUCTIONS(LOCKSTEP_ROW)};
#undef LOCKSTEP_ROW
  for (Dtype dt : kHalves)
    for (Reduction op : every)
      for (const Dims& s : shapes) {
        if (op == Reduction::Prod && s.n > 50) continue;  // leaves the range
        CAPTURE(dt);
        CAPTURE(reduction_name(op));
        CAPTURE(s.n);
        CAPTURE(s.inner);
        // Values on a coarse grid, so that extremes tie; a NaN in some rows.
        Tensor x = internal::to_dtype(internal::mul(internal::to_dtype(randint(-8, 8, {s.outer, s.n, s.inner}),
                                                                       kFloat32), 0.375),
                                      dt);
        if (op != Reduction::Prod) x = internal::add(x, random({s.outer, s.n, s.inner}, dt, 0, 0.25));
        x = internal::to_dtype(x, dt);
        if (s.n > 3) {
          set_nan(x, 0, 2);
          set_nan(x, s.outer - 1, s.n - 1);
        }
        const bool index = reduction_info(op).index;
        Tensor want = out(Shape{s.outer, s.inner}, index ? kInt64 : kFloat32);
        cpu_backend().reduce(op, want, f32(x), s.outer, s.n, s.inner);
        Tensor got = out(Shape{s.outer, s.inner}, index ? kInt64 : dt, kGpu);
        gpu_backend().reduce(op, got, gpu(x), s.outer, s.n, s.inner);
        CHECK_ULPS(got, index ? want : rounded(want, dt));
      }
}

TEST_CASE("reduce at 16 bits: a sum of 10^5 values rounds once, not per add") {
  REQUIRE_DEVICE();
  for (Dtype dt : kHalves) {
    CAPTURE(dt);
    // 1 + 10^5 values of 2^-12 each: at 16 bits every add alone would round away.
    Tensor x = full({100001}, 0x1p-12, {dt});
    Tensor first = internal::narrow(x, 0, 0, 1);
    internal::fill_(first, 1.0);
    Tensor got = out(Shape{1}, dt, kGpu);
    gpu_backend().reduce(Reduction::Sum, got, gpu(x), 1, x.numel(), 1);
    CHECK(host(got).to_vector<double>()[0] == doctest::Approx(1 + 1e5 * 0x1p-12).epsilon(ulp(dt)));
  }
}

// --- softmax and the NLL loss ----------------------------------------------------------------------

TEST_CASE("softmax and log_softmax at 16 bits, forward and backward, along rows and columns") {
  REQUIRE_DEVICE();
  manual_seed(22);
  const Dims shapes[] = {{4, 33, 1}, {3, 7, 5}, {1, 300, 1}, {2, 1, 3}, {5, 257, 1}};
  for (Dtype dt : kHalves)
    for (bool log : {false, true})
      for (const Dims& s : shapes) {
        CAPTURE(dt);
        CAPTURE(log);
        CAPTURE(s.n);
        const Shape shape{s.outer, s.n, s.inner};
        Tensor a = random(shape, dt, -8, 8);
        Tensor want = out(shape, kFloat32);
        cpu_backend().softmax(want, f32(a), s.outer, s.n, s.inner, log);
        Tensor y(shape, dt, kGpu);
        gpu_backend().softmax(y, gpu(a), s.outer, s.n, s.inner, log);
        CHECK_ULPS(y, rounded(want, dt), 1, 1e-7);
        // The backward from the 16-bit output the forward stored.
        Tensor g = random(shape, dt);
        Tensor y16 = host(y);
        Tensor want_gi = out(shape, kFloat32);
        cpu_backend().softmax_backward(want_gi, f32(g), f32(y16), s.outer, s.n, s.inner, log);
        Tensor gi(shape, dt, kGpu);
        gpu_backend().softmax_backward(gi, gpu(g), y, s.outer, s.n, s.inner, log);
        CHECK_ULPS(gi, rounded(want_gi, dt), 1, 1e-6);
      }
}

TEST_CASE("nll_loss at 16 bits: the loss summed in double and rounded once; the backward's one value per row") {
  REQUIRE_DEVICE();
  manual_seed(23);
  for (Dtype dt : kHalves) {
    CAPTURE(dt);
    const int64_t n = 37, c = 11;
    Tensor logp = random({n, c}, dt, -5, 0);
    Tensor target = randint(0, c, {n});
    for (double scale : {1.0, 1.0 / n}) {
      Tensor want = out(Shape{}, kFloat32);
      cpu_backend().nll_loss(want, f32(logp), target, scale);
      Tensor got = out(Shape{}, dt, kGpu);
      gpu_backend().nll_loss(got, gpu(logp), gpu(target), scale);
      CHECK_ULPS(got, rounded(want, dt));
      Tensor go = internal::to_dtype(tensor({0.75f}), dt);
      Tensor want_g = zeros({n, c});
      cpu_backend().nll_loss_backward(want_g, f32(go), target, scale);
      Tensor g = zeros({n, c}, {dt, kGpu});
      gpu_backend().nll_loss_backward(g, gpu(go), gpu(target), scale);
      CHECK_ULPS(g, rounded(want_g, dt));
    }
    // A target out of range is raised at the next synchronization, as for float32.
    Tensor bad = gpu(tensor(std::vector<int64_t>{0, c}));
    Tensor loss = out(Shape{}, dt, kGpu);
    gpu_backend().nll_loss(loss, gpu(internal::contiguous(internal::narrow(logp, 0, 0, 2))), bad, 1.0);
    CHECK(!error_at_sync().empty());
  }
}

// --- LayerNorm, BatchNorm, max pooling -------------------------------------------------------------

TEST_CASE("layer_norm at 16 bits: float32 statistics, outputs and gradients rounded once, with and without affine") {
  REQUIRE_DEVICE();
  manual_seed(24);
  for (Dtype dt : kHalves)
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{300}})
      for (bool affine : {true, false}) {
        CAPTURE(dt);
        CAPTURE(n);
        CAPTURE(affine);
        const int64_t rows = 5;
        Tensor x = random({rows, n}, dt, -2, 4), w, b;
        if (affine) w = random({n}, dt, 0.5, 1.5), b = random({n}, dt, -1, 1);
        Tensor want_y = out({rows, n}, kFloat32), want_mean = out(Shape{rows}, kFloat32), want_rstd = out(Shape{rows}, kFloat32);
        cpu_backend().layer_norm(want_y, want_mean, want_rstd, f32(x), f32(w), f32(b), rows, n, 1e-5);
        Tensor y = out({rows, n}, dt, kGpu), mean = out(Shape{rows}, kFloat32, kGpu), rstd = out(Shape{rows}, kFloat32, kGpu);
        gpu_backend().layer_norm(y, mean, rstd, gpu(x), affine ? gpu(w) : w, affine ? gpu(b) : b, rows, n, 1e-5);
        CHECK_ULPS(y, rounded(want_y, dt), 1, 1e-3);
        CHECK_ULPS(mean, want_mean, 4, 1e-6);
        CHECK_ULPS(rstd, want_rstd, 4);
        Tensor gy = random({rows, n}, dt);
        Tensor want_gx = out({rows, n}, kFloat32), want_gw, want_gb;
        if (affine) want_gw = out(Shape{n}, kFloat32), want_gb = out(Shape{n}, kFloat32);
        cpu_backend().layer_norm_backward(want_gx, want_gw, want_gb, f32(gy), f32(x), want_mean, want_rstd, f32(w),
                                          rows, n);
        Tensor gx = out({rows, n}, dt, kGpu), gw, gb;
        if (affine) gw = out(Shape{n}, dt, kGpu), gb = out(Shape{n}, dt, kGpu);
        gpu_backend().layer_norm_backward(gx, gw, gb, gpu(gy), gpu(x), mean, rstd, affine ? gpu(w) : w, rows, n);
        CHECK_ULPS(gx, rounded(want_gx, dt), 2, 1e-3);
        if (affine) {
          CHECK_ULPS(gw, rounded(want_gw, dt), 2, 1e-3);
          CHECK_ULPS(gb, rounded(want_gb, dt), 1, 1e-6);
        }
      }
}

TEST_CASE("batch_norm's four kernels at 16 bits, with a float32 weight and bias, odd sizes") {
  REQUIRE_DEVICE();
  manual_seed(25);
  for (Dtype dt : kHalves)
    for (bool affine : {true, false}) {
      CAPTURE(dt);
      CAPTURE(affine);
      const int64_t N = 3, C = 5, inner = 7;
      Tensor x = random({N, C, inner}, dt, -1, 3), gy = random({N, C, inner}, dt);
      Tensor w = affine ? random({C}, kFloat32, 0.5, 1.5) : Tensor(), b = affine ? random({C}, kFloat32) : Tensor();
      Tensor want_sums = out({2, C}, kFloat64), sums = out({2, C}, kFloat64, kGpu);
      cpu_backend().batch_norm_stats(want_sums, f32(x), N, C, inner);
      gpu_backend().batch_norm_stats(sums, gpu(x), N, C, inner);
      // The 16-bit values are exact in float32 and summed in double: the same sums up to the order.
      CHECK(internal::allclose(host(sums), want_sums, 1e-12, 1e-12));
      const internal::BatchNormMoments mo = internal::batch_norm_moments(want_sums, double(N * inner), 1e-5);
      Tensor want_y = out({N, C, inner}, kFloat32), y = out({N, C, inner}, dt, kGpu);
      cpu_backend().batch_norm_elemt(want_y, f32(x), mo.mean, mo.invstd, w, b, N, C, inner);
      gpu_backend().batch_norm_elemt(y, gpu(x), gpu(mo.mean), gpu(mo.invstd), affine ? gpu(w) : w,
                                     affine ? gpu(b) : b, N, C, inner);
      CHECK_ULPS(y, rounded(want_y, dt), 1, 1e-6);
      Tensor want_bsums = out({2, C}, kFloat64), bsums = out({2, C}, kFloat64, kGpu);
      cpu_backend().batch_norm_backward_reduce(want_bsums, f32(gy), f32(x), mo.mean, N, C, inner);
      gpu_backend().batch_norm_backward_reduce(bsums, gpu(gy), gpu(x), gpu(mo.mean), N, C, inner);
      CHECK(internal::allclose(host(bsums), want_bsums, 1e-12, 1e-12));
      for (bool train : {true, false}) {
        CAPTURE(train);
        Tensor want_gx = out({N, C, inner}, kFloat32), gx = out({N, C, inner}, dt, kGpu);
        cpu_backend().batch_norm_backward_elemt(want_gx, f32(gy), f32(x), mo.mean, mo.invstd, w,
                                                train ? want_bsums : Tensor(), double(N * inner), N, C, inner);
        gpu_backend().batch_norm_backward_elemt(gx, gpu(gy), gpu(x), gpu(mo.mean), gpu(mo.invstd),
                                                affine ? gpu(w) : w, train ? gpu(want_bsums) : Tensor(),
                                                double(N * inner), N, C, inner);
        CHECK_ULPS(gx, rounded(want_gx, dt), 1, 1e-5);
      }
    }
}

TEST_CASE("max_pool2d at 16 bits: the maxima as they are and their positions, NaN first, dilation and stride") {
  REQUIRE_DEVICE();
  manual_seed(26);
  for (Dtype dt : kHalves) {
    CAPTURE(dt);
    MaxPool2dArgs a;
    a.planes = 6, a.H = 9, a.W = 11, a.kh = 3, a.kw = 2, a.sh = 2, a.sw = 3, a.dh = 1, a.dw = 2;
    a.OH = (a.H - (a.kh - 1) * a.dh - 1) / a.sh + 1, a.OW = (a.W - (a.kw - 1) * a.dw - 1) / a.sw + 1;
    // Few distinct values: ties, where the first maximum wins.
    Tensor x = internal::to_dtype(randint(-3, 3, {a.planes, a.H, a.W}), dt);
    set_nan(x, 2, 4);
    Tensor want = out(Shape{a.planes, a.OH, a.OW}, kFloat32), want_i = out(Shape{a.planes, a.OH, a.OW}, kInt64);
    cpu_backend().max_pool2d(want, want_i, f32(x), a);
    Tensor got = out(Shape{a.planes, a.OH, a.OW}, dt, kGpu), got_i = out(Shape{a.planes, a.OH, a.OW}, kInt64, kGpu);
    gpu_backend().max_pool2d(got, got_i, gpu(x), a);
    CHECK_ULPS(got, rounded(want, dt));
    CHECK_ULPS(got_i, want_i);
  }
}

// --- indexing, sort --------------------------------------------------------------------------------

TEST_CASE("index_add and scatter_add into 16-bit destinations, repeated indices, each add rounded at 16 bits") {
  REQUIRE_DEVICE();
  manual_seed(27);
  const int64_t outer = 3, n = 6, inner = 5, k = 7;  // odd inner: elements in both halves of 32-bit words
  Tensor index = tensor(std::vector<int64_t>{5, 0, 2, 2, 5, 5, 1});
  Tensor positions = randint(0, n, {outer, k, inner});
  for (Dtype dt : kHalves) {
    CAPTURE(dt);
    Tensor src = random({outer, k, inner}, dt, 0, 4);
    Tensor base = random({outer, n, inner}, dt, 0, 4);
    // Up to 4 adds reach one element: each may round by half a unit of the growing sum.
    Tensor want = f32(base);
    cpu_backend().index_add(want, index, f32(src), outer, n, inner);
    Tensor got = gpu(base);
    gpu_backend().index_add(got, gpu(index), gpu(src), outer, n, inner);
    CHECK_ULPS(got, rounded(want, dt), 3);
    Tensor want_s = f32(base);
    cpu_backend().scatter_add(want_s, positions, f32(src), outer, n, inner);
    Tensor got_s = gpu(base);
    gpu_backend().scatter_add(got_s, gpu(positions), gpu(src), outer, n, inner);
    CHECK_ULPS(got_s, rounded(want_s, dt), 4);
  }
  CHECK(error_at_sync().empty());
  // Exact where every partial sum is a 16-bit value: small integers.
  for (Dtype dt : kHalves) {
    Tensor sums = zeros({4}, {dt, kGpu});
    gpu_backend().index_add(sums, gpu(tensor(std::vector<int64_t>{1, 3, 1, 1, 2})),
                            gpu(internal::to_dtype(tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f}), dt)), 1, 4, 1);
    CHECK(host(sums).to_vector<double>() == std::vector<double>{0, 8, 5, 2});
  }
}

TEST_CASE("sort at 16 bits: stable, both directions, ties and NaN, rows longer than a block") {
  REQUIRE_DEVICE();
  manual_seed(28);
  for (Dtype dt : kHalves)
    for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{300}})
      for (bool descending : {false, true}) {
        CAPTURE(dt);
        CAPTURE(n);
        CAPTURE(descending);
        const int64_t rows = 3;
        Tensor x = internal::to_dtype(internal::mul(f32(randint(-4, 4, {rows, n})), 0.5), dt);
        if (n > 2) {
          set_nan(x, 1, 1);
          set_nan(x, 1, n - 1);
        }
        Tensor want = out({rows, n}, kFloat32), want_i = out({rows, n}, kInt64);
        cpu_backend().sort(want, want_i, f32(x), rows, n, descending);
        Tensor got = out({rows, n}, dt, kGpu), got_i = out({rows, n}, kInt64, kGpu);
        gpu_backend().sort(got, got_i, gpu(x), rows, n, descending);
        CHECK_ULPS(got, rounded(want, dt));
        CHECK_ULPS(got_i, want_i);
      }
}

// --- optimizer steps -------------------------------------------------------------------------------

TEST_CASE("sgd_step on 16-bit parameters: float32 math, parameter and momentum rounded once per step, as on the CPU") {
  REQUIRE_DEVICE();
  manual_seed(29);
  for (Dtype dt : kHalves)
    for (bool nesterov : {false, true}) {
      CAPTURE(dt);
      CAPTURE(nesterov);
      const int64_t n = 1001;
      Tensor p = random({n}, dt), m = zeros({n}, {dt});
      Tensor pg = gpu(p), mg = gpu(m), pc = internal::clone(p), mc = internal::clone(m);
      for (int step = 0; step < 3; ++step) {
        Tensor g = random({n}, dt);
        // The reference: this step in float32 from the 16-bit state, rounded back.
        Tensor p32 = f32(p), m32 = f32(m);
        cpu_backend().sgd_step(p32, f32(g), m32, 0.1, 0.9, nesterov ? 0.0 : 0.1, 0.01, nesterov, step == 0);
        p = rounded(p32, dt), m = rounded(m32, dt);
        gpu_backend().sgd_step(pg, gpu(g), mg, 0.1, 0.9, nesterov ? 0.0 : 0.1, 0.01, nesterov, step == 0);
        CHECK_ULPS(pg, p);
        CHECK_ULPS(mg, m);
        // The CPU's 16-bit step: the same rule (its float32 loops may contract a multiply-add into an FMA
        // where another loop does not, so a result may round to the neighbouring 16-bit value).
        cpu_backend().sgd_step(pc, g, mc, 0.1, 0.9, nesterov ? 0.0 : 0.1, 0.01, nesterov, step == 0);
        CHECK_ULPS(pc, p);
        CHECK_ULPS(mc, m);
      }
      // Without momentum the buffer is not touched (nor needed).
      Tensor q = random({n}, dt), g = random({n}, dt), none;
      Tensor q32 = f32(q), qg = gpu(q);
      cpu_backend().sgd_step(q32, f32(g), none, 0.5, 0, 0, 0, false, true);
      gpu_backend().sgd_step(qg, gpu(g), none, 0.5, 0, 0, 0, false, true);
      CHECK_ULPS(qg, rounded(q32, dt));
    }
}

TEST_CASE("adam_step on 16-bit parameters and state: Adam, AdamW, amsgrad, maximize, as on the CPU") {
  REQUIRE_DEVICE();
  manual_seed(30);
  for (Dtype dt : kHalves)
    for (bool decoupled : {false, true})
      for (bool amsgrad : {false, true}) {
        CAPTURE(dt);
        CAPTURE(decoupled);
        CAPTURE(amsgrad);
        const int64_t n = 777;
        Tensor p = random({n}, dt), m = zeros({n}, {dt}), v = zeros({n}, {dt}), vmax = zeros({n}, {dt});
        Tensor pg = gpu(p), mg = gpu(m), vg = gpu(v), vmaxg = gpu(vmax);
        Tensor pc = internal::clone(p), mc = internal::clone(m), vc = internal::clone(v), vmaxc = internal::clone(vmax);
        for (int step = 1; step <= 3; ++step) {
          AdamStepArgs a;
          a.lr = 1e-2, a.beta1 = 0.9, a.beta2 = 0.999, a.eps = 1e-8, a.weight_decay = 0.1;
          a.step_size = a.lr / (1 - std::pow(a.beta1, step));
          a.bias_correction2_sqrt = std::sqrt(1 - std::pow(a.beta2, step));
          a.decoupled_weight_decay = decoupled, a.amsgrad = amsgrad, a.maximize = step == 2;
          Tensor g = random({n}, dt);
          Tensor p32 = f32(p), m32 = f32(m), v32 = f32(v), vmax32 = f32(vmax);
          cpu_backend().adam_step(p32, f32(g), m32, v32, vmax32, a);
          p = rounded(p32, dt), m = rounded(m32, dt), v = rounded(v32, dt), vmax = rounded(vmax32, dt);
          gpu_backend().adam_step(pg, gpu(g), mg, vg, vmaxg, a);
          CHECK_ULPS(pg, p);
          CHECK_ULPS(mg, m);
          CHECK_ULPS(vg, v);
          if (amsgrad) CHECK_ULPS(vmaxg, vmax);
          cpu_backend().adam_step(pc, g, mc, vc, vmaxc, a);  // as for SGD: within one 16-bit unit
          CHECK_ULPS(pc, p);
          CHECK_ULPS(vc, v);
        }
      }
}

// --- the ops layer on 16-bit CUDA tensors ----------------------------------------------------------

TEST_CASE("ops on non-contiguous 16-bit CUDA tensors: reductions over middle dimensions, softmax, sort, layer_norm") {
  REQUIRE_DEVICE();
  manual_seed(31);
  for (Dtype dt : kHalves) {
    CAPTURE(dt);
    // [5, 7, 9] permuted to [7, 9, 5] and sliced: strided in every dimension.
    Tensor base = random({5, 7, 9}, dt);
    auto view = [](const Tensor& t) { return internal::slice(internal::permute(t, {1, 2, 0}), 1, 1, 9, 2); };  // [7, 4, 5]
    Tensor x = view(base), xg = view(gpu(base));
    REQUIRE(!xg.is_contiguous());
    Tensor x32 = f32(x);
    for (int64_t d : {0, 1, 2}) {
      CAPTURE(d);
      CHECK_ULPS(internal::sum(xg, d), rounded(internal::sum(x32, d), dt));
      CHECK_ULPS(internal::mean(xg, d), rounded(internal::mean(x32, d), dt));
      CHECK_ULPS(internal::max(xg, d), rounded(internal::max(x32, d), dt));
      CHECK_ULPS(internal::argmax(xg, d), internal::argmax(x32, d));
      CHECK_ULPS(internal::reduce(Reduction::Min, xg, d, true, "min"),
                  rounded(internal::reduce(Reduction::Min, x32, d, true, "min"), dt));
      CHECK_ULPS(internal::softmax(xg, d, false), rounded(internal::softmax(x32, d, false), dt), 1, 1e-7);
      CHECK_ULPS(internal::log_softmax(xg, d), rounded(internal::log_softmax(x32, d), dt));
      CHECK_ULPS(internal::sort(xg, d, true).first, rounded(internal::sort(x32, d, true).first, dt));
    }
    // Several dimensions summed as one reduction, rounded once: adjacent ones, and ones around a kept one.
    CHECK_ULPS(internal::sum(xg, {0, 1}), rounded(internal::sum(x32, {0, 1}), dt));
    CHECK_ULPS(internal::sum(xg, {0, 2}), rounded(internal::sum(x32, {0, 2}), dt));
    CHECK_ULPS(internal::sum(xg, {0, 2}, true), rounded(internal::sum(x32, {0, 2}, true), dt));
    internal::LayerNormResult ln = internal::layer_norm(xg, 5, Tensor(), Tensor(), 1e-5);
    internal::LayerNormResult ln32 = internal::layer_norm(x32, 5, Tensor(), Tensor(), 1e-5);
    CHECK(ln.y.dtype() == dt);
    CHECK(ln.mean.dtype() == kFloat32);
    CHECK_ULPS(ln.y, rounded(ln32.y, dt), 1, 1e-3);
    // The NLL loss through the ops layer, 16-bit in and out.
    Tensor logp = internal::log_softmax(random({9, 4}, dt), 1);
    Tensor target = tensor(std::vector<int64_t>{0, 1, 2, 3, 3, 2, 1, 0, 0});
    Tensor loss = internal::nll_loss(gpu(logp), gpu(target));
    CHECK(loss.dtype() == dt);
    CHECK_ULPS(loss, rounded(internal::nll_loss(f32(logp), target), dt));
  }
}

TEST_CASE("16-bit CUDA ops reject what no kernel takes, naming the op, dtypes and devices") {
  REQUIRE_DEVICE();
  Tensor xi = zeros({4, 3}, {kInt64, kGpu});
  Tensor y = zeros({4, 3}, {kInt64, kGpu});
  CHECK(contains(error_of([&] { gpu_backend().softmax(y, xi, 4, 3, 1, false); }),
                 "softmax: expected a floating tensor (float32, float64, bfloat16 or float16), got int64"));
  CHECK(contains(error_of([&] { gpu_backend().layer_norm(y, y, y, xi, Tensor(), Tensor(), 4, 3, 1e-5); }),
                 "layer_norm: expected a floating tensor (float32, float64, bfloat16 or float16), got int64"));
  // The optimizer steps: a gradient of another dtype than the parameter's, state of another dtype, an
  // integer parameter.
  Tensor p = zeros({3}, {kBFloat16, kGpu}), g32 = zeros({3}, {kFloat32, kGpu}), none;
  CHECK(contains(error_of([&] { internal::sgd_step_(p, g32, none, 0.1, 0, 0, 0, false, true); }),
                 "sgd_step_: gradient [3] float32 on cuda:0 does not match parameter [3] bfloat16 on cuda:0"));
  Tensor m = zeros({3}, {kFloat16, kGpu}), v = zeros({3}, {kBFloat16, kGpu}), gb = zeros({3}, {kBFloat16, kGpu});
  CHECK(contains(error_of([&] { internal::adam_step_(p, gb, m, v, none, AdamStepArgs{}); }),
                 "adam_step_: exp_avg [3] does not match parameter [3] bfloat16 on cuda:0"));
  Tensor pi = zeros({3}, {kInt64, kGpu});
  CHECK(contains(error_of([&] { internal::sgd_step_(pi, pi, none, 0.1, 0, 0, 0, false, true); }),
                 "sgd_step_: expected a floating parameter (float32, float64, bfloat16 or float16), got int64"));
  // A float16 weight beside a bfloat16 input: neither holds the other's values.
  Tensor xb = zeros({2, 3}, {kBFloat16, kGpu}), wh = ones({3}, {kFloat16, kGpu});
  CHECK(contains(error_of([&] { internal::layer_norm(xb, 3, wh, Tensor(), 1e-5); }),
                 "layer_norm: weight/bias of dtype float16 for a bfloat16 input"));
}

TEST_CASE("16-bit random fills, dropout masks and bernoulli: from the float32 Philox draws, made on the device") {
  REQUIRE_DEVICE();
  for (Dtype dt : kHalves) {
    INFO(dt);
    // The kernels from one (seed, counter): the CPU backend's float32 fill (the reference the float32
    // GPU fill equals, cuda_test) rounded to dt, except a value rounding up to high, which becomes low.
    Tensor want32 = out({4001}, kFloat32), got = out({4001}, dt, kGpu);
    cpu_backend().uniform(want32, -2.0, 3.0, 11, 500);
    gpu_backend().uniform(got, -2.0, 3.0, 11, 500);
    Tensor want = rounded(want32, dt);
    want = internal::where(internal::binary_scalar(BinaryOp::Eq, want, 3.0), full_like(want, -2.0), want);
    CHECK_MATCH(got, want);
    const std::vector<double> g = host(got).to_vector<double>();
    CHECK(*std::min_element(g.begin(), g.end()) >= -2.0);
    CHECK(*std::max_element(g.begin(), g.end()) < 3.0);
    Tensor mask32 = out({4001}, kFloat32), mask = out({4001}, dt, kGpu);
    cpu_backend().dropout_mask(mask32, 0.3, 11, 500);
    gpu_backend().dropout_mask(mask, 0.3, 11, 500);
    CHECK_MATCH(mask, rounded(mask32, dt));

    // Through the ops layer: rand in dt on the device from the seed equals rand in float32 rounded.
    manual_seed(5);
    Tensor r = rand({1000}, {dt, kGpu});
    manual_seed(5);
    Tensor r32 = rand({1000}, {kFloat32, kGpu});
    CHECK(r.device() == kGpu);
    Tensor r_want = rounded(host(r32), dt);
    r_want = internal::where(internal::binary_scalar(BinaryOp::Eq, r_want, 1.0), zeros_like(r_want), r_want);
    CHECK_MATCH(r, r_want);
    // dropout(p = 0.5) keeps x * 2 (exact) where float32's dropout does, from the same draws.
    Tensor x = random({64, 33}, dt);
    manual_seed(9);
    Tensor d = dropout(gpu(x), 0.5, true);
    manual_seed(9);
    Tensor d32 = dropout(gpu(f32(x)), 0.5, true);
    CHECK(d.dtype() == dt);
    CHECK_MATCH(d, rounded(host(d32), dt));
    const double kept = internal::sum(internal::binary_scalar(BinaryOp::Ne, host(d32), 0.0)).item<double>();
    CHECK(std::abs(kept / x.numel() - 0.5) < 0.05);  // 2112 elements, fixed seed: the same count every run

    // bernoulli(p): 1 where the float32 draw is below p (a 16-bit p compared exactly), as the CPU
    // backend's on the same values in float32, and as float32's bernoulli from the same seed.
    Tensor p = random({37, 29}, dt, 0, 1), b = out({37, 29}, dt, kGpu), b32 = out({37, 29}, kFloat32);
    internal::copy_(p, internal::where(internal::binary_scalar(BinaryOp::Lt, p, 0.1), zeros_like(p), p));  // p = 0
    cpu_backend().bernoulli(b32, f32(p), 3, 77);
    gpu_backend().bernoulli(b, gpu(p), 3, 77);
    CHECK_MATCH(b, rounded(b32, dt));
    manual_seed(4);
    Tensor s = bernoulli(gpu(p));
    manual_seed(4);
    Tensor s32 = bernoulli(gpu(f32(p)));
    CHECK(s.dtype() == dt);
    CHECK_MATCH(s, rounded(host(s32), dt));
    CHECK(internal::sum(internal::mul(host(s), internal::binary_scalar(BinaryOp::Eq, p, 0.0))).item<double>() == 0);
    CHECK_MATCH(bernoulli(full({100}, 1.0, {dt, kGpu})), full({100}, 1.0, dt));
  }
}
