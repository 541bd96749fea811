// data/transforms.h and data/map_dataset.h: Normalize against hand-computed values, LibTorch's
// ds.map(Normalize<>).map(Stack<>) pipeline through the DataLoader (workers, DistributedSampler), the
// lambdas and Collate<>, and bad input to all of them.
#include <doctest/doctest.h>

#include <map>
#include <numeric>
#include <set>
#include <string>

#include "data/api.h"
#include "tensor/api.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using namespace lockstep::data;

namespace {
using lockstep::testing::contains;
using lockstep::testing::error_of;

// n images [C = 2, H = 1, W = 2]: example i has channel 0 = {i, i + 0.5} and channel 1 = {10 i, 10 (i + 1)};
// target i. With mean {0.5, 10} and stddev {0.25, 5} the normalised values are, by hand,
//   channel 0: (i + 0.5 w - 0.5) / 0.25 = 4i + 2w - 2,   channel 1: (10 (i + w) - 10) / 5 = 2i + 2w - 2,
// all exact in float32.
std::shared_ptr<TensorDataset> images(int64_t n) {
  std::vector<float> x(static_cast<size_t>(4 * n));
  for (int64_t i = 0; i < n; ++i) {
    const float example[4] = {float(i), float(i) + 0.5f, 10.f * i, 10.f * (i + 1)};
    std::copy(example, example + 4, x.begin() + 4 * i);
  }
  std::vector<int64_t> y(n);
  std::iota(y.begin(), y.end(), 0);
  return std::make_shared<TensorDataset>(tensor(x, {n, 2, 1, 2}), tensor(y, {n}));
}

std::vector<float> normalized(int64_t i) {
  const float f = float(i);
  return {4 * f - 2, 4 * f, 2 * f - 2, 2 * f};
}

// Checks every row of a batch of images() normalised, and returns its targets.
std::vector<int64_t> check_normalized_batch(const Batch& batch) {
  const int64_t b = batch.input.size(0);
  REQUIRE(batch.input.shape() == Shape{b, 2, 1, 2});
  REQUIRE(batch.target.shape() == Shape{b});
  auto x = batch.input.to_vector<float>();
  auto y = batch.target.to_vector<int64_t>();
  for (int64_t r = 0; r < b; ++r) {
    CAPTURE(y[r]);
    CHECK(std::vector<float>(x.begin() + 4 * r, x.begin() + 4 * r + 4) == normalized(y[r]));
  }
  return y;
}

}  // namespace

// --- Normalize -----------------------------------------------------------------------------------

TEST_CASE("Normalize: (x - mean[c]) / stddev[c] over dimension 0, by hand") {
  // [2, 2, 2]: channel 0 = 1, 2, 3, 4 and channel 1 = 10, 20, 30, 40.
  Tensor x = tensor(std::vector<float>{1, 2, 3, 4, 10, 20, 30, 40}, {2, 2, 2});
  Tensor y = transforms::Normalize<>({0.5, 10}, {0.25, 5})(x);
  CHECK(y.shape() == Shape{2, 2, 2});
  CHECK(y.dtype() == kFloat32);
  CHECK(y.to_vector<float>() == std::vector<float>{2, 6, 10, 14, 0, 2, 4, 6});
  CHECK(x.to_vector<float>()[0] == 1.f);  // the input is left alone

  // One value for every element, any shape (here a flat [4], as IdxDataset's flattened images).
  Tensor flat = tensor(std::vector<float>{0, 0.5f, 1, 1.5f}, {4});
  CHECK(transforms::Normalize<>(0.5, 0.25)(flat).to_vector<float>() == std::vector<float>{-2, 0, 2, 4});
  CHECK(transforms::Normalize<>(0.5, 0.25)(scalar_tensor(1.0)).item<float>() == 2.f);
  // One mean, a stddev per channel: [2, 2] = {1, 2 | 3, 5} -> {(1-1)/0.5, (2-1)/0.5 | (3-1)/2, (5-1)/2}.
  Tensor two = tensor(std::vector<float>{1, 2, 3, 5}, {2, 2});
  CHECK(transforms::Normalize<>({1.0}, {0.5, 2.0})(two).to_vector<float>() == std::vector<float>{0, 2, 1, 2});
  // float64 stays float64, computed in float64 (as torchvision converts mean and std to the input's dtype).
  Tensor d = transforms::Normalize<>(0.1, 0.3)(tensor(std::vector<double>{1.0}, {1}));
  CHECK(d.dtype() == kFloat64);
  CHECK(d.to_vector<double>()[0] == (1.0 - 0.1) / 0.3);
  // torchvision's ImageNet constants on a [3, 1, 1] pixel.
  Tensor px = tensor(std::vector<float>{0.485f + 0.229f, 0.456f, 0.406f - 2 * 0.225f}, {3, 1, 1});
  auto n = transforms::Normalize<>({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})(px).to_vector<float>();
  CHECK(n[0] == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(n[1] == doctest::Approx(0.0).epsilon(1e-6));
  CHECK(n[2] == doctest::Approx(-2.0).epsilon(1e-6));
  // As a TensorTransform, on the example's input only.
  Example e = transforms::Normalize<>(0.5, 0.25).apply({flat, scalar_tensor(7, kInt64)});
  CHECK(e.input.to_vector<float>() == std::vector<float>{-2, 0, 2, 4});
  CHECK(e.target.item<int64_t>() == 7);
}

// --- the pipeline through the DataLoader ---------------------------------------------------------

TEST_CASE("map(Normalize<>).map(Stack<>): LibTorch's pipeline, batched by the DataLoader") {
  auto base = images(6);
  MapDataset ds = base->map(transforms::Normalize<>({0.5, 10}, {0.25, 5})).map(transforms::Stack<>());
  CHECK(ds.size() == 6);
  CHECK(ds.collates());
  // Single examples: example 0 -> {-2, 0 | -2, 0}, example 5 -> {18, 20 | 8, 10}.
  CHECK(ds.get(0).input.to_vector<float>() == std::vector<float>{-2, 0, -2, 0});
  CHECK(ds.get(5).input.to_vector<float>() == std::vector<float>{18, 20, 8, 10});
  CHECK(ds.get(5).target.item<int64_t>() == 5);
  DataLoader loader(ds, {.batch_size = 4});
  CHECK(loader.size() == 2);
  std::vector<int64_t> seen;
  for (auto& batch : loader) {
    auto y = check_normalized_batch(batch);
    seen.insert(seen.end(), y.begin(), y.end());
  }
  CHECK(seen == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  // The source is untouched, and shared (no copy of its tensors).
  CHECK(base->get(5).input.to_vector<float>() == std::vector<float>{5, 5.5f, 50, 60});
  auto* mid = dynamic_cast<MapDataset*>(ds.dataset().get());
  REQUIRE(mid != nullptr);
  CHECK(mid->dataset().get() == base.get());
}

TEST_CASE("map: every example exactly once across ranks and workers, each normalised") {
  auto base = images(90);
  for (int workers : {0, 1, 3}) {
    std::map<int64_t, int> count;
    for (int rank = 0; rank < 3; ++rank) {
      CAPTURE(workers);
      CAPTURE(rank);
      auto ds = base->map(transforms::Normalize<>({0.5, 10}, {0.25, 5})).map(transforms::Stack<>());
      auto sampler = std::make_shared<DistributedSampler>(ds.size(), 3, rank, /*shuffle=*/true, /*seed=*/4);
      DataLoader loader(std::move(ds), {.batch_size = 7, .sampler = sampler, .num_workers = workers});
      loader.set_epoch(2);
      int64_t batches = 0;
      for (auto& batch : loader) {
        ++batches;
        for (int64_t t : check_normalized_batch(batch)) ++count[t];
      }
      CHECK(batches == 5);  // 30 per rank: 4 x 7 + 2
    }
    REQUIRE(count.size() == 90);
    for (auto& [t, c] : count) CHECK(c == 1);
  }
}

TEST_CASE("Stack<> is the DataLoader's own batching; a transform then Stack<> stacks transformed examples") {
  auto base = images(10);
  DataLoader plain(base, {.batch_size = 4, .shuffle = true, .seed = 1});
  DataLoader stacked(base->map(transforms::Stack<>()), {.batch_size = 4, .shuffle = true, .seed = 1});
  // Identity as a Transform (Lambda<Example>, LibTorch's spelling) goes the per-example way.
  DataLoader per_example(base->map(transforms::Lambda<Example>([](Example e) { return e; })),
                         {.batch_size = 4, .shuffle = true, .seed = 1});
  auto a = plain.begin(), b = stacked.begin(), c = per_example.begin();
  for (; a != plain.end(); ++a, ++b, ++c) {
    REQUIRE(b != stacked.end());
    REQUIRE(c != per_example.end());
    CHECK(a->input.to_vector<float>() == b->input.to_vector<float>());
    CHECK(a->target.to_vector<int64_t>() == b->target.to_vector<int64_t>());
    CHECK(a->input.to_vector<float>() == c->input.to_vector<float>());
    CHECK(a->input.shape() == c->input.shape());
  }
  CHECK(b == stacked.end());
  CHECK(c == per_example.end());
}

TEST_CASE("Lambda<>, TensorLambda<> and Collate<>") {
  auto base = images(5);
  // TensorLambda<> doubles the input; Lambda<> moves the target to 100 + i; Collate<> concatenates the
  // inputs ([B * 4]) and stacks the targets.
  auto ds = base->map(transforms::TensorLambda<>([](Tensor x) { return internal::mul(x, 2.0); }))
                .map(transforms::Lambda<>([](Example e) {
                  e.target = internal::add(e.target, 100.0);
                  return e;
                }))
                .map(transforms::Collate<>([](std::vector<Example> examples) {
                  std::vector<Tensor> xs, ys;
                  for (auto& e : examples) {
                    xs.push_back(internal::reshape(e.input, {4}));
                    ys.push_back(e.target);
                  }
                  return Batch{internal::cat(xs), internal::stack(ys)};
                }));
  CHECK(ds.get(1).input.to_vector<float>() == std::vector<float>{2, 3, 20, 40});
  CHECK(ds.get(1).target.item<int64_t>() == 101);
  for (int workers : {0, 2}) {
    DataLoader loader(ds, {.batch_size = 2, .num_workers = workers});
    std::vector<std::vector<float>> xs;
    std::vector<std::vector<int64_t>> ys;
    for (auto& batch : loader) {
      xs.push_back(batch.input.to_vector<float>());
      ys.push_back(batch.target.to_vector<int64_t>());
    }
    REQUIRE(xs.size() == 3);
    CHECK(xs[0] == std::vector<float>{0, 1, 0, 20, 2, 3, 20, 40});
    CHECK(xs[2] == std::vector<float>{8, 9, 80, 100});
    CHECK(ys == std::vector<std::vector<int64_t>>{{100, 101}, {102, 103}, {104}});
  }
}

// --- bad input -----------------------------------------------------------------------------------

TEST_CASE("transforms and map: bad input is an error naming the op and the values") {
  using transforms::Normalize;
  CHECK(error_of([] { Normalize<>(0.5, 0.0); }) ==
        "Normalize: stddev [0] has a zero or non-finite value, which would divide by zero");
  CHECK(error_of([] { Normalize<>({0.1, 0.2, 0.3}, {1.0, 2.0}); }) ==
        "Normalize: mean [0.1, 0.2, 0.3] and stddev [1, 2] have different channel counts");
  CHECK(contains(error_of([] { Normalize<>(std::vector<double>{}, {1.0}); }), "at least one value each, got 0 and 1"));
  CHECK(error_of([] { Normalize<>({0.5, 0.5}, {1.0, 1.0})(zeros({3, 4})); }) ==
        "Normalize: mean [0.5, 0.5] and stddev [1, 1] give 2 channels, but the input [3, 4] has 3 along its channel "
        "dimension (dim 0)");
  CHECK(contains(error_of([] { Normalize<>({0.5, 0.5}, {1.0, 1.0})(scalar_tensor(1.0)); }), "has 0 along its channel"));
  CHECK(contains(error_of([] { Normalize<>(0.5, 1.0)(arange(4)); }),
                 "Normalize: expected a floating-point input, got int64 [4]"));

  auto base = images(4);
  CHECK(contains(error_of([&] { base->map(transforms::Stack<>()).map(Normalize<>(0.0, 1.0)); }),
                 "MapDataset: cannot map a transform on top of a collation (Stack<>, Collate<>)"));
  CHECK(contains(error_of([&] { base->map(transforms::Stack<>()).map(transforms::Stack<>()); }),
                 "MapDataset: cannot map a second collation on top of a collation"));
  TensorDataset by_value(zeros({2, 1}), arange(2));
  CHECK(contains(error_of([&] { by_value.map(Normalize<>(0.0, 1.0)); }),
                 "Dataset::map: the dataset is not held by a std::shared_ptr"));
  CHECK(error_of([] { MapDataset(nullptr, std::make_shared<const transforms::Stack<>>()); }) ==
        "MapDataset: the source dataset is null");
  // A transform that throws reaches the consumer at its batch, with workers too.
  auto broken = base->map(transforms::TensorLambda<>([](Tensor x) -> Tensor { fail("my transform: no"); }));
  for (int workers : {0, 2}) {
    DataLoader loader(broken, {.batch_size = 2, .num_workers = workers});
    CHECK(error_of([&] { loader.begin(); }) == "my transform: no");
  }
}
