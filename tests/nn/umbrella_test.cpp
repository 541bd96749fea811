// `#include <lockstep.h>` with `deps = ["//:lockstep"]` alone (in this tree as where lockstep is
// installed) brings gradient clipping (nn::utils) and checkpoints, as `#include <torch/torch.h>` brings
// torch::nn::utils and torch::save.
#include <doctest/doctest.h>

#include <lockstep.h>
#include "tests/util/test_util.h"

using namespace lockstep;

TEST_CASE("lockstep.h: nn::utils::clip_grad_norm_ and save_checkpoint / load_checkpoint") {
  nn::Linear fc(2, 1);
  fc->weight.set_grad(tensor({3.0f, 4.0f}, {1, 2}));
  fc->bias.set_grad(zeros({1}));
  // The total 2-norm is 5; clipping to 1 scales every gradient by 1 / 5 (up to PyTorch's 1e-6).
  Tensor norm = nn::utils::clip_grad_norm_(fc->parameters(), 1.0);
  CHECK(norm.item<float>() == doctest::Approx(5.0));
  CHECK(fc->weight.grad().to_vector<float>()[0] == doctest::Approx(0.6));
  CHECK(fc->weight.grad().to_vector<float>()[1] == doctest::Approx(0.8));
  nn::utils::clip_grad_value_(fc->parameters(), 0.7);
  CHECK(fc->weight.grad().to_vector<float>()[1] == doctest::Approx(0.7));

  testing::TempDir dir;
  const std::string path = dir.path + "/ckpt.safetensors";
  Checkpoint save;
  save.model = fc.get();
  save.epoch = 3;
  save_checkpoint(path, save);
  nn::Linear other(2, 1);
  Checkpoint into;
  into.model = other.get();
  Checkpoint got = load_checkpoint(path, into);
  CHECK(got.epoch == 3);
  CHECK(allclose(other->weight, fc->weight, 0, 0));
}
