// gradcheck: compares autograd's gradients with central finite differences in float64, as
// torch.autograd.gradcheck. The output is reduced to a scalar with fixed random weights so every
// output element's gradient is exercised.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <vector>

#include "autograd/api.h"

namespace lockstep::testing {

inline void gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, std::vector<Tensor> inputs,
                      double eps = 1e-6, double tol = 1e-5) {
  for (auto& x : inputs) x.set_requires_grad(true);
  Tensor probe = fn(inputs);
  Tensor weights = randn(probe.shape(), kFloat64);
  auto scalar = [&](const std::vector<Tensor>& in) { return sum(fn(in) * weights); };
  for (auto& x : inputs) x.set_grad(Tensor());
  scalar(inputs).backward();
  NoGradGuard no_grad;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    REQUIRE_MESSAGE(x.grad().defined(), "input ", k, " received no gradient");
    std::vector<double> analytic = x.grad().to_vector<double>();
    double* p = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      double orig = p[i];
      p[i] = orig + eps;
      double up = scalar(inputs).item<double>();
      p[i] = orig - eps;
      double down = scalar(inputs).item<double>();
      p[i] = orig;
      double numeric = (up - down) / (2 * eps);
      CHECK_MESSAGE(analytic[i] == doctest::Approx(numeric).epsilon(tol).scale(1.0),
                    "input ", k, " element ", i, ": analytic ", analytic[i], " vs numeric ", numeric);
    }
  }
}

}  // namespace lockstep::testing
