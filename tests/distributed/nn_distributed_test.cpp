// nn layers across ranks, in forked processes over loopback: SyncBatchNorm on 2 ranks at half the
// batch, or unequal parts, equals BatchNorm2d on the whole batch (outputs, input gradients, parameter
// gradients summed over ranks, running statistics); DDP wraps a module whose forward takes (idx, targets) and returns
// (logits, loss), with a tied weight, and its averaged gradients equal one process's on the whole batch.
// Also: the README's `init_process_group({.backend = "gloo"})` compiles without a warning.
#include <doctest/doctest.h>

#include "distributed/ddp.h"
#include "distributed/init.h"
#include "distributed/sync_batch_norm.h"
#include "nn/api.h"
#include "tests/util/multiprocess.h"
#include "tests/util/tcp_group.h"

using namespace lockstep;
using namespace lockstep::testing;

namespace {

void init(int world, int rank, uint16_t port) {
  testing::init_tcp_group(port, world, rank, std::chrono::seconds(20));
}

// The README's designated initializers compile without -Wmissing-field-initializers warnings.
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wmissing-field-initializers"
[[maybe_unused]] dist::InitOptions readme_init_options() { return {.backend = "gloo"}; }
[[maybe_unused]] dist::DDPOptions readme_ddp_options() { return {.bucket_cap_mb = 1}; }
#pragma GCC diagnostic pop

bool close(const Tensor& a, const Tensor& b) { return allclose(a, b, 1e-10, 1e-12); }

struct TiedImpl : nn::Module {
  nn::Embedding wte{nullptr};
  nn::LayerNorm ln{nullptr};
  nn::Linear head{nullptr};
  TiedImpl() : Module("Tied") {
    wte = register_module("wte", nn::Embedding(7, 4));
    ln = register_module("ln", nn::LayerNorm(4));
    head = register_module("head", nn::Linear(nn::LinearOptions(4, 7).bias(false)));
    head->weight = head->register_parameter("weight", wte->weight);
  }
  std::pair<Tensor, Tensor> forward(const Tensor& idx, const Tensor& targets) {
    Tensor logits = head(ln(wte(idx)));  // [B, T, 7]
    return {logits, nn::functional::cross_entropy(logits.reshape({-1, 7}), targets.reshape({-1}))};
  }
};
LOCKSTEP_MODULE(Tied);

}  // namespace

TEST_CASE("SyncBatchNorm on 2 ranks equals BatchNorm2d on the whole batch, halves or unequal parts") {
  manual_seed(0);
  Tensor x = randn({6, 3, 2, 2}, kFloat64) * 3.0 + 1.0, gout = randn({6, 3, 2, 2}, kFloat64);
  for (int64_t first : {3, 2}) {  // rank 0's samples; rank 1 has the rest
    INFO("rank 0 has ", first, " of 6 samples");
    // The reference: one process, the whole batch.
    nn::BatchNorm2d bn(3);
    bn->to(kFloat64);
    Tensor xr = x.clone().set_requires_grad();
    Tensor ref = bn(xr);
    sum(ref * gout).backward();

    uint16_t port = free_port();
    auto results = run_ranks(2, [&](int rank) {
      init(2, rank, port);
      nn::SyncBatchNorm sbn(nn::BatchNormOptions(3), dist::stats_reducer());  // over the default group
      sbn->to(kFloat64);
      const int64_t start = rank ? first : 0, n = rank ? 6 - first : first;
      Tensor xs = x.narrow(0, start, n).clone().set_requires_grad();
      Tensor out = sbn(xs);
      sum(out * gout.narrow(0, start, n)).backward();
      RANK_CHECK(close(out, ref.narrow(0, start, n)), "output differs");
      RANK_CHECK(close(xs.grad(), xr.grad().narrow(0, start, n)), "input gradient differs");
      RANK_CHECK(close(sbn->running_mean, bn->running_mean), "running_mean differs");
      RANK_CHECK(close(sbn->running_var, bn->running_var), "running_var differs");
      Tensor gw = sbn->weight.grad().clone();
      dist::all_reduce(gw);
      RANK_CHECK(close(gw, bn->weight.grad()), "weight gradient summed over ranks differs");
      sbn->eval();
      bn->eval();
      RANK_CHECK(close(sbn(x), bn(x)), "eval output differs");
      dist::destroy_process_group();
    });
    CHECK_MESSAGE(all_ok(results), failures(results));
  }
}

TEST_CASE("DDP wraps a forward(idx, targets) -> (logits, loss) with a tied weight") {
  manual_seed(1);
  Tensor idx = randint(0, 7, {4, 5}), targets = randint(0, 7, {4, 5});
  Tied ref;
  ref->to(kFloat64);
  auto [ref_logits, ref_loss] = ref(idx, targets);
  ref_loss.backward();
  nn::NamedTensors ref_state = ref->state_dict();

  uint16_t port = free_port();
  auto results = run_ranks(2, [&](int rank) {
    init(2, rank, port);
    Tied model;
    model->to(kFloat64);
    model->load_state_dict(ref_state);
    auto ddp = std::make_shared<dist::DistributedDataParallel>(model);
    RANK_CHECK(ddp->parameters().size() == 3, "expected wte.weight, ln.weight, ln.bias; got ",
               ddp->parameters().size(), " parameters");
    auto [logits, loss] = ddp->forward<TiedImpl>(idx.narrow(0, 2 * rank, 2), targets.narrow(0, 2 * rank, 2));
    RANK_CHECK(close(logits, ref_logits.narrow(0, 2 * rank, 2)), "logits differ");
    loss.backward();  // gradients averaged over ranks: the mean loss over the whole batch
    auto mine = model->named_parameters(), theirs = ref->named_parameters();
    for (size_t i = 0; i < mine.size(); ++i)
      RANK_CHECK(close(mine[i].second.grad(), theirs[i].second.grad()), mine[i].first, " gradient differs");
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(all_ok(results), failures(results));
}

TEST_CASE("DDP gives its group to every SyncBatchNorm without one; one that has a reducer keeps it") {
  uint16_t port = free_port();
  auto results = run_ranks(2, [&](int rank) {
    init(2, rank, port);
    auto bn = std::make_shared<nn::SyncBatchNormImpl>(nn::BatchNormOptions(3));
    RANK_CHECK(bn->reducer() == nullptr, "a SyncBatchNorm built without a reducer has one");
    dist::DistributedDataParallel ddp(bn);
    RANK_CHECK(bn->reducer() != nullptr, "DDP gave the SyncBatchNorm no reducer");
    RANK_CHECK(bn->reducer()->world_size() == 2, "its reducer spans ", bn->reducer()->world_size(), " ranks, not 2");
    auto own = dist::stats_reducer();
    nn::SyncBatchNorm kept(nn::BatchNormOptions(3), own);
    RANK_CHECK(dist::convert_sync_batchnorm(*kept.ptr()) == 0, "convert_sync_batchnorm replaced a given reducer");
    RANK_CHECK(kept->reducer() == own, "the given reducer was replaced");
    nn::SyncBatchNorm bare(3);
    RANK_CHECK(dist::convert_sync_batchnorm(*bare.ptr()) == 1, "convert_sync_batchnorm gave no reducer");
    // Over the reducer, the statistics are the whole batch's: rank r's batch is all r, so the mean is 0.5.
    Tensor x = full({2, 3, 1, 1}, static_cast<double>(rank));
    bare(x);
    RANK_CHECK(close(bare->running_mean, full({3}, 0.05)), "running_mean ", bare->running_mean, ", expected 0.05 each");
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(all_ok(results), failures(results));
}

TEST_CASE("SyncBatchNorm without a reducer in a job of world size 2 throws, naming the module and the world size") {
  auto results = run_ranks(1, [&](int) {
    ::setenv("WORLD_SIZE", "2", 1);
    nn::SyncBatchNorm bn(3);
    std::string error;
    try {
      bn(randn({4, 3, 2, 2}));
    } catch (const Error& e) {
      error = e.what();
    }
    RANK_CHECK(error.starts_with("SyncBatchNorm(3): batch statistics in a job of world size 2 (WORLD_SIZE) with no "
                                 "stats reducer"),
               "error: \"", error, "\"");
    RANK_CHECK(bn->num_batches_tracked.item<int64_t>() == 0, "the failed call counted a batch");
  });
  CHECK_MESSAGE(all_ok(results), failures(results));
}
