// bfloat16 and float16 collectives on the gloo backend's transports (shared memory; TCP by exchange and
// ring, and gloo's own ring and bcube), 2 and 3 ranks over loopback: every reduce op summed in float32
// and rounded once, with values worked out by hand; broadcast and all_gather move the bits.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "distributed/gloo/process_group_gloo.h"
#include "tensor/api.h"
#include "tests/util/gloo_group.h"
#include "tests/util/multiprocess.h"

using namespace lockstep;
using dist::ProcessGroupGloo;
using dist::ReduceOp;
using Algorithm = ProcessGroupGloo::Options::Algorithm;

namespace {

constexpr std::chrono::milliseconds kTimeout{20000};
const double kInf = std::numeric_limits<double>::infinity();

Tensor half(Dtype dtype, const std::vector<double>& values) {
  return internal::to_dtype(tensor(values, {static_cast<int64_t>(values.size())}), dtype);
}

std::vector<double> values_of(const Tensor& t) { return internal::to_dtype(t, kFloat64).to_vector<double>(); }

std::string str(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return "[" + s + "]";
}

// Runs fn on 2 (or W) ranks for every transport and all-reduce algorithm between ranks of one host.
void on_every_transport(int W, const std::function<void(ProcessGroupGloo&, int, const std::string&)>& fn) {
  struct Setup {
    const char* name;
    bool shm;
    Algorithm algorithm;
  };
  for (Setup s : {Setup{"shm", true, Algorithm::kAuto}, Setup{"tcp exchange", false, Algorithm::kExchange},
                  Setup{"tcp ring", false, Algorithm::kRing}, Setup{"gloo ring", false, Algorithm::kGlooRing},
                  Setup{"gloo bcube", false, Algorithm::kGlooBcube}}) {
    ProcessGroupGloo::Options options;
    options.timeout = kTimeout;
    options.shared_memory = s.shm;
    options.allreduce_algorithm = s.algorithm;
    auto results = testing::run_group(W, options, [&](ProcessGroupGloo& pg, int rank) { fn(pg, rank, s.name); });
    CHECK_MESSAGE(testing::all_ok(results), s.name, ", ", W, " ranks:", testing::failures(results));
  }
}

void expect(const Tensor& t, Dtype dtype, const std::vector<double>& want, const std::string& what) {
  RANK_CHECK(t.dtype() == dtype, what, ": dtype ", t.dtype());
  const auto got = values_of(t);
  RANK_CHECK(got == want, what, ": got ", str(got), ", expected ", str(want));
}

}  // namespace

TEST_CASE("all_reduce of bfloat16 and float16 at 2 ranks: every op, in float32 and rounded once") {
  on_every_transport(2, [](ProcessGroupGloo& pg, int rank, const std::string& how) {
    // Rank 0 and rank 1's values; 40000 is 39936 in bfloat16 (8 bits of mantissa).
    const std::vector<double> a = {1, 256, 2048, 40000, 0.5, -3}, b = {2, 1, 1, 40000, 0.25, 7};
    struct Case {
      ReduceOp op;
      std::vector<double> bf16, fp16;
    };
    const Case cases[] = {
        // 257 is a tie in bfloat16 (even: 256), exact in float16; 2049 a tie in both (2048); 80000
        // overflows float16, 79872 in bfloat16.
        {ReduceOp::SUM, {3, 256, 2048, 79872, 0.75, 4}, {3, 257, 2048, kInf, 0.75, 4}},
        {ReduceOp::MAX, {2, 256, 2048, 39936, 0.5, 7}, {2, 256, 2048, 40000, 0.5, 7}},
        {ReduceOp::MIN, {1, 1, 1, 39936, 0.25, -3}, {1, 1, 1, 40000, 0.25, -3}},
    };
    for (const Case& c : cases) {
      for (Dtype dtype : {kBFloat16, kFloat16}) {
        Tensor t = half(dtype, rank == 0 ? a : b);
        pg.all_reduce(t, c.op, /*async_op=*/false);
        expect(t, dtype, dtype == kBFloat16 ? c.bf16 : c.fp16, how + " " + reduce_op_name(c.op) + " " + dtype_name(dtype));
      }
    }
    for (Dtype dtype : {kBFloat16, kFloat16}) {
      // 300 * 300 = 90000: inf in float16, 90112 in bfloat16.
      Tensor t = half(dtype, rank == 0 ? std::vector<double>{3, 0.5, 300} : std::vector<double>{5, -0.25, 300});
      pg.all_reduce(t, ReduceOp::PRODUCT, false);
      expect(t, dtype, {15, -0.125, dtype == kBFloat16 ? 90112.0 : kInf}, how + " PRODUCT " + dtype_name(dtype));
      Tensor m = half(dtype, rank == 0 ? std::vector<double>{1, 3, 0.5} : std::vector<double>{2, 5, 0.25});
      pg.all_reduce(m, ReduceOp::AVG, false);
      expect(m, dtype, {1.5, 4, 0.375}, how + " AVG " + dtype_name(dtype));
      // A long tensor takes the transports' large-message paths (the shared-memory reduce-scatter, the ring).
      const int64_t n = 300000;
      Tensor big = internal::to_dtype(full({n}, rank == 0 ? 256.0 : 1.0), dtype);
      pg.all_reduce(big, ReduceOp::SUM, false);
      const auto got = values_of(big);
      const double want = dtype == kBFloat16 ? 256 : 257;
      for (int64_t i = 0; i < n; i += 4999) RANK_CHECK(got[i] == want, how, " big ", dtype, " [", i, "] = ", got[i]);
      RANK_CHECK(got[n - 1] == want, how, " big ", dtype, " last = ", got[n - 1]);
    }
  });
}

TEST_CASE("shared memory folds three ranks' bfloat16 in float32: 256 + 1 + 1 is 258, not 256 + 1 -> 256, + 1 -> 256") {
  ProcessGroupGloo::Options options;
  options.timeout = kTimeout;
  auto results = testing::run_group(3, options, [](ProcessGroupGloo& pg, int rank) {
    RANK_CHECK(pg.transport() == "shm", "transport ", pg.transport());
    Tensor t = half(kBFloat16, {rank == 0 ? 256.0 : 1.0, 0.5 * (rank + 1)});
    pg.all_reduce(t, ReduceOp::SUM, false);
    expect(t, kBFloat16, {258, 3}, "shm SUM of 3 ranks");
    Tensor m = half(kFloat16, {rank == 0 ? 2048.0 : 3.0, 3.0 * rank});
    pg.all_reduce(m, ReduceOp::AVG, false);
    expect(m, kFloat16, {684.5, 3}, "shm AVG of 3 ranks");  // 2054 / 3 = 684.67: float16 684.5, rounded once
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("exact sums of 3 ranks, reduce_scatter, broadcast and all_gather of bfloat16 and float16") {
  on_every_transport(3, [](ProcessGroupGloo& pg, int rank, const std::string& how) {
    for (Dtype dtype : {kBFloat16, kFloat16}) {
      Tensor t = half(dtype, {rank + 1.0, 0.5 * (rank + 1), -1.0 * rank});
      pg.all_reduce(t, ReduceOp::SUM, false);
      expect(t, dtype, {6, 3, -3}, how + " SUM " + dtype_name(dtype));
      // reduce_scatter: output = sum over ranks of inputs[rank]; input k of rank r holds 10 k + r.
      std::vector<Tensor> inputs;
      for (int k = 0; k < pg.size(); ++k) inputs.push_back(half(dtype, {10.0 * k + rank, 0.25}));
      Tensor out = half(dtype, {0, 0});
      pg.reduce_scatter(out, inputs, ReduceOp::SUM, false);
      expect(out, dtype, {30.0 * rank + 3, 0.75}, how + " reduce_scatter " + dtype_name(dtype));
      // broadcast and all_gather move the bits (a float16 subnormal included).
      Tensor b = half(dtype, rank == 1 ? std::vector<double>{1e-7, -65504} : std::vector<double>{0, 0});
      const Tensor sent = half(dtype, {1e-7, -65504});
      pg.broadcast(b, 1, false);
      RANK_CHECK(std::memcmp(b.data_ptr(), sent.data_ptr(), 4) == 0, how, " broadcast ", dtype);
      std::vector<Tensor> outs;
      for (int k = 0; k < pg.size(); ++k) outs.push_back(half(dtype, {0}));
      pg.all_gather(outs, half(dtype, {rank + 0.5}), false);
      for (int k = 0; k < pg.size(); ++k) expect(outs[k], dtype, {k + 0.5}, how + " all_gather");
    }
  });
}
