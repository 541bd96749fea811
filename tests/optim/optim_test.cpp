// Tests of optim/: SGD trajectories worked out by hand from torch.optim.SGD's rule, options
// validation with the errors each bad value gets, param groups, zero_grad, checkpoints (save, load into
// fresh objects, continue on the same trajectory), and an MLP that learns a separable problem end to
// end. optim_fixtures_test compares every option against PyTorch.
#include <doctest/doctest.h>

#include <cmath>

#include "nn/api.h"
#include "nn/utils/clip_grad.h"
#include "optim/api.h"
#include "optim/checkpoint.h"
#include "optim/state_keys.h"
#include "tensor/safetensors.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::contains;
using lockstep::testing::error_of;

// Three steps on loss = 0.5 * p^2 (gradient p), from p = 1.
static std::vector<double> trajectory(optim::SGDOptions o, int steps = 3) {
  Tensor p = tensor({1.0}).set_requires_grad();
  optim::SGD sgd({p}, o);
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) {
    sgd.zero_grad();
    (p * p * 0.5).sum().backward();
    sgd.step();
    out.push_back(p.item<double>());
  }
  return out;
}

static void check_close(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
}

TEST_CASE("SGD follows torch.optim.SGD's update rule") {
  // Plain: p <- p - lr * p.
  check_close(trajectory(optim::SGDOptions(0.1), 2), {0.9, 0.81});
  // Momentum 0.9: buf = g on the first step, then 0.9 * buf + g.
  //   g=1    buf=1     p=0.9
  //   g=0.9  buf=1.8   p=0.72
  //   g=0.72 buf=2.34  p=0.486
  check_close(trajectory(optim::SGDOptions(0.1).momentum(0.9)), {0.9, 0.72, 0.486});
  // Nesterov: d = g + 0.9 * buf.
  //   g=1    buf=1     d=1.9    p=0.81
  //   g=0.81 buf=1.71  d=2.349  p=0.5751
  check_close(trajectory(optim::SGDOptions(0.1).momentum(0.9).nesterov(true), 2), {0.81, 0.5751});
  // Weight decay 0.1, momentum 0.5, dampening 0.5 (the first buffer is not dampened):
  //   g=1.1    buf=1.1                     p=0.89
  //   g=0.979  buf=0.5*1.1+0.5*0.979=1.0395 p=0.78605
  check_close(trajectory(optim::SGDOptions(0.1).momentum(0.5).dampening(0.5).weight_decay(0.1), 2),
              {0.89, 0.78605});
}

TEST_CASE("SGD skips parameters without gradients and validates its options") {
  Tensor a = tensor({1.0}).set_requires_grad(), b = tensor({2.0}).set_requires_grad();
  optim::SGD sgd({a, b}, optim::SGDOptions(0.5).momentum(0.9));
  (a * 2.0).sum().backward();
  sgd.step();
  CHECK(a.item<double>() == 0.0);
  CHECK(b.item<double>() == 2.0);
  CHECK(!sgd.momentum_buffer(1).defined());
  CHECK_THROWS_WITH_AS(optim::SGD({a}, optim::SGDOptions(-1)), "SGD: Invalid learning rate: -1", Error);
  CHECK_THROWS_WITH_AS(optim::SGD({a}, optim::SGDOptions(0.1).nesterov(true)), doctest::Contains("nesterov"), Error);
  CHECK_THROWS_WITH_AS(optim::SGD({a, a}, optim::SGDOptions(0.1)), doctest::Contains("appears twice"), Error);
  CHECK_THROWS_WITH_AS(optim::SGD({tensor({1.0})}, optim::SGDOptions(0.1)), doctest::Contains("not a leaf tensor that requires grad"), Error);
}

TEST_CASE("an MLP learns a separable problem to more than 95% accuracy") {
  manual_seed(7);
  // Two Gaussian blobs per class in 2-D, four classes at the corners of a square.
  const int64_t n = 512;
  Tensor labels = randint(0, 4, {n});
  auto lab = labels.to_vector<int64_t>();
  std::vector<float> pts(n * 2);
  auto noise = randn({n, 2}).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    pts[2 * i] = (lab[i] & 1 ? 2.f : -2.f) + 0.5f * noise[2 * i];
    pts[2 * i + 1] = (lab[i] & 2 ? 2.f : -2.f) + 0.5f * noise[2 * i + 1];
  }
  Tensor x = tensor(pts, {n, 2});
  auto model = nn::Sequential(
      nn::Linear(2, 16), nn::ReLU(), nn::Linear(16, 4));
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  nn::CrossEntropyLoss ce;
  double first = 0, last = 0;
  for (int epoch = 0; epoch < 50; ++epoch) {
    sgd.zero_grad();
    Tensor loss = ce((*model)(x), labels);
    loss.backward();
    sgd.step();
    (epoch == 0 ? first : last) = loss.item<float>();
  }
  CHECK(last < first / 4);
  NoGradGuard no_grad;
  model->eval();
  int64_t correct = (*model)(x).argmax(1).eq(labels).sum().item<int64_t>();
  CHECK(correct > 0.95 * n);
}

TEST_CASE("bad options are errors naming the optimizer and the value") {
  Tensor p = zeros({2}).set_requires_grad();
  CHECK(error_of([&] { optim::Adam({p}, optim::AdamOptions(-0.1)); }) == "Adam: Invalid learning rate: -0.1");
  CHECK(error_of([&] { optim::AdamW({p}, optim::AdamWOptions(0.1).betas(1.0, 0.999)); }) ==
        "AdamW: Invalid beta parameter at index 0: 1");
  CHECK(error_of([&] { optim::Adam({p}, optim::AdamOptions(0.1).betas(0.9, -0.5)); }) ==
        "Adam: Invalid beta parameter at index 1: -0.5");
  CHECK(error_of([&] { optim::Adam({p}, optim::AdamOptions(0.1).eps(-1)); }) == "Adam: Invalid epsilon value: -1");
  CHECK(error_of([&] { optim::AdamW({p}, optim::AdamWOptions(0.1).weight_decay(-0.01)); }) ==
        "AdamW: Invalid weight_decay value: -0.01");
  CHECK(error_of([&] { optim::AdamW({}, optim::AdamWOptions()); }) == "AdamW: got an empty parameter list");
  optim::AdamW adamw({p}, optim::AdamWOptions(0.1));
  CHECK(error_of([&] { adamw.set_lr(0, -1); }) == "AdamW: Invalid learning rate: -1");
  CHECK(error_of([&] { adamw.add_param_group({p}, optim::AdamWOptions()); }) ==
        "AdamW: parameter 0 [2] is already in another param group (as parameter 0)");
  Tensor q = zeros({3}).set_requires_grad();
  CHECK(error_of([&] { adamw.add_param_group({q}, optim::AdamWOptions(0.1).betas(0.9, 1.5)); }) ==
        "AdamW (param group 1): Invalid beta parameter at index 1: 1.5");
  CHECK(error_of([&] { adamw.params(3); }) == "AdamW: no param group 3 (it has 1)");
}

TEST_CASE("Adadelta's bad options are errors naming the optimizer and the value") {
  Tensor p = zeros({2}).set_requires_grad();
  using optim::AdadeltaOptions;
  CHECK(error_of([&] { optim::Adadelta({p}, AdadeltaOptions(-1)); }) == "Adadelta: Invalid learning rate: -1");
  CHECK(error_of([&] { optim::Adadelta({p}, AdadeltaOptions().rho(1.5)); }) ==
        "Adadelta: Invalid rho value: 1.5");
  CHECK(error_of([&] { optim::Adadelta({p}, AdadeltaOptions().rho(-0.1)); }) ==
        "Adadelta: Invalid rho value: -0.1");
  CHECK(error_of([&] { optim::Adadelta({p}, AdadeltaOptions().eps(-1e-6)); }) ==
        "Adadelta: Invalid epsilon value: -1e-06");
  CHECK(error_of([&] { optim::Adadelta({p}, AdadeltaOptions().weight_decay(-0.01)); }) ==
        "Adadelta: Invalid weight_decay value: -0.01");
  CHECK(error_of([&] { optim::Adadelta({}, AdadeltaOptions()); }) == "Adadelta: got an empty parameter list");
  optim::Adadelta adadelta({p});
  CHECK(adadelta.lr(0) == 1.0);  // torch.optim.Adadelta's defaults: lr 1, rho 0.9, eps 1e-6
  CHECK(adadelta.options().rho() == 0.9);
  CHECK(adadelta.options().eps() == 1e-6);
  CHECK(error_of([&] { adadelta.set_lr(0, NAN); }) == "Adadelta: Invalid learning rate: nan");
  Tensor q = zeros({3}).set_requires_grad();
  CHECK(error_of([&] { adadelta.add_param_group({q}, AdadeltaOptions().rho(2)); }) ==
        "Adadelta (param group 1): Invalid rho value: 2");
  // rho's ends are allowed, as in PyTorch.
  CHECK_NOTHROW(optim::Adadelta({p}, AdadeltaOptions().rho(0)));
  CHECK_NOTHROW(optim::Adadelta({p}, AdadeltaOptions().rho(1)));
}

TEST_CASE("Adagrad, RMSprop, Adamax, NAdam and RAdam: torch.optim's defaults, and its errors for bad options") {
  using namespace optim;
  Tensor p = zeros({2}).set_requires_grad(), q = zeros({3}).set_requires_grad();

  CHECK(error_of([&] { Adagrad({p}, AdagradOptions(-1)); }) == "Adagrad: Invalid learning rate: -1");
  CHECK(error_of([&] { Adagrad({p}, AdagradOptions().lr_decay(-0.5)); }) == "Adagrad: Invalid lr_decay value: -0.5");
  CHECK(error_of([&] { Adagrad({p}, AdagradOptions().weight_decay(-0.01)); }) ==
        "Adagrad: Invalid weight_decay value: -0.01");
  CHECK(error_of([&] { Adagrad({p}, AdagradOptions().initial_accumulator_value(-1)); }) ==
        "Adagrad: Invalid initial_accumulator_value value: -1");
  CHECK(error_of([&] { Adagrad({p}, AdagradOptions().eps(-1e-10)); }) == "Adagrad: Invalid epsilon value: -1e-10");
  CHECK(error_of([&] { Adagrad({}, AdagradOptions()); }) == "Adagrad: got an empty parameter list");
  Adagrad adagrad({p});
  CHECK(adagrad.lr(0) == 1e-2);
  CHECK(adagrad.options().eps() == 1e-10);
  CHECK(adagrad.options().lr_decay() == 0);
  CHECK(adagrad.options().initial_accumulator_value() == 0);
  CHECK(error_of([&] { adagrad.set_lr(0, NAN); }) == "Adagrad: Invalid learning rate: nan");

  CHECK(error_of([&] { RMSprop({p}, RMSpropOptions(-1)); }) == "RMSprop: Invalid learning rate: -1");
  CHECK(error_of([&] { RMSprop({p}, RMSpropOptions().eps(-1)); }) == "RMSprop: Invalid epsilon value: -1");
  CHECK(error_of([&] { RMSprop({p}, RMSpropOptions().momentum(-0.9)); }) == "RMSprop: Invalid momentum value: -0.9");
  CHECK(error_of([&] { RMSprop({p}, RMSpropOptions().weight_decay(-1)); }) ==
        "RMSprop: Invalid weight_decay value: -1");
  CHECK(error_of([&] { RMSprop({p}, RMSpropOptions().alpha(-0.1)); }) == "RMSprop: Invalid alpha value: -0.1");
  RMSprop rmsprop({p});
  CHECK(rmsprop.lr(0) == 1e-2);
  CHECK(rmsprop.options().alpha() == 0.99);
  CHECK(rmsprop.options().eps() == 1e-8);
  CHECK(!rmsprop.options().centered());
  CHECK(error_of([&] { rmsprop.add_param_group({q}, RMSpropOptions().alpha(NAN)); }) ==
        "RMSprop (param group 1): Invalid alpha value: nan");

  CHECK(error_of([&] { Adamax({p}, AdamaxOptions(-1)); }) == "Adamax: Invalid learning rate: -1");
  CHECK(error_of([&] { Adamax({p}, AdamaxOptions().eps(-1)); }) == "Adamax: Invalid epsilon value: -1");
  CHECK(error_of([&] { Adamax({p}, AdamaxOptions().betas(1.0, 0.999)); }) ==
        "Adamax: Invalid beta parameter at index 0: 1");
  CHECK(error_of([&] { Adamax({p}, AdamaxOptions().betas(0.9, -0.5)); }) ==
        "Adamax: Invalid beta parameter at index 1: -0.5");
  CHECK(error_of([&] { Adamax({p}, AdamaxOptions().weight_decay(-1)); }) == "Adamax: Invalid weight_decay value: -1");
  Adamax adamax({p});
  CHECK(adamax.lr(0) == 2e-3);
  CHECK(adamax.options().betas() == (AdamaxOptions::Betas{0.9, 0.999}));
  CHECK(adamax.options().eps() == 1e-8);

  CHECK(error_of([&] { NAdam({p}, NAdamOptions(-1)); }) == "NAdam: Invalid learning rate: -1");
  CHECK(error_of([&] { NAdam({p}, NAdamOptions().betas(0.9, 1.0)); }) == "NAdam: Invalid beta parameter at index 1: 1");
  CHECK(error_of([&] { NAdam({p}, NAdamOptions().momentum_decay(-4e-3)); }) ==
        "NAdam: Invalid momentum_decay value: -0.004");
  NAdam nadam({p});
  CHECK(nadam.lr(0) == 2e-3);
  CHECK(nadam.options().momentum_decay() == 4e-3);
  CHECK(!nadam.options().decoupled_weight_decay());

  CHECK(error_of([&] { RAdam({p}, RAdamOptions(-1)); }) == "RAdam: Invalid learning rate: -1");
  CHECK(error_of([&] { RAdam({p}, RAdamOptions().betas(-0.1, 0.999)); }) ==
        "RAdam: Invalid beta parameter at index 0: -0.1");
  CHECK(error_of([&] { RAdam({p}, RAdamOptions().eps(-1e-8)); }) == "RAdam: Invalid epsilon value: -1e-08");
  RAdam radam({p});
  CHECK(radam.lr(0) == 1e-3);
  CHECK(!radam.options().decoupled_weight_decay());
  // A bad option in a loaded state_dict is refused, as a bad option given to the constructor.
  StateDict sd = radam.state_dict();
  for (auto& [k, t] : sd)
    if (k == "param_groups.0.betas") t = tensor({0.9, 1.0}, {2});
  CHECK(error_of([&] { radam.load_state_dict(sd); }) ==
        "RAdam (loaded param group 0): Invalid beta parameter at index 1: 1");
}

TEST_CASE("Adagrad's state is made at construction with the defaults' initial_accumulator_value, as PyTorch's") {
  Tensor p = zeros({2}).set_requires_grad(), q = zeros({3}).set_requires_grad();
  optim::Adagrad adagrad({{{p}, optim::AdagradOptions(0.1).initial_accumulator_value(0.5)},
                          {{q}, optim::AdagradOptions(0.1).initial_accumulator_value(2.0)}});
  std::map<std::string, Tensor> sd;
  for (const auto& [k, t] : adagrad.state_dict()) sd[k] = t;
  REQUIRE(sd.count("state.1.sum"));
  CHECK(sd["state.0.step"].item<float>() == 0.0f);
  CHECK(sd["state.0.sum"].to_vector<float>() == std::vector<float>{0.5f, 0.5f});
  CHECK(sd["state.1.sum"].to_vector<float>() == std::vector<float>{0.5f, 0.5f, 0.5f});  // the defaults', not 2
  CHECK(sd["param_groups.1.initial_accumulator_value"].item<double>() == 2.0);
  // A group added later gets its state at its first step, from the defaults' value again.
  Tensor r = zeros({1}).set_requires_grad();
  adagrad.add_param_group({r}, optim::AdagradOptions(0.1).initial_accumulator_value(3.0));
  CHECK(adagrad.state(2).empty());
  r.set_grad(tensor({1.0f}));
  adagrad.step();
  CHECK(adagrad.state(2).at("sum").item<float>() == 1.5f);  // 0.5 + 1 * 1
  CHECK(adagrad.state(2).at("step").item<float>() == 1.0f);
  CHECK(adagrad.state(0).at("step").item<float>() == 0.0f);  // p had no gradient
}

TEST_CASE("bad scheduler settings are errors naming the scheduler and the value") {
  Tensor p = zeros({2}).set_requires_grad();
  optim::SGD sgd({p}, optim::SGDOptions(0.1));
  CHECK(error_of([&] { optim::StepLR(sgd, 0); }) == "StepLR: invalid step_size 0 (expected a positive number of epochs)");
  CHECK(error_of([&] { optim::CosineAnnealingLR(sgd, -5); }) ==
        "CosineAnnealingLR: invalid T_max -5 (expected a positive number of epochs)");
  CHECK(error_of([&] { optim::LinearLR(sgd, 0.0); }) == "LinearLR: invalid start_factor 0 (expected (0, 1])");
  CHECK(error_of([&] { optim::LinearLR(sgd, 0.5, 1.5); }) == "LinearLR: invalid end_factor 1.5 (expected [0, 1])");
  CHECK(error_of([&] { optim::MultiStepLR(sgd, {3, -1}); }) == "MultiStepLR: invalid milestone -1");
  CHECK(error_of([&] {
          optim::LambdaLR(sgd, std::vector<optim::LambdaLR::Lambda>{[](int64_t) { return 1.0; },
                                                                    [](int64_t) { return 1.0; }});
        }) == "LambdaLR: expected 1 lr_lambdas (one per param group), got 2");
  CHECK(error_of([&] { optim::LambdaLR(sgd, [](int64_t) { return -1.0; }); }) ==
        "LambdaLR: computed an invalid learning rate -0.1 for param group 0 at epoch 0");
  auto a = std::make_shared<optim::StepLR>(sgd, 2);
  CHECK(error_of([&] { optim::SequentialLR(sgd, {a}, {3}); }) ==
        "SequentialLR: expects one milestone fewer than schedulers, got 1 schedulers and 1 milestones");
  Tensor q = zeros({2}).set_requires_grad();
  optim::SGD other({q}, optim::SGDOptions(0.1));
  auto b = std::make_shared<optim::StepLR>(other, 2);
  CHECK(error_of([&] { optim::SequentialLR(sgd, {a, b}, {3}); }) ==
        "SequentialLR: expects all schedulers to belong to the same optimizer, but scheduler 1 (StepLR) has another");
  optim::SGD fresh({zeros({1}).set_requires_grad()}, optim::SGDOptions(0.1));
  CHECK(error_of([&] { optim::StepLR(fresh, 2, 0.1, 4); }) ==
        "StepLR: param group 0 has no initial_lr, needed to resume with last_epoch 4 (load the optimizer's "
        "state_dict first)");
}

TEST_CASE("a mismatched state_dict is an error naming the optimizer and the key, and changes nothing") {
  Tensor w = zeros({2, 3}).set_requires_grad(), b = zeros({3}).set_requires_grad();
  optim::Adam adam({w, b}, optim::AdamOptions(0.1));
  w.set_grad(ones({2, 3}));
  b.set_grad(ones({3}));
  adam.step();
  const optim::StateDict good = adam.state_dict();
  auto with = [&](const std::string& key, const Tensor& t) {
    optim::StateDict sd;
    for (auto& [k, v] : good) sd.emplace_back(k, k == key ? t : v);
    return sd;
  };
  CHECK(error_of([&] { adam.load_state_dict(with("state.0.exp_avg", zeros({3, 2}))); }) ==
        "Adam.load_state_dict: 'state.0.exp_avg' has shape [3, 2], parameter 0 has [2, 3]");
  CHECK(error_of([&] { adam.load_state_dict(with("param_groups.0.params", tensor({int64_t{0}}, {1}))); }) ==
        "Adam.load_state_dict: param group 0 has 1 parameters in the state_dict and 2 in this optimizer");
  CHECK(error_of([&] { adam.load_state_dict(with("param_groups.0.betas", tensor({0.9, 1.0}, {2}))); }) ==
        "Adam (loaded param group 0): Invalid beta parameter at index 1: 1");
  optim::StateDict extra = good;
  extra.emplace_back("state.1.momentum_buffer", zeros({3}));
  CHECK(error_of([&] { adam.load_state_dict(extra); }) ==
        "Adam.load_state_dict: unexpected state 'momentum_buffer' in key 'state.1.momentum_buffer'");
  optim::StateDict missing;
  for (auto& kv : good)
    if (kv.first != "param_groups.0.eps") missing.push_back(kv);
  CHECK(error_of([&] { adam.load_state_dict(missing); }) == "Adam.load_state_dict: missing 'param_groups.0.eps'");
  optim::SGD sgd({w, b}, optim::SGDOptions(0.1));
  CHECK(error_of([&] { sgd.load_state_dict(good); }).find("SGD.load_state_dict: unexpected state") == 0);
  // Nothing above changed the optimizer.
  CHECK(adam.options().betas()[1] == 0.999);
  CHECK(adam.state(0).at("exp_avg").shape() == Shape{2, 3});
  optim::StepLR sched(adam, 3);
  optim::StateDict s = sched.state_dict();
  s.emplace_back("bogus", zeros({1}));
  CHECK(error_of([&] { sched.load_state_dict(s); }) == "StepLR.load_state_dict: unexpected key 'bogus'");
  CHECK(error_of([&] { sched.load_state_dict({}); }) == "StepLR.load_state_dict: missing 'last_epoch'");
}

TEST_CASE("state_dict keys are made and read in one place: malformed ones are errors naming the key") {
  CHECK(optim::state_key(3, "exp_avg") == "state.3.exp_avg");
  CHECK(optim::group_key(1, "lr") == "param_groups.1.lr");
  const optim::StateKey s = optim::parse_state_key("state.12.exp_avg_sq", "t");
  CHECK((s.kind == optim::StateKey::Kind::kState && s.index == 12 && s.name == "exp_avg_sq"));
  const optim::StateKey g = optim::parse_state_key("param_groups.0.params", "t");
  CHECK((g.kind == optim::StateKey::Kind::kGroup && g.index == 0 && g.name == "params"));
  CHECK(optim::is_group_key("param_groups.7.betas"));
  CHECK(!optim::is_group_key("state.7.step"));
  for (const char* bad : {"state.x.exp_avg", "state.1", "state..exp_avg", "state.1.", "param_groups.-1.lr",
                          "param_groups.1e3.lr", "state.99999999999999999999999.step"})
    CHECK(error_of([&] { optim::parse_state_key(bad, "Adam.load_state_dict"); }) ==
          std::string("Adam.load_state_dict: malformed key '") + bad + "' (expected " +
              (std::string(bad).starts_with("state.") ? "state." : "param_groups.") + "<decimal index>.<name>)");
  CHECK(error_of([] { optim::parse_state_key("bogus", "t"); }) ==
        "t: unexpected key 'bogus' (an optimizer's keys are state.<i>.<name> and param_groups.<g>.<name>)");
  // Every group's indices, counted across the groups in order.
  const optim::StateDict ids = optim::group_params_entries({2, 0, 3});
  REQUIRE(ids.size() == 3);
  CHECK(ids[0].first == "param_groups.0.params");
  CHECK(ids[0].second.to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(ids[1].second.numel() == 0);
  CHECK(ids[2].second.to_vector<int64_t>() == std::vector<int64_t>{2, 3, 4});
  // An optimizer rejects a malformed state key with the same message, and changes nothing.
  Tensor w = zeros({2}).set_requires_grad();
  optim::Adam adam({w}, optim::AdamOptions(0.1));
  w.set_grad(ones({2}));
  adam.step();
  optim::StateDict sd = adam.state_dict();
  sd.emplace_back("state.first.exp_avg", zeros({2}));
  CHECK(error_of([&] { adam.load_state_dict(sd); }) ==
        "Adam.load_state_dict: malformed key 'state.first.exp_avg' (expected state.<decimal index>.<name>)");
}

TEST_CASE("get_total_norm and clip_grads_with_norm_ are clip_grad_norm_ in two steps") {
  // Gradients (3, 4) and (12): norms 5 and 12; total 2-norm 13, 1-norm 19, inf-norm 12.
  auto params = [] {
    Tensor a = zeros({2}).set_requires_grad(), b = zeros({1}).set_requires_grad();
    a.set_grad(tensor({3.0f, 4.0f}, {2}));
    b.set_grad(tensor({12.0f}, {1}));
    return std::vector<Tensor>{a, b};
  };
  std::vector<Tensor> p = params();
  const std::vector<Tensor> grads{p[0].grad(), p[1].grad()};
  CHECK(nn::utils::get_total_norm(grads).item<float>() == doctest::Approx(13.0));
  CHECK(nn::utils::get_total_norm(grads, 1.0).item<float>() == doctest::Approx(19.0));
  CHECK(nn::utils::get_total_norm(grads, INFINITY).item<float>() == doctest::Approx(12.0));
  CHECK(nn::utils::get_total_norm(grads, 3.0).item<float>() == doctest::Approx(std::cbrt(27.0 + 64.0 + 1728.0)));
  CHECK(nn::utils::get_total_norm({}).item<float>() == 0.0f);
  nn::utils::clip_grads_with_norm_(p, 6.5, nn::utils::get_total_norm(grads));  // scale 6.5 / (13 + 1e-6)
  CHECK(p[0].grad().to_vector<float>()[1] == doctest::Approx(2.0).epsilon(1e-6));
  CHECK(p[1].grad().to_vector<float>()[0] == doctest::Approx(6.0).epsilon(1e-6));
  std::vector<Tensor> q = params();
  nn::utils::clip_grads_with_norm_(q, 100.0, scalar_tensor(13.0));  // below max_norm: unchanged
  CHECK(q[1].grad().to_vector<float>()[0] == 12.0f);
  CHECK(error_of([&] { nn::utils::get_total_norm(grads, -2.0); }) ==
        "get_total_norm: invalid norm_type -2 (expected a positive number or infinity)");
  CHECK(error_of([&] { nn::utils::clip_grads_with_norm_(q, 1.0, zeros({2})); }) ==
        "clip_grads_with_norm_: total_norm must be one element, got [2]");
}

TEST_CASE("param groups keep their own options; zero_grad clears every group") {
  Tensor a = ones({2}).set_requires_grad(), b = ones({2}).set_requires_grad();
  optim::SGD sgd({a}, optim::SGDOptions(0.1));
  sgd.add_param_group({b}, optim::SGDOptions(0.5));
  CHECK(sgd.num_param_groups() == 2);
  a.set_grad(ones({2}));
  b.set_grad(ones({2}));
  sgd.step();
  CHECK(a.to_vector<float>() == std::vector<float>{0.9f, 0.9f});
  CHECK(b.to_vector<float>() == std::vector<float>{0.5f, 0.5f});
  sgd.zero_grad(false);
  CHECK(b.grad().to_vector<float>() == std::vector<float>{0, 0});
  sgd.zero_grad();
  CHECK(!a.grad().defined());
  CHECK(!b.grad().defined());
  CHECK(sgd.params().size() == 2);
}

namespace {

// A small model, AdamW with decay/no-decay groups, warmup + cosine and clipping: the GPT example's
// training loop in miniature. Returns the loss after each step in [from, to).
struct Run {
  nn::Sequential model{nullptr};
  std::unique_ptr<optim::AdamW> opt;
  std::shared_ptr<optim::SequentialLR> sched;
  Tensor x, y;

  Run() {
    manual_seed(3);
    model = nn::Sequential(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 3));
    std::vector<Tensor> decay, no_decay;
    for (auto& [name, p] : model->named_parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    opt = std::make_unique<optim::AdamW>(std::vector<optim::AdamW::ParamGroup>{
        {decay, optim::AdamWOptions(0.01).weight_decay(0.1)},
        {no_decay, optim::AdamWOptions(0.01).weight_decay(0)}});
    auto warmup = std::make_shared<optim::LinearLR>(*opt, 0.1, 1.0, 3);
    auto cosine = std::make_shared<optim::CosineAnnealingLR>(*opt, 10, 1e-4);
    sched = std::make_shared<optim::SequentialLR>(
        *opt, std::vector<std::shared_ptr<optim::LRScheduler>>{warmup, cosine}, std::vector<int64_t>{3});
    x = randn({16, 4});
    y = randint(0, 3, {16});
  }
  std::vector<float> train(int steps) {
    std::vector<float> losses;
    nn::CrossEntropyLoss ce;
    for (int i = 0; i < steps; ++i) {
      opt->zero_grad();
      Tensor loss = ce((*model)(x), y);
      loss.backward();
      nn::utils::clip_grad_norm_(model->parameters(), 0.5);
      opt->step();
      sched->step();
      losses.push_back(loss.item<float>());
    }
    return losses;
  }
};

}  // namespace

TEST_CASE("a checkpoint restores model, optimizer, scheduler and position: the run continues identically") {
  testing::TempDir dir("optim_checkpoint");
  const std::string path = dir.path + "/ckpt.safetensors";
  Run straight;
  const std::vector<float> all = straight.train(12);

  Run first;
  const std::vector<float> head = first.train(5);
  Checkpoint save;
  save.model = first.model.get();
  save.optimizer = first.opt.get();
  save.scheduler = first.sched.get();
  save.epoch = 0;
  save.step = 5;
  save.metadata = {{"note", "five steps"}};
  save_checkpoint(path, save);

  Run resumed;  // fresh objects: initial weights, no optimizer state, the schedule at its start
  Checkpoint into;
  into.model = resumed.model.get();
  into.optimizer = resumed.opt.get();
  into.scheduler = resumed.sched.get();
  const Checkpoint got = load_checkpoint(path, into);
  CHECK(got.epoch == 0);
  CHECK(got.step == 5);
  CHECK(got.metadata.at("note") == "five steps");
  CHECK(got.metadata.at("format") == "lockstep checkpoint");
  CHECK(resumed.sched->last_epoch() == 5);
  CHECK(resumed.opt->lr(0) == first.opt->lr(0));
  const std::vector<float> tail = resumed.train(7);
  for (int i = 0; i < 5; ++i) CHECK(head[i] == all[i]);
  for (int i = 0; i < 7; ++i) CHECK_MESSAGE(tail[i] == all[5 + i], "step ", 5 + i);
  for (auto& [name, p] : straight.model->named_parameters()) {
    Tensor q = resumed.model->named_parameters()[0].second;
    for (auto& [n2, p2] : resumed.model->named_parameters())
      if (n2 == name) q = p2;
    CHECK_MESSAGE(p.to_vector<float>() == q.to_vector<float>(), name);
  }

  // The file's keys: the model's own names, then optimizer.* and scheduler.*.
  SafetensorsFile f = load_safetensors(path);
  std::map<std::string, Tensor> keys(f.tensors.begin(), f.tensors.end());
  CHECK(keys.count("0.weight"));
  CHECK(keys.count("2.bias"));
  CHECK(keys.count("optimizer.state.0.exp_avg"));
  CHECK(keys.count("optimizer.param_groups.1.weight_decay"));
  CHECK(keys.count("optimizer.param_groups.0.initial_lr"));
  CHECK(keys.count("scheduler._schedulers.1.T_max"));
  // A weights-only file loads as a checkpoint without optimizer; asking for its optimizer is an error.
  const std::string weights = dir.path + "/weights.safetensors";
  save_safetensors(weights, first.model->state_dict());
  Checkpoint model_only;
  model_only.model = resumed.model.get();
  CHECK(load_checkpoint(weights, model_only).epoch == -1);
  model_only.optimizer = resumed.opt.get();
  CHECK(error_of([&] { load_checkpoint(weights, model_only); }) ==
        "load_checkpoint: " + weights + " holds no optimizer state (was it saved with one?)");
}

TEST_CASE("OneCycleLR follows PyTorch: defaults with SGD's momentum, three_phase linear with Adam's beta1") {
  // Expected values printed by tools/fixtures/onecycle_values.py (torch.optim.lr_scheduler.OneCycleLR,
  // PyTorch 2.15), read once per step before optimizer.step() and scheduler.step().
  auto run = [](optim::Optimizer& opt, optim::OneCycleLR& sched, const std::vector<double>& lrs,
                const std::vector<double>& momenta) {
    for (size_t s = 0; s < lrs.size(); ++s) {
      CAPTURE(s);
      CHECK(sched.get_last_lr()[0] == doctest::Approx(lrs[s]).epsilon(1e-12));
      CHECK(sched.get_last_momentum()[0] == doctest::Approx(momenta[s]).epsilon(1e-12));
      opt.step();
      if (s + 1 < lrs.size()) sched.step();
    }
  };
  Tensor w = zeros({1}).requires_grad_();
  optim::SGD sgd({w}, optim::SGDOptions(0.1));
  optim::OneCycleLR a(sgd, optim::OneCycleLROptions(1.0).total_steps(10));
  CHECK(sgd.options().momentum() == 0.95);  // cycle_momentum sets SGD's momentum to max_momentum
  CHECK(*sgd.initial_lr(0) == 1.0 / 25);
  run(sgd, a,
      {0.040000000000000036, 0.52, 1.0, 0.9504846320134737, 0.8117456539497631, 0.6112620219362893,
       0.38874197806371075, 0.18825834605023697, 0.049519367986526286, 4e-06},
      {0.95, 0.8999999999999999, 0.85, 0.854951556604879, 0.8688255099070633, 0.8888739533021842,
       0.9111260466978157, 0.9311744900929366, 0.945048443395121, 0.95});
  // Step 10 is the last PyTorch allows (last_epoch == total_steps); step 11 is an error.
  a.step();
  CHECK(contains(error_of([&] { a.step(); }), "OneCycleLR: tried to step 11 times"));

  Tensor v = zeros({1}).requires_grad_();
  optim::Adam adam({v}, optim::AdamOptions(0.1));
  optim::OneCycleLR b(adam, optim::OneCycleLROptions(0.5).epochs(2).steps_per_epoch(5).pct_start(0.25)
                                .anneal_strategy("linear").three_phase(true));
  CHECK(b.total_steps() == 10);
  run(adam, b,
      {0.02, 0.33999999999999997, 0.34, 0.020000000000000018, 0.016667, 0.013334, 0.010001, 0.006668,
       0.0033349999999999977, 1.9999999999985307e-06},
      {0.95, 0.8833333333333333, 0.8833333333333333, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95});
  CHECK(adam.options().betas()[1] == 0.999);  // beta2 untouched

  // PyTorch's errors.
  Tensor u = zeros({1}).requires_grad_();
  optim::SGD s2({u}, optim::SGDOptions(0.1));
  CHECK(contains(error_of([&] { optim::OneCycleLR(s2, optim::OneCycleLROptions(1.0)); }),
                 "either total_steps OR (epochs AND steps_per_epoch)"));
  CHECK(contains(error_of([&] { optim::OneCycleLR(s2, optim::OneCycleLROptions(1.0).total_steps(0)); }),
                 "positive integer total_steps, but got 0"));
  CHECK(contains(error_of([&] { optim::OneCycleLR(s2, optim::OneCycleLROptions(1.0).total_steps(5).pct_start(1.5)); }),
                 "between 0 and 1 pct_start, but got 1.5"));
  CHECK(contains(error_of([&] { optim::OneCycleLR(s2, optim::OneCycleLROptions(1.0).total_steps(5).anneal_strategy("exp")); }),
                 "'cos' or 'linear'"));
  optim::Adadelta ada({u}, optim::AdadeltaOptions(1.0));
  CHECK(contains(error_of([&] { optim::OneCycleLR(ada, optim::OneCycleLROptions(1.0).total_steps(5)); }),
                 "must support momentum or beta1"));
  optim::OneCycleLR no_momentum(ada, optim::OneCycleLROptions(1.0).total_steps(5).cycle_momentum(false));
  CHECK(no_momentum.get_last_lr()[0] == doctest::Approx(0.04));
}

TEST_CASE("SGD and AdamW step bfloat16 and float16 parameters in float32, rounding parameter and state once per step") {
  for (Dtype dt : {kBFloat16, kFloat16}) {
    CAPTURE(dt);
    // SGD on loss = 0.5 * p^2 from p = 1: p = 1 - 0.1f * 1 = 0.9f, stored as its nearest 16-bit value.
    Tensor p = tensor({1.0}).to(dt).set_requires_grad();
    optim::SGD sgd({p}, optim::SGDOptions(0.1));
    (p * p * 0.5).sum().backward();
    sgd.step();
    CHECK(p.dtype() == dt);
    CHECK(p.item<double>() == (dt == kBFloat16 ? 0.8984375 : 0.89990234375));  // 0.9 in 8 and 11 bits
    // Adam/AdamW and momentum SGD over three steps: each equals the float32 step from the same 16-bit
    // values, rounded (within one 16-bit unit: a float32 multiply-add may be fused in one loop and not in
    // the other).
    manual_seed(3);
    const double unit = dt == kBFloat16 ? 0x1p-7 : 0x1p-10;
    Tensor w = randn({257}).to(dt), m = zeros({257}, dt), v = zeros({257}, dt), buf = zeros({257}, dt), none;
    Tensor q = randn({257}).to(dt);
    for (int step = 1; step <= 3; ++step) {
      AdamStepArgs a;
      a.lr = 0.01, a.beta1 = 0.9, a.beta2 = 0.999, a.eps = 1e-8, a.weight_decay = 0.1, a.decoupled_weight_decay = true;
      a.step_size = a.lr / (1 - std::pow(a.beta1, step));
      a.bias_correction2_sqrt = std::sqrt(1 - std::pow(a.beta2, step));
      Tensor g = randn({257}).to(dt);
      Tensor w32 = w.to(kFloat32), m32 = m.to(kFloat32), v32 = v.to(kFloat32);
      internal::adam_step_(w32, g.to(kFloat32), m32, v32, none, a);
      internal::adam_step_(w, g, m, v, none, a);
      CHECK(internal::allclose(w.to(kFloat32), w32.to(dt).to(kFloat32), unit, 0));
      CHECK(internal::allclose(m.to(kFloat32), m32.to(dt).to(kFloat32), unit, 0));
      CHECK(internal::allclose(v.to(kFloat32), v32.to(dt).to(kFloat32), unit, 0));
      Tensor q32 = q.to(kFloat32), buf32 = buf.to(kFloat32);
      internal::sgd_step_(q32, g.to(kFloat32), buf32, 0.1, 0.9, 0, 0.01, true, step == 1);
      internal::sgd_step_(q, g, buf, 0.1, 0.9, 0, 0.01, true, step == 1);
      CHECK(internal::allclose(q.to(kFloat32), q32.to(dt).to(kFloat32), unit, 0));
      CHECK(internal::allclose(buf.to(kFloat32), buf32.to(dt).to(kFloat32), unit, 0));
    }
  }
  Tensor pi = zeros({2}, kInt64), none;
  CHECK(contains(error_of([&] { internal::sgd_step_(pi, pi, none, 0.1, 0, 0, 0, false, true); }),
                 "sgd_step_: expected a floating parameter (float32, float64, bfloat16 or float16), got int64"));
}
