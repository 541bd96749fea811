// What the fused attention tests (tests/nn/attention_fused_test, attention_half_test) share: the six
// cases both fixture scripts write (tools/fixtures/make_attention_fixtures.py and
// make_attention_bf16_fixtures.py), one case's tensors out of a fixture file, one sdpa call's output and
// q, k, v gradients, and their comparison with a reference under a tolerance rule.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "autograd/api.h"

namespace lockstep::testing::attention {

// A fixture case: the flags the fixture scripts passed to scaled_dot_product_attention.
struct Case {
  const char* name;
  bool bool_mask = false, is_causal = false, enable_gqa = false;
  std::optional<double> scale = std::nullopt;
};
inline const Case kFixtureCases[] = {
    {.name = "causal", .is_causal = true},
    {.name = "causal_l_ne_s", .is_causal = true},
    {.name = "bool_mask", .bool_mask = true},
    {.name = "additive_mask"},
    {.name = "scale", .scale = 0.3},
    {.name = "gqa", .is_causal = true, .enable_gqa = true},
};

// The tensors of case `name` among a fixture file's (load_safetensors(...).tensors): "name.q",
// "name.grad.k", ... keyed without the "name." prefix.
template <typename Tensors>
std::map<std::string, Tensor> case_tensors(const Tensors& all, const std::string& name) {
  std::map<std::string, Tensor> parts;
  for (const auto& [key, t] : all)
    if (key.rfind(name + ".", 0) == 0) parts[key.substr(name.size() + 1)] = t;
  return parts;
}

// out and the gradients of sum(out * g) for q, k, v through `sdpa` (fused or composed).
struct Run {
  Tensor out, dq, dk, dv;
};
using Sdpa = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;
inline Run run(const Sdpa& sdpa, Tensor q, Tensor k, Tensor v, const Tensor& g) {
  for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
  Tensor out = sdpa(q, k, v);
  sum(out * g).backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// How far an element may be from its reference: tol(want, max |want| over the tensor).
using Tolerance = std::function<double(double want, double max_abs)>;
// atol + rtol * |want|.
inline Tolerance within(double rtol, double atol) {
  return [=](double w, double) { return atol + rtol * std::abs(w); };
}
// tol * (|want| + max |want|): for 16-bit results, whose gradient elements near 0 are differences of
// larger terms.
inline Tolerance relative_to_max(double tol) {
  return [=](double w, double max_abs) { return tol * (std::abs(w) + max_abs); };
}

// "" when got matches want in shape and within `tol` everywhere, else the first difference.
inline std::string mismatch(const Tensor& got, const Tensor& want, const Tolerance& tol) {
  if (!got.defined()) return "undefined";
  if (got.shape() != want.shape()) return "shape " + shape_str(got.shape()) + ", want " + shape_str(want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double max_abs = 0;
  for (double x : w) max_abs = std::max(max_abs, std::abs(x));
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::abs(g[i] - w[i]) <= tol(w[i], max_abs)) continue;
    std::ostringstream os;
    os.precision(17);
    os << "element " << i << ": " << g[i] << ", want " << w[i] << " (max |want| " << max_abs << ")";
    return os.str();
  }
  return "";
}

// The output and each gradient of got against want's, the first difference of each named.
inline void check_run(const Run& got, const Run& want, const Tolerance& tol, const std::string& what) {
  const char* names[] = {"out", "grad q", "grad k", "grad v"};
  const Tensor* g[] = {&got.out, &got.dq, &got.dk, &got.dv};
  const Tensor* w[] = {&want.out, &want.dq, &want.dk, &want.dv};
  for (int i = 0; i < 4; ++i) {
    const std::string m = mismatch(*g[i], *w[i], tol);
    CHECK_MESSAGE(m.empty(), what, ", ", names[i], ": ", m);
  }
}

}  // namespace lockstep::testing::attention
