// LBFGS against PyTorch: tests/fixtures/lbfgs_fixtures.safetensors (written by
// tools/fixtures/make_lbfgs_fixtures.py) holds torch.optim.LBFGS's float64 trajectories on Rosenbrock's
// function and a small least-squares problem, with a fixed step and with the strong-Wolfe line search
// (and maximize): after every step(closure) the parameters, the returned loss, func_evals, n_iter and
// the closure's call count, and the final state. Then the state_dict round trip and the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "autograd/api.h"
#include "optim/api.h"
#include "tensor/ops.h"
#include "tensor/safetensors.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::error_of;

namespace {

const std::map<std::string, Tensor>& lbfgs_fixtures() {
  static const std::map<std::string, Tensor> all = [] {
    std::map<std::string, Tensor> m;
    for (auto& [k, v] : load_safetensors("tests/fixtures/lbfgs_fixtures.safetensors").tensors) m.emplace(k, v);
    return m;
  }();
  return all;
}

Tensor lfx(const std::string& key) {
  auto it = lbfgs_fixtures().find(key);
  REQUIRE_MESSAGE(it != lbfgs_fixtures().end(), "fixture '", key,
                  "' is missing (rerun tools/fixtures/make_lbfgs_fixtures.py)");
  return it->second.clone();
}

void check_values(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-9) {
  REQUIRE_MESSAGE(got.defined(), what, ": undefined");
  REQUIRE_MESSAGE(got.shape() == want.shape(), what, ": shape ", got.shape(), " vs PyTorch's ", want.shape());
  auto g = got.to(kFloat64).contiguous().to_vector<double>(), w = want.to(kFloat64).contiguous().to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i)
    CHECK_MESSAGE(std::abs(g[i] - w[i]) <= tol * (1 + std::abs(w[i])), what, ": element ", i, " is ", g[i],
                  ", PyTorch's ", w[i]);
}

int64_t int_of(const Tensor& t) { return static_cast<int64_t>(t.to(kFloat64).item<double>()); }

using Loss = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor rosenbrock(const std::vector<Tensor>& p, double sign) {
  Tensor a = select(p[0], 0, 0), b = select(p[0], 0, 1);
  return (pow(rsub(a, 1.0), 2.0) + pow(b - pow(a, 2.0), 2.0) * 100.0) * sign;
}

Tensor least_squares(const std::vector<Tensor>& p) {
  return mean(pow(matmul(lfx("lsq.A"), p[0]) + p[1] - lfx("lsq.y"), 2.0));
}

std::vector<Tensor> start(bool lsq) {
  std::vector<Tensor> p;
  if (lsq) p = {tensor({0.5, -0.25, 1.0}, {3}), tensor({0.1}, {1})};
  else p = {tensor({-1.5, 2.0}, {2})};
  for (Tensor& t : p) t.set_requires_grad();
  return p;
}

// A closure as PyTorch programs write it: clear, evaluate, backward, return the loss; counts calls.
optim::LBFGS::LossClosure closure_for(optim::LBFGS& opt, const std::vector<Tensor>& params, const Loss& loss_fn,
                                      int64_t& calls) {
  return [&opt, params, loss_fn, &calls] {
    ++calls;
    opt.zero_grad();
    Tensor loss = loss_fn(params);
    loss.backward();
    return loss;
  };
}

void check_case(const std::string& c, bool lsq, const Loss& loss_fn, const optim::LBFGSOptions& options) {
  INFO("case ", c);
  std::vector<Tensor> params = start(lsq);
  optim::LBFGS opt(params, options);
  int64_t calls = 0;
  auto closure = closure_for(opt, params, loss_fn, calls);
  for (int k = 0; k < 3; ++k) {
    const std::string at = c + "." + std::to_string(k) + ".";
    Tensor loss = opt.step(closure);
    check_values(loss, lfx(at + "loss"), at + "loss");
    for (size_t i = 0; i < params.size(); ++i) check_values(params[i], lfx(at + "p" + std::to_string(i)), at + "p");
    CHECK(int_of(opt.state(0).at("func_evals")) == int_of(lfx(at + "func_evals")));
    CHECK(int_of(opt.state(0).at("n_iter")) == int_of(lfx(at + "n_iter")));
    CHECK(calls == int_of(lfx(at + "calls")));
  }
  std::map<std::string, Tensor> sd;
  for (auto& [k, v] : opt.state_dict()) sd.emplace(k, v);
  for (const char* name : {"d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad", "prev_loss"}) {
    REQUIRE(sd.count(std::string("state.0.") + name));
    check_values(sd.at(std::string("state.0.") + name), lfx(c + ".state." + name), c + ".state." + name, 1e-7);
  }
}

}  // namespace

TEST_CASE("LBFGS follows PyTorch's trajectories: fixed steps, strong Wolfe, maximize, history shifts") {
  auto rosen = [](const std::vector<Tensor>& p) { return rosenbrock(p, 1.0); };
  check_case("rosen_fixed", false, rosen, optim::LBFGSOptions(0.05).max_iter(6));
  check_case("rosen_wolfe", false, rosen, optim::LBFGSOptions(1).max_iter(10).line_search_fn("strong_wolfe"));
  check_case("rosen_max", false, [](const std::vector<Tensor>& p) { return rosenbrock(p, -1.0); },
             optim::LBFGSOptions(1).max_iter(10).line_search_fn("strong_wolfe").maximize(true));
  check_case("lsq_fixed", true, least_squares, optim::LBFGSOptions(0.5).max_iter(4).history_size(3));
  check_case("lsq_wolfe", true, least_squares,
             optim::LBFGSOptions(1).max_iter(5).history_size(2).max_eval(9).line_search_fn("strong_wolfe"));
}

TEST_CASE("LBFGS's state_dict resumes the same trajectory") {
  auto rosen = [](const std::vector<Tensor>& p) { return rosenbrock(p, 1.0); };
  const auto options = optim::LBFGSOptions(1).max_iter(4).line_search_fn("strong_wolfe");
  std::vector<Tensor> a = start(false);
  optim::LBFGS first(a, options);
  int64_t calls = 0;
  first.step(closure_for(first, a, rosen, calls));
  optim::StateDict saved;
  for (auto& [k, v] : first.state_dict()) saved.emplace_back(k, v.clone());
  CHECK(first.options().max_eval() == std::optional<int64_t>(5));  // max_iter * 5 / 4
  std::vector<Tensor> b = {a[0].detach().clone().set_requires_grad()};
  optim::LBFGS second(b, optim::LBFGSOptions(7).line_search_fn("strong_wolfe"));
  second.load_state_dict(saved);
  CHECK(second.options().lr() == 1);
  CHECK(second.options().max_iter() == 4);
  first.step(closure_for(first, a, rosen, calls));
  second.step(closure_for(second, b, rosen, calls));
  CHECK(a[0].to_vector<double>() == b[0].to_vector<double>());
  CHECK(int_of(second.state(0).at("n_iter")) == int_of(first.state(0).at("n_iter")));
  CHECK(int_of(second.state(0).at("func_evals")) == int_of(first.state(0).at("func_evals")));
  CHECK(int_of(second.state(0).at("n_iter")) > 4);

  // A state that is not LBFGS's, or shaped for other parameters, is refused before anything changes.
  optim::StateDict bad = saved;
  for (auto& [k, v] : bad)
    if (k == "state.0.d") v = zeros({3}, TensorOptions(kFloat64));
  CHECK(error_of([&] { second.load_state_dict(bad); }).find("LBFGS.load_state_dict: 'state.0.d' has shape [3]") !=
        std::string::npos);
  bad = saved;
  bad.emplace_back("state.0.exp_avg", zeros({2}, TensorOptions(kFloat64)));
  CHECK(error_of([&] { second.load_state_dict(bad); }).find("unexpected state 'exp_avg'") != std::string::npos);
}

TEST_CASE("LBFGS stops at once at a stationary point and rejects bad use") {
  std::vector<Tensor> p = {tensor({1.0, 1.0}, {2}).set_requires_grad()};
  optim::LBFGS opt(p, optim::LBFGSOptions(1));
  int64_t calls = 0;
  Tensor loss = opt.step(closure_for(opt, p, [](const std::vector<Tensor>& q) { return rosenbrock(q, 1.0); }, calls));
  CHECK(loss.item<double>() == 0);
  CHECK(calls == 1);
  CHECK(p[0].to_vector<double>() == std::vector<double>{1.0, 1.0});
  CHECK(int_of(opt.state(0).at("n_iter")) == 0);

  CHECK(error_of([&] { opt.step(); }).find("LBFGS: step() needs a closure") != std::string::npos);
  CHECK(error_of([&] { optim::LBFGS(p, optim::LBFGSOptions(-1)); }).find("LBFGS: Invalid learning rate: -1") !=
        std::string::npos);
  CHECK(error_of([&] { optim::LBFGS(p, optim::LBFGSOptions().line_search_fn("backtracking")); })
            .find("only 'strong_wolfe' is supported") != std::string::npos);
  CHECK(error_of([&] { optim::LBFGS(p, optim::LBFGSOptions().history_size(0)); })
            .find("Invalid history_size value: 0") != std::string::npos);
  CHECK(error_of([] { optim::LBFGS({}, optim::LBFGSOptions()); }).find("got an empty parameter list") !=
        std::string::npos);
  CHECK(error_of([&] { opt.step([] { return zeros({2}); }); }).find("the closure must return the loss") !=
        std::string::npos);
}
