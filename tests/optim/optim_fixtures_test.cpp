// Optimizers, schedulers and clip_grad_norm_ against PyTorch: tests/fixtures/optim_fixtures.safetensors
// (written by tools/fixtures/make_optim_fixtures.py, which states the setup) holds torch.optim's trajectories
// and state_dicts, torch.optim.lr_scheduler's lr sequences and torch.nn.utils.clip_grad_norm_'s
// results; tests/fixtures/optim_long_fixtures.safetensors the trajectories and state_dicts of Adagrad,
// RMSprop, Adamax, NAdam and RAdam over 20 steps. Each case's options are written here as in the script's
// CASES and LONG_CASES tables.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include "autograd/api.h"
#include "nn/utils/clip_grad.h"
#include "optim/api.h"
#include "tensor/ops.h"
#include "tensor/safetensors.h"

using namespace lockstep;

namespace {

constexpr const char* kFixtures = "tests/fixtures/optim_fixtures.safetensors";
constexpr const char* kLongFixtures = "tests/fixtures/optim_long_fixtures.safetensors";
constexpr int kSteps = 5;
constexpr int kLongSteps = 20;
constexpr int kSchedSteps = 30;

const std::map<std::string, Tensor>& fixtures(const std::string& file = kFixtures) {
  static std::map<std::string, std::map<std::string, Tensor>> loaded;
  auto it = loaded.find(file);
  if (it == loaded.end()) {
    SafetensorsFile f = load_safetensors(file);
    it = loaded.emplace(file, std::map<std::string, Tensor>(f.tensors.begin(), f.tensors.end())).first;
  }
  return it->second;
}

Tensor fx(const std::string& key, const std::string& file = kFixtures) {
  auto it = fixtures(file).find(key);
  REQUIRE_MESSAGE(it != fixtures(file).end(), "fixture ", key, " is missing from ", file,
                  ": run tools/fixtures/make_optim_fixtures.py");
  return it->second;
}

// Every element within rtol * |want| + atol, compared in float64; reports the worst element.
void check_close(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what) {
  REQUIRE_MESSAGE(got.shape() == want.shape(), what, ": shape ", got.shape(), " vs ", want.shape());
  auto g = internal::to_dtype(got, kFloat64).to_vector<double>();
  auto w = internal::to_dtype(want, kFloat64).to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double excess = std::abs(g[i] - w[i]) - (rtol * std::abs(w[i]) + atol);
    if (excess > worst || (i == 0 && excess > 0)) worst = excess, at = i;
  }
  CHECK_MESSAGE(worst <= 0, what, ": element ", at, " is ", (g.empty() ? 0 : g[at]), ", PyTorch has ",
                (w.empty() ? 0 : w[at]));
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(Tensor w, Tensor b)>;

template <class Opt, class O>
MakeOptimizer one_group(O o) {
  return [o](Tensor w, Tensor b) { return std::make_unique<Opt>(std::vector<Tensor>{w, b}, o); };
}

template <class Opt, class O>
MakeOptimizer two_groups(O ow, O ob) {
  return [ow, ob](Tensor w, Tensor b) {
    return std::make_unique<Opt>(std::vector<typename Opt::ParamGroup>{{{w}, ow}, {{b}, ob}});
  };
}

using optim::AdadeltaOptions;
using optim::AdagradOptions;
using optim::AdamaxOptions;
using optim::AdamOptions;
using optim::AdamWOptions;
using optim::NAdamOptions;
using optim::RAdamOptions;
using optim::RMSpropOptions;
using optim::SGDOptions;

// A case of the script's: its name, the optimizer over w and b, the file it is in and its steps.
struct OptimCase {
  std::string name;
  MakeOptimizer make;
  std::string file = kFixtures;
  int steps = kSteps;
};

// The script's CASES, then its LONG_CASES.
const std::vector<OptimCase>& cases() {
  static const std::vector<OptimCase> all = [] {
    std::vector<OptimCase> out = {
        {"sgd", one_group<optim::SGD>(SGDOptions(0.1))},
        {"sgd_momentum", one_group<optim::SGD>(SGDOptions(0.1).momentum(0.9))},
        {"sgd_dampening", one_group<optim::SGD>(SGDOptions(0.1).momentum(0.9).dampening(0.3))},
        {"sgd_nesterov", one_group<optim::SGD>(SGDOptions(0.1).momentum(0.9).nesterov(true))},
        {"sgd_weight_decay", one_group<optim::SGD>(SGDOptions(0.1).momentum(0.5).weight_decay(0.05))},
        {"sgd_maximize",
         one_group<optim::SGD>(SGDOptions(0.1).momentum(0.9).weight_decay(0.05).maximize(true))},
        {"sgd_groups", two_groups<optim::SGD>(SGDOptions(0.1).momentum(0.9), SGDOptions(0.03).momentum(0.5))},
        {"adam", one_group<optim::Adam>(AdamOptions(0.01))},
        {"adam_weight_decay", one_group<optim::Adam>(AdamOptions(0.01).weight_decay(0.1))},
        {"adam_amsgrad", one_group<optim::Adam>(AdamOptions(0.01).amsgrad(true))},
        {"adam_amsgrad_weight_decay", one_group<optim::Adam>(AdamOptions(0.01).amsgrad(true).weight_decay(0.1))},
        {"adam_betas_eps", one_group<optim::Adam>(AdamOptions(0.02).betas(0.5, 0.8).eps(1e-3))},
        {"adam_maximize", one_group<optim::Adam>(AdamOptions(0.01).maximize(true).weight_decay(0.1))},
        {"adamw", one_group<optim::AdamW>(AdamWOptions(0.01))},
        {"adamw_weight_decay", one_group<optim::AdamW>(AdamWOptions(0.01).weight_decay(0.1))},
        {"adamw_amsgrad", one_group<optim::AdamW>(AdamWOptions(0.01).weight_decay(0.1).amsgrad(true))},
        {"adamw_groups", two_groups<optim::AdamW>(AdamOptions(AdamWOptions(0.01).weight_decay(0.1)),
                                                  AdamOptions(AdamWOptions(0.003).weight_decay(0.0)))},
        {"adamw_f32", one_group<optim::AdamW>(AdamWOptions(0.01).weight_decay(0.1))},
        {"adam_amsgrad_f32", one_group<optim::Adam>(AdamOptions(0.01).amsgrad(true).weight_decay(0.1))},
        {"adadelta", one_group<optim::Adadelta>(AdadeltaOptions())},
        {"adadelta_rho_eps", one_group<optim::Adadelta>(AdadeltaOptions(0.5).rho(0.6).eps(1e-3))},
        {"adadelta_weight_decay", one_group<optim::Adadelta>(AdadeltaOptions(1.0).weight_decay(0.1))},
        {"adadelta_maximize", one_group<optim::Adadelta>(AdadeltaOptions(1.0).weight_decay(0.1).maximize(true))},
        {"adadelta_groups", two_groups<optim::Adadelta>(AdadeltaOptions(1.0),
                                                        AdadeltaOptions(0.3).rho(0.95).weight_decay(0.05))},
        {"adadelta_f32", one_group<optim::Adadelta>(AdadeltaOptions(1.0).weight_decay(0.1))},
    };
    const std::vector<std::pair<std::string, MakeOptimizer>> long_cases = {
        {"adagrad", one_group<optim::Adagrad>(AdagradOptions(0.1))},
        {"adagrad_lr_decay_init",
         one_group<optim::Adagrad>(
             AdagradOptions(0.1).lr_decay(0.05).initial_accumulator_value(0.5).weight_decay(0.1))},
        {"adagrad_maximize",
         one_group<optim::Adagrad>(AdagradOptions(0.1).eps(1e-3).weight_decay(0.05).maximize(true))},
        // b's sum starts at the defaults' (group 0's) 0.2, as PyTorch's; its group still saves 0.9.
        {"adagrad_groups", two_groups<optim::Adagrad>(AdagradOptions(0.1).initial_accumulator_value(0.2),
                                                      AdagradOptions(0.03).lr_decay(0.1).weight_decay(0.05)
                                                          .initial_accumulator_value(0.9))},
        {"rmsprop", one_group<optim::RMSprop>(RMSpropOptions(0.01))},
        {"rmsprop_centered", one_group<optim::RMSprop>(RMSpropOptions(0.01).centered(true))},
        {"rmsprop_momentum", one_group<optim::RMSprop>(RMSpropOptions(0.01).alpha(0.9).momentum(0.9))},
        {"rmsprop_centered_momentum_weight_decay",
         one_group<optim::RMSprop>(RMSpropOptions(0.01).centered(true).momentum(0.5).weight_decay(0.1).eps(1e-4))},
        {"rmsprop_centered_alpha", one_group<optim::RMSprop>(RMSpropOptions(0.01).alpha(0.3).centered(true))},
        {"rmsprop_maximize", one_group<optim::RMSprop>(RMSpropOptions(0.01).centered(true).momentum(0.9)
                                                           .weight_decay(0.05).maximize(true))},
        {"rmsprop_groups", two_groups<optim::RMSprop>(RMSpropOptions(0.01),
                                                      RMSpropOptions(0.003).momentum(0.9).centered(true))},
        {"adamax", one_group<optim::Adamax>(AdamaxOptions(0.02))},
        {"adamax_weight_decay",
         one_group<optim::Adamax>(AdamaxOptions(0.02).betas(0.8, 0.99).eps(1e-3).weight_decay(0.1))},
        {"adamax_beta1", one_group<optim::Adamax>(AdamaxOptions(0.02).betas(0.3, 0.9))},
        {"adamax_maximize", one_group<optim::Adamax>(AdamaxOptions(0.02).weight_decay(0.1).maximize(true))},
        {"nadam", one_group<optim::NAdam>(NAdamOptions(0.01))},
        {"nadam_weight_decay", one_group<optim::NAdam>(NAdamOptions(0.01).weight_decay(0.1))},
        {"nadam_decoupled_weight_decay",
         one_group<optim::NAdam>(NAdamOptions(0.01).weight_decay(0.1).decoupled_weight_decay(true))},
        {"nadam_momentum_decay",
         one_group<optim::NAdam>(NAdamOptions(0.02).betas(0.8, 0.95).eps(1e-4).momentum_decay(0.1))},
        {"nadam_maximize", one_group<optim::NAdam>(NAdamOptions(0.01).weight_decay(0.05).maximize(true))},
        {"nadam_groups",
         two_groups<optim::NAdam>(NAdamOptions(0.01), NAdamOptions(0.003).betas(0.3, 0.9).weight_decay(0.1))},
        {"radam", one_group<optim::RAdam>(RAdamOptions(0.01))},
        {"radam_weight_decay", one_group<optim::RAdam>(RAdamOptions(0.01).weight_decay(0.1))},
        {"radam_decoupled_weight_decay",
         one_group<optim::RAdam>(RAdamOptions(0.01).weight_decay(0.1).decoupled_weight_decay(true))},
        {"radam_betas", one_group<optim::RAdam>(RAdamOptions(0.01).betas(0.5, 0.9).eps(1e-4))},
        {"radam_maximize", one_group<optim::RAdam>(RAdamOptions(0.01).weight_decay(0.1).maximize(true))},
        {"radam_groups", two_groups<optim::RAdam>(RAdamOptions(0.01),
                                                  RAdamOptions(0.003).weight_decay(0.1).decoupled_weight_decay(true))},
    };
    for (const auto& [name, make] : long_cases) out.push_back({name, make, kLongFixtures, kLongSteps});
    return out;
  }();
  return all;
}

bool is_f32(const std::string& name) { return name.size() > 4 && name.substr(name.size() - 4) == "_f32"; }

// The script's gradient: coef * p + shift, except b at step 3.
void set_grads(Tensor& w, Tensor& b, int step, Dtype dtype, const std::string& file) {
  const std::pair<const char*, Tensor*> params[] = {{"w", &w}, {"b", &b}};
  for (auto [k, p] : params) {
    if (std::string(k) == "b" && step == 3) continue;
    const Tensor c = internal::to_dtype(fx(std::string("coef.") + k, file), dtype);
    const Tensor s = internal::to_dtype(fx(std::string("shift.") + k, file), dtype);
    p->set_grad(internal::add(internal::mul(c, *p), s));
  }
}

Tensor leaf(const std::string& key, Dtype dtype, const std::string& file) {
  return internal::clone(internal::to_dtype(fx(key, file), dtype)).set_requires_grad();
}

// Runs steps [from, to] of a case on w and b, checking each against PyTorch.
void run_steps(const OptimCase& c, optim::Optimizer& opt, Tensor& w, Tensor& b, int from, int to) {
  const std::string& name = c.name;
  const Dtype dtype = is_f32(name) ? kFloat32 : kFloat64;
  const double rtol = dtype == kFloat32 ? 2e-6 : 1e-12, atol = dtype == kFloat32 ? 1e-7 : 1e-15;
  for (int step = from; step <= to; ++step) {
    opt.zero_grad();
    set_grads(w, b, step, dtype, c.file);
    opt.step();
    const std::string at = name + ".step" + std::to_string(step);
    check_close(w, fx(at + ".w", c.file), rtol, atol, name + " step " + std::to_string(step) + " w");
    check_close(b, fx(at + ".b", c.file), rtol, atol, name + " step " + std::to_string(step) + " b");
  }
}

}  // namespace

TEST_CASE("every optimizer option follows torch.optim's trajectory (5 steps, 20 for the later optimizers)") {
  for (const OptimCase& c : cases()) {
    CAPTURE(c.name);
    const Dtype dtype = is_f32(c.name) ? kFloat32 : kFloat64;
    Tensor w = leaf("init.w", dtype, c.file), b = leaf("init.b", dtype, c.file);
    auto opt = c.make(w, b);
    run_steps(c, *opt, w, b, 1, c.steps);
  }
}

TEST_CASE("state_dict has PyTorch's keys and values (flattened)") {
  for (const OptimCase& c : cases()) {
    const std::string& name = c.name;
    CAPTURE(name);
    const Dtype dtype = is_f32(name) ? kFloat32 : kFloat64;
    Tensor w = leaf("init.w", dtype, c.file), b = leaf("init.b", dtype, c.file);
    auto opt = c.make(w, b);
    run_steps(c, *opt, w, b, 1, c.steps);
    std::map<std::string, Tensor> want;
    const std::string prefix = name + ".";
    for (const auto& [k, t] : fixtures(c.file))
      if (k.rfind(prefix, 0) == 0 && k.rfind(prefix + "step", 0) != 0) want[k.substr(prefix.size())] = t;
    std::map<std::string, Tensor> got;
    for (const auto& [k, t] : opt->state_dict()) got[k] = t;
    std::vector<std::string> got_keys, want_keys;
    for (const auto& kv : got) got_keys.push_back(kv.first);
    for (const auto& kv : want) want_keys.push_back(kv.first);
    CHECK(got_keys == want_keys);
    for (const auto& [k, t] : want) {
      if (!got.count(k)) continue;
      CHECK_MESSAGE(got[k].dtype() == t.dtype(), k, ": ", got[k].dtype(), " vs PyTorch's ", t.dtype());
      check_close(got[k], t, dtype == kFloat32 ? 2e-6 : 1e-12, dtype == kFloat32 ? 1e-7 : 1e-15, k);
    }
  }
}

TEST_CASE("an optimizer loaded from a state_dict continues the same trajectory") {
  for (const OptimCase& c : cases()) {
    CAPTURE(c.name);
    const Dtype dtype = is_f32(c.name) ? kFloat32 : kFloat64;
    Tensor w = leaf("init.w", dtype, c.file), b = leaf("init.b", dtype, c.file);
    auto opt = c.make(w, b);
    run_steps(c, *opt, w, b, 1, 2);
    const optim::StateDict saved = opt->state_dict();
    // Fresh parameters holding the values after step 2, a fresh optimizer, the saved state.
    Tensor w2 = internal::clone(w).set_requires_grad(), b2 = internal::clone(b).set_requires_grad();
    auto fresh = c.make(w2, b2);
    fresh->load_state_dict(saved);
    run_steps(c, *fresh, w2, b2, 3, c.steps);
  }
}

// --- schedulers ---

namespace {

using MakeScheduler = std::function<std::shared_ptr<optim::LRScheduler>(optim::Optimizer&)>;

struct SchedCase {
  std::string name;
  std::vector<double> lrs;
  MakeScheduler make;
};

std::unique_ptr<optim::SGD> sgd_with_lrs(const std::vector<double>& lrs, std::vector<Tensor>& keep) {
  std::vector<optim::SGD::ParamGroup> groups;
  for (double lr : lrs) {
    keep.push_back(zeros({1}).set_requires_grad());
    groups.push_back({{keep.back()}, SGDOptions(lr)});
  }
  return std::make_unique<optim::SGD>(groups);
}

const std::vector<SchedCase>& sched_cases() {
  using namespace optim;
  static const std::vector<SchedCase> all = {
      {"step", {0.1}, [](Optimizer& o) { return std::make_shared<StepLR>(o, 3, 0.5); }},
      {"multistep", {0.1}, [](Optimizer& o) { return std::make_shared<MultiStepLR>(o, std::vector<int64_t>{2, 5, 5, 9}, 0.3); }},
      {"cosine", {0.1}, [](Optimizer& o) { return std::make_shared<CosineAnnealingLR>(o, 10, 0.001); }},
      {"cosine_groups", {0.1, 0.02}, [](Optimizer& o) { return std::make_shared<CosineAnnealingLR>(o, 7); }},
      {"linear", {0.1}, [](Optimizer& o) { return std::make_shared<LinearLR>(o, 0.1, 1.0, 5); }},
      {"linear_down", {0.1, 0.3}, [](Optimizer& o) { return std::make_shared<LinearLR>(o, 1.0, 0.25, 8); }},
      {"lambda", {0.1}, [](Optimizer& o) {
         return std::make_shared<LambdaLR>(o, [](int64_t e) { return std::pow(0.95, static_cast<double>(e)); });
       }},
      {"lambda_groups", {0.1, 0.3}, [](Optimizer& o) {
         return std::make_shared<LambdaLR>(
             o, std::vector<LambdaLR::Lambda>{[](int64_t e) { return 1.0 / static_cast<double>(e + 1); },
                                              [](int64_t e) { return std::pow(0.9, static_cast<double>(e)); }});
       }},
      {"warmup_cosine", {0.1}, [](Optimizer& o) {
         auto warmup = std::make_shared<LinearLR>(o, 0.01, 1.0, 5);
         auto cosine = std::make_shared<CosineAnnealingLR>(o, 20, 1e-4);
         return std::make_shared<SequentialLR>(o, std::vector<std::shared_ptr<LRScheduler>>{warmup, cosine},
                                               std::vector<int64_t>{5});
       }},
      {"step_then_lambda", {0.1, 0.05}, [](Optimizer& o) {
         auto a = std::make_shared<StepLR>(o, 2, 0.5);
         auto b = std::make_shared<LambdaLR>(o, [](int64_t e) { return std::pow(0.9, static_cast<double>(e)); });
         auto c = std::make_shared<MultiStepLR>(o, std::vector<int64_t>{3}, 0.1);
         return std::make_shared<SequentialLR>(o, std::vector<std::shared_ptr<LRScheduler>>{a, b, c},
                                               std::vector<int64_t>{6, 15});
       }},
  };
  return all;
}

void check_lrs(const optim::Optimizer& opt, const std::vector<double>& want, const std::string& what) {
  REQUIRE(opt.num_param_groups() == want.size());
  for (size_t g = 0; g < want.size(); ++g)
    CHECK_MESSAGE(std::abs(opt.lr(g) - want[g]) <= 1e-12 * std::abs(want[g]), what, " group ", g, ": ", opt.lr(g),
                  " vs PyTorch's ", want[g]);
}

std::vector<double> row(const Tensor& table, int64_t r) {
  auto all = table.to_vector<double>();
  const int64_t cols = table.size(1);
  return std::vector<double>(all.begin() + r * cols, all.begin() + (r + 1) * cols);
}

}  // namespace

TEST_CASE("every scheduler's lr sequence equals torch.optim.lr_scheduler's to 1e-12") {
  for (const auto& c : sched_cases()) {
    CAPTURE(c.name);
    const Tensor want = fx("sched." + c.name + ".lr");
    std::vector<Tensor> keep;
    auto opt = sgd_with_lrs(c.lrs, keep);
    auto sched = c.make(*opt);
    check_lrs(*opt, row(want, 0), c.name + " after construction");
    for (int t = 1; t <= kSchedSteps; ++t) {
      opt->step();
      sched->step();
      check_lrs(*opt, row(want, t), c.name + " step " + std::to_string(t));
      CHECK(sched->get_last_lr() == row(want, t));
    }
  }
}

TEST_CASE("a scheduler loaded from its state_dict continues PyTorch's sequence") {
  for (const auto& c : sched_cases()) {
    CAPTURE(c.name);
    const Tensor want = fx("sched." + c.name + ".lr");
    std::vector<Tensor> keep;
    auto opt = sgd_with_lrs(c.lrs, keep);
    auto sched = c.make(*opt);
    for (int t = 1; t <= 7; ++t) opt->step(), sched->step();
    const optim::StateDict opt_state = opt->state_dict(), sched_state = sched->state_dict();
    // As PyTorch's resume: build both afresh, load the optimizer, then the scheduler.
    std::vector<Tensor> keep2;
    auto opt2 = sgd_with_lrs(c.lrs, keep2);
    auto sched2 = c.make(*opt2);
    opt2->load_state_dict(opt_state);
    sched2->load_state_dict(sched_state);
    check_lrs(*opt2, row(want, 7), c.name + " after loading");
    for (int t = 8; t <= kSchedSteps; ++t) {
      opt2->step();
      sched2->step();
      check_lrs(*opt2, row(want, t), c.name + " resumed step " + std::to_string(t));
    }
  }
}

// --- clip_grad_norm_ ---

TEST_CASE("clip_grad_norm_ returns torch's total norm and scales the gradients as torch") {
  struct Case {
    const char* name;
    double max_norm, norm_type;
    Dtype dtype;
  };
  const double inf = std::numeric_limits<double>::infinity();
  for (const Case& c : {Case{"l2", 1.0, 2.0, kFloat64}, Case{"inf", 0.5, inf, kFloat64}, Case{"l1", 2.0, 1.0, kFloat64},
                        Case{"p3", 1.0, 3.0, kFloat64}, Case{"no_clip", 100.0, 2.0, kFloat64},
                        Case{"l2_f32", 1.0, 2.0, kFloat32}}) {
    CAPTURE(c.name);
    std::vector<Tensor> params;
    for (int k = 0; k < 3; ++k) {
      Tensor g = internal::to_dtype(fx("clip.g" + std::to_string(k)), c.dtype);
      params.push_back(zeros(g.shape(), TensorOptions(c.dtype)).set_requires_grad());
      params.back().set_grad(internal::clone(g));
    }
    params.push_back(zeros({2}, TensorOptions(c.dtype)).set_requires_grad());  // no gradient: ignored
    const double rtol = c.dtype == kFloat32 ? 1e-6 : 1e-13;
    const Tensor total = nn::utils::clip_grad_norm_(params, c.max_norm, c.norm_type);
    CHECK(total.dtype() == c.dtype);
    check_close(total, fx(std::string("clip.") + c.name + ".total"), rtol, 0, "total norm");
    for (int k = 0; k < 3; ++k)
      check_close(params[k].grad(), fx(std::string("clip.") + c.name + ".g" + std::to_string(k)), rtol, 1e-15,
                  "gradient " + std::to_string(k));
    CHECK(!params[3].grad().defined());
  }
}

TEST_CASE("clip_grad_norm_ with error_if_nonfinite names the non-finite norm") {
  Tensor p = zeros({2}).set_requires_grad();
  p.set_grad(tensor({1.0f, std::numeric_limits<float>::quiet_NaN()}, {2}));
  CHECK_THROWS_WITH_AS(nn::utils::clip_grad_norm_({p}, 1.0, 2.0, true),
                       doctest::Contains("clip_grad_norm_: the total norm of order 2 for gradients from `parameters` "
                                         "is non-finite (nan)"),
                       Error);
  CHECK(std::isnan(nn::utils::clip_grad_norm_({p}, 1.0).item<float>()));  // without the flag: scaled by NaN
  CHECK(nn::utils::clip_grad_norm_({zeros({1}).set_requires_grad()}, 1.0).item<float>() == 0.0f);
  CHECK_THROWS_WITH_AS(nn::utils::clip_grad_norm_({p}, 1.0, -1), "clip_grad_norm_: invalid norm_type -1 (expected a "
                       "positive number or infinity)", Error);
}
