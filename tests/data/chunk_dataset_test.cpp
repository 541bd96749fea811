// data/chunk_dataset.h and data/stream_sampler.h: the stream a ChunkDataset makes of its chunks (order,
// groups, empty chunks), read through the DataLoader by any number of workers and preloaders, sharded
// by a DistributedSampler over chunks, restarted per epoch, failing at the right batch; StreamSampler's
// LibTorch counts and its positions; and bad input to both.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <numeric>
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

// Chunk c holds sizes[c] examples; example j of chunk c is example id = offset(c) + j, with input
// {id, -id} (float) and target id (int64). Reads sleep a little, unevenly, so that preloaders finish
// out of order.
struct CountingReader : ChunkDataReader<> {
  std::vector<int64_t> sizes, offsets;
  std::atomic<int64_t> fail_chunk{-1};
  std::atomic<int> resets{0};
  std::atomic<int> reads{0};

  explicit CountingReader(std::vector<int64_t> s) : sizes(std::move(s)), offsets(sizes.size() + 1, 0) {
    for (size_t i = 0; i < sizes.size(); ++i) offsets[i + 1] = offsets[i] + sizes[i];
  }
  int64_t total() const { return offsets.back(); }
  int64_t chunk_of(int64_t id) const {
    return std::upper_bound(offsets.begin(), offsets.end(), id) - offsets.begin() - 1;
  }

  std::vector<Example> read_chunk(int64_t c) override {
    ++reads;
    LOCKSTEP_CHECK(c != fail_chunk, "CountingReader: chunk ", c, " is corrupt");
    std::this_thread::sleep_for(std::chrono::microseconds((c * 7919) % 300));
    std::vector<Example> out;
    for (int64_t j = 0; j < sizes[c]; ++j) {
      const float id = float(offsets[c] + j);
      out.push_back({tensor(std::vector<float>{id, -id}, {2}), scalar_tensor(id, kInt64)});
    }
    return out;
  }
  int64_t chunk_count() override { return static_cast<int64_t>(sizes.size()); }
  void reset() override { ++resets; }
};

// One epoch's targets, batch by batch, checking that each input row belongs to its target.
std::vector<std::vector<int64_t>> run_epoch(DataLoader& loader) {
  std::vector<std::vector<int64_t>> batches;
  for (auto& batch : loader) {
    auto x = batch.input.to_vector<float>();
    auto y = batch.target.to_vector<int64_t>();
    REQUIRE(batch.input.shape() == Shape{static_cast<int64_t>(y.size()), 2});
    for (size_t i = 0; i < y.size(); ++i) REQUIRE(x[2 * i] == float(y[i]));
    batches.push_back(y);
  }
  return batches;
}

std::vector<int64_t> flat(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> all;
  for (auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

std::vector<int64_t> iota(int64_t first, int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::shared_ptr<ChunkDataset> sequential(std::shared_ptr<CountingReader> reader, ChunkDatasetOptions options) {
  return std::make_shared<ChunkDataset>(reader, std::make_shared<SequentialSampler>(0),
                                        std::make_shared<SequentialSampler>(0), options);
}

}  // namespace

// --- the stream ----------------------------------------------------------------------------------

TEST_CASE("ChunkDataset: chunks in the chunk sampler's order, batches across chunk boundaries, empty chunks skipped") {
  auto reader = std::make_shared<CountingReader>(std::vector<int64_t>{3, 0, 5, 2});
  auto ds = sequential(reader, ChunkDatasetOptions(/*preloader_count=*/2, /*batch_size=*/4));
  CHECK(ds->size() == kUnknownSize);
  DataLoader loader(ds, {.batch_size = 4});
  CHECK(loader.size() == kUnknownSize);
  auto e0 = run_epoch(loader);
  CHECK(e0 == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}});
  CHECK(reader->resets.load() == 1);  // the DataLoader reset the dataset, and so the reader, at begin()
  CHECK(run_epoch(loader) == e0);
  CHECK(reader->resets.load() == 2);
  CHECK(reader->reads.load() == 8);
  // drop_last drops the stream's short last batch.
  DataLoader drop(ds, {.batch_size = 4, .drop_last = true});
  CHECK(run_epoch(drop).size() == 2);
  // No chunks at all: an empty epoch.
  DataLoader none(sequential(std::make_shared<CountingReader>(std::vector<int64_t>{}), {}), {.batch_size = 1});
  CHECK(none.begin() == none.end());
}

TEST_CASE("ChunkDataset: cross_chunk_shuffle_count chunks form a group, which the example sampler orders") {
  // Groups {0, 1} (3 + 0 examples) and {2, 3} (5 + 2): the seeded example sampler is reset to 3, then 7.
  auto reader = std::make_shared<CountingReader>(std::vector<int64_t>{3, 0, 5, 2});
  auto ds = std::make_shared<ChunkDataset>(reader, std::make_shared<SequentialSampler>(0),
                                           std::make_shared<RandomSampler>(0, /*seed=*/21),
                                           ChunkDatasetOptions{.preloader_count = 3, .batch_size = 4,
                                                               .cross_chunk_shuffle_count = 2});
  DataLoader loader(ds, {.batch_size = 4, .num_workers = 2});
  Generator g(21);
  std::vector<int64_t> expected = g.randperm(3);
  for (int64_t i : g.randperm(7)) expected.push_back(3 + i);
  auto got = run_epoch(loader);
  CHECK(flat(got) == expected);
  CHECK(got.size() == 3);
}

TEST_CASE("ChunkDataset: 0 to 4 workers and 1 to 3 preloaders make the same batches, each example once") {
  std::vector<int64_t> sizes;
  for (int64_t c = 0; c < 20; ++c) sizes.push_back((c * 7) % 11);  // 0..10, one chunk empty
  auto reader = std::make_shared<CountingReader>(sizes);
  for (int64_t cross : {1, 3}) {
    std::vector<std::vector<int64_t>> expected;
    for (int workers : {0, 1, 4}) {
      for (int64_t preloaders : {1, 3}) {
        for (int64_t cache : {5, 2048}) {
          CAPTURE(cross);
          CAPTURE(workers);
          CAPTURE(preloaders);
          CAPTURE(cache);
          auto ds = std::make_shared<ChunkDataset>(
              reader, std::make_shared<RandomSampler>(0, 3), std::make_shared<RandomSampler>(0, 4),
              ChunkDatasetOptions{.preloader_count = preloaders, .batch_size = 5, .cache_size = cache,
                                  .cross_chunk_shuffle_count = cross});
          DataLoader loader(ds, {.batch_size = 5, .num_workers = workers, .prefetch = 2});
          auto got = run_epoch(loader);
          if (expected.empty()) {
            expected = got;
            auto all = flat(got);
            std::sort(all.begin(), all.end());
            CHECK(all == iota(0, reader->total()));
            CHECK(all != flat(got));  // shuffled
          }
          CHECK(got == expected);
        }
      }
    }
  }
}

TEST_CASE("ChunkDataset: a DistributedSampler over chunks gives each rank its chunks, every example once") {
  std::vector<int64_t> sizes;
  for (int64_t c = 0; c < 12; ++c) sizes.push_back(1 + c % 4);
  auto reader = std::make_shared<CountingReader>(sizes);
  std::set<int64_t> rank0_epoch0;
  for (int64_t epoch : {0, 1}) {
    std::map<int64_t, int> count;
    std::vector<std::set<int64_t>> chunks_of_rank(3);
    for (int rank = 0; rank < 3; ++rank) {
      auto chunk_sampler = std::make_shared<DistributedSampler>(reader->chunk_count(), 3, rank, true, /*seed=*/8);
      auto ds = std::make_shared<ChunkDataset>(reader, chunk_sampler, std::make_shared<RandomSampler>(0, 1),
                                               ChunkDatasetOptions(2, 3));
      DataLoader loader(ds, {.batch_size = 3, .num_workers = 2});
      loader.set_epoch(epoch);  // reaches the chunk sampler at the next reset, i.e. begin()
      for (int64_t id : flat(run_epoch(loader))) {
        ++count[id];
        chunks_of_rank[rank].insert(reader->chunk_of(id));
      }
      // Exactly the chunks PyTorch's rule assigns to this rank in this epoch.
      DistributedSampler expected(12, 3, rank, true, 8);
      expected.set_epoch(epoch);
      auto mine = expected.indices();
      CHECK(chunks_of_rank[rank] == std::set<int64_t>(mine.begin(), mine.end()));
    }
    CHECK(count.size() == static_cast<size_t>(reader->total()));
    for (auto& [id, c] : count) CHECK(c == 1);
    if (epoch == 0) rank0_epoch0 = chunks_of_rank[0];
    if (epoch == 1) CHECK(chunks_of_rank[0] != rank0_epoch0);  // set_epoch reshuffled the chunks
  }
  // 10 chunks on 3 ranks: PyTorch's padding repeats the first 2 chunks of the permuted list, so exactly
  // their examples are read twice.
  auto ten = std::make_shared<CountingReader>(std::vector<int64_t>(10, 2));
  std::map<int64_t, int> count;
  for (int rank = 0; rank < 3; ++rank) {
    auto ds = std::make_shared<ChunkDataset>(ten, std::make_shared<DistributedSampler>(10, 3, rank, true, 5),
                                             nullptr, ChunkDatasetOptions(1, 2));
    DataLoader loader(ds, {.batch_size = 2});
    for (int64_t id : flat(run_epoch(loader))) ++count[id];
  }
  auto perm = Generator(5).randperm(10);
  for (int64_t c = 0; c < 10; ++c) {
    const int expected = (c == perm[0] || c == perm[1]) ? 2 : 1;
    CHECK(count[2 * c] == expected);
    CHECK(count[2 * c + 1] == expected);
  }
}

TEST_CASE("ChunkDataset: set_epoch reorders chunks and examples at the next reset; null samplers follow manual_seed") {
  auto reader = std::make_shared<CountingReader>(std::vector<int64_t>(8, 4));
  auto make = [&] {
    return std::make_shared<ChunkDataset>(reader, std::make_shared<RandomSampler>(0, 2),
                                          std::make_shared<RandomSampler>(0, 3), ChunkDatasetOptions(2, 8));
  };
  auto a = make(), b = make();
  DataLoader la(a, {.batch_size = 8}), lb(b, {.batch_size = 8});
  la.set_epoch(1);
  lb.set_epoch(1);
  auto a1 = run_epoch(la);
  CHECK(run_epoch(lb) == a1);  // another "process", same epoch
  la.set_epoch(2);
  CHECK(run_epoch(la) != a1);
  la.set_epoch(1);
  CHECK(run_epoch(la) == a1);
  // LibTorch's defaults: random chunk and example order, here drawn from the global generator at reset().
  auto defaults = std::make_shared<ChunkDataset>(reader, nullptr, nullptr, ChunkDatasetOptions(2, 8));
  DataLoader ld(defaults, {.batch_size = 8, .num_workers = 2});
  manual_seed(7);
  auto d0 = run_epoch(ld), d1 = run_epoch(ld);
  CHECK(d0 != d1);
  manual_seed(7);
  CHECK(run_epoch(ld) == d0);
  CHECK(run_epoch(ld) == d1);
  auto all = flat(d0);
  std::sort(all.begin(), all.end());
  CHECK(all == iota(0, 32));
}

TEST_CASE("ChunkDataset: a reader's exception reaches the batch that needs that chunk, then the next epoch works") {
  auto reader = std::make_shared<CountingReader>(std::vector<int64_t>(5, 4));
  for (int workers : {0, 2}) {
    for (int64_t preloaders : {1, 3}) {
      CAPTURE(workers);
      CAPTURE(preloaders);
      reader->fail_chunk = 2;  // positions 8..11: batch 2
      auto ds = sequential(reader, ChunkDatasetOptions(preloaders, 4));
      DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
      int good = 0;
      std::string message = error_of([&] {
        for (auto& batch : loader) {
          CHECK(batch.target.to_vector<int64_t>() == iota(4 * good, 4));
          ++good;
        }
      });
      CHECK(good == 2);
      CHECK(message == "CountingReader: chunk 2 is corrupt");
      reader->fail_chunk = -1;
      CHECK(flat(run_epoch(loader)) == iota(0, 20));
    }
  }
}

TEST_CASE("ChunkDataset: breaking out of an epoch, a full cache, and LibTorch's get_batch() loop") {
  auto reader = std::make_shared<CountingReader>(std::vector<int64_t>(30, 5));
  auto ds = sequential(reader, ChunkDatasetOptions{.preloader_count = 3, .batch_size = 5, .cache_size = 5});
  DataLoader loader(ds, {.batch_size = 5, .num_workers = 2});
  for (int i = 0; i < 3; ++i) {
    auto it = loader.begin();  // preloaders now wait on the full cache
    CHECK(it->target.to_vector<int64_t>() == iota(0, 5));
  }
  CHECK(flat(run_epoch(loader)) == iota(0, 150));
  // The loop LibTorch users write without a DataLoader.
  ds->reset();
  std::vector<int64_t> sizes;
  std::vector<int64_t> ids;
  while (auto batch = ds->get_batch()) {
    sizes.push_back(static_cast<int64_t>(batch->size()));
    for (auto& e : *batch) ids.push_back(e.target.item<int64_t>());
  }
  CHECK(sizes == std::vector<int64_t>(30, 5));
  CHECK(ids == iota(0, 150));
  CHECK(!ds->get_batch());
  // Single positions; each can be read once.
  ds->reset();
  CHECK(ds->get(3).target.item<int64_t>() == 3);
  CHECK(contains(error_of([&] { ds->get(3); }), "ChunkDataset: position 3 of this epoch was already read"));
  CHECK(error_of([&] { ds->get(150); }) == "ChunkDataset: position 150 is past the end of this epoch's stream");
}

TEST_CASE("ChunkDataset: mapped through Normalize<> and Stack<>, read by workers") {
  auto reader = std::make_shared<CountingReader>(std::vector<int64_t>{4, 3, 5});
  auto ds = sequential(reader, ChunkDatasetOptions(2, 4))
                ->map(transforms::Normalize<>(1.0, 0.5))
                .map(transforms::Stack<>());
  CHECK(ds.size() == kUnknownSize);
  DataLoader loader(std::move(ds), {.batch_size = 4, .num_workers = 2});
  for (int epoch = 0; epoch < 2; ++epoch) {  // reset() passes through the maps
    std::vector<int64_t> ids;
    for (auto& batch : loader) {
      auto x = batch.input.to_vector<float>();
      auto y = batch.target.to_vector<int64_t>();
      for (size_t i = 0; i < y.size(); ++i) {
        CHECK(x[2 * i] == (float(y[i]) - 1) * 2);       // (id - 1) / 0.5
        CHECK(x[2 * i + 1] == (-float(y[i]) - 1) * 2);  // (-id - 1) / 0.5
        ids.push_back(y[i]);
      }
    }
    CHECK(ids == iota(0, 12));
  }
}

// --- StreamSampler -------------------------------------------------------------------------------

TEST_CASE("StreamSampler: LibTorch's counts, and the positions the DataLoader reads") {
  StreamSampler s(10);
  std::vector<int64_t> counts;
  while (auto n = s.next(3)) counts.push_back(*n);
  CHECK(counts == std::vector<int64_t>{3, 3, 3, 1});
  CHECK(!s.next(3));
  s.reset();
  CHECK(s.next(4)->size() == 4);
  s.reset(5);
  CHECK(s.next(4)->size() == 4);
  CHECK(s.next(4)->size() == 1);
  CHECK(!s.next(4));
  CHECK(s.size() == 5);
  CHECK(s.indices() == iota(0, 5));
  StreamSampler unbounded(kUnknownSize);
  CHECK(unbounded.size() == kUnknownSize);
  for (int i = 0; i < 5; ++i) CHECK(unbounded.next(7)->size() == 7);  // LibTorch's BatchSizeSampler
  // Sharded: DistributedSampler's positions, unshuffled; next() counts this rank's share.
  for (int rank = 0; rank < 3; ++rank) {
    StreamSampler shard(10, 3, rank);
    CHECK(shard.indices() == DistributedSampler(10, 3, rank, /*shuffle=*/false).indices());
    CHECK(shard.size() == 4);
    CHECK(shard.next(3)->size() == 3);
    CHECK(shard.next(3)->size() == 1);
  }
  CHECK(StreamSampler(10, 3, 2, /*drop_last=*/true).indices() == std::vector<int64_t>{2, 5, 8});
}

TEST_CASE("StreamSampler in a DataLoader: an epoch of a given size, sharded across ranks") {
  // A bounded epoch over a ChunkDataset: fewer positions than the stream, or more (it ends first).
  auto reader = std::make_shared<CountingReader>(std::vector<int64_t>{4, 6});
  auto ds = sequential(reader, ChunkDatasetOptions(1, 4));
  DataLoader six(ds, {.batch_size = 4, .sampler = std::make_shared<StreamSampler>(6)});
  CHECK(six.size() == 2);
  CHECK(run_epoch(six) == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5}});
  DataLoader twenty(ds, {.batch_size = 4, .sampler = std::make_shared<StreamSampler>(20), .num_workers = 2});
  CHECK(twenty.size() == 5);  // an upper bound: the stream has 10
  CHECK(flat(run_epoch(twenty)) == iota(0, 10));
  // Positions of an indexed dataset, over 3 ranks and workers: each once.
  std::vector<float> x(2 * 90);
  for (int64_t i = 0; i < 90; ++i) x[2 * i] = float(i), x[2 * i + 1] = -float(i);
  auto tensors = std::make_shared<TensorDataset>(tensor(x, {90, 2}), tensor(iota(0, 90), {90}));
  std::map<int64_t, int> count;
  for (int rank = 0; rank < 3; ++rank) {
    DataLoader loader(tensors, {.batch_size = 8, .sampler = std::make_shared<StreamSampler>(90, 3, rank),
                                .num_workers = 2});
    auto got = flat(run_epoch(loader));
    CHECK(got.front() == rank);
    for (int64_t id : got) ++count[id];
  }
  CHECK(count.size() == 90);
  for (auto& [id, c] : count) CHECK(c == 1);
}

// --- bad input -----------------------------------------------------------------------------------

namespace {
// A chunk sampler that always gives chunk 7, and can be resized.
struct ChunkSeven : Sampler {
  std::vector<int64_t> indices() override { return {7}; }
  int64_t size() const override { return 1; }
  void reset(std::optional<int64_t>) override {}
};
// A sampler with no reset(new_size) of its own.
struct Fixed : Sampler {
  std::vector<int64_t> indices() override { return {0}; }
  int64_t size() const override { return 1; }
};
}  // namespace

TEST_CASE("ChunkDataset and StreamSampler: bad input is an error naming the op and the values") {
  auto reader = std::make_shared<CountingReader>(std::vector<int64_t>{4, 4, 4});
  auto make = [&](ChunkDatasetOptions o) { return sequential(reader, o); };
  CHECK(error_of([&] { make({.preloader_count = 0}); }) == "ChunkDataset: preloader_count must be positive, got 0");
  CHECK(error_of([&] { make({.batch_size = 0}); }) == "ChunkDataset: batch_size must be positive, got 0");
  CHECK(error_of([&] { make({.batch_size = 8, .cache_size = 4}); }) ==
        "ChunkDataset: cache_size 4 is less than batch_size 8 (the cache must hold at least one batch)");
  CHECK(error_of([&] { make({.cross_chunk_shuffle_count = 0}); }) ==
        "ChunkDataset: cross_chunk_shuffle_count must be positive, got 0");
  CHECK(error_of([] { ChunkDataset(nullptr, nullptr, nullptr, {}); }) == "ChunkDataset: the chunk reader is null");

  auto ds = make(ChunkDatasetOptions(1, 4));
  CHECK(error_of([&] { ds->get_batch(); }) ==
        "ChunkDataset::get_batch: call reset() before reading (the DataLoader calls it at the start of each epoch)");
  CHECK(contains(error_of([&] { ds->get(0); }), "ChunkDataset::get_examples: call reset() before reading"));
  // The DataLoader's batch must fit the dataset's batch_size (LibTorch requires them equal).
  DataLoader too_big(ds, {.batch_size = 8});
  CHECK(error_of([&] { too_big.begin(); }) ==
        "ChunkDataset: 8 examples were requested at once, but the dataset was created with batch_size 4 (give the "
        "DataLoader the same batch_size)");
  // A stream is sharded by its chunks, not by index samplers; nor shuffled by the DataLoader.
  DataLoader by_index(ds, {.batch_size = 4, .sampler = std::make_shared<DistributedSampler>(12, 2, 1, false)});
  CHECK(contains(error_of([&] { by_index.begin(); }), "ChunkDataset: positions must be consecutive and non-negative, "
                                                      "got [1, 3, 5, 7] (a stream is read in order"));
  CHECK(error_of([&] { DataLoader(ds, {.shuffle = true}); }) ==
        "DataLoader: shuffle needs a dataset of known size; a stream of unknown size (ChunkDataset) is shuffled by "
        "its own samplers");
  CHECK(contains(error_of([&] { DistributedSampler(*ds, 2, 0); }), "dataset size must be non-negative, got -1"));

  // Samplers that do not fit the reader.
  auto seven = std::make_shared<ChunkDataset>(reader, std::make_shared<ChunkSeven>(), nullptr, ChunkDatasetOptions());
  CHECK(error_of([&] { seven->reset(); }) == "ChunkDataset: the chunk sampler gave chunk 7, but the reader has 3 chunks");
  auto fixed = std::make_shared<ChunkDataset>(reader, std::make_shared<Fixed>(), nullptr, ChunkDatasetOptions());
  CHECK(error_of([&] { fixed->reset(); }) ==
        "Sampler::reset: this sampler cannot be resized from 1 to 3 examples (override reset(new_size) to allow it)");
  auto half = std::make_shared<ChunkDataset>(reader, std::make_shared<SequentialSampler>(0),
                                             std::make_shared<DistributedSampler>(0, 2, 0, false), ChunkDatasetOptions(1, 4));
  DataLoader half_loader(half, {.batch_size = 4});
  CHECK(error_of([&] { half_loader.begin(); }) ==
        "ChunkDataset: the example sampler gave 2 indices for a group of 4 examples (it must give a permutation of 0..3)");

  CHECK(contains(error_of([] { StreamSampler(-5); }), "StreamSampler: the epoch size must be non-negative"));
  CHECK(contains(error_of([] { StreamSampler(kUnknownSize, 2, 0); }),
                 "StreamSampler: an unbounded stream has one replica, got num_replicas 2 and rank 0"));
  CHECK(contains(error_of([] { StreamSampler(10, 2, 2); }), "StreamSampler: DistributedSampler: invalid rank 2"));
  CHECK(contains(error_of([] { StreamSampler(kUnknownSize).indices(); }), "an unbounded stream has no index list"));
  CHECK(error_of([] { StreamSampler(4).next(0); }) == "StreamSampler::next: batch_size must be positive, got 0");
}
