// DataLoader: batches of a dataset in a sampler's order, as torch.utils.data.DataLoader.
//
//   auto loader = DataLoader(dataset, {.batch_size = 64, .shuffle = true, .num_workers = 2});
//   for (int epoch = 0; epoch < 10; ++epoch) {
//     loader.set_epoch(epoch);
//     for (auto& batch : loader) ...  // batch.input [B, ...], batch.target [B]
//   }
//
// Each begin() starts an epoch: it calls the dataset's reset() (a no-op but for streams such as
// ChunkDataset), draws the sampler's indices and cuts them into batches of batch_size (the last one
// partial unless drop_last). Batches are collated by Dataset::get_batch (one index_select per tensor
// for a TensorDataset; the mapped collation for a MapDataset, Stack<> by default) and moved to
// options.device as they are made.
//
// Streams (data/stream_sampler.h): a dataset of unknown size (ChunkDataset) given no sampler is read
// at positions 0, 1, 2, ... batch by batch; size() is then kUnknownSize. Whatever the sampler, an
// empty batch from the dataset (a stream past its end) ends the epoch, and with drop_last so does a
// short one.
//
// num_workers == 0 makes each batch on the calling thread when the iterator advances. num_workers > 0
// starts that many threads, which make batches ahead of the consumer, at most num_workers * prefetch
// batches in flight; the iterator still yields them strictly in order. An exception thrown while
// making a batch is rethrown by the iterator when that batch is due, and ends the epoch. The iterator
// owns the epoch's threads: destroying it (a `break` out of the loop) stops and joins them. It holds
// its own reference to the dataset, so it may outlive the loader.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <type_traits>

#include "data/dataset.h"
#include "data/sampler.h"
#include "tensor/device.h"

namespace lockstep::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;                        // a RandomSampler (below); exclusive with `sampler`
  std::shared_ptr<Sampler> sampler = nullptr;  // null: sequential, or random with `shuffle`
  bool drop_last = false;                      // drop the last batch when it is partial
  int num_workers = 0;                         // background threads making batches; 0 makes them inline
  int prefetch = 2;                            // batches in flight per worker
  Device device = Device::cpu();               // where batches are delivered
  // With `shuffle`: unset, each epoch's order is drawn from the global generator when the epoch's
  // iterator is made (begin()), as PyTorch's; reproducible under manual_seed. Set, the RandomSampler
  // draws from its own Generator seeded with it (set_epoch(e) reseeds with seed + e).
  std::optional<uint64_t> seed = std::nullopt;
};

namespace detail { class EpochRun; }

class DataLoader {
 public:
  class Iterator;

  explicit DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options = {});
  // A dataset held by value, e.g. the MapDataset of ds->map(...).map(...), moved into a shared_ptr
  // (LibTorch's make_data_loader(std::move(dataset), ...)).
  template <typename D>
    requires std::derived_from<D, Dataset> && (!std::is_abstract_v<D>)
  explicit DataLoader(D dataset, DataLoaderOptions options = {})
      : DataLoader(std::make_shared<D>(std::move(dataset)), std::move(options)) {}

  // Starts an epoch (see above); end() is the matching sentinel.
  Iterator begin();
  Iterator end();
  // Batches per epoch; kUnknownSize for an unbounded stream (and an upper bound for a stream that may
  // end early).
  int64_t size() const;
  // Forwards to the sampler (DistributedSampler and RandomSampler reorder by epoch) and to the dataset
  // (a ChunkDataset's chunk and example samplers).
  void set_epoch(int64_t epoch) {
    sampler_->set_epoch(epoch);
    dataset_->set_epoch(epoch);
  }

  const std::shared_ptr<Dataset>& dataset() const { return dataset_; }
  const std::shared_ptr<Sampler>& sampler() const { return sampler_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
};

// An input iterator over one epoch's batches. Move-only: it owns the epoch (and its threads).
class DataLoader::Iterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using pointer = Batch*;
  using reference = Batch&;

  Iterator();  // the end
  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;
  ~Iterator();

  Batch& operator*() { return batch_; }
  Batch* operator->() { return &batch_; }
  // Waits for the next batch; rethrows the exception that making it raised.
  Iterator& operator++();
  // True for two ends, or an iterator and itself.
  bool operator==(const Iterator& other) const { return run_ == other.run_; }

 private:
  friend class DataLoader;
  explicit Iterator(std::unique_ptr<detail::EpochRun> run);
  void advance();

  std::unique_ptr<detail::EpochRun> run_;  // null at the end
  Batch batch_;
};

}  // namespace lockstep::data
