// ProcessGroupNCCL and DDP with two ranks, each on its own GPU, as the launcher runs them: every
// collective with exact values, DDP over NCCL step by step against one CPU process at the full batch,
// and a rank that stops calling collectives. Needs two visible devices: on one GPU (NCCL refuses two
// ranks on one device) or none, the cases skip. Under --config=cudaemu the CUDA emulator provides two.
#include <doctest/doctest.h>

#include <limits>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "distributed/api.h"
#include "nn/api.h"
#include "optim/api.h"
#include "tensor/cuda/cuda.h"
#include "tests/util/ddp_reference.h"
#include "tests/util/multiprocess.h"
#include "tests/util/nccl_devices.h"
#include "tests/util/tcp_group.h"

using namespace lockstep;
using testing::run_ranks;

namespace {

constexpr int kWorld = 2;

const testing::NcclDevices kDevices = testing::nccl_devices(kWorld);

#define REQUIRE_TWO_DEVICES()                          \
  do {                                                 \
    if (kDevices.count < kWorld) {                     \
      MESSAGE(kDevices.why_not << ": skipped");        \
      return;                                          \
    }                                                  \
  } while (0)

void init_nccl(int rank, uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  cuda::set_device(rank);  // cuda:LOCAL_RANK, as the seeds' program does
  testing::init_tcp_group(port, kWorld, rank, timeout, "nccl");
}

void check_all(const Tensor& t, double value, const std::string& what) {
  for (double v : t.to_vector<double>()) RANK_CHECK(v == value, what, ": got ", v, ", expected ", value);
}

}  // namespace

TEST_CASE("nccl, 2 ranks on 2 GPUs: every collective, dtype and reduce op gives the exact result") {
  REQUIRE_TWO_DEVICES();
  const uint16_t port = testing::free_port();
  auto results = run_ranks(kWorld, [&](int rank) {
    init_nccl(rank, port);
    const Device gpu = Device::cuda(rank);
    // Rank r holds r + 2: sum 5, product 6, min 2, max 3, average 2.5 (2 with int64's division).
    struct Case {
      dist::ReduceOp op;
      double f, i;
    };
    for (Dtype dtype : {kFloat32, kFloat64, kInt64})
      for (Case c : {Case{dist::ReduceOp::SUM, 5, 5}, Case{dist::ReduceOp::PRODUCT, 6, 6}, Case{dist::ReduceOp::MIN, 2, 2},
                     Case{dist::ReduceOp::MAX, 3, 3}, Case{dist::ReduceOp::AVG, 2.5, 2}}) {
        Tensor t = full({1000}, rank + 2.0, TensorOptions(dtype, gpu));
        dist::all_reduce(t, c.op);
        check_all(t, dtype == kInt64 ? c.i : c.f, "all_reduce");
      }
    Tensor b = full({7}, rank == 1 ? 9.0 : -1.0, TensorOptions(kInt64, gpu));
    dist::broadcast(b, /*src=*/1);
    check_all(b, 9.0, "broadcast from rank 1");

    std::vector<Tensor> gathered = {zeros({3}, gpu), zeros({3}, gpu)};
    dist::all_gather(gathered, full({3}, 10.0 * (rank + 1), gpu));
    check_all(gathered[0], 10.0, "all_gather[0]");
    check_all(gathered[1], 20.0, "all_gather[1]");

    Tensor out = zeros({4}, gpu);
    // Rank r contributes (r + 1) to chunk 0 and 10 (r + 1) to chunk 1; rank 0 keeps chunk 0's sum.
    dist::reduce_scatter(out, {full({4}, rank + 1.0, gpu), full({4}, 10.0 * (rank + 1), gpu)}, dist::ReduceOp::SUM);
    check_all(out, rank == 0 ? 3.0 : 30.0, "reduce_scatter");

    // Asynchronous: the compute stream waits for the collective; the host reads after wait().
    Tensor a = full({1 << 16}, rank + 1.0, gpu);
    auto work = dist::default_pg()->all_reduce(a);
    work->wait();
    check_all(a, 3.0, "async all_reduce");
    dist::barrier();
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("nccl, 2 ranks: bfloat16 and float16 all-reduce in float32, rounded once; reduce_scatter, broadcast") {
  REQUIRE_TWO_DEVICES();
  const uint16_t port = testing::free_port();
  auto results = run_ranks(kWorld, [&](int rank) {
    init_nccl(rank, port);
    const Device gpu = Device::cuda(rank);
    const double inf = std::numeric_limits<double>::infinity();
    auto half = [&](Dtype dtype, std::vector<double> v) {
      return tensor(v, {static_cast<int64_t>(v.size())}).to(dtype).to(gpu);
    };
    for (Dtype dtype : {kBFloat16, kFloat16}) {
      // 256 + 1 ties to 256 in bfloat16, is exact in float16; 2048 + 1 ties to 2048 in both; 40000 is 39936
      // in bfloat16, and twice it 79872; twice 40000 overflows float16.
      Tensor t = half(dtype, rank == 0 ? std::vector<double>{1, 256, 2048, 40000} : std::vector<double>{2, 1, 1, 40000});
      dist::all_reduce(t, dist::ReduceOp::SUM);
      const std::vector<double> want = dtype == kBFloat16 ? std::vector<double>{3, 256, 2048, 79872}
                                                          : std::vector<double>{3, 257, 2048, inf};
      const auto got = t.to(Device::cpu()).to(kFloat64).to_vector<double>();
      RANK_CHECK(t.dtype() == dtype && got == want, dtype_name(dtype), " SUM: got ", got[0], ", ", got[1], ", ", got[2],
                 ", ", got[3]);
      Tensor m = half(dtype, {rank + 1.0, 3.0});
      dist::all_reduce(m, dist::ReduceOp::AVG);
      check_all(internal::select(m, 0, 0).to(Device::cpu()).to(kFloat64), 1.5, "AVG");
      Tensor out = half(dtype, {0, 0});
      dist::reduce_scatter(out, {half(dtype, {rank + 1.0, 0.5}), half(dtype, {10.0 * (rank + 1), 0.25})},
                           dist::ReduceOp::SUM);
      const auto rs = out.to(Device::cpu()).to(kFloat64).to_vector<double>();
      RANK_CHECK(rs == (rank == 0 ? std::vector<double>{3, 1} : std::vector<double>{30, 0.5}), "reduce_scatter");
      Tensor b = half(dtype, {rank == 1 ? 0.1 : 0.0});
      dist::broadcast(b, 1);
      RANK_CHECK(b.to(Device::cpu()).to(kFloat32).item<float>() == half(dtype, {0.1}).to(Device::cpu()).to(kFloat32).item<float>(),
                 "broadcast");
    }
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("DDP over nccl with bf16_compress_hook: the gradients within bfloat16's rounding of float32's") {
  REQUIRE_TWO_DEVICES();
  const testing::Data d = testing::make_data();
  const uint16_t port = testing::free_port();
  auto results = run_ranks(kWorld, [&](int rank) {
    init_nccl(rank, port);
    const Device dev = Device::cuda(rank);
    const int64_t per = testing::kBatch / kWorld;
    nn::CrossEntropyLoss ce;
    auto grads = [&](bool hook) {
      auto model = testing::make_model(0);
      model->to(dev);
      dist::DistributedDataParallel ddp(model);
      if (hook) ddp.register_comm_hook(dist::default_pg(), dist::default_hooks::bf16_compress_hook);
      Tensor x = testing::rows(d.x[0], rank * per, (rank + 1) * per).to(dev);
      Tensor y = testing::rows(d.y[0], rank * per, (rank + 1) * per).to(dev);
      ce(ddp(x), y).backward();
      std::vector<std::vector<float>> out;
      for (auto& p : model->parameters()) out.push_back(p.grad().to(Device::cpu()).to_vector<float>());
      return out;
    };
    const auto plain = grads(false), bf16 = grads(true);
    for (size_t i = 0; i < plain.size(); ++i) {
      float scale = 0;
      for (float v : plain[i]) scale = std::max(scale, std::abs(v));
      for (size_t k = 0; k < plain[i].size(); ++k)
        RANK_CHECK(std::abs(bf16[i][k] - plain[i][k]) <= 0x1p-6 * scale + 1e-7, "parameter ", i, "[", k, "]: ",
                   bf16[i][k], " vs ", plain[i][k]);
    }
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("DDP over nccl on 2 GPUs follows one CPU process at the full batch, step by step") {
  REQUIRE_TWO_DEVICES();
  // The reference: plain training at the global batch on the CPU (computed in the parent: no CUDA).
  const testing::Data d = testing::make_data();
  const auto ref = testing::reference_trajectory(d);
  const uint16_t port = testing::free_port();
  auto results = run_ranks(kWorld, [&](int rank) {
    init_nccl(rank, port);
    const Device dev = Device::cuda(rank);
    // Rank 1 starts from other weights: DDP's constructor must broadcast rank 0's.
    auto model = testing::make_model(rank == 0 ? 0 : 7);
    model->to(dev);
    dist::DDPOptions opts;
    opts.bucket_cap_mb = opts.first_bucket_cap_mb = 0.0001;  // one bucket per parameter: several collectives
    dist::DistributedDataParallel ddp(model, opts);
    optim::SGD sgd(ddp.parameters(), optim::SGDOptions(0.1).momentum(0.9));
    nn::CrossEntropyLoss ce;
    const int64_t per = testing::kBatch / kWorld;
    for (int s = 0; s < testing::kSteps; ++s) {
      sgd.zero_grad();
      Tensor x = testing::rows(d.x[s], rank * per, (rank + 1) * per).to(dev);
      Tensor y = testing::rows(d.y[s], rank * per, (rank + 1) * per).to(dev);
      ce(ddp(x), y).backward();
      sgd.step();
      auto params = model->parameters();
      for (size_t i = 0; i < params.size(); ++i)
        RANK_CHECK(internal::allclose(params[i].to(Device::cpu()), ref[s][i].second, 1e-5, 1e-6), "step ", s, " ",
                   ref[s][i].first, " differs from the single-process reference");
    }
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("nccl: a rank that skips a collective makes the other's wait time out, naming it, then refuse more") {
  REQUIRE_TWO_DEVICES();
  const uint16_t port = testing::free_port();
  auto results = run_ranks(kWorld, [&](int rank) {
    init_nccl(rank, port, std::chrono::seconds(2));
    Tensor t = full({100}, 1.0, Device::cuda(rank));
    dist::all_reduce(t);  // both ranks: the communicator works
    check_all(t, 2.0, "first all_reduce");
    if (rank == 1) {
      // Stays alive past rank 0's timeout without joining the second collective.
      std::this_thread::sleep_for(std::chrono::seconds(4));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    auto work = dist::default_pg()->all_reduce(t);
    const std::string err = testing::error_of([&] { work->wait(std::chrono::seconds(2)); });
    RANK_CHECK(testing::contains(err, "all_reduce") && testing::contains(err, "did not finish within"),
               "the wait said: \"", err, "\"");
    const double waited = testing::seconds_since(start);
    RANK_CHECK(waited >= 1.9 && waited < 10, "the wait took ", waited, " s with a 2 s timeout");
    testing::expect_error([&] { dist::all_reduce(t); }, "aborted");
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}
