// data/: DistributedSampler against a line-by-line transcription of PyTorch's, the samplers, the
// DataLoader (batching, sharding, workers, errors, early exit) and a user-defined dataset.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "data/api.h"
#include "tensor/api.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using namespace lockstep::data;

namespace {
using lockstep::testing::contains;

using lockstep::testing::error_of;


// torch.utils.data.DistributedSampler.__init__ and __iter__, transcribed from PyTorch's source with
// lists for lists (and lockstep's Generator for torch.randperm).
std::vector<int64_t> torch_distributed_sampler(int64_t n, int w, int rank, bool shuffle, uint64_t seed, int64_t epoch,
                                               bool drop_last) {
  int64_t num_samples = drop_last && n % w != 0 ? static_cast<int64_t>(std::ceil(double(n - w) / w))
                                                : static_cast<int64_t>(std::ceil(double(n) / w));
  int64_t total_size = num_samples * w;
  std::vector<int64_t> indices(n);
  if (shuffle) {
    Generator g;
    g.manual_seed(seed + epoch);
    indices = g.randperm(n);
  } else {
    std::iota(indices.begin(), indices.end(), 0);
  }
  if (!drop_last) {
    int64_t padding_size = total_size - static_cast<int64_t>(indices.size());
    if (padding_size <= static_cast<int64_t>(indices.size())) {
      indices.insert(indices.end(), indices.begin(), indices.begin() + padding_size);
    } else {
      std::vector<int64_t> repeated;
      int64_t times = static_cast<int64_t>(std::ceil(double(padding_size) / indices.size()));
      for (int64_t t = 0; t < times; ++t) repeated.insert(repeated.end(), indices.begin(), indices.end());
      indices.insert(indices.end(), repeated.begin(), repeated.begin() + padding_size);
    }
  } else {
    indices.resize(total_size);
  }
  REQUIRE(static_cast<int64_t>(indices.size()) == total_size);
  std::vector<int64_t> mine;
  for (int64_t i = rank; i < total_size; i += w) mine.push_back(indices[i]);
  REQUIRE(static_cast<int64_t>(mine.size()) == num_samples);
  return mine;
}

// A dataset of n examples: input [3] = {3i, 3i + 1, 3i + 2} (float), target i (int64).
std::shared_ptr<TensorDataset> counting_dataset(int64_t n) {
  std::vector<float> x(n * 3);
  std::iota(x.begin(), x.end(), 0.f);
  std::vector<int64_t> y(n);
  std::iota(y.begin(), y.end(), 0);
  return std::make_shared<TensorDataset>(tensor(x, {n, 3}), tensor(y, {n}));
}

// Every batch of one epoch, as host vectors.
struct Seen {
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<int64_t>> targets;
};
Seen run_epoch(DataLoader& loader) {
  Seen s;
  for (auto& batch : loader) {
    s.inputs.push_back(batch.input.to_vector<float>());
    s.targets.push_back(batch.target.to_vector<int64_t>());
  }
  return s;
}

// PyTorch's documentation example: RandomDataset(size, length) of randn data, in a few lines.
struct RandomDataset : Dataset {
  Tensor data;  // [length, size]
  RandomDataset(int64_t size, int64_t length) : data(randn({length, size})) {}
  int64_t size() const override { return data.size(0); }
  Example get(int64_t i) const override { return {row(data, i), scalar_tensor(double(i), kInt64)}; }
};

// Slow, uneven examples (so that workers finish out of order), and one that fails at `bad`.
struct SlowDataset : Dataset {
  int64_t n, bad;
  SlowDataset(int64_t n, int64_t bad = -1) : n(n), bad(bad) {}
  int64_t size() const override { return n; }
  Example get(int64_t i) const override {
    LOCKSTEP_CHECK(i != bad, "SlowDataset: example ", i, " is broken");
    std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 200));
    return {full({2}, double(i)), scalar_tensor(double(i), kInt64)};
  }
};

}  // namespace

// --- DistributedSampler --------------------------------------------------------------------------

TEST_CASE("DistributedSampler: N = 5, W = 3 pads with the first index, as in PyTorch") {
  // Padded list [0, 1, 2, 3, 4, 0], rank r takes positions r, r + 3.
  CHECK(DistributedSampler(5, 3, 0, false).indices() == std::vector<int64_t>{0, 3});
  CHECK(DistributedSampler(5, 3, 1, false).indices() == std::vector<int64_t>{1, 4});
  CHECK(DistributedSampler(5, 3, 2, false).indices() == std::vector<int64_t>{2, 0});
  CHECK(DistributedSampler(5, 3, 0, false).size() == 2);
  CHECK(DistributedSampler(5, 3, 0, false).total_size() == 6);
  // drop_last: ceil((5 - 3) / 3) = 1 per rank, the tail [3, 4] dropped.
  CHECK(DistributedSampler(5, 3, 0, false, 0, true).indices() == std::vector<int64_t>{0});
  CHECK(DistributedSampler(5, 3, 2, false, 0, true).indices() == std::vector<int64_t>{2});
  // Padding larger than N repeats the list: N = 2, W = 7 -> [0, 1, 0, 1, 0, 1, 0].
  std::vector<int64_t> all;
  for (int r = 0; r < 7; ++r) {
    auto mine = DistributedSampler(2, 7, r, false).indices();
    REQUIRE(mine.size() == 1);
    all.push_back(mine[0]);
  }
  CHECK(all == std::vector<int64_t>{0, 1, 0, 1, 0, 1, 0});
  // N = 1, W = 4, drop_last: nothing for anyone.
  CHECK(DistributedSampler(1, 4, 3, true, 0, true).indices().empty());
}

TEST_CASE("DistributedSampler: every N x W x shuffle x drop_last matches PyTorch's algorithm") {
  for (int64_t n : {0, 1, 5, 90, 91, 60000}) {
    for (int w : {1, 2, 3, 4, 7}) {
      for (bool shuffle : {false, true}) {
        for (bool drop_last : {false, true}) {
          CAPTURE(n);
          CAPTURE(w);
          CAPTURE(shuffle);
          CAPTURE(drop_last);
          const int64_t num_samples = drop_last ? n / w : (n + w - 1) / w;
          const uint64_t seed = 17;
          std::map<int64_t, int> count;  // over all ranks
          std::vector<int64_t> interleaved(num_samples * w);
          for (int r = 0; r < w; ++r) {
            DistributedSampler s(n, w, r, shuffle, seed, drop_last);  // one sampler per "process"
            s.set_epoch(3);
            auto mine = s.indices();
            CHECK(s.size() == num_samples);
            REQUIRE(static_cast<int64_t>(mine.size()) == num_samples);
            CHECK(mine == torch_distributed_sampler(n, w, r, shuffle, seed, 3, drop_last));
            for (int64_t k = 0; k < num_samples; ++k) {
              interleaved[r + k * w] = mine[k];
              ++count[mine[k]];
            }
          }
          // The ranks' shares interleave back into one list: the (same) permutation, padded or cut.
          std::vector<int64_t> base(n);
          std::iota(base.begin(), base.end(), 0);
          if (shuffle) base = Generator(seed + 3).randperm(n);
          for (int64_t p = 0; p < static_cast<int64_t>(interleaved.size()); ++p) REQUIRE(interleaved[p] == base[p % n]);
          if (n % w == 0 || drop_last) {
            // Each index at most once; all of them when W divides N.
            CHECK(static_cast<int64_t>(count.size()) == num_samples * w);
            for (auto& [i, c] : count) CHECK(c == 1);
            if (n % w == 0) CHECK(static_cast<int64_t>(count.size()) == n);
          } else {
            // Every index once, plus the first total - N of the list once more.
            CHECK(static_cast<int64_t>(count.size()) == n);
            std::map<int64_t, int> expected;
            for (int64_t p = 0; p < num_samples * w; ++p) ++expected[base[p % n]];
            CHECK(count == expected);
          }
        }
      }
    }
  }
}

TEST_CASE("DistributedSampler: set_epoch reshuffles deterministically, the same on every rank") {
  DistributedSampler a(90, 2, 0, true, 5), b(90, 2, 0, true, 5), other_rank(90, 2, 1, true, 5);
  auto e0 = a.indices();
  CHECK(a.indices() == e0);  // no set_epoch: the same order again
  a.set_epoch(1);
  auto e1 = a.indices();
  CHECK(e1 != e0);
  b.set_epoch(1);
  CHECK(b.indices() == e1);  // another process, same epoch
  a.set_epoch(0);
  CHECK(a.indices() == e0);
  // The two ranks of epoch 1 partition 0..89.
  other_rank.set_epoch(1);
  std::set<int64_t> all(e1.begin(), e1.end());
  for (int64_t i : other_rank.indices()) all.insert(i);
  CHECK(all.size() == 90);
  // A different seed gives a different order.
  CHECK(DistributedSampler(90, 2, 0, true, 6).indices() != e0);
}

TEST_CASE("DistributedSampler: bad rank or num_replicas is an error naming them") {
  CHECK(contains(error_of([] { DistributedSampler(10, 2, 2); }), "invalid rank 2"));
  CHECK(contains(error_of([] { DistributedSampler(10, 2, 2); }), "[0, 1]"));
  CHECK(contains(error_of([] { DistributedSampler(10, 3, -2); }), "invalid rank -2"));
  CHECK(contains(error_of([] { DistributedSampler(10, 0, 0); }), "num_replicas must be positive, got 0"));
  CHECK(contains(error_of([] { DistributedSampler(10, -3, 0); }), "num_replicas must be positive, got -3"));
  CHECK(contains(error_of([] { DistributedSampler(-1, 2, 0); }), "dataset size must be non-negative"));
}

TEST_CASE("DistributedSampler: num_replicas and rank default to the process group's") {
  default_world_provider() = nullptr;
  CHECK(error_of([] { DistributedSampler(10); }) ==
        "DistributedSampler: num_replicas and rank not given and no process group is initialized");
  CHECK(contains(error_of([] { DistributedSampler(10, 2); }), "no process group is initialized"));
  default_world_provider() = [] { return std::pair<int, int>(4, 3); };
  DistributedSampler s(10, -1, -1, false);
  CHECK(s.num_replicas() == 4);
  CHECK(s.rank() == 3);
  CHECK(s.indices() == std::vector<int64_t>{3, 7, 1});  // [0..9, 0, 1] positions 3, 7, 11
  DistributedSampler explicit_rank(10, -1, 0, false);  // only the missing one comes from the group
  CHECK(explicit_rank.num_replicas() == 4);
  CHECK(explicit_rank.rank() == 0);
  default_world_provider() = nullptr;
}

// --- Sequential and random samplers --------------------------------------------------------------

TEST_CASE("SequentialSampler and RandomSampler") {
  CHECK(SequentialSampler(4).indices() == std::vector<int64_t>{0, 1, 2, 3});
  RandomSampler r(50, 9), same(50, 9);
  auto p0 = r.indices(), p1 = r.indices();
  CHECK(p0 != p1);  // a new permutation each epoch
  CHECK(std::set<int64_t>(p1.begin(), p1.end()).size() == 50);
  CHECK(same.indices() == p0);  // seeded: reproducible
  CHECK(same.indices() == p1);
  r.set_epoch(7);
  same.set_epoch(7);
  CHECK(r.indices() == same.indices());
  r.set_epoch(0);
  CHECK(r.indices() == p0);  // epoch 0 is the seed's first permutation
}

// --- DataLoader ----------------------------------------------------------------------------------

TEST_CASE("DataLoader: 90 samples on 2 ranks at batch 30 gives each rank batches of 30 and 15") {
  auto ds = counting_dataset(90);
  std::set<int64_t> covered;
  for (int rank = 0; rank < 2; ++rank) {
    auto sampler = std::make_shared<DistributedSampler>(*ds, 2, rank);
    DataLoader loader(ds, {.batch_size = 30, .sampler = sampler});
    CHECK(loader.size() == 2);
    std::vector<int64_t> sizes;
    for (auto& batch : loader) {
      sizes.push_back(batch.input.size(0));
      CHECK(batch.input.shape() == Shape{batch.input.size(0), 3});
      CHECK(batch.target.shape() == Shape{batch.input.size(0)});
      CHECK(batch.target.dtype() == kInt64);
      auto x = batch.input.to_vector<float>();
      auto y = batch.target.to_vector<int64_t>();
      for (size_t i = 0; i < y.size(); ++i) {
        CHECK(x[3 * i] == float(3 * y[i]));  // input row i belongs to target i
        covered.insert(y[i]);
      }
    }
    CHECK(sizes == std::vector<int64_t>{30, 15});
  }
  CHECK(covered.size() == 90);  // 90 = 2 x 45: no padding, each sample on exactly one rank
}

TEST_CASE("DataLoader: batches, last partial batch and drop_last") {
  auto ds = counting_dataset(90);
  DataLoader keep(ds, {.batch_size = 32});
  CHECK(keep.size() == 3);
  Seen s = run_epoch(keep);
  REQUIRE(s.targets.size() == 3);
  CHECK(s.targets[0].size() == 32);
  CHECK(s.targets[2].size() == 26);
  CHECK(s.targets[2].front() == 64);
  CHECK(s.targets[2].back() == 89);
  CHECK(s.inputs[1][0] == 96.f);  // example 32, element 0
  DataLoader drop(ds, {.batch_size = 32, .drop_last = true});
  CHECK(drop.size() == 2);
  CHECK(run_epoch(drop).targets.size() == 2);
  DataLoader exact(ds, {.batch_size = 30, .drop_last = true});
  CHECK(exact.size() == 3);
  CHECK(run_epoch(exact).targets.size() == 3);
  DataLoader ones(ds);
  CHECK(ones.size() == 90);
  // Two epochs from one loader; an empty dataset has no batches.
  CHECK(run_epoch(keep).targets == s.targets);
  DataLoader empty(counting_dataset(0), {.batch_size = 4});
  CHECK(empty.size() == 0);
  CHECK(empty.begin() == empty.end());
}

TEST_CASE("DataLoader: shuffle draws a seeded permutation per epoch; shuffle with a sampler is an error") {
  auto ds = counting_dataset(90);
  DataLoader a(ds, {.batch_size = 10, .shuffle = true, .seed = 3}), b(ds, {.batch_size = 10, .shuffle = true, .seed = 3});
  Seen a0 = run_epoch(a), a1 = run_epoch(a);
  CHECK(run_epoch(b).targets == a0.targets);
  CHECK(a1.targets != a0.targets);
  std::set<int64_t> all;
  for (auto& t : a0.targets) all.insert(t.begin(), t.end());
  CHECK(all.size() == 90);
  DataLoader sequential(ds, {.batch_size = 10});
  CHECK(a0.targets != run_epoch(sequential).targets);
  CHECK(contains(error_of([&] { DataLoader(ds, {.shuffle = true, .sampler = std::make_shared<SequentialSampler>(90)}); }),
            "mutually exclusive with shuffle"));
  CHECK(contains(error_of([&] { DataLoader(ds, {.batch_size = 0}); }), "batch_size must be positive, got 0"));
  CHECK(contains(error_of([&] { DataLoader(nullptr); }), "dataset is null"));
}

TEST_CASE("DataLoader: shuffle without a seed draws each epoch's order from the global generator") {
  auto ds = counting_dataset(90);
  DataLoader loader(ds, {.batch_size = 10, .shuffle = true});
  manual_seed(1);
  Seen e0 = run_epoch(loader), e1 = run_epoch(loader);
  CHECK(e0.targets != e1.targets);  // each epoch a new order
  manual_seed(1);
  CHECK(run_epoch(loader).targets == e0.targets);  // reproducible under manual_seed
  CHECK(run_epoch(loader).targets == e1.targets);
  manual_seed(2);
  CHECK(run_epoch(loader).targets != e0.targets);  // another global seed, another order
  // The order is drawn when the epoch's iterator is made: one draw of the global generator, as PyTorch's
  // RandomSampler seeding its own generator from torch.empty((), dtype=int64).random_().
  manual_seed(1);
  Generator expected(default_generator().next_u64());
  std::vector<int64_t> perm = expected.randperm(90);
  CHECK(e0.targets[0] == std::vector<int64_t>(perm.begin(), perm.begin() + 10));
  // set_epoch does not pin an unseeded order; an explicit seed still does.
  manual_seed(1);
  loader.set_epoch(5);
  CHECK(run_epoch(loader).targets == e0.targets);
  RandomSampler unseeded(5);
  manual_seed(3);
  auto u = unseeded.indices();
  manual_seed(3);
  CHECK(unseeded.indices() == u);
}

TEST_CASE("DataLoader: a user-defined dataset (PyTorch's RandomDataset) collates by stacking") {
  manual_seed(0);
  auto ds = std::make_shared<RandomDataset>(5, 100);
  DataLoader loader(ds, {.batch_size = 16});
  CHECK(loader.size() == 7);
  int64_t seen = 0;
  auto data = ds->data.to_vector<float>();
  for (auto& batch : loader) {
    const int64_t b = batch.input.size(0);
    CHECK(batch.input.shape() == Shape{b, 5});
    CHECK(batch.target.shape() == Shape{b});
    auto x = batch.input.to_vector<float>();
    for (int64_t i = 0; i < b * 5; ++i) REQUIRE(x[i] == data[seen * 5 + i]);
    CHECK(batch.target.to_vector<int64_t>()[0] == seen);
    seen += b;
  }
  CHECK(seen == 100);
}

TEST_CASE("DataLoader: 1, 2 and 4 workers yield exactly the batches of 0 workers, in order") {
  for (bool tensor_ds : {true, false}) {
    std::shared_ptr<Dataset> ds = tensor_ds ? std::shared_ptr<Dataset>(counting_dataset(203))
                                            : std::shared_ptr<Dataset>(std::make_shared<SlowDataset>(203));
    DataLoader serial(ds, {.batch_size = 8, .shuffle = true, .seed = 11});
    Seen expected = run_epoch(serial);
    REQUIRE(expected.targets.size() == 26);
    for (int workers : {1, 2, 4}) {
      for (int prefetch : {1, 2}) {
        CAPTURE(tensor_ds);
        CAPTURE(workers);
        CAPTURE(prefetch);
        DataLoader parallel(ds, {.batch_size = 8, .shuffle = true, .num_workers = workers, .prefetch = prefetch,
                                 .seed = 11});
        Seen got = run_epoch(parallel);
        CHECK(got.targets == expected.targets);
        CHECK(got.inputs == expected.inputs);
      }
    }
  }
}

TEST_CASE("DataLoader: an exception while making a batch reaches the consumer when that batch is due") {
  auto ds = std::make_shared<SlowDataset>(100, 37);  // batch 4 of 10 (indices 30..39) fails
  for (int workers : {0, 1, 3}) {
    CAPTURE(workers);
    DataLoader loader(ds, {.batch_size = 10, .num_workers = workers});
    int good = 0;
    std::string message;
    try {
      for (auto& batch : loader) {
        CHECK(batch.target.to_vector<int64_t>()[0] == 10 * good);
        ++good;
      }
    } catch (const Error& e) {
      message = e.what();
    }
    CHECK(good == 3);
    CHECK(message == "SlowDataset: example 37 is broken");
    // The error ended that epoch; the loader starts a fresh one.
    auto it = loader.begin();
    CHECK(it->target.to_vector<int64_t>()[0] == 0);
  }
}

TEST_CASE("DataLoader: breaking out early, or dropping the loader first, joins the workers without hanging") {
  auto ds = counting_dataset(10000);
  for (int workers : {1, 4}) {
    DataLoader loader(ds, {.batch_size = 2, .num_workers = workers, .prefetch = 2});
    int n = 0;
    for (auto& batch : loader) {
      (void)batch;
      if (++n == 3) break;  // workers are blocked on a full queue here
    }
    CHECK(n == 3);
    // An iterator outlives its loader.
    std::optional<DataLoader::Iterator> it;
    {
      DataLoader scoped(ds, {.batch_size = 100, .num_workers = workers});
      it.emplace(scoped.begin());
    }
    int64_t batches = 0;
    for (; *it != DataLoader::Iterator(); ++*it) ++batches;
    CHECK(batches == 100);
    // Dropped right after starting, while workers are still making their first batches.
    for (int i = 0; i < 20; ++i) {
      DataLoader l(std::make_shared<SlowDataset>(1000), {.batch_size = 4, .num_workers = workers});
      auto begin = l.begin();
    }
  }
}

TEST_CASE("DataLoader: batches go to options.device") {
  auto ds = counting_dataset(10);
  DataLoader loader(ds, {.batch_size = 4, .device = Device::cpu()});
  for (auto& batch : loader) {
    CHECK(batch.input.device() == Device::cpu());
    CHECK(batch.target.device() == Device::cpu());
  }
}
