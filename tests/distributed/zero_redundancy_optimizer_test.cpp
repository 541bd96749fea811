// ZeroRedundancyOptimizer on CPU ranks over loopback: PyTorch's greedy partition, 20 Adam steps equal
// to DDP with a whole Adam on every rank, a consolidated state_dict equal to that Adam's, and a loaded
// one that continues the same trajectory; the same over two param groups (AdamW with and without weight
// decay), whose consolidated state also loads into a whole AdamW.
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

void check_same_params(nn::Module& a, nn::Module& b, const std::string& when) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const double d = max_abs_diff(pa[i].second, pb[i].second);
    RANK_CHECK(d <= 1e-6, when, ": ", pa[i].first, " differs by ", d);
  }
}

// Steps [from, to) of DDP with `whole` (the whole optimizer on every rank) beside DDP with `zero`, on
// the same batches, the two models' parameters compared after each step (`when` leads the message).
void train_beside(dist::DistributedDataParallel& ref, optim::Optimizer& whole, dist::DistributedDataParallel& ddp,
                  dist::ZeroRedundancyOptimizer& zero, int from, int to, const std::string& when = "") {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  for (int s = from; s < to; ++s) {
    whole.zero_grad();
    zero.zero_grad();
    for (auto* d : {&ref, &ddp}) {
      auto [x, y] = batch(s, rank, world);
      nn::functional::cross_entropy((*d)(x), y).backward();
    }
    whole.step();
    zero.step();
    check_same_params(*ref.module(), *ddp.module(), when + "step " + std::to_string(s));
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
  // Over groups, the load carried: {10, 3} -> r0, r1 (10, 3); {7, 7, 1}: 7 -> r1 (10), 7 -> r0 (tie: 17), 1 -> r1.
  std::vector<std::vector<Tensor>> groups = {{p[0], p[1]}, {p[2], p[3], p[4]}};
  CHECK(dist::partition_parameters(groups, 2) == std::vector<int>{0, 1, 1, 0, 1});
  expect_error([&] { dist::partition_parameters(p, 0); }, "world_size must be >= 1");
}

TEST_CASE("ZeroRedundancyOptimizer equals DDP with a whole Adam, and its consolidated state equals that Adam's") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    on_ranks(world, [&](int rank) {
      Stack ref_model = make_stack(7), zero_model = make_stack(7);
      dist::DistributedDataParallel ref(ref_model.ptr()), ddp(zero_model.ptr());
      optim::Adam adam(ref.parameters(), optim::AdamOptions(1e-2));
      auto zero = dist::ZeroRedundancyOptimizer::make<optim::Adam>(ddp.parameters(), optim::AdamOptions(1e-2));
      // Each rank's optimizer holds its share only.
      size_t mine = 0;
      for (size_t i = 0; i < ddp.parameters().size(); ++i) mine += zero.owner(i) == rank;
      RANK_CHECK(zero.optim() && zero.optim()->params(0).size() == mine, "rank ", rank, " holds ",
                 zero.optim() ? zero.optim()->params(0).size() : 0, " parameters, owns ", mine);
      train_beside(ref, adam, ddp, zero, 0, kSteps);
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
      train_beside(ref, adam, ddp, loaded, kSteps, kSteps + 5, "after loading, ");
    });
  }
}

// AdamW over two param groups (decay on the weights, none and another lr on the rest), as the GPT's.
TEST_CASE("ZeroRedundancyOptimizer over two param groups equals a whole AdamW over them, state dicts both ways") {
  auto groups_of = [](const std::vector<Tensor>& ps) {
    std::vector<std::vector<Tensor>> g(2);
    for (const auto& p : ps) g[p.dim() >= 2 ? 0 : 1].push_back(p);
    return g;
  };
  auto adamw = [](std::vector<std::vector<Tensor>> g) {
    return std::make_unique<optim::AdamW>(std::vector<optim::AdamW::ParamGroup>{
        {g[0], optim::AdamWOptions(1e-2).weight_decay(0.1)}, {g[1], optim::AdamWOptions(3e-3).weight_decay(0)}});
  };
  for (int world : {2, 3}) {
    CAPTURE(world);
    on_ranks(world, [&](int rank) {
      Stack ref_model = make_stack(7), zero_model = make_stack(7);
      dist::DistributedDataParallel ref(ref_model.ptr()), ddp(zero_model.ptr());
      auto whole = adamw(groups_of(ref.parameters()));
      dist::ZeroRedundancyOptimizer zero(groups_of(ddp.parameters()), adamw);
      RANK_CHECK(zero.num_param_groups() == 2 && zero.optim()->num_param_groups() == 2, "groups: ",
                 zero.num_param_groups(), ", local ", zero.optim()->num_param_groups());
      train_beside(ref, *whole, ddp, zero, 0, 8);
      // Consolidated on rank 0: the whole AdamW's keys and tensors, group by group.
      zero.consolidate_state_dict(0);
      if (rank == 0) {
        auto full = whole->state_dict(), got = zero.state_dict();
        RANK_CHECK(full.size() == got.size(), "consolidated state has ", got.size(), " entries, AdamW's ", full.size());
        std::map<std::string, Tensor> by_key(got.begin(), got.end());
        for (auto& [k, t] : full) {
          RANK_CHECK(by_key.count(k), "consolidated state lacks ", k);
          RANK_CHECK(by_key[k].shape() == t.shape() && max_abs_diff(by_key[k], t) <= 1e-6, k, " differs");
        }
        // ... and loads into a fresh whole AdamW (a ZeRO checkpoint resumed without ZeRO).
        Stack other = make_stack(9);
        auto back = adamw(groups_of(other->parameters()));
        back->load_state_dict(got);
        RANK_CHECK(back->lr(1) == 3e-3 && back->state(0).count("exp_avg"), "loaded lr ", back->lr(1));
      }
      // A fresh ZeRO loads the whole AdamW's state (other lrs before) and goes on as it does.
      dist::ZeroRedundancyOptimizer loaded(groups_of(ddp.parameters()), [&](std::vector<std::vector<Tensor>> g) {
        return std::make_unique<optim::AdamW>(std::vector<optim::AdamW::ParamGroup>{
            {g[0], optim::AdamWOptions(0.5)}, {g[1], optim::AdamWOptions(0.5)}});
      });
      loaded.load_state_dict(whole->state_dict());
      RANK_CHECK(loaded.optim()->lr(1) == 3e-3, "loaded lr of group 1: ", loaded.optim()->lr(1));
      train_beside(ref, *whole, ddp, loaded, 8, 12, "after loading, ");
    });
  }
}

TEST_CASE("ZeroRedundancyOptimizer rejects what it cannot shard") {
  on_ranks(1, [&](int) {
    expect_error([] { dist::ZeroRedundancyOptimizer(std::vector<Tensor>{}, nullptr); }, "empty parameter list");
    Tensor w = zeros({4, 4}).set_requires_grad();
    expect_error([&] { dist::ZeroRedundancyOptimizer(std::vector<Tensor>{w}, nullptr); }, "the optimizer factory is empty");
    expect_error([&] {
      dist::ZeroRedundancyOptimizer::make<optim::Adam>({w.t()}, optim::AdamOptions());
    }, "parameter 0 is undefined or not contiguous");
    auto z = dist::ZeroRedundancyOptimizer::make<optim::Adam>({w}, optim::AdamOptions());
    expect_error([&] { z.consolidate_state_dict(1); }, "to = 1 is not a rank of a group of 1");
    expect_error([&] { z.load_state_dict({}); }, "no param_groups.0.params entry");
    // A flat list's factory may split its share into groups; state dicts then refuse (the groups are not known).
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
    expect_error([&] { grouped.consolidate_state_dict(0); },
                 "the local SGD has 2 param groups, this ZeroRedundancyOptimizer 1; state dicts need one local group");
    expect_error([&] {
      dist::ZeroRedundancyOptimizer({{w}, {b}}, [&](std::vector<std::vector<Tensor>> s) -> std::unique_ptr<optim::Optimizer> {
        return std::make_unique<optim::SGD>(std::vector<Tensor>{s[1][0], s[0][0]}, optim::SGDOptions(0.1));
      });
    }, "the local SGD has 1 param groups, this ZeroRedundancyOptimizer 2");
    expect_error([&] {
      dist::ZeroRedundancyOptimizer({{w}, {b}}, [&](std::vector<std::vector<Tensor>> s) -> std::unique_ptr<optim::Optimizer> {
        return std::make_unique<optim::SGD>(std::vector<optim::SGD::ParamGroup>{{s[1], optim::SGDOptions(0.1)},
                                                                                {s[0], optim::SGDOptions(0.1)}});
      });
    }, "param group 0 does not hold this rank's share of the given group 0");
    auto two = dist::ZeroRedundancyOptimizer({{w}, {b}}, [&](std::vector<std::vector<Tensor>> s) {
      return std::make_unique<optim::SGD>(std::vector<optim::SGD::ParamGroup>{{s[0], optim::SGDOptions(0.1)},
                                                                              {s[1], optim::SGDOptions(0.1)}});
    });
    expect_error([&] { two.load_state_dict({{"param_groups.0.params", arange(1)}}); }, "no param_groups.1.params entry");
    expect_error([&] { two.load_state_dict({{"param_groups.2.lr", zeros({})}}); },
                 "unexpected key 'param_groups.2.lr' (this optimizer has 2 param group(s))");
    expect_error([&] {
      dist::ZeroRedundancyOptimizer({w, b}, [&](std::vector<Tensor>) -> std::unique_ptr<optim::Optimizer> {
        return std::make_unique<optim::SGD>(std::vector<Tensor>{w}, optim::SGDOptions(0.1));
      });
    }, "the factory's optimizer holds 1 parameters; it must hold exactly the ones it is given");
  });
}
