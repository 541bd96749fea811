// ChunkDataset: one Epoch object per reset(), holding the preloaders and the ordered stream they fill.
#include "data/chunk_dataset.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <iterator>
#include <map>
#include <thread>

#include "common/check.h"
#include "tensor/generator.h"

namespace lockstep::data {

// The stream of one epoch. Groups are claimed by preloaders in sequence order, read outside the lock,
// deposited (waiting for cache space, unless a reader needs that group next), and committed to the
// stream strictly in sequence order, where the example sampler orders them. Readers wait until the
// positions they ask for are committed, or the epoch is complete, failed or stopped.
class ChunkDataset::Epoch {
 public:
  Epoch(std::shared_ptr<ChunkDataReader<>> reader, PreprocessingPolicy policy, std::shared_ptr<Sampler> example_sampler,
        std::vector<std::vector<int64_t>> groups, int64_t cache_size)
      : reader_(std::move(reader)), policy_(std::move(policy)), example_sampler_(std::move(example_sampler)),
        groups_(std::move(groups)), cache_size_(cache_size) {
    complete_ = groups_.empty();
  }

  ~Epoch() { stop(); }

  void start(int64_t preloaders) {
    try {
      for (int64_t i = 0; i < preloaders; ++i) threads_.emplace_back([this] { preload(); });
    } catch (...) {
      stop();
      throw;
    }
  }

  // Wakes every waiter (readers then get nothing) and joins the preloaders.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    ready_.notify_all();
    space_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  // Positions [first, first + count) of the stream, cut at its end.
  std::vector<Example> take(int64_t first, int64_t count) {
    const int64_t last = first + count;
    std::unique_lock<std::mutex> lock(mu_);
    if (last > wanted_) {
      wanted_ = last;
      space_.notify_all();  // a preloader holding the next group may add it past a full cache
    }
    ready_.wait(lock, [&] { return stop_ || last <= end_ || complete_ || failure_; });
    if (stop_) return {};
    if (last > end_ && failure_) std::rethrow_exception(failure_);
    std::vector<Example> out;
    bool freed = false;
    for (int64_t p = first; p < std::min(last, end_); ++p) {
      // The committed group holding p: the last one starting at or before it.
      auto g = std::prev(std::upper_bound(committed_.begin(), committed_.end(), p,
                                          [](int64_t pos, const Group& grp) { return pos < grp.start; }));
      const int64_t j = p - g->start;
      LOCKSTEP_CHECK(!g->taken[j], "ChunkDataset: position ", p, " of this epoch was already read (each position of ",
                     "the stream is read once; reset() starts the epoch again)");
      g->taken[j] = 1;
      out.push_back(g->examples[j]);
      if (--g->left == 0) {
        cached_ -= static_cast<int64_t>(g->examples.size());
        std::vector<Example>().swap(g->examples);
        freed = true;
      }
    }
    lock.unlock();
    if (freed) space_.notify_all();
    return out;
  }

 private:
  struct Group {
    int64_t start;  // its first position in the stream
    std::vector<Example> examples;
    std::vector<char> taken;
    int64_t left;  // not yet taken; the examples are freed at 0
  };
  struct Pending {
    std::vector<Example> examples;
    std::exception_ptr error;
  };

  void preload() {
    for (;;) {
      int64_t k;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_ || failure_ || next_claim_ >= static_cast<int64_t>(groups_.size())) return;
        k = next_claim_++;
      }
      Pending p;
      try {
        for (int64_t c : groups_[k]) {
          std::vector<Example> chunk = reader_->read_chunk(c);
          std::move(chunk.begin(), chunk.end(), std::back_inserter(p.examples));
        }
        if (policy_) policy_(p.examples);
      } catch (...) {
        p.error = std::current_exception();
        p.examples.clear();
      }
      std::unique_lock<std::mutex> lock(mu_);
      // Past a full cache only the next group in sequence, and only while a reader waits for positions
      // beyond the stream so far: readers never wait on a cache full of groups they cannot read yet.
      space_.wait(lock, [&] { return stop_ || cached_ < cache_size_ || (k == next_commit_ && wanted_ > end_); });
      if (stop_) return;
      cached_ += static_cast<int64_t>(p.examples.size());
      pending_.emplace(k, std::move(p));
      commit_in_order();
      lock.unlock();
      ready_.notify_all();
      space_.notify_all();
    }
  }

  // Moves the deposited groups that come next into the stream. mu_ is held.
  void commit_in_order() {
    for (auto it = pending_.find(next_commit_); it != pending_.end() && !failure_; it = pending_.find(next_commit_)) {
      Pending p = std::move(it->second);
      pending_.erase(it);
      ++next_commit_;
      if (!p.error) {
        try {
          p.examples = in_sampler_order(std::move(p.examples));
        } catch (...) {
          p.error = std::current_exception();
        }
      }
      if (p.error) {
        cached_ -= static_cast<int64_t>(p.examples.size());
        failure_ = p.error;  // positions from end_ on are unknown: readers of them get the error
        break;
      }
      const int64_t n = static_cast<int64_t>(p.examples.size());
      if (n == 0) continue;  // an empty chunk adds nothing
      committed_.push_back({end_, std::move(p.examples), std::vector<char>(n, 0), n});
      end_ += n;
    }
    if (next_commit_ == static_cast<int64_t>(groups_.size())) complete_ = true;
  }

  std::vector<Example> in_sampler_order(std::vector<Example> examples) {
    const int64_t n = static_cast<int64_t>(examples.size());
    if (n == 0) return examples;
    example_sampler_->reset(n);
    std::vector<int64_t> order = example_sampler_->indices();
    LOCKSTEP_CHECK(static_cast<int64_t>(order.size()) == n, "ChunkDataset: the example sampler gave ", order.size(),
                   " indices for a group of ", n, " examples (it must give a permutation of 0..", n - 1, ")");
    std::vector<char> seen(n, 0);
    std::vector<Example> out;
    out.reserve(n);
    for (int64_t i : order) {
      LOCKSTEP_CHECK(i >= 0 && i < n && !seen[i], "ChunkDataset: the example sampler gave index ", i,
                     " out of range or twice for a group of ", n, " examples (it must give a permutation)");
      seen[i] = 1;
      out.push_back(std::move(examples[i]));
    }
    return out;
  }

  std::shared_ptr<ChunkDataReader<>> reader_;
  PreprocessingPolicy policy_;
  std::shared_ptr<Sampler> example_sampler_;  // used under mu_ only, in commit order
  const std::vector<std::vector<int64_t>> groups_;
  const int64_t cache_size_;
  std::vector<std::thread> threads_;

  std::mutex mu_;
  std::condition_variable ready_;  // more of the stream is committed, or complete, failed, stopped
  std::condition_variable space_;  // examples were freed, the next group changed, or stopped
  int64_t next_claim_ = 0;         // the next group a preloader reads
  int64_t next_commit_ = 0;        // the next group to join the stream
  std::map<int64_t, Pending> pending_;  // read, waiting for the groups before them
  std::vector<Group> committed_;        // the stream so far, in order (empty groups left out)
  int64_t end_ = 0;                     // positions [0, end_) are committed
  int64_t wanted_ = 0;                  // one past the furthest position a reader has asked for
  int64_t cached_ = 0;                  // examples pending or committed and not yet read
  bool complete_ = false;               // every group is committed
  std::exception_ptr failure_;          // the first group that failed, at position end_
  bool stop_ = false;
};

ChunkDataset::ChunkDataset(std::shared_ptr<ChunkDataReader<>> chunk_reader, std::shared_ptr<Sampler> chunk_sampler,
                           std::shared_ptr<Sampler> example_sampler, ChunkDatasetOptions options,
                           PreprocessingPolicy preprocessing_policy)
    : reader_(std::move(chunk_reader)),
      chunk_sampler_(std::move(chunk_sampler)),
      example_sampler_(std::move(example_sampler)),
      options_(options),
      policy_(std::move(preprocessing_policy)) {
  LOCKSTEP_CHECK(reader_, "ChunkDataset: the chunk reader is null");
  // LibTorch's checks on ChunkDatasetOptions.
  LOCKSTEP_CHECK(options_.preloader_count > 0, "ChunkDataset: preloader_count must be positive, got ",
                 options_.preloader_count);
  LOCKSTEP_CHECK(options_.batch_size > 0, "ChunkDataset: batch_size must be positive, got ", options_.batch_size);
  LOCKSTEP_CHECK(options_.cache_size >= options_.batch_size, "ChunkDataset: cache_size ", options_.cache_size,
                 " is less than batch_size ", options_.batch_size, " (the cache must hold at least one batch)");
  LOCKSTEP_CHECK(options_.cross_chunk_shuffle_count > 0, "ChunkDataset: cross_chunk_shuffle_count must be positive, got ",
                 options_.cross_chunk_shuffle_count);
  if (!chunk_sampler_) chunk_sampler_ = std::make_shared<RandomSampler>(0);
}

ChunkDataset::~ChunkDataset() {
  if (epoch_) epoch_->stop();
}

void ChunkDataset::reset() {
  std::shared_ptr<Epoch> old;
  std::optional<int64_t> epoch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = std::move(epoch_);
    epoch = pending_epoch_;
    pending_epoch_.reset();
  }
  if (old) old->stop();  // before the samplers change: the old preloaders may be using the example sampler
  std::shared_ptr<Sampler> example_sampler = example_sampler_;
  if (!example_sampler) example_sampler = std::make_shared<RandomSampler>(0, default_generator().next_u64());
  if (epoch) {
    chunk_sampler_->set_epoch(*epoch);
    example_sampler->set_epoch(*epoch);
  }
  reader_->reset();
  const int64_t chunks = reader_->chunk_count();
  LOCKSTEP_CHECK(chunks >= 0, "ChunkDataset: the reader's chunk_count() is negative: ", chunks);
  chunk_sampler_->reset(chunks);
  const std::vector<int64_t> order = chunk_sampler_->indices();
  std::vector<std::vector<int64_t>> groups;
  for (size_t i = 0; i < order.size(); ++i) {
    LOCKSTEP_CHECK(order[i] >= 0 && order[i] < chunks, "ChunkDataset: the chunk sampler gave chunk ", order[i],
                   ", but the reader has ", chunks, " chunks");
    if (i % options_.cross_chunk_shuffle_count == 0) groups.emplace_back();
    groups.back().push_back(order[i]);
  }
  auto next = std::make_shared<Epoch>(reader_, policy_, std::move(example_sampler), std::move(groups),
                                      options_.cache_size);
  next->start(options_.preloader_count);
  std::lock_guard<std::mutex> lock(mu_);
  epoch_ = std::move(next);
  cursor_ = 0;
}

void ChunkDataset::set_epoch(int64_t epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_epoch_ = epoch;
}

std::shared_ptr<ChunkDataset::Epoch> ChunkDataset::current_epoch(const char* op) const {
  std::lock_guard<std::mutex> lock(mu_);
  LOCKSTEP_CHECK(epoch_, "ChunkDataset::", op, ": call reset() before reading (the DataLoader calls it at the start ",
                 "of each epoch)");
  return epoch_;
}

std::vector<Example> ChunkDataset::get_examples(const std::vector<int64_t>& positions) const {
  if (positions.empty()) return {};
  const int64_t n = static_cast<int64_t>(positions.size());
  LOCKSTEP_CHECK(n <= options_.batch_size, "ChunkDataset: ", n, " examples were requested at once, but the dataset ",
                 "was created with batch_size ", options_.batch_size, " (give the DataLoader the same batch_size)");
  for (int64_t i = 0; i < n; ++i) {
    LOCKSTEP_CHECK(positions[i] == positions[0] + i && positions[0] >= 0, "ChunkDataset: positions must be ",
                   "consecutive and non-negative, got ", positions, " (a stream is read in order: shard it with the ",
                   "chunk sampler, e.g. a DistributedSampler over chunks, not with the DataLoader's sampler)");
  }
  return current_epoch("get_examples")->take(positions[0], n);
}

Example ChunkDataset::get(int64_t position) const {
  std::vector<Example> one = get_examples({position});
  LOCKSTEP_CHECK(!one.empty(), "ChunkDataset: position ", position, " is past the end of this epoch's stream");
  return std::move(one[0]);
}

std::optional<std::vector<Example>> ChunkDataset::get_batch() {
  std::shared_ptr<Epoch> epoch;
  int64_t first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    LOCKSTEP_CHECK(epoch_, "ChunkDataset::get_batch: call reset() before reading (the DataLoader calls it at the ",
                   "start of each epoch)");
    epoch = epoch_;
    first = cursor_;
    cursor_ += options_.batch_size;
  }
  std::vector<Example> batch = epoch->take(first, options_.batch_size);
  if (batch.empty()) return std::nullopt;
  return batch;
}

}  // namespace lockstep::data
