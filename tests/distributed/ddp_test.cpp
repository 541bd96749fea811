// DistributedDataParallel's core promise, on CPU ranks in forked processes over loopback: W ranks at
// per-rank batch B/W produce, step by step, the same parameters as one process at batch B; DDP on one
// rank equals no DDP exactly; no_sync over k micro-batches equals one batch k times larger; plus the
// errors for unused parameters and models that differ across ranks.
#include <doctest/doctest.h>

#include "distributed/ddp.h"
#include "distributed/init.h"
#include "nn/api.h"
#include "optim/api.h"
#include "tests/util/ddp_reference.h"
#include "tests/util/multiprocess.h"
#include "tests/util/tcp_group.h"

using namespace lockstep;
using namespace lockstep::testing;

namespace {

dist::DDPOptions small_buckets() {
  dist::DDPOptions o;
  o.bucket_cap_mb = o.first_bucket_cap_mb = 0.0001;
  return o;
}
dist::DDPOptions find_unused() {
  dist::DDPOptions o;
  o.find_unused_parameters = true;
  return o;
}
dist::DDPOptions first_bucket_100_bytes() {
  dist::DDPOptions o;
  o.bucket_cap_mb = 1;
  o.first_bucket_cap_mb = 100.0 / (1024 * 1024);
  return o;
}

void init(int world, int rank, uint16_t port) {
  testing::init_tcp_group(port, world, rank, std::chrono::seconds(20));
}

std::string max_rel_error(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / (std::abs(y[i]) + 1e-6));
  return std::to_string(worst);
}

// Trains with DDP on `world` ranks and checks every step against the single-process reference.
void check_parity(int world, double bucket_cap_mb, bool as_view) {
  Data d = make_data();
  auto ref = reference_trajectory(d);
  uint16_t port = testing::free_port();
  auto results = run_ranks(world, [&](int rank) {
    init(world, rank, port);
    // Rank 0 starts from the reference weights; the others from different ones, which DDP must
    // replace by rank 0's.
    auto model = make_model(rank == 0 ? 0 : 100 + rank);
    dist::DDPOptions opts;
    opts.bucket_cap_mb = bucket_cap_mb;
    opts.first_bucket_cap_mb = std::min(1.0, bucket_cap_mb);
    opts.gradient_as_bucket_view = as_view;
    dist::DistributedDataParallel ddp(model, opts);
    optim::SGD sgd(ddp.parameters(), optim::SGDOptions(0.1).momentum(0.9));
    nn::CrossEntropyLoss ce;
    const int64_t per = kBatch / world;
    for (int s = 0; s < kSteps; ++s) {
      sgd.zero_grad();
      Tensor x = rows(d.x[s], rank * per, (rank + 1) * per), y = rows(d.y[s], rank * per, (rank + 1) * per);
      ce(ddp(x), y).backward();
      sgd.step();
      auto params = model->named_parameters();
      for (size_t i = 0; i < params.size(); ++i)
        RANK_CHECK(internal::allclose(params[i].second, ref[s][i].second, 1e-5, 1e-6), "step ", s, " ", params[i].first,
                   ": relative error ", max_rel_error(params[i].second, ref[s][i].second));
    }
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

}  // namespace

TEST_CASE("W ranks at batch B/W follow one process at batch B, step by step") {
  for (int world : {2, 3}) {
    for (double cap : {25.0, 0.0001}) {  // one bucket; one bucket per parameter
      INFO("world ", world, " bucket_cap_mb ", cap);
      check_parity(world, cap, false);
    }
  }
  INFO("gradient_as_bucket_view");
  check_parity(2, 0.0002, true);
}

TEST_CASE("DDP on one rank equals no DDP exactly") {
  Data d = make_data();
  auto ref = reference_trajectory(d);
  uint16_t port = testing::free_port();
  auto results = run_ranks(1, [&](int rank) {
    init(1, rank, port);
    auto model = make_model(0);
    dist::DistributedDataParallel ddp(model);
    optim::SGD sgd(ddp.parameters(), optim::SGDOptions(0.1).momentum(0.9));
    nn::CrossEntropyLoss ce;
    for (int s = 0; s < kSteps; ++s) {
      sgd.zero_grad();
      ce(ddp(d.x[s]), d.y[s]).backward();
      sgd.step();
      auto params = model->named_parameters();
      for (size_t i = 0; i < params.size(); ++i)
        RANK_CHECK(internal::allclose(params[i].second, ref[s][i].second, 0, 0), "step ", s, " ", params[i].first,
                   " differs");
    }
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

namespace {
// pytorch/examples' VAE shape: one input, three outputs.
struct TwoHeadsImpl : nn::Module {
  nn::Linear a{nullptr}, b{nullptr};
  TwoHeadsImpl() : Module("TwoHeads") {
    a = register_module("a", nn::Linear(4, 2));
    b = register_module("b", nn::Linear(4, 3));
  }
  std::tuple<Tensor, Tensor, Tensor> forward(const Tensor& x) { return {a(x), b(x), a(x).sum()}; }
};
LOCKSTEP_MODULE(TwoHeads);
}  // namespace

TEST_CASE("a module returning a tuple trains through forward<M>, averaged over ranks") {
  uint16_t port = testing::free_port();
  auto results = run_ranks(2, [&](int rank) {
    init(2, rank, port);
    manual_seed(rank);  // DDP replaces rank 1's weights by rank 0's
    TwoHeads model;
    auto ddp = std::make_shared<dist::DistributedDataParallel>(model);
    Tensor x = full({3, 4}, rank + 1.0);
    auto [ya, yb, s] = ddp->forward<TwoHeadsImpl>(x);
    RANK_CHECK((ya.shape() == Shape{3, 2} && yb.shape() == Shape{3, 3} && s.dim() == 0), "wrong shapes");
    (ya.sum() + yb.sum()).backward();
    // d(sum of x W^T + b)/dW = column sums of x: 3 on rank 0, 6 on rank 1; averaged: 4.5.
    RANK_CHECK(model->a->weight.grad().to_vector<float>() == std::vector<float>(8, 4.5f), "wrong gradient");
    RANK_CHECK(model->b->bias.grad().to_vector<float>() == std::vector<float>(3, 3.f), "wrong bias gradient");
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("no_sync over k micro-batches equals one batch k times larger") {
  Data d = make_data();
  const int world = 2, k = 3;
  const int64_t micro = kBatch / (world * k);  // 2 rows per micro-batch
  // Reference gradient: the whole global batch in one process.
  auto ref_model = make_model(0);
  nn::CrossEntropyLoss ce;
  ce((*ref_model)(d.x[0]), d.y[0]).backward();
  std::vector<Tensor> ref_grads;
  for (auto& p : ref_model->parameters()) ref_grads.push_back(internal::clone(p.grad()));
  uint16_t port = testing::free_port();
  auto results = run_ranks(world, [&](int rank) {
    init(world, rank, port);
    auto model = make_model(0);
    dist::DistributedDataParallel ddp(model, small_buckets());
    for (int j = 0; j < k; ++j) {
      int64_t begin = (rank * k + j) * micro;
      Tensor x = rows(d.x[0], begin, begin + micro), y = rows(d.y[0], begin, begin + micro);
      // Each micro-batch's mean loss scaled by 1/k: the accumulated gradient is the big batch's.
      if (j + 1 < k) {
        auto guard = ddp.no_sync();
        (ce(ddp(x), y) * (1.0 / k)).backward();
      } else {
        (ce(ddp(x), y) * (1.0 / k)).backward();
      }
    }
    auto params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i)
      RANK_CHECK(internal::allclose(params[i].grad(), ref_grads[i], 1e-5, 1e-7), "parameter ", i, ": relative error ",
                 max_rel_error(params[i].grad(), ref_grads[i]));
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

namespace {
// Holds a layer that forward never uses.
struct WithUnused : nn::Module {
  nn::Linear used{nullptr}, unused{nullptr};
  WithUnused() : Module("WithUnused") {
    used = register_module("used", nn::Linear(4, 2));
    unused = register_module("unused", nn::Linear(4, 2));
  }
  Tensor forward(const Tensor& x) { return used->forward(x); }
};
}  // namespace

TEST_CASE("parameters without gradients are an error naming them, unless find_unused_parameters") {
  uint16_t port = testing::free_port();
  auto results = run_ranks(2, [&](int rank) {
    init(2, rank, port);
    manual_seed(0);
    auto model = std::make_shared<WithUnused>();
    Tensor x = ones({3, 4});
    {
      dist::DistributedDataParallel ddp(model);
      std::string error;
      try {
        ddp(x).sum().backward();
      } catch (const Error& e) {
        error = e.what();
      }
      RANK_CHECK(error.find("received no gradient in this backward pass: [unused.weight, unused.bias]") !=
                     std::string::npos, "error was: ", error);
    }
    model->zero_grad();
    dist::DistributedDataParallel ddp(model, find_unused());
    ddp(x).sum().backward();
    RANK_CHECK(model->used->weight.grad().defined(), "used.weight has no gradient");
    // d(sum of x W^T + b)/dW = column sums of x = 3 for every weight, identical on both ranks.
    RANK_CHECK(model->used->weight.grad().to_vector<float>() == std::vector<float>(8, 3.f), "wrong gradient");
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("models that differ across ranks are an error on every rank") {
  uint16_t port = testing::free_port();
  auto results = run_ranks(2, [&](int rank) {
    init(2, rank, port);
    auto model = nn::Sequential(nn::Linear(4, rank == 0 ? 3 : 5));
    std::string error;
    try {
      dist::DistributedDataParallel ddp(model);
    } catch (const Error& e) {
      error = e.what();
    }
    if (rank == 1)
      RANK_CHECK(error == "DistributedDataParallel: the model differs across ranks: parameter 0: rank 0 has "
                          "'0.weight float32 [3, 4]', rank 1 has '0.weight float32 [5, 4]'", "error was: ", error);
    else
      RANK_CHECK(error.find("another rank reported the first difference") != std::string::npos, "error was: ", error);
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("buckets: reverse registration order, a small first bucket, then bucket_cap_mb") {
  uint16_t port = testing::free_port();
  auto results = run_ranks(1, [&](int rank) {
    init(1, rank, port);
    auto model = make_model(0);  // 0.weight (48), 0.bias (8), 2.weight (24), 2.bias (3) floats
    dist::DistributedDataParallel one(model);
    using Layout = std::vector<std::vector<size_t>>;
    RANK_CHECK((one.reducer().bucket_indices() == Layout{{3, 2, 1, 0}}), "one bucket");
    // First bucket capped at 100 bytes (25 floats): 2.bias + 2.weight = 108 bytes closes it.
    dist::DistributedDataParallel split(model, first_bucket_100_bytes());
    RANK_CHECK((split.reducer().bucket_indices() == Layout{{3, 2}, {1, 0}}), "two buckets");
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}
