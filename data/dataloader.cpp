// DataLoader: an epoch's batches made inline or by worker threads, yielded in order.
#include "data/dataloader.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "common/check.h"
#include "tensor/ops.h"

namespace lockstep::data {
namespace detail {

// One epoch: the indices cut into batches, and (with workers) the threads making them.
class EpochRun {
 public:
  EpochRun(std::shared_ptr<Dataset> dataset, std::vector<int64_t> indices, const DataLoaderOptions& o)
      : dataset_(std::move(dataset)), indices_(std::move(indices)), batch_size_(o.batch_size), device_(o.device) {
    const int64_t n = static_cast<int64_t>(indices_.size());
    num_batches_ = o.drop_last ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
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
    if (next_out_ >= num_batches_) return false;
    if (workers_.empty()) {
      out = make(next_out_++);
      return true;
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
    out = std::move(slot.batch);
    return true;
  }

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };

  // Batch b: indices [b * B, min((b + 1) * B, n)).
  Batch make(int64_t b) const {
    auto first = indices_.begin() + b * batch_size_;
    auto last = indices_.begin() + std::min<int64_t>((b + 1) * batch_size_, indices_.size());
    Batch batch = dataset_->get_batch(std::vector<int64_t>(first, last));
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
          return stop_ || next_task_ >= num_batches_ || next_task_ < next_out_ + static_cast<int64_t>(slots_.size());
        });
        if (stop_ || next_task_ >= num_batches_) return;
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
        slots_[b % slots_.size()] = std::move(slot);
      }
      ready_.notify_all();
    }
  }

  std::shared_ptr<Dataset> dataset_;
  std::vector<int64_t> indices_;
  int64_t batch_size_;
  Device device_;
  int64_t num_batches_ = 0;
  int64_t next_out_ = 0;  // the next batch the consumer takes

  // Shared with the workers, under mu_. Batch b lives in slots_[b % slots_.size()] until taken.
  std::mutex mu_;
  std::condition_variable ready_;  // a slot was filled
  std::condition_variable space_;  // a slot was taken, or stop_
  std::vector<std::optional<Slot>> slots_;
  int64_t next_task_ = 0;  // the next batch a worker claims
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
  } else if (options_.shuffle) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  return Iterator(std::make_unique<detail::EpochRun>(dataset_, sampler_->indices(), options_));
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
