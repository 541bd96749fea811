// What DDP parity tests compare against (ddp_test on CPU ranks, nccl_multi_rank_test on GPUs): a small
// MLP, kSteps global batches of data, and the parameters plain single-process training at the global
// batch reaches after each step.
#pragma once

#include <memory>
#include <vector>

#include "nn/api.h"
#include "optim/api.h"

namespace lockstep::testing {

constexpr int64_t kIn = 6, kHidden = 8, kClasses = 3, kBatch = 12, kSteps = 5;

inline nn::Sequential make_model(uint64_t seed) {
  manual_seed(seed);
  return nn::Sequential(nn::Linear(kIn, kHidden), nn::ReLU(),
                                          nn::Linear(kHidden, kClasses));
}

struct Data {
  std::vector<Tensor> x, y;  // one global batch per step
};

inline Data make_data() {
  manual_seed(42);
  Data d;
  for (int s = 0; s < kSteps; ++s) {
    d.x.push_back(randn({kBatch, kIn}));
    d.y.push_back(randint(0, kClasses, {kBatch}));
  }
  return d;
}

// Rows [begin, end) of t.
inline Tensor rows(const Tensor& t, int64_t begin, int64_t end) { return internal::index_select(t, arange(begin, end)); }

// Parameters after each step of plain single-process training at the global batch (SGD, lr 0.1,
// momentum 0.9), on the CPU.
inline std::vector<nn::NamedTensors> reference_trajectory(const Data& d) {
  auto model = make_model(0);
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  nn::CrossEntropyLoss ce;
  std::vector<nn::NamedTensors> out;
  for (int s = 0; s < kSteps; ++s) {
    sgd.zero_grad();
    ce((*model)(d.x[s]), d.y[s]).backward();
    sgd.step();
    nn::NamedTensors snap;
    for (auto& [n, p] : model->named_parameters()) snap.emplace_back(n, internal::clone(p));
    out.push_back(snap);
  }
  return out;
}

}  // namespace lockstep::testing
