// The losses after MSELoss (L1Loss ... TripletMarginWithDistanceLoss) and cosine_similarity, pairwise_distance
// and normalize against PyTorch: tests/fixtures/loss_fixtures.safetensors (written by
// tools/fixtures/make_nn_fixtures.py) holds, per case, the inputs, PyTorch's float64 output and the gradients
// of sum(out * gout). Each case runs in float64 (to 1e-9) and in float32 (to about 1e-5), through nn::functional
// or, for the default options, the module. Then gradcheck in float64, and the errors for bad inputs.
// Part of the nn_layers_test binary.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nn/api.h"
#include "tests/util/fixtures.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::error_of;
namespace F = lockstep::nn::functional;

namespace {

const std::vector<std::pair<std::string, nn::Reduction>> kReductions = {
    {"none", nn::kNone}, {"mean", nn::kMean}, {"sum", nn::kSum}};

const testing::Fixtures fx("tests/fixtures/loss_fixtures.safetensors", "make_nn_fixtures.py");

using testing::check_close;

using CaseFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Case c in `dtype`: fn gets the inputs (leaves requiring grad) then the consts, floating-point ones in
// `dtype`; its output and each input's gradient (of sum(out * gout)) are compared with PyTorch's.
void run_case(const std::string& c, const std::vector<std::string>& inputs, const std::vector<std::string>& consts,
              const CaseFn& fn, Dtype dtype, double tol) {
  auto as = [&](Tensor t) { return is_floating_point(t.dtype()) ? t.to(dtype) : t; };
  std::vector<Tensor> args;
  for (auto& n : inputs) args.push_back(as(fx(c + "." + n)).set_requires_grad());
  for (auto& n : consts) args.push_back(as(fx(c + "." + n)));
  Tensor out = fn(args);
  const std::string tag = c + (dtype == kFloat64 ? "" : " (float32)");
  check_close(out, fx(c + ".out"), tag + ".out", tol);
  sum(out * as(fx(c + ".gout"))).backward();
  for (size_t i = 0; i < inputs.size(); ++i)
    check_close(args[i].grad(), fx(c + ".grad." + inputs[i]), tag + ".grad." + inputs[i], tol);
}

void check_case(const std::string& c, const std::vector<std::string>& inputs, const std::vector<std::string>& consts,
                const CaseFn& fn, double tol32 = 1e-5) {
  INFO("case ", c);
  run_case(c, inputs, consts, fn, kFloat64, 1e-9);
  run_case(c, inputs, consts, fn, kFloat32, tol32);
}

// gradcheck on a case's float64 inputs (consts passed as they are).
void gradcheck_case(const std::string& c, const std::vector<std::string>& inputs,
                    const std::vector<std::string>& consts, const CaseFn& fn) {
  INFO("gradcheck ", c);
  std::vector<Tensor> in, fixed;
  for (auto& n : inputs) in.push_back(fx(c + "." + n));
  for (auto& n : consts) fixed.push_back(fx(c + "." + n));
  testing::gradcheck([&](const std::vector<Tensor>& v) {
    std::vector<Tensor> all = v;
    all.insert(all.end(), fixed.begin(), fixed.end());
    return fn(all);
  }, in);
}

}  // namespace

TEST_CASE("L1Loss, SmoothL1Loss and HuberLoss match PyTorch") {
  for (auto& [name, r] : kReductions) {
    const nn::Reduction red = r;
    check_case("l1_" + name, {"x", "target"}, {}, [&](auto& v) {
      return red == nn::kMean ? nn::L1Loss()(v[0], v[1]) : F::l1_loss(v[0], v[1], red);
    });
    for (auto [tag, b] : {std::pair{"b1", 1.0}, {"b05", 0.5}, {"b0", 0.0}}) {
      const double beta = b;
      check_case(std::string("smooth_l1_") + tag + "_" + name, {"x", "target"}, {}, [&](auto& v) {
        if (beta == 1.0 && red == nn::kMean) return nn::SmoothL1Loss()(v[0], v[1]);
        return F::smooth_l1_loss(v[0], v[1], nn::SmoothL1LossOptions(red).beta(beta));
      });
    }
    for (auto [tag, d] : {std::pair{"d1", 1.0}, {"d2", 2.0}, {"d03", 0.3}}) {
      const double delta = d;
      check_case(std::string("huber_") + tag + "_" + name, {"x", "target"}, {}, [&](auto& v) {
        if (delta == 1.0 && red == nn::kMean) return nn::HuberLoss()(v[0], v[1]);
        return nn::HuberLoss(nn::HuberLossOptions(red).delta(delta))(v[0], v[1]);
      });
    }
  }
  // Input and target broadcast, as PyTorch's; the target's gradient sums over what it was broadcast along.
  check_case("l1_broadcast", {"x", "target"}, {}, [](auto& v) { return F::l1_loss(v[0], v[1]); });
  check_case("smooth_l1_broadcast", {"x", "target"}, {},
             [](auto& v) { return F::smooth_l1_loss(v[0], v[1], nn::SmoothL1LossOptions(nn::kNone).beta(0.5)); });
}

TEST_CASE("KLDivLoss matches PyTorch: every reduction, batchmean, log_target, zero targets") {
  for (const std::string name : {"none", "mean", "sum", "batchmean"}) {
    const nn::KLDivReduction red = name == "none" ? nn::KLDivReduction(nn::kNone)
                                   : name == "mean" ? nn::KLDivReduction(nn::kMean)
                                   : name == "sum"  ? nn::KLDivReduction(nn::kSum)
                                                    : nn::KLDivReduction(nn::kBatchMean);
    check_case("kl_div_" + name, {"x", "target"}, {}, [&](auto& v) {
      return name == "mean" ? nn::KLDivLoss()(v[0], v[1]) : F::kl_div(v[0], v[1], red);
    });
    check_case("kl_div_log_" + name, {"x", "target"}, {}, [&](auto& v) {
      return nn::KLDivLoss(nn::KLDivLossOptions(red).log_target(true))(v[0], v[1]);
    });
  }
  check_case("kl_div_zero_target", {"x"}, {"target"},
             [](auto& v) { return F::kl_div(v[0], v[1], nn::KLDivLossOptions().reduction(nn::kBatchMean)); });
  // A target of 0 contributes 0 and gives a finite gradient (-input), where PyTorch's is NaN.
  Tensor t = fx("kl_div_zero_target.target").set_requires_grad();
  Tensor x = fx("kl_div_zero_target.x");
  F::kl_div(x, t, nn::kSum).backward();
  CHECK(t.grad().to_vector<double>()[1] == doctest::Approx(-x.to_vector<double>()[1]));
}

TEST_CASE("PoissonNLLLoss matches PyTorch: log_input, full (Stirling's term), eps") {
  for (auto& [name, r] : kReductions) {
    const nn::Reduction red = r;
    for (bool log_input : {true, false}) {
      for (bool full : {false, true}) {
        const std::string c = std::string("poisson_") + (log_input ? "log" : "rate") + (full ? "_full_" : "_") + name;
        check_case(c, {"x", "target"}, {}, [&](auto& v) {
          if (log_input && !full && red == nn::kMean) return nn::PoissonNLLLoss()(v[0], v[1]);
          return F::poisson_nll_loss(v[0], v[1],
                                     nn::PoissonNLLLossOptions().log_input(log_input).full(full).reduction(red));
        });
      }
    }
  }
  // Counts with zeros and ones, where Stirling's term is left out; and a large eps.
  check_case("poisson_counts_full", {"x"}, {"target"},
             [](auto& v) { return F::poisson_nll_loss(v[0], v[1], nn::PoissonNLLLossOptions().full(true).eps(1e-4)); });
  check_case("poisson_rate_eps", {"x", "target"}, {}, [](auto& v) {
    return F::poisson_nll_loss(v[0], v[1], nn::PoissonNLLLossOptions().log_input(false).eps(0.3).reduction(nn::kSum));
  });
  // The target's gradient stays finite at a count of 0 under full (PyTorch's is NaN there).
  Tensor t = fx("poisson_counts_full.target").set_requires_grad();
  F::poisson_nll_loss(fx("poisson_counts_full.x"), t, nn::PoissonNLLLossOptions().full(true)).backward();
  for (double g : t.grad().to_vector<double>()) CHECK(std::isfinite(g));
}

TEST_CASE("GaussianNLLLoss matches PyTorch: full, var clamped at eps with its gradient passing, var shapes") {
  for (auto& [name, r] : kReductions) {
    const nn::Reduction red = r;
    check_case("gaussian_" + name, {"x", "target", "var"}, {}, [&](auto& v) {
      return red == nn::kMean ? nn::GaussianNLLLoss()(v[0], v[1], v[2])
                              : F::gaussian_nll_loss(v[0], v[1], v[2], nn::GaussianNLLLossOptions().reduction(red));
    });
    check_case("gaussian_full_" + name, {"x", "target", "var"}, {}, [&](auto& v) {
      return nn::GaussianNLLLoss(nn::GaussianNLLLossOptions().full(true).reduction(red))(v[0], v[1], v[2]);
    });
  }
  check_case("gaussian_var_short", {"x", "target", "var"}, {}, [](auto& v) {
    return F::gaussian_nll_loss(v[0], v[1], v[2], nn::GaussianNLLLossOptions().reduction(nn::kNone));
  });
  check_case("gaussian_var_last1", {"x", "target", "var"}, {},
             [](auto& v) { return F::gaussian_nll_loss(v[0], v[1], v[2], nn::GaussianNLLLossOptions().eps(0.3)); });
  check_case("gaussian_var_mid1", {"x", "target", "var"}, {}, [](auto& v) {
    return F::gaussian_nll_loss(v[0], v[1], v[2], nn::GaussianNLLLossOptions().reduction(nn::kSum));
  });
  check_case("gaussian_target_broadcast", {"x", "target", "var"}, {}, [](auto& v) {
    return F::gaussian_nll_loss(v[0], v[1], v[2], nn::GaussianNLLLossOptions().reduction(nn::kNone));
  });
  check_case("gaussian_float_var", {"x", "target"}, {},
             [](auto& v) { return F::gaussian_nll_loss(v[0], v[1], 0.7, nn::GaussianNLLLossOptions().full(true)); });
}

TEST_CASE("MarginRankingLoss, HingeEmbeddingLoss, CosineEmbeddingLoss and SoftMarginLoss match PyTorch") {
  for (auto& [name, r] : kReductions) {
    const nn::Reduction red = r;
    for (auto [tag, m] : {std::pair{"m0", 0.0}, {"m05", 0.5}}) {
      const double margin = m;
      check_case(std::string("margin_ranking_") + tag + "_" + name, {"input1", "input2", "target"}, {}, [&](auto& v) {
        if (margin == 0.0 && red == nn::kMean) return nn::MarginRankingLoss()(v[0], v[1], v[2]);
        return F::margin_ranking_loss(v[0], v[1], v[2], nn::MarginRankingLossOptions().margin(margin).reduction(red));
      });
    }
    for (auto [tag, m] : {std::pair{"m1", 1.0}, {"m05", 0.5}}) {
      const double margin = m;
      check_case(std::string("hinge_") + tag + "_" + name, {"x"}, {"target"}, [&](auto& v) {
        if (margin == 1.0 && red == nn::kMean) return nn::HingeEmbeddingLoss()(v[0], v[1]);
        return F::hinge_embedding_loss(v[0], v[1], nn::HingeEmbeddingLossOptions().margin(margin).reduction(red));
      });
    }
    for (auto [tag, m] : {std::pair{"m0", 0.0}, {"m03", 0.3}, {"mneg", -0.5}}) {
      const double margin = m;
      check_case(std::string("cosine_embedding_") + tag + "_" + name, {"input1", "input2"}, {"target"}, [&](auto& v) {
        if (margin == 0.0 && red == nn::kMean) return nn::CosineEmbeddingLoss()(v[0], v[1], v[2]);
        return F::cosine_embedding_loss(v[0], v[1], v[2],
                                        nn::CosineEmbeddingLossOptions().margin(margin).reduction(red));
      });
    }
    check_case("soft_margin_" + name, {"x"}, {"target"}, [&](auto& v) {
      return red == nn::kMean ? nn::SoftMarginLoss()(v[0], v[1]) : F::soft_margin_loss(v[0], v[1], red);
    });
  }
  check_case("hinge_broadcast", {"x"}, {"target"},
             [](auto& v) { return F::hinge_embedding_loss(v[0], v[1], nn::HingeEmbeddingLossOptions().reduction(nn::kNone)); });
  check_case("cosine_embedding_vector", {"input1", "input2"}, {"target"}, [](auto& v) {
    return F::cosine_embedding_loss(v[0], v[1], v[2], nn::CosineEmbeddingLossOptions().reduction(nn::kNone));
  });
}

TEST_CASE("MultiLabelSoftMarginLoss, MultiMarginLoss and MultiLabelMarginLoss match PyTorch") {
  for (auto& [name, r] : kReductions) {
    const nn::Reduction red = r;
    check_case("multilabel_soft_margin_" + name, {"x", "target"}, {}, [&](auto& v) {
      return red == nn::kMean ? nn::MultiLabelSoftMarginLoss()(v[0], v[1])
                              : F::multilabel_soft_margin_loss(v[0], v[1],
                                                               nn::MultiLabelSoftMarginLossOptions().reduction(red));
    });
    check_case("multilabel_soft_margin_weight_" + name, {"x", "target", "weight"}, {}, [&](auto& v) {
      return F::multilabel_soft_margin_loss(v[0], v[1],
                                            nn::MultiLabelSoftMarginLossOptions().weight(v[2]).reduction(red));
    });
    for (int64_t p : {1, 2}) {
      check_case("multi_margin_p" + std::to_string(p) + "_" + name, {"x"}, {"target"}, [&](auto& v) {
        if (p == 1 && red == nn::kMean) return nn::MultiMarginLoss()(v[0], v[1]);
        return F::multi_margin_loss(v[0], v[1], nn::MultiMarginLossOptions().p(p).reduction(red));
      });
      check_case("multi_margin_p" + std::to_string(p) + "_weight_" + name, {"x"}, {"target", "weight"}, [&](auto& v) {
        return nn::MultiMarginLoss(nn::MultiMarginLossOptions().p(p).margin(0.7).weight(v[2]).reduction(red))(v[0], v[1]);
      });
    }
    check_case("multilabel_margin_" + name, {"x"}, {"target"}, [&](auto& v) {
      return red == nn::kMean ? nn::MultiLabelMarginLoss()(v[0], v[1]) : F::multilabel_margin_loss(v[0], v[1], red);
    });
  }
  check_case("multilabel_soft_margin_3d", {"x", "target"}, {}, [](auto& v) {
    return F::multilabel_soft_margin_loss(v[0], v[1], nn::MultiLabelSoftMarginLossOptions().reduction(nn::kNone));
  });
  // Vectors: 'none' has the target's shape, [1] or [].
  check_case("multi_margin_vector", {"x"}, {"target"},
             [](auto& v) { return F::multi_margin_loss(v[0], v[1], nn::MultiMarginLossOptions().reduction(nn::kNone)); });
  check_case("multi_margin_vector0d", {"x"}, {"target"}, [](auto& v) {
    return F::multi_margin_loss(v[0], v[1], nn::MultiMarginLossOptions().p(2).reduction(nn::kNone));
  });
  check_case("multilabel_margin_vector", {"x"}, {"target"},
             [](auto& v) { return F::multilabel_margin_loss(v[0], v[1], nn::kNone); });
}

TEST_CASE("TripletMarginLoss and TripletMarginWithDistanceLoss match PyTorch: p, eps, swap, distance_function") {
  const std::vector<std::pair<std::string, nn::TripletMarginLossOptions>> variants = {
      {"default", {}},
      {"p1_swap", nn::TripletMarginLossOptions().p(1).swap(true).margin(2.0)},
      {"p3_eps", nn::TripletMarginLossOptions().p(3).eps(1e-3).margin(0.5)},
      {"p2_swap", nn::TripletMarginLossOptions().swap(true)}};
  auto cos_distance = [](const Tensor& a, const Tensor& b) { return 1.0 - F::cosine_similarity(a, b); };
  for (auto& [name, r] : kReductions) {
    const nn::Reduction red = r;
    for (auto& [tag, o] : variants) {
      const auto opts = nn::TripletMarginLossOptions(o).reduction(red);
      const bool defaults = tag == "default" && red == nn::kMean;
      check_case("triplet_" + tag + "_" + name, {"anchor", "positive", "negative"}, {}, [&](auto& v) {
        if (defaults) return nn::TripletMarginLoss()(v[0], v[1], v[2]);
        return F::triplet_margin_loss(v[0], v[1], v[2], opts);
      });
    }
    check_case("triplet_distance_default_" + name, {"anchor", "positive", "negative"}, {}, [&](auto& v) {
      if (red == nn::kMean) return nn::TripletMarginWithDistanceLoss()(v[0], v[1], v[2]);
      return F::triplet_margin_with_distance_loss(v[0], v[1], v[2],
                                                  nn::TripletMarginWithDistanceLossOptions().reduction(red));
    });
    check_case("triplet_distance_cosine_swap_" + name, {"anchor", "positive", "negative"}, {}, [&](auto& v) {
      return nn::TripletMarginWithDistanceLoss(nn::TripletMarginWithDistanceLossOptions()
                                                   .distance_function(cos_distance)
                                                   .margin(0.4)
                                                   .swap(true)
                                                   .reduction(red))(v[0], v[1], v[2]);
    });
  }
  check_case("triplet_broadcast", {"anchor", "positive", "negative"}, {}, [](auto& v) {
    return F::triplet_margin_loss(v[0], v[1], v[2], nn::TripletMarginLossOptions().reduction(nn::kNone));
  });
}

TEST_CASE("cosine_similarity, pairwise_distance and normalize match PyTorch, zero vectors included") {
  const double inf = std::numeric_limits<double>::infinity();
  for (auto [tag, o] : {std::pair{"p2", nn::PairwiseDistanceOptions()},
                        {"p1", nn::PairwiseDistanceOptions().p(1)},
                        {"p3_keepdim", nn::PairwiseDistanceOptions().p(3).keepdim(true)},
                        {"eps", nn::PairwiseDistanceOptions().eps(0.1)},
                        {"pinf", nn::PairwiseDistanceOptions().p(inf)}}) {
    const nn::PairwiseDistanceOptions opts = o;
    check_case(std::string("pairwise_distance_") + tag, {"x1", "x2"}, {},
               [&](auto& v) { return nn::PairwiseDistance(opts)(v[0], v[1]); });
  }
  check_case("pairwise_distance_broadcast", {"x1", "x2"}, {}, [](auto& v) { return F::pairwise_distance(v[0], v[1]); });
  check_case("pairwise_distance_3d", {"x1", "x2"}, {},
             [](auto& v) { return F::pairwise_distance(v[0], v[1], F::PairwiseDistanceFuncOptions().p(1.5)); });
  for (auto [tag, o] : {std::pair{"dim1", nn::CosineSimilarityOptions()},
                        {"dim0", nn::CosineSimilarityOptions().dim(0)},
                        {"broadcast", nn::CosineSimilarityOptions().dim(-1)},
                        {"zero_row", nn::CosineSimilarityOptions().eps(1e-3)}}) {
    const nn::CosineSimilarityOptions opts = o;
    check_case(std::string("cosine_similarity_") + tag, {"x1", "x2"}, {},
               [&](auto& v) { return nn::CosineSimilarity(opts)(v[0], v[1]); });
  }
  for (auto [tag, o] : {std::pair{"p2", F::NormalizeFuncOptions()},
                        {"p1_dim0", F::NormalizeFuncOptions().p(1).dim(0)},
                        {"p3_last", F::NormalizeFuncOptions().p(3).dim(-1)},
                        {"zero_row", F::NormalizeFuncOptions().eps(1e-3)}}) {
    const F::NormalizeFuncOptions opts = o;
    check_case(std::string("normalize_") + tag, {"x"}, {}, [&](auto& v) { return F::normalize(v[0], opts); });
  }
  // Scalars: pairwise_distance is |x1 - x2 + eps|, of shape [].
  Tensor d = F::pairwise_distance(scalar_tensor(1.0, kFloat64), scalar_tensor(3.0, kFloat64));
  CHECK(d.shape() == Shape{});
  CHECK(d.item<double>() == doctest::Approx(2.0 - 1e-6));
}

TEST_CASE("the new losses' gradients pass gradcheck in float64") {
  gradcheck_case("smooth_l1_b05_mean", {"x", "target"}, {},
                 [](auto& v) { return F::smooth_l1_loss(v[0], v[1], nn::SmoothL1LossOptions().beta(0.5)); });
  gradcheck_case("huber_d03_none", {"x", "target"}, {},
                 [](auto& v) { return F::huber_loss(v[0], v[1], nn::HuberLossOptions(nn::kNone).delta(0.3)); });
  gradcheck_case("kl_div_log_batchmean", {"x", "target"}, {}, [](auto& v) {
    return F::kl_div(v[0], v[1], nn::KLDivLossOptions(nn::kBatchMean).log_target(true));
  });
  gradcheck_case("poisson_rate_full_none", {"x", "target"}, {}, [](auto& v) {
    return F::poisson_nll_loss(v[0], v[1], nn::PoissonNLLLossOptions().log_input(false).full(true).reduction(nn::kNone));
  });
  gradcheck_case("gaussian_var_mid1", {"x", "target", "var"}, {},
                 [](auto& v) { return F::gaussian_nll_loss(v[0], v[1], v[2]); });
  gradcheck_case("margin_ranking_m05_none", {"input1", "input2", "target"}, {}, [](auto& v) {
    return F::margin_ranking_loss(v[0], v[1], v[2], nn::MarginRankingLossOptions().margin(0.5).reduction(nn::kNone));
  });
  gradcheck_case("cosine_embedding_m03_none", {"input1", "input2"}, {"target"}, [](auto& v) {
    return F::cosine_embedding_loss(v[0], v[1], v[2], nn::CosineEmbeddingLossOptions().margin(0.3).reduction(nn::kNone));
  });
  gradcheck_case("multilabel_soft_margin_weight_none", {"x", "target", "weight"}, {}, [](auto& v) {
    return F::multilabel_soft_margin_loss(v[0], v[1],
                                          nn::MultiLabelSoftMarginLossOptions().weight(v[2]).reduction(nn::kNone));
  });
  gradcheck_case("multi_margin_p2_weight_none", {"x"}, {"target", "weight"}, [](auto& v) {
    return F::multi_margin_loss(v[0], v[1],
                                nn::MultiMarginLossOptions().p(2).margin(0.7).weight(v[2]).reduction(nn::kNone));
  });
  gradcheck_case("multilabel_margin_none", {"x"}, {"target"},
                 [](auto& v) { return F::multilabel_margin_loss(v[0], v[1], nn::kNone); });
  gradcheck_case("triplet_p1_swap_none", {"anchor", "positive", "negative"}, {}, [](auto& v) {
    return F::triplet_margin_loss(v[0], v[1], v[2],
                                  nn::TripletMarginLossOptions().p(1).swap(true).margin(2.0).reduction(nn::kNone));
  });
  gradcheck_case("cosine_similarity_broadcast", {"x1", "x2"}, {},
                 [](auto& v) { return F::cosine_similarity(v[0], v[1], F::CosineSimilarityFuncOptions().dim(-1)); });
  gradcheck_case("pairwise_distance_3d", {"x1", "x2"}, {},
                 [](auto& v) { return F::pairwise_distance(v[0], v[1], nn::PairwiseDistanceOptions().p(1.5)); });
  gradcheck_case("normalize_p3_last", {"x"}, {},
                 [](auto& v) { return F::normalize(v[0], F::NormalizeFuncOptions().p(3).dim(-1)); });
}

TEST_CASE("the new losses name themselves, the shapes and the values in their errors") {
  Tensor x34 = zeros({3, 4}), x35 = zeros({3, 5});
  CHECK(error_of([&] { F::l1_loss(x34, x35); }) ==
        "l1_loss: input [3, 4] and target [3, 5] do not broadcast: the size of input (4) must match the size of "
        "target (5) at non-singleton dimension 1");
  CHECK(error_of([&] { F::l1_loss(zeros({3}, kInt64), zeros({3}, kInt64)); }) ==
        "l1_loss: expected a floating-point input, got int64 [3]");
  CHECK(error_of([&] { F::smooth_l1_loss(x34, x34, nn::SmoothL1LossOptions().beta(-1)); }) ==
        "smooth_l1_loss does not support negative values for beta, got -1");
  CHECK(error_of([&] { nn::HuberLoss(nn::HuberLossOptions().delta(0))(x34, x34); }) ==
        "huber_loss does not support non-positive values for delta, got 0");
  CHECK(error_of([&] { F::kl_div(x34, x35); }).find("kl_div: input [3, 4] and target [3, 5] do not broadcast") == 0);
  CHECK(error_of([&] { F::poisson_nll_loss(x34, x35); }).find("poisson_nll_loss: input [3, 4] and target [3, 5]") == 0);
  CHECK(error_of([&] { F::gaussian_nll_loss(x34, x34, ones({3, 5})); }) ==
        "gaussian_nll_loss: var is of incorrect size: var [3, 5] for input [3, 4] (expected the input's shape, it "
        "without its last dimension, or it with one dimension of size 1)");
  CHECK(error_of([&] { F::gaussian_nll_loss(zeros({2, 3, 4}), zeros({2, 3, 4}), ones({1, 1, 4})); }).find(
            "gaussian_nll_loss: var is of incorrect size: var [1, 1, 4] for input [2, 3, 4]") == 0);
  CHECK(error_of([&] { F::gaussian_nll_loss(x34, x34, tensor({1.f, -1.f, 1.f}, {3})); }) ==
        "gaussian_nll_loss: var has negative entry/entries (var [3])");
  CHECK(error_of([&] { F::gaussian_nll_loss(x34, x34, -0.5); }) ==
        "gaussian_nll_loss: var has negative entry/entries (var -0.5)");
  CHECK(error_of([&] { F::margin_ranking_loss(zeros({3}), zeros({3}), zeros({1, 3})); }) ==
        "margin_ranking_loss: All input tensors should have same dimension but got sizes: input1: [3], input2: [3], "
        "target: [1, 3]");
  CHECK(error_of([&] { F::margin_ranking_loss(zeros({3}), zeros({4}), zeros({3})); }).find(
            "margin_ranking_loss: input1 [3] and input2 [4] do not broadcast") == 0);
  CHECK(error_of([&] { F::hinge_embedding_loss(zeros({3}), zeros({4})); }).find(
            "hinge_embedding_loss: input [3] and target [4] do not broadcast") == 0);
  CHECK(error_of([&] { F::cosine_embedding_loss(x34, x34, ones({3, 1})); }) ==
        "cosine_embedding_loss: 0D or 1D target tensor expected, multi-target not supported, got target [3, 1]");
  CHECK(error_of([&] { F::cosine_embedding_loss(zeros({4}), zeros({4}), ones({3})); }) ==
        "cosine_embedding_loss: 1D target tensor expects 2D input tensors, but found inputs with sizes [4] and [4].");
  CHECK(error_of([&] { F::cosine_embedding_loss(x34, x34, ones({})); }) ==
        "cosine_embedding_loss: 0D target tensor expects 1D input tensors, but found inputs with sizes [3, 4] and [3, 4].");
  CHECK(error_of([&] { F::cosine_embedding_loss(x34, x34, ones({2})); }).find(
            "cosine_embedding_loss: the inputs' cosine [3] and target [2] do not broadcast") == 0);
  CHECK(error_of([&] { F::soft_margin_loss(zeros({3}), zeros({4})); }).find("soft_margin_loss: input [3] and target [4]") ==
        0);
  CHECK(error_of([&] { F::multilabel_soft_margin_loss(x34, x34, nn::MultiLabelSoftMarginLossOptions().weight(ones({5}))); })
            .find("multilabel_soft_margin_loss: input [3, 4] and weight [5] do not broadcast") == 0);
  Tensor t3 = tensor(std::vector<int64_t>{0, 1, 2});
  CHECK(error_of([&] { F::multi_margin_loss(x34, t3, nn::MultiMarginLossOptions().p(3)); }) ==
        "multi_margin_loss: only p == 1 and p == 2 supported, got p = 3");
  CHECK(error_of([&] { nn::MultiMarginLoss(nn::MultiMarginLossOptions().p(3)); }) ==
        "MultiMarginLoss: only p == 1 and p == 2 supported, got p = 3");
  CHECK(error_of([&] { nn::MultiMarginLoss(nn::MultiMarginLossOptions().weight(ones({2, 2}))); }) ==
        "MultiMarginLoss: expected weight to be None or 1D tensor, got 2D instead");
  CHECK(error_of([&] { F::multi_margin_loss(x34, t3, nn::MultiMarginLossOptions().weight(ones({3}))); }) ==
        "multi_margin_loss: inconsistent weight size, expected 4 but got [3]");
  CHECK(error_of([&] { F::multi_margin_loss(x34, tensor(std::vector<int64_t>{0, 1})); }) ==
        "multi_margin_loss: target tensor should be 1-D with size equal to the number of input samples (batch size). "
        "Expected target size [3], but got [2]. Input has shape [3, 4].");
  CHECK(error_of([&] { F::multi_margin_loss(x34, tensor(std::vector<int64_t>{0, 4, 1})); }) ==
        "multi_margin_loss: target out of range: 4 at position 1 of target [3] is not in [0, 4) for input [3, 4]");
  CHECK(error_of([&] { F::multi_margin_loss(zeros({2, 3, 4}), tensor(std::vector<int64_t>{0, 1})); }) ==
        "multi_margin_loss: Expected non-empty vector or matrix with optional 0-dim batch size, but got: [2, 3, 4]");
  CHECK(error_of([&] { F::multi_margin_loss(x34, zeros({3})); }) ==
        "multi_margin_loss: expected int64 class indices, got float32 target [3]");
  Tensor t24 = tensor(std::vector<int64_t>{0, 1, -1, 0, 1, -1, 0, 0}, {2, 4});
  CHECK(error_of([&] { F::multilabel_margin_loss(x34, t24); }) ==
        "multilabel_margin_loss: inconsistent target size: [2, 4] for input of size: [3, 4]");
  CHECK(error_of([&] { F::multilabel_margin_loss(zeros({2, 4}), tensor(std::vector<int64_t>{0, -1, 7, 0, 1, -1, 0, 0}, {2, 4})); }) ==
        "multilabel_margin_loss: argument #2 'target' is out of range: 7 at position 2 of target [2, 4] is not in "
        "[-1, 4) for input [2, 4]");
  CHECK(error_of([&] { F::triplet_margin_loss(x34, x34, zeros({4})); }) ==
        "triplet_margin_loss: The anchor, positive, and negative tensors are expected to have the same number of "
        "dimensions, but got: anchor 2D, positive 2D, and negative 1D inputs");
  CHECK(error_of([&] { F::triplet_margin_loss(x34, x34, x34, nn::TripletMarginLossOptions().margin(0)); }) ==
        "triplet_margin_loss: margin must be greater than 0, got 0");
  CHECK(error_of([&] { F::triplet_margin_loss(x34, x35, x34); }).find(
            "triplet_margin_loss: anchor [3, 4] and positive [3, 5] do not broadcast") == 0);
  CHECK(error_of([&] { nn::TripletMarginLoss(nn::TripletMarginLossOptions().margin(-1)); }) ==
        "TripletMarginLoss: expected margin to be greater than 0, got -1 instead");
  CHECK(error_of([&] { nn::TripletMarginWithDistanceLoss(nn::TripletMarginWithDistanceLossOptions().margin(0)); }) ==
        "TripletMarginWithDistanceLoss: expected margin to be greater than 0, got 0 instead");
  CHECK(error_of([&] { F::triplet_margin_with_distance_loss(x34, zeros({4}), x34); }).find(
            "triplet_margin_with_distance_loss: The anchor, positive, and negative tensors") == 0);
  CHECK(error_of([&] { F::pairwise_distance(x34, x35); }) ==
        "pairwise_distance: x1 [3, 4] and x2 [3, 5] do not broadcast: the size of x1 (4) must match the size of x2 "
        "(5) at non-singleton dimension 1");
  CHECK(error_of([&] { F::cosine_similarity(x34, x34, nn::CosineSimilarityOptions().dim(2)); }) ==
        "cosine_similarity: dim 2 is out of range for shape [3, 4] (expected to be in range of [-2, 1])");
  CHECK(error_of([&] { F::normalize(x34, F::NormalizeFuncOptions().dim(-3)); }) ==
        "normalize: dim -3 is out of range for shape [3, 4] (expected to be in range of [-2, 1])");
}

TEST_CASE("kl_div's batchmean divides the summed loss by the batch, not the element count") {
  Tensor x = fx("kl_div_sum.x"), t = fx("kl_div_sum.target");
  const double total = F::kl_div(x, t, nn::kSum).item<double>();
  CHECK(F::kl_div(x, t, nn::kBatchMean).item<double>() == doctest::Approx(total / 3));
  CHECK(F::kl_div(x, t, nn::kMean).item<double>() == doctest::Approx(total / 15));
  CHECK(nn::KLDivLossOptions().reduction() == nn::KLDivReduction(nn::kMean));
}

TEST_CASE("under CPU autocast the losses on PyTorch's float32 list return float32; its Python composites do not") {
  // The dtypes torch 2.x gives bfloat16 operands under torch.autocast("cpu", dtype=torch.bfloat16).
  manual_seed(3);
  Tensor x = randn({4, 6}).to(kBFloat16), y = randn({4, 6}).to(kBFloat16), z = randn({4, 6}).to(kBFloat16);
  Tensor var = rand({4, 6}).to(kBFloat16) + 0.1, label = sign(randn({4, 6})).to(kBFloat16);
  Tensor classes = tensor(std::vector<int64_t>{0, 1, 2, 3});
  Tensor listed = tensor(std::vector<int64_t>{0, 1, -1, 0, 0, 0}, {1, 6}).expand({4, 6}).contiguous();
  autocast guard(kCPU, kBFloat16);
  const std::vector<std::pair<std::string, Tensor>> float32 = {
      {"l1_loss", F::l1_loss(x, y)},
      {"smooth_l1_loss", F::smooth_l1_loss(x, y)},
      {"huber_loss", F::huber_loss(x, y)},
      {"kl_div", F::kl_div(x, var)},
      {"poisson_nll_loss", F::poisson_nll_loss(x, var)},
      {"margin_ranking_loss", F::margin_ranking_loss(x, y, label)},
      {"hinge_embedding_loss", F::hinge_embedding_loss(x, label)},
      {"cosine_embedding_loss", F::cosine_embedding_loss(x, y, label.select(1, 0))},
      {"soft_margin_loss", F::soft_margin_loss(x, label)},
      {"multi_margin_loss", F::multi_margin_loss(x, classes)},
      {"multilabel_margin_loss", F::multilabel_margin_loss(x, listed)},
      {"triplet_margin_loss", F::triplet_margin_loss(x, y, z)}};
  for (auto& [name, out] : float32) CHECK_MESSAGE(out.dtype() == kFloat32, name, " gave ", out.dtype());
  const std::vector<std::pair<std::string, Tensor>> bfloat16 = {
      {"gaussian_nll_loss", F::gaussian_nll_loss(x, y, var)},
      {"multilabel_soft_margin_loss", F::multilabel_soft_margin_loss(x, (label > 0.0).to(kBFloat16))},
      {"triplet_margin_with_distance_loss", F::triplet_margin_with_distance_loss(x, y, z)},
      {"pairwise_distance", F::pairwise_distance(x, y)},
      {"cosine_similarity", F::cosine_similarity(x, y)},
      {"normalize", F::normalize(x)}};
  for (auto& [name, out] : bfloat16) CHECK_MESSAGE(out.dtype() == kBFloat16, name, " gave ", out.dtype());
}
