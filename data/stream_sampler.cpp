// StreamSampler: LibTorch's counts, and the positions the DataLoader reads (DistributedSampler's, unshuffled).
#include "data/stream_sampler.h"

#include <algorithm>

#include "common/check.h"

namespace lockstep::data {

StreamSampler::StreamSampler(int64_t epoch_size, int num_replicas, int rank, bool drop_last)
    : epoch_size_(epoch_size), num_replicas_(num_replicas), rank_(rank), drop_last_(drop_last) {
  shard();
}

void StreamSampler::shard() {
  LOCKSTEP_CHECK(epoch_size_ >= 0 || epoch_size_ == kUnknownSize, "StreamSampler: the epoch size must be ",
                 "non-negative, or kUnknownSize for an unbounded stream; got ", epoch_size_);
  if (epoch_size_ == kUnknownSize) {
    LOCKSTEP_CHECK(num_replicas_ == 1 && rank_ == 0, "StreamSampler: an unbounded stream has one replica, got ",
                   "num_replicas ", num_replicas_, " and rank ", rank_,
                   " (give an epoch size to shard the positions, or shard the stream itself, as ChunkDataset does)");
    positions_.reset();
    return;
  }
  try {
    positions_.emplace(epoch_size_, num_replicas_, rank_, /*shuffle=*/false, /*seed=*/0, drop_last_);
  } catch (const Error& e) {
    fail("StreamSampler: ", e.what());  // e.g. "StreamSampler: DistributedSampler: invalid rank 2, ..."
  }
  num_replicas_ = positions_->num_replicas();  // resolved from the process group when given as -1
  rank_ = positions_->rank();
}

std::vector<int64_t> StreamSampler::indices() {
  LOCKSTEP_CHECK(positions_, "StreamSampler: an unbounded stream has no index list; the DataLoader reads it batch "
                             "by batch, and next(batch_size) counts it");
  return positions_->indices();
}

int64_t StreamSampler::size() const { return positions_ ? positions_->size() : kUnknownSize; }

void StreamSampler::reset(std::optional<int64_t> new_size) {
  retrieved_ = 0;
  if (!new_size) return;
  epoch_size_ = *new_size;
  shard();
}

std::optional<BatchSize> StreamSampler::next(int64_t batch_size) {
  LOCKSTEP_CHECK(batch_size > 0, "StreamSampler::next: batch_size must be positive, got ", batch_size);
  int64_t n = batch_size;
  if (positions_) {
    const int64_t left = positions_->size() - retrieved_;
    if (left == 0) return std::nullopt;
    n = std::min(n, left);
  }
  retrieved_ += n;
  return BatchSize(n);
}

}  // namespace lockstep::data
