// ZeroRedundancyOptimizer on CPU ranks over loopback: PyTorch's greedy partition, 20 Adam steps equal
// to DDP with a whole Adam on every rank, a consolidated state_dict equal to that Adam's, and a loaded
// one that continues the same trajectory.
#include <doctest/doctest.h>

#include "distributed/ddp.h"
#include "distributed/init.h"
#include "distributed/zero_redundancy_optimizer.h"
#include "optim/api.h"
#include "tests/distributed/sharding_util.h"
#include "tests/util/multiprocess.h"
#include "tests/util/tcp_group.h"

using namespace lockstep;
using namespace lockstep::testing;

namespace {

constexpr int kSteps = 20;

void train_step(dist::DistributedDataParallel& ddp, int step, int rank, int world) {
  auto [x, y] = batch(step, rank, world);
  nn::functional::cross_entropy(ddp(x), y).backward();
}

void check_same_params(nn::Module& a, nn::Module& b, const std::string& when) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const double d = max_abs_diff(pa[i].second, pb[i].second);
    RANK_CHECK(d <= 1e-6, when, ": ", pa[i].first, " differs by ", d);
  }
}

}  // namespace

TEST_CASE("partition_parameters: largest first, each to the least loaded rank (PyTorch's greedy order)") {
  std::vector<Tensor> p = {zeros({10}), zeros({3}), zeros({7}), zeros({7}), zeros({1})};
  // 10 -> r0 (10), 7 -> r1 (7), 7 (index 3) -> r1 (14), 3 -> r0 (13), 1 -> r0 (14).
  CHECK(dist::partition_parameters(p, 2) == std::vector<int>{0, 0, 1, 1, 0});
  // Three ranks: 10 -> r0, 7 -> r1, 7 -> r2, 3 -> r1 (10), 1 -> r2 (8).
  CHECK(dist::partition_parameters(p, 3) == std::vector<int>{0, 1, 1, 2, 2});
  CHECK(dist::partition_parameters(p, 1) == std::vector<int>(5, 0));
  expect_error([&] { dist::partition_parameters(p, 0); }, "world_size must be >= 1");
}

TEST_CASE("ZeroRedundancyOptimizer equals DDP with a whole Adam, and its consolidated state equals that Adam's") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    const uint16_t port = free_port();
    auto results = run_ranks(world, [&](int rank) {
      init_tcp_group(port, world, rank, std::chrono::seconds(30));
      Stack ref_model = make_stack(7), zero_model = make_stack(7);
      dist::DistributedDataParallel ref(ref_model.ptr()), ddp(zero_model.ptr());
      optim::Adam adam(ref.parameters(), optim::AdamOptions(1e-2));
      auto zero = dist::ZeroRedundancyOptimizer::make<optim::Adam>(ddp.parameters(), optim::AdamOptions(1e-2));
      // Each rank's optimizer holds its share only.
      size_t mine = 0;
      for (size_t i = 0; i < ddp.parameters().size(); ++i) mine += zero.owner(i) == rank;
      RANK_CHECK(zero.optim() && zero.optim()->params(0).size() == mine, "rank ", rank, " holds ",
                 zero.optim() ? zero.optim()->params(0).size() : 0, " parameters, owns ", mine);
      for (int s = 0; s < kSteps; ++s) {
        adam.zero_grad();
        zero.zero_grad();
        train_step(ref, s, rank, world);
        train_step(ddp, s, rank, world);
        adam.step();
        zero.step();
        check_same_params(*ref_model, *zero_model, "step " + std::to_string(s));
      }
      // Consolidated on rank 1: PyTorch's layout, the same tensors as the whole Adam's.
      zero.consolidate_state_dict(1);
      if (rank == 1) {
        auto full = adam.state_dict(), got = zero.state_dict();
        RANK_CHECK(full.size() == got.size(), "consolidated state has ", got.size(), " entries, Adam's ", full.size());
        std::map<std::string, Tensor> by_key(got.begin(), got.end());
        for (auto& [k, t] : full) {
          RANK_CHECK(by_key.count(k), "consolidated state lacks ", k);
          RANK_CHECK(max_abs_diff(by_key[k], t) <= 1e-6, k, " differs");
        }
      } else {
        expect_error([&] { zero.state_dict(); }, "call consolidate_state_dict(to) on every rank first");
      }
      // A fresh ZeRO over the same model loads the whole Adam's state and goes on as it does.
      auto loaded = dist::ZeroRedundancyOptimizer::make<optim::Adam>(ddp.parameters(), optim::AdamOptions(0.5));
      loaded.load_state_dict(adam.state_dict());
      RANK_CHECK(loaded.lr() == 1e-2, "loaded lr is ", loaded.lr());
      for (int s = kSteps; s < kSteps + 5; ++s) {
        adam.zero_grad();
        loaded.zero_grad();
        train_step(ref, s, rank, world);
        train_step(ddp, s, rank, world);
        adam.step();
        loaded.step();
        check_same_params(*ref_model, *zero_model, "after loading, step " + std::to_string(s));
      }
      dist::destroy_process_group();
    });
    CHECK_MESSAGE(all_ok(results), failures(results));
  }
}

TEST_CASE("ZeroRedundancyOptimizer rejects what it cannot shard") {
  const uint16_t port = free_port();
  auto results = run_ranks(1, [&](int rank) {
    init_tcp_group(port, 1, rank, std::chrono::seconds(30));
    expect_error([] { dist::ZeroRedundancyOptimizer({}, nullptr); }, "empty parameter list");
    Tensor w = zeros({4, 4}).set_requires_grad();
    expect_error([&] { dist::ZeroRedundancyOptimizer({w.t()}, nullptr); }, "the optimizer factory is empty");
    expect_error([&] {
      dist::ZeroRedundancyOptimizer::make<optim::Adam>({w.t()}, optim::AdamOptions());
    }, "parameter 0 is undefined or not contiguous");
    auto z = dist::ZeroRedundancyOptimizer::make<optim::Adam>({w}, optim::AdamOptions());
    expect_error([&] { z.consolidate_state_dict(1); }, "to = 1 is not a rank of a group of 1");
    expect_error([&] { z.load_state_dict({}); }, "no param_groups.0.params entry");
    // A factory may split its share into groups (the GPT's decay / no-decay); state dicts then refuse.
    Tensor b = zeros({4}).set_requires_grad();
    auto grouped = dist::ZeroRedundancyOptimizer({w, b}, [](std::vector<Tensor> ps) -> std::unique_ptr<optim::Optimizer> {
      return std::make_unique<optim::SGD>(std::vector<optim::SGD::ParamGroup>{{{ps[1]}, optim::SGDOptions(0.1)},
                                                                              {{ps[0]}, optim::SGDOptions(0.2)}});
    });
    w.autograd_meta().grad = ones({4, 4});
    b.autograd_meta().grad = ones({4});
    grouped.step();
    RANK_CHECK(w.to_vector<float>()[0] == -0.2f && b.to_vector<float>()[0] == -0.1f, "w ", w.to_vector<float>()[0],
               ", b ", b.to_vector<float>()[0]);
    expect_error([&] { grouped.consolidate_state_dict(0); }, "has 2 param groups; state dicts need one group");
    expect_error([&] {
      dist::ZeroRedundancyOptimizer({w, b}, [&](std::vector<Tensor>) -> std::unique_ptr<optim::Optimizer> {
        return std::make_unique<optim::SGD>(std::vector<Tensor>{w}, optim::SGDOptions(0.1));
      });
    }, "the factory's optimizer holds 1 parameters; it must hold exactly the ones it is given");
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(all_ok(results), failures(results));
}
