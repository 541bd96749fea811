// The sharding tests' model and data: a stack of Linear + LayerNorm blocks with sizes that no world
// size divides (so shards are padded), trained with Adam on data every rank draws alike; and their
// ranks, each in a default process group over loopback.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "distributed/init.h"
#include "nn/api.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tests/util/multiprocess.h"
#include "tests/util/tcp_group.h"

namespace lockstep::testing {

class LNBlockImpl : public nn::Module {
 public:
  LNBlockImpl(int64_t in, int64_t out) : Module("LNBlock") {
    fc = register_module("fc", nn::Linear(in, out));
    ln = register_module("ln", nn::LayerNorm(nn::LayerNormOptions(out)));
  }
  Tensor forward(const Tensor& x) { return tanh(ln(fc(x))); }
  nn::Linear fc{nullptr};
  nn::LayerNorm ln{nullptr};
};
LOCKSTEP_MODULE(LNBlock);

// [B, 7] -> 13 -> 13 -> 11 -> head [B, 3]; 570 parameters in 11 tensors.
class StackImpl : public nn::Module {
 public:
  StackImpl() : Module("Stack") {
    blocks = register_module("blocks", nn::ModuleList());
    blocks->push_back(LNBlock(7, 13));
    blocks->push_back(LNBlock(13, 13));
    blocks->push_back(LNBlock(13, 11));
    head = register_module("head", nn::Linear(11, 3));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = x;
    for (const auto& b : *blocks) h = b->forward(h);
    return head(h);
  }
  nn::ModuleList blocks{nullptr};
  nn::Linear head{nullptr};
};
LOCKSTEP_MODULE(Stack);

inline Stack make_stack(uint64_t seed) {
  manual_seed(seed);
  return Stack();
}

constexpr int64_t kGlobalBatch = 12;  // divisible by 2 and 3

// Step s's batch, rows [rank * B / world, (rank + 1) * B / world): every rank draws the whole batch.
inline std::pair<Tensor, Tensor> batch(int step, int rank, int world) {
  manual_seed(1000 + step);
  Tensor x = randn({kGlobalBatch, 7});
  Tensor y = randint(0, 3, {kGlobalBatch});
  const int64_t per = kGlobalBatch / world;
  return {x.slice(0, rank * per, (rank + 1) * per).contiguous(), y.slice(0, rank * per, (rank + 1) * per).contiguous()};
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  if (x.size() != y.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

// Runs fn(rank) on `world` forked ranks, each between init_process_group (TCP on loopback) and
// destroy_process_group, and checks that every rank ended well.
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

}  // namespace lockstep::testing
