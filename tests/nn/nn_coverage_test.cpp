// LibTorch's nn names against lockstep's code and the README's coverage table. A module counts when
// nn::NameImpl exists (with its holder nn::Name), a function when nn::functional::name exists: each
// name is looked up qualified, with a stand-in reachable only when lockstep declares nothing of that
// name there (a using-directive, which qualified lookup follows only then). The README's table, between
// its "nn-coverage" markers, must list the same names as present and missing; on a mismatch this test
// prints the table to paste.
#include <doctest/doctest.h>

#include <concepts>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "nn/api.h"

struct LibtorchNameMissing {};

// The stand-ins, after every real declaration of the test's headers.
namespace lockstep::nn {
namespace coverage_stand_ins {
#define LIBTORCH_MODULE(Name) \
  struct Name##Impl {         \
    static constexpr bool lockstep_missing = true; \
  };
#define PYTHON_MODULE(Name) LIBTORCH_MODULE(Name)
#define LIBTORCH_FUNCTION(name)
#define PYTHON_FUNCTION(name)
#include "tests/nn/libtorch_nn_names.inc"
#undef LIBTORCH_MODULE
#undef PYTHON_MODULE
#undef LIBTORCH_FUNCTION
#undef PYTHON_FUNCTION
}  // namespace coverage_stand_ins
using namespace coverage_stand_ins;  // NOLINT: reached only by names lockstep::nn lacks
namespace functional {
namespace coverage_stand_ins {
#define LIBTORCH_MODULE(Name)
#define PYTHON_MODULE(Name)
#define LIBTORCH_FUNCTION(name) template <typename T> LibtorchNameMissing name(T);
#define PYTHON_FUNCTION(name) LIBTORCH_FUNCTION(name)
#include "tests/nn/libtorch_nn_names.inc"
#undef LIBTORCH_MODULE
#undef PYTHON_MODULE
#undef LIBTORCH_FUNCTION
#undef PYTHON_FUNCTION
}  // namespace coverage_stand_ins
using namespace coverage_stand_ins;  // NOLINT
}  // namespace functional
}  // namespace lockstep::nn

namespace {

namespace probe_adl {
struct Probe {};  // no associated namespace holds a stand-in
}  // namespace probe_adl

template <typename T>
constexpr bool is_stand_in() {
  return requires { T::lockstep_missing; };
}

struct Name {
  std::string name;
  bool present;
  bool python_only;
  bool module;
};

std::vector<Name> names() {
  std::vector<Name> all;
#define LIBTORCH_MODULE(N) all.push_back({#N, !is_stand_in<::lockstep::nn::N##Impl>(), false, true});
#define PYTHON_MODULE(N) all.push_back({#N, !is_stand_in<::lockstep::nn::N##Impl>(), true, true});
#define LIBTORCH_FUNCTION(n)                                                                             \
  all.push_back({#n, ![]<typename P>(P) {                                                                \
                   return requires(P p) { { ::lockstep::nn::functional::n(p) } -> std::same_as<LibtorchNameMissing>; }; \
                 }(probe_adl::Probe{}), false, false});
#define PYTHON_FUNCTION(n)                                                                               \
  all.push_back({#n, ![]<typename P>(P) {                                                                \
                   return requires(P p) { { ::lockstep::nn::functional::n(p) } -> std::same_as<LibtorchNameMissing>; }; \
                 }(probe_adl::Probe{}), true, false});
#include "tests/nn/libtorch_nn_names.inc"
#undef LIBTORCH_MODULE
#undef PYTHON_MODULE
#undef LIBTORCH_FUNCTION
#undef PYTHON_FUNCTION
  return all;
}

std::string join(const std::vector<Name>& all, bool module, bool python_only, bool present) {
  std::string out;
  for (const Name& n : all)
    if (n.module == module && n.python_only == python_only && n.present == present)
      out += (out.empty() ? "`" : ", `") + n.name + "`";
  return out.empty() ? "(none)" : out;
}

int count(const std::vector<Name>& all, bool module, bool python_only, bool present) {
  int c = 0;
  for (const Name& n : all) c += n.module == module && n.python_only == python_only && n.present == present;
  return c;
}

// The README's section as it should read.
std::string table(const std::vector<Name>& all) {
  std::ostringstream t;
  auto row = [&](const char* what, bool module, bool python_only) {
    const int have = count(all, module, python_only, true), lack = count(all, module, python_only, false);
    t << "| " << what << " | " << have << " of " << have + lack << " | " << join(all, module, python_only, false)
      << " |\n";
  };
  t << "| LibTorch's names | in lockstep | missing |\n|---|---|---|\n";
  row("`torch::nn` modules", true, false);
  row("`torch::nn::functional` functions", false, false);
  row("Python-only modules", true, true);
  row("Python-only functions", false, true);
  return t.str();
}

}  // namespace

TEST_CASE("the README's table of LibTorch's nn names matches the code") {
  const std::vector<Name> all = names();
  REQUIRE(all.size() == 132 + 106 + 10);
  std::ifstream in("README.md");
  REQUIRE_MESSAGE(in.good(), "README.md is not readable from the test's directory");
  const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string begin = "<!-- nn-coverage:begin -->\n", end = "<!-- nn-coverage:end -->";
  const size_t b = readme.find(begin), e = readme.find(end);
  const bool marked = b != std::string::npos && e != std::string::npos && b < e;
  REQUIRE_MESSAGE(marked, "README.md has no nn-coverage markers");
  const std::string section = readme.substr(b + begin.size(), e - b - begin.size());
  const std::string want = table(all);
  CHECK_MESSAGE(section == want, "README.md's nn-coverage table is stale; it should read:\n", want);
}
