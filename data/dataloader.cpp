// DataLoader: an epoch's batches made inline or by worker threads, yielded in order.
#include "data/dataloader.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "common/check.h"
#include "data/stream_sampler.h"
#include "tensor/ops.h"

namespace lockstep::data {
namespace detail {

// One epoch: the indices cut into batches (or, with no indices, an unbounded stream's positions), and
// (with workers) the threads making them. An empty batch from the dataset is the epoch's end.
class EpochRun {
 public:
  EpochRun(std::shared_ptr<Dataset> dataset, std::optional<std::vector<int64_t>> indices, const DataLoaderOptions& o)
      : dataset_(std::move(dataset)), indices_(std::move(indices)), batch_size_(o.batch_size),
        drop_last_(o.drop_last), stream_(dataset_->size() == kUnknownSize), device_(o.device) {
    if (indices_) {
      const int64_t n = static_cast<int64_t>(indices_->size());
      num_batches_ = drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
    } else {
      num_batches_ = std::numeric_limits<int64_t>::max() / batch_size_;  // until the stream ends
    }
    if (o.num_workers > 0 && num_batches_ > 0) {
      slots_.resize(static_cast<size_t>(o.num_workers) * o.prefetch);
      try {
        for (int w = 0; w < o.num_workers; ++w) workers_.emplace_back([this] { work(); });
      } catch (...) {
        stop_and_join();
        throw;
      }
    }
  }

  ~EpochRun() { stop_and_join(); }

  void stop_and_join() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    space_.notify_all();
    for (auto& t : workers_) t.join();
  }

  // The next batch in order into `out`; false at the end of the epoch.
  bool next(Batch& out) {
    if (finished_ || next_out_ >= num_batches_) return false;
    if (workers_.empty()) {
      out = make(next_out_++);
      finished_ = is_end(out);
      return !finished_;
    }
    Slot slot;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto& s = slots_[next_out_ % slots_.size()];
      ready_.wait(lock, [&] { return s.has_value(); });
      slot = std::move(*s);
      s.reset();
      ++next_out_;
    }
    space_.notify_all();
    if (slot.error) std::rethrow_exception(slot.error);
    if (is_end(slot.batch)) {
      finished_ = true;  // later next() calls return false too
      return false;
    }
    out = std::move(slot.batch);
    return true;
  }

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };

  static bool is_end(const Batch& b) { return !b.input.defined(); }

  // Batch b: indices [b * B, min((b + 1) * B, n)), or positions [b * B, (b + 1) * B) of a stream. An
  // empty batch, or with drop_last a stream's short last one, comes back as the end.
  Batch make(int64_t b) const {
    std::vector<int64_t> positions;
    if (indices_) {
      auto first = indices_->begin() + b * batch_size_;
      auto last = indices_->begin() + std::min<int64_t>((b + 1) * batch_size_, indices_->size());
      positions.assign(first, last);
    } else {
      positions.resize(batch_size_);
      std::iota(positions.begin(), positions.end(), b * batch_size_);
    }
    Batch batch = dataset_->get_batch(positions);
    if (is_end(batch) || (stream_ && drop_last_ && batch.input.size(0) < batch_size_)) return {};
    batch.input = internal::to_device(batch.input, device_);
    batch.target = internal::to_device(batch.target, device_);
    return batch;
  }

  // A worker claims the next batch while fewer than slots_.size() are in flight (claimed and not
  // yet taken by the consumer), makes it outside the lock, and files it in its slot.
  void work() {
    for (;;) {
      int64_t b;
      {
        std::unique_lock<std::mutex> lock(mu_);
        space_.wait(lock, [&] {
          return stop_ || next_task_ >= std::min(num_batches_, end_) ||
                 next_task_ < next_out_ + static_cast<int64_t>(slots_.size());
        });
        if (stop_ || next_task_ >= std::min(num_batches_, end_)) return;
        b = next_task_++;
      }
      Slot slot;
      try {
        slot.batch = make(b);
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!slot.error && is_end(slot.batch)) end_ = std::min(end_, b + 1);  // claim nothing past the end
        slots_[b % slots_.size()] = std::move(slot);
      }
      ready_.notify_all();
    }
  }

  std::shared_ptr<Dataset> dataset_;
  std::optional<std::vector<int64_t>> indices_;  // empty: an unbounded stream
  int64_t batch_size_;
  bool drop_last_;
  bool stream_;  // the dataset's size is unknown
  Device device_;
  int64_t num_batches_ = 0;  // an upper bound for a stream
  int64_t next_out_ = 0;     // the next batch the consumer takes
  bool finished_ = false;    // the consumer met the end (an empty batch)

  // Shared with the workers, under mu_. Batch b lives in slots_[b % slots_.size()] until taken.
  std::mutex mu_;
  std::condition_variable ready_;  // a slot was filled
  std::condition_variable space_;  // a slot was taken, or stop_
  std::vector<std::optional<Slot>> slots_;
  int64_t next_task_ = 0;  // the next batch a worker claims
  int64_t end_ = std::numeric_limits<int64_t>::max();  // one past the first empty batch made
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace detail

// --- DataLoader ----------------------------------------------------------------------------------

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  LOCKSTEP_CHECK(dataset_, "DataLoader: the dataset is null");
  LOCKSTEP_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be positive, got ", options_.batch_size);
  LOCKSTEP_CHECK(options_.num_workers >= 0, "DataLoader: num_workers must be non-negative, got ", options_.num_workers);
  LOCKSTEP_CHECK(options_.num_workers == 0 || options_.prefetch >= 1,
                 "DataLoader: prefetch must be positive with num_workers > 0, got ", options_.prefetch);
  LOCKSTEP_CHECK(!(options_.shuffle && options_.sampler),
                 "DataLoader: sampler option is mutually exclusive with shuffle (the sampler decides the order)");
  if (options_.sampler) {
    sampler_ = options_.sampler;
  } else if (dataset_->size() == kUnknownSize) {
    LOCKSTEP_CHECK(!options_.shuffle, "DataLoader: shuffle needs a dataset of known size; a stream of unknown size ",
                   "(ChunkDataset) is shuffled by its own samplers");
    sampler_ = std::make_shared<StreamSampler>(kUnknownSize);
  } else if (options_.shuffle) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size(), b = options_.batch_size;
  if (n == kUnknownSize) return kUnknownSize;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  dataset_->reset();
  std::optional<std::vector<int64_t>> indices;
  if (sampler_->size() != kUnknownSize) indices = sampler_->indices();
  return Iterator(std::make_unique<detail::EpochRun>(dataset_, std::move(indices), options_));
}

DataLoader::Iterator DataLoader::end() { return Iterator(); }

// --- Iterator ------------------------------------------------------------------------------------

DataLoader::Iterator::Iterator() = default;
DataLoader::Iterator::Iterator(Iterator&&) noexcept = default;
DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&&) noexcept = default;
DataLoader::Iterator::~Iterator() = default;

DataLoader::Iterator::Iterator(std::unique_ptr<detail::EpochRun> run) : run_(std::move(run)) { advance(); }

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  advance();
  return *this;
}

void DataLoader::Iterator::advance() {
  LOCKSTEP_CHECK(run_, "DataLoader: iterator advanced past the end of the epoch");
  try {
    if (!run_->next(batch_)) run_.reset();
  } catch (...) {
    run_.reset();  // the epoch ends with the error: join its threads, then rethrow
    throw;
  }
}

}  // namespace lockstep::data
