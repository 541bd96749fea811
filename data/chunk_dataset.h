// ChunkDataset: a dataset read a whole chunk at a time (a file, or a slice of one), as LibTorch's
// datasets::ChunkDataset over a ChunkDataReader.
//
//   struct ShardReader : ChunkDataReader<> {              // chunk c: the examples of file c
//     std::vector<Example> read_chunk(int64_t c) override;
//     int64_t chunk_count() override;
//     void reset() override {}
//   };
//   auto chunks = std::make_shared<DistributedSampler>(reader->chunk_count());  // this rank's chunks
//   auto ds = std::make_shared<ChunkDataset>(reader, chunks, std::make_shared<RandomSampler>(0, seed),
//                                            ChunkDatasetOptions(/*preloader_count=*/2, /*batch_size=*/64));
//   DataLoader loader(ds, {.batch_size = 64, .num_workers = 2});
//   for (int epoch = 0; ...) { loader.set_epoch(epoch); for (auto& batch : loader) ...; }
//
// An epoch, as LibTorch's: reset() resets the reader, resizes the chunk sampler to chunk_count() and
// takes its order; consecutive runs of cross_chunk_shuffle_count chunks in that order form groups. A
// group's chunks are read and concatenated (by preloader_count threads, the policy applied to the
// whole group), the example sampler, reset to the group's size, orders its examples, and the epoch's
// stream is the groups one after another (so batches run across chunk boundaries; empty chunks add
// nothing). About cache_size examples are held at most: a preloader waits for space before adding a
// group, unless a reader is waiting for that group (the next in sequence) and nothing else can help.
//
// Where lockstep differs, and why:
//   - The stream has one order, the chunk sampler's, whatever thread reads which chunk first: groups
//     join it in sequence order, and the example sampler runs on them in that order too. The DataLoader
//     reads it by position (batch b is positions [b * B, b * B + B), data/stream_sampler.h), so its
//     workers make the same batches as one thread, each example exactly once. LibTorch's order
//     depends on which preloader finishes first.
//   - Sharding is the chunk sampler's: a DistributedSampler over chunks gives each rank its share (as
//     LibTorch's DistributedRandomSampler), with PyTorch's padding (a few chunks read twice when the
//     ranks do not divide chunk_count) or drop_last. Ranks whose chunks hold different numbers of
//     examples make different numbers of batches: for DDP, give the DataLoader a
//     StreamSampler(epoch_size) with the same size on every rank.
//   - set_epoch(e) (DataLoader::set_epoch calls it) passes e to both samplers at the next reset().
//   - The default example sampler (null) is a RandomSampler seeded, at each reset(), from the global
//     generator: it runs on the preloader threads, which must not draw from the (unsynchronised)
//     global generator themselves. A RandomSampler of yours there needs a seed for the same reason.
//   - An exception from read_chunk, the policy or a sampler reaches whoever reads a position at or
//     after that group's start (the DataLoader: the batch that needed it), and ends the epoch.
//   - No save/load of the chunk sampler (lockstep has no archive type for samplers).
//
// read_chunk and the preprocessing policy run on the preloader threads, several at once; chunk_count
// and reset on the thread that calls reset(). size() is kUnknownSize.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"

namespace lockstep::data {

// Reads whole chunks (LibTorch's ChunkDataReader<ExampleType, ChunkType>; lockstep's examples are
// data::Example, the template parameters only keep LibTorch's spelling).
template <typename ExampleType = Example, typename ChunkType = std::vector<ExampleType>>
class ChunkDataReader {
  static_assert(std::is_same_v<ExampleType, Example> && std::is_same_v<ChunkType, std::vector<Example>>,
                "lockstep's chunks are std::vector<data::Example>");

 public:
  virtual ~ChunkDataReader() = default;
  // The examples of chunk `chunk_index`, in 0..chunk_count() - 1; called from several threads at once.
  virtual ChunkType read_chunk(int64_t chunk_index) = 0;
  virtual int64_t chunk_count() = 0;
  // Clears the reader's state at the start of each epoch.
  virtual void reset() = 0;
};

// LibTorch's ChunkDatasetOptions(preloader_count, batch_size, cache_size, cross_chunk_shuffle_count);
// as an aggregate, both ChunkDatasetOptions(2, 64) and {.preloader_count = 2, .batch_size = 64} work.
struct ChunkDatasetOptions {
  int64_t preloader_count = 1;            // threads reading chunks
  int64_t batch_size = 1;                 // the largest request; get_batch()'s size
  int64_t cache_size = 2048;              // examples held in memory, about
  int64_t cross_chunk_shuffle_count = 1;  // chunks per group, shuffled together
};

class ChunkDataset : public Dataset {
 public:
  using PreprocessingPolicy = std::function<void(std::vector<Example>&)>;

  // A null chunk_sampler is an (unseeded) RandomSampler, LibTorch's default; a null example_sampler
  // is described above.
  ChunkDataset(std::shared_ptr<ChunkDataReader<>> chunk_reader, std::shared_ptr<Sampler> chunk_sampler,
               std::shared_ptr<Sampler> example_sampler, ChunkDatasetOptions options,
               PreprocessingPolicy preprocessing_policy = nullptr);
  ~ChunkDataset() override;
  ChunkDataset(const ChunkDataset&) = delete;
  ChunkDataset& operator=(const ChunkDataset&) = delete;

  int64_t size() const override { return kUnknownSize; }
  // The example at stream position p of this epoch; each position can be read once.
  Example get(int64_t position) const override;
  // The examples at consecutive positions (at most batch_size), waiting for them to be loaded; fewer,
  // or none, past the end of the epoch.
  std::vector<Example> get_examples(const std::vector<int64_t>& positions) const override;
  using Dataset::get_batch;
  // Stops the last epoch's preloaders and starts the next epoch (the DataLoader calls this at begin()).
  void reset() override;
  void set_epoch(int64_t epoch) override;

  // LibTorch's get_batch(): the next batch_size examples of the epoch, or nullopt after its end.
  std::optional<std::vector<Example>> get_batch();

  // The chunk sampler (LibTorch's chunk_sampler(), e.g. for set_epoch).
  const std::shared_ptr<Sampler>& chunk_sampler() const { return chunk_sampler_; }
  const ChunkDatasetOptions& options() const { return options_; }

 private:
  class Epoch;
  std::shared_ptr<Epoch> current_epoch(const char* op) const;

  std::shared_ptr<ChunkDataReader<>> reader_;
  std::shared_ptr<Sampler> chunk_sampler_;
  std::shared_ptr<Sampler> example_sampler_;  // null: a seeded RandomSampler per epoch
  ChunkDatasetOptions options_;
  PreprocessingPolicy policy_;

  mutable std::mutex mu_;         // guards the three below
  std::shared_ptr<Epoch> epoch_;  // null before the first reset()
  int64_t cursor_ = 0;            // get_batch()'s next position
  std::optional<int64_t> pending_epoch_;
};

}  // namespace lockstep::data
