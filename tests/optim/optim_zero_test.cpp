// The optimizers added after Adam (Adagrad, RMSprop, Adamax, NAdam, RAdam) under
// dist::ZeroRedundancyOptimizer, which takes them with no change outside optim/: on 2 and 3 CPU ranks
// over loopback, each rank steps its share and every rank's parameters equal a whole optimizer's, the
// consolidated state_dict equals the whole optimizer's, and a fresh ZeroRedundancyOptimizer loaded from
// that state goes on as the whole optimizer does.
#include <doctest/doctest.h>

#include <map>

#include "distributed/init.h"
#include "distributed/zero_redundancy_optimizer.h"
#include "optim/api.h"
#include "tensor/factory.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tests/util/multiprocess.h"
#include "tests/util/tcp_group.h"

using namespace lockstep;
using namespace lockstep::testing;

namespace {

// Five tensors of different sizes, so that every rank owns some; the same on every rank.
std::vector<Tensor> make_params() {
  manual_seed(11);
  std::vector<Tensor> out;
  for (const Shape& shape : {Shape{7}, Shape{3, 4}, Shape{5}, Shape{2, 2}, Shape{6}})
    out.push_back(randn(shape, TensorOptions(kFloat64)).set_requires_grad());
  return out;
}

// Step s's gradients, alike on every rank: 0.7 p + a shift; parameter 1 has none at step 3.
void set_grads(std::vector<Tensor>& params, int step) {
  for (size_t i = 0; i < params.size(); ++i) {
    if (i == 1 && step == 3) continue;
    params[i].set_grad(internal::add(internal::mul(params[i], 0.7), 0.1 * static_cast<double>(i) - 0.25 + 0.01 * step));
  }
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  auto x = internal::to_dtype(a, kFloat64).to_vector<double>(), y = internal::to_dtype(b, kFloat64).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

// Steps [from, to) of `whole` over `ref` beside `zero` over `mine`, comparing the parameters after each.
void train_beside(optim::Optimizer& whole, std::vector<Tensor>& ref, dist::ZeroRedundancyOptimizer& zero,
                  std::vector<Tensor>& mine, int from, int to, const std::string& when) {
  for (int s = from; s < to; ++s) {
    whole.zero_grad();
    zero.zero_grad();
    set_grads(ref, s);
    set_grads(mine, s);
    whole.step();
    zero.step();
    for (size_t i = 0; i < ref.size(); ++i)
      RANK_CHECK(max_abs_diff(ref[i], mine[i]) <= 1e-12, when, "step ", s, ": parameter ", i, " differs by ",
                 max_abs_diff(ref[i], mine[i]));
  }
}

// fn(rank) on `world` forked ranks, each in a default process group over loopback.
template <typename Fn>
void on_ranks(int world, Fn fn) {
  const uint16_t port = free_port();
  auto results = run_ranks(world, [&](int rank) {
    init_tcp_group(port, world, rank, std::chrono::seconds(30));
    fn(rank);
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(all_ok(results), failures(results));
}

template <class Opt, class O>
void check_under_zero(O options, bool loads) {
  for (int world : {2, 3}) {
    CAPTURE(world);
    on_ranks(world, [&](int rank) {
      std::vector<Tensor> ref = make_params(), mine = make_params();
      Opt whole(ref, options);
      auto zero = dist::ZeroRedundancyOptimizer::make<Opt>(mine, options);
      train_beside(whole, ref, zero, mine, 1, 9, "");
      zero.consolidate_state_dict(0);
      if (rank == 0) {
        const optim::StateDict full = whole.state_dict(), got = zero.state_dict();
        RANK_CHECK(full.size() == got.size(), "consolidated state has ", got.size(), " entries, the whole ",
                   whole.name(), "'s ", full.size());
        std::map<std::string, Tensor> by_key(got.begin(), got.end());
        for (const auto& [k, t] : full) {
          RANK_CHECK(by_key.count(k), "consolidated state lacks ", k);
          RANK_CHECK(by_key[k].dtype() == t.dtype() && max_abs_diff(by_key[k], t) == 0, k, " differs");
        }
      }
      if (!loads) return;
      // Fresh parameters with the values now, a fresh ZeRO (another lr) loaded with the whole state.
      std::vector<Tensor> again;
      for (const Tensor& p : mine) again.push_back(internal::clone(p).set_requires_grad());
      auto loaded = dist::ZeroRedundancyOptimizer::make<Opt>(again, O(0.5));
      loaded.load_state_dict(whole.state_dict());
      RANK_CHECK(loaded.lr() == options.lr(), "loaded lr is ", loaded.lr());
      train_beside(whole, ref, loaded, again, 9, 21, "after loading, ");
    });
  }
}

}  // namespace

TEST_CASE("Adagrad under ZeroRedundancyOptimizer equals a whole Adagrad") {
  check_under_zero<optim::Adagrad>(optim::AdagradOptions(0.1).lr_decay(0.01).initial_accumulator_value(0.1), true);
}

TEST_CASE("RMSprop (centered, momentum) under ZeroRedundancyOptimizer equals a whole RMSprop") {
  check_under_zero<optim::RMSprop>(optim::RMSpropOptions(0.01).centered(true).momentum(0.9).weight_decay(0.01), true);
}

TEST_CASE("Adamax under ZeroRedundancyOptimizer equals a whole Adamax") {
  check_under_zero<optim::Adamax>(optim::AdamaxOptions(0.02).weight_decay(0.01), true);
}

TEST_CASE("NAdam under ZeroRedundancyOptimizer equals a whole NAdam") {
  check_under_zero<optim::NAdam>(optim::NAdamOptions(0.01).weight_decay(0.01).decoupled_weight_decay(true), true);
}

TEST_CASE("RAdam under ZeroRedundancyOptimizer equals a whole RAdam, past the rectification's start") {
  check_under_zero<optim::RAdam>(optim::RAdamOptions(0.01).weight_decay(0.01), true);
}
