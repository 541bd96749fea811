// nn::Module's forward hooks: run in order around calls through a holder and through
// Module::forward(x), seeing (and replacing) the output's tensors, a pair's too; a call of the typed
// forward on the module itself runs none.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "nn/api.h"
#include "tensor/factory.h"

using namespace lockstep;

namespace {
class PairImpl : public nn::Module {
 public:
  PairImpl() : Module("Pair") {}
  std::pair<Tensor, Tensor> forward(const Tensor& a, const Tensor& b) { return {a + b, a * b}; }
};
LOCKSTEP_MODULE(Pair);
}  // namespace

TEST_CASE("forward hooks run around holder calls and Module::forward, in registration order") {
  nn::Linear fc(2, 3);
  std::vector<std::string> calls;
  fc->register_forward_pre_hook([&](nn::Module& m) { calls.push_back("pre1 " + m.name()); });
  fc->register_forward_pre_hook([&](nn::Module&) { calls.push_back("pre2"); });
  fc->register_forward_hook([&](nn::Module&, const std::vector<Tensor*>& outs) {
    calls.push_back("post " + std::to_string(outs.size()) + " " + std::to_string(outs[0]->size(1)));
  });
  CHECK(fc->has_forward_hooks());
  fc(zeros({4, 2}));
  CHECK(calls == std::vector<std::string>{"pre1 Linear", "pre2", "post 1 3"});
  calls.clear();
  std::shared_ptr<nn::Module> m = fc.ptr();
  m->forward(zeros({4, 2}));  // Sequential and ModuleList loops call modules so
  CHECK(calls == std::vector<std::string>{"pre1 Linear", "pre2", "post 1 3"});
  calls.clear();
  fc->forward(zeros({4, 2}));  // the typed forward on the module itself: no hooks
  CHECK(calls.empty());
  nn::Sequential seq(fc, nn::ReLU());
  seq(zeros({1, 2}));
  CHECK(calls.size() == 3);
}

TEST_CASE("a forward hook may replace the output tensors, each of a pair") {
  Pair pair;
  pair->register_forward_hook([](nn::Module&, const std::vector<Tensor*>& outs) {
    REQUIRE(outs.size() == 2);
    for (Tensor* t : outs) *t = *t * 10.0;
  });
  auto [sum, product] = pair(full({1}, 2.0), full({1}, 3.0));
  CHECK(sum.item<float>() == 50.0f);
  CHECK(product.item<float>() == 60.0f);
  nn::Linear fc(1, 1);
  fc->register_forward_hook([](nn::Module&, const std::vector<Tensor*>& outs) { *outs[0] = zeros({1, 7}); });
  CHECK(fc(ones({1, 1})).shape() == Shape{1, 7});
}
