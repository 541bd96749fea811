// PyTorch's numbers for the parity tests: a safetensors file under tests/fixtures (written by a script
// in tools/fixtures/), loaded once per binary, and the comparison every parity test makes.
//
//   const testing::Fixtures fx("tests/fixtures/pooling_fixtures.safetensors", "make_pooling_fixtures.py");
//   testing::check_close(out, fx("max3d.out"), "max3d.out", 1e-9);
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tensor/api.h"
#include "tensor/safetensors.h"

namespace lockstep::testing {

class Fixtures {
 public:
  // `script` names the tools/fixtures/ script to rerun when a key is missing.
  Fixtures(std::string path, std::string script) : path_(std::move(path)), script_(std::move(script)) {}
  // A copy of fixture `key` (the test may modify it); REQUIREs that it exists.
  Tensor operator()(const std::string& key) const {
    auto it = all().find(key);
    REQUIRE_MESSAGE(it != all().end(), "fixture '", key, "' is missing from ", path_, " (rerun tools/fixtures/",
                    script_, ")");
    return it->second.clone();
  }
  bool contains(const std::string& key) const { return all().count(key) > 0; }
  // The cases whose keys start with `prefix` ("bag." ...), each named by its key before `marker` (every
  // case stores one key ending in it, as the fixture scripts write their options): "bag.sum" for "bag.sum.opts".
  std::vector<std::string> cases(const std::string& prefix, const std::string& marker = ".opts") const {
    std::vector<std::string> names;
    for (const auto& [k, v] : all())
      if (k.size() > prefix.size() + marker.size() && k.rfind(prefix, 0) == 0 &&
          k.compare(k.size() - marker.size(), marker.size(), marker) == 0)
        names.push_back(k.substr(0, k.size() - marker.size()));
    return names;
  }
  const std::map<std::string, Tensor>& all() const {
    if (!loaded_) {
      for (auto& [k, v] : load_safetensors(path_).tensors) tensors_.emplace(k, v);
      loaded_ = true;
    }
    return tensors_;
  }

 private:
  std::string path_, script_;
  mutable bool loaded_ = false;
  mutable std::map<std::string, Tensor> tensors_;
};

// Element by element in float64, |got - want| / (1 + |want|) <= tol, with the worst element named. Equal
// values match (NaN where PyTorch has NaN, the same infinity); a NaN or infinity PyTorch lacks fails.
inline void check_close(const Tensor& got, const Tensor& want, const std::string& what, double tol) {
  REQUIRE_MESSAGE(got.defined(), what, ": undefined");
  REQUIRE_MESSAGE(got.shape() == want.shape(), what, ": shape ", got.shape(), " vs PyTorch's ", want.shape());
  const std::vector<double> g = got.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> w = want.to(kFloat64).contiguous().to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool same = g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i]));
    const double err = same ? 0.0 : std::abs(g[i] - w[i]) / (1 + std::abs(w[i]));
    if (std::isnan(err)) {  // the first NaN decides (a later larger error must not hide it)
      worst = err, at = i;
      break;
    }
    if (err > worst) worst = err, at = i;
  }
  CHECK_MESSAGE(worst <= tol, what, ": element ", at, " is ", g.empty() ? 0 : g[at], ", PyTorch's ",
                w.empty() ? 0 : w[at]);
}

}  // namespace lockstep::testing
