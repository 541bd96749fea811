// ProcessGroupGloo's own algorithms, on raw pointers: all-reduce by direct exchange and around the
// ring, the flat reduce-scatter and all-gather around the ring (on DirectMesh, driven by the calling
// thread), and the per-chunk reduce-scatter around the ring (on gloo's unbound buffers). Each folds every element in an order that is the same on every rank.
#pragma once

#include <gloo/context.h>
#include <gloo/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/check.h"
#include "distributed/gloo/direct_mesh.h"
#include "distributed/reduce_kernels.h"
#include "tensor/tensor.h"

namespace lockstep::dist::detail {

// gloo's own collectives use slot prefixes 0x01-0x08.
inline constexpr uint8_t kReduceScatterSlotPrefix = 0x40;

// Ring reduce-scatter over the caller's W inputs of n elements: chunk c starts at rank c + 1, which
// sends its inputs[c] to the right; every rank on the way adds its own inputs[c] and passes the sum on,
// until rank c adds the last one into `out`. W - 1 steps of n elements each way; the inputs are only
// read. `tmp` holds 3n elements: the chunk being received and two partial sums (one being sent while
// the next is computed).
template <typename T>
void ring_reduce_scatter(const std::shared_ptr<gloo::Context>& context, const std::vector<Tensor>& inputs, T* out,
                         size_t n, ReduceFn reduce, uint32_t tag, std::chrono::milliseconds timeout,
                         T* tmp) {
  const int W = context->size, rank = context->rank;
  const size_t bytes = n * sizeof(T);
  const int right = (rank + 1) % W, left = (rank + W - 1) % W;
  const auto slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
  T* received = tmp;
  T* partial[2] = {tmp + n, tmp + 2 * n};
  auto recv_buffer = context->createUnboundBuffer(received, bytes);
  const T* sending = static_cast<const T*>(inputs[left].data_ptr());
  for (int step = 0; step < W - 1; ++step) {
    const int chunk = (rank + 2 * W - step - 2) % W;  // the chunk arriving from the left
    auto send_buffer = context->createUnboundBuffer(const_cast<T*>(sending), bytes);
    recv_buffer->recv(left, slot, 0, bytes);
    send_buffer->send(right, slot, 0, bytes);
    LOCKSTEP_CHECK(recv_buffer->waitRecv(timeout), "reduce_scatter: receive aborted");
    // The send is done before the sum is written: `out` may be any of the inputs.
    LOCKSTEP_CHECK(send_buffer->waitSend(timeout), "reduce_scatter: send aborted");
    T* sum = step == W - 2 ? out : partial[step % 2];
    reduce(sum, inputs[chunk].data_ptr(), received, n);
    sending = sum;
  }
}

// All-reduce by direct exchange (DirectMesh): every rank sends its n elements to every other rank,
// then folds all W tensors in rank order, x0 op x1 op ... op x(W-1), the same order on every rank, so
// that every rank ends with the same bits. `tmp` holds the W - 1 received tensors.
template <typename T>
void exchange_all_reduce(DirectMesh& mesh, T* data, size_t n, ReduceFn reduce, uint32_t tag,
                         T* tmp) {
  const int W = mesh.size(), rank = mesh.rank();
  mesh.exchange(data, tmp, n * sizeof(T), tag);
  auto from = [&](int r) -> const T* { return r == rank ? data : tmp + mesh.slot(r) * n; };
  // Rank 0 folds into its own tensor; the others into rank 0's received copy, the last step into
  // `data` (the reduce functions allow the output to be either input).
  T* acc = rank == 0 ? data : tmp;
  for (int r = 1; r < W; ++r) reduce(r == W - 1 ? data : acc, acc, from(r), n);
}

// Ring all-reduce over DirectMesh (gloo's ring, driven by the calling thread): W - 1 reduce-scatter
// steps, each sending one of W chunks to the right neighbour and adding the chunk that arrives from
// the left, then W - 1 all-gather steps passing the finished chunks on. Each chunk is reduced once,
// along the ring, and copied to the others, so every rank ends with the same bits. `tmp` holds one
// chunk (n / W rounded up).
// One step around the ring: `send_bytes` from `send` to the right neighbour, `recv_bytes` from the left
// one into `recv` (with two ranks both are the other rank: one message each way).
inline void ring_step(DirectMesh& mesh, const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                      uint32_t tag) {
  const int W = mesh.size(), rank = mesh.rank();
  const int right = (rank + 1) % W, left = (rank + W - 1) % W;
  // On the stack: a span, not a vector, per step.
  const DirectMesh::Message both[] = {{right, send, send_bytes, recv, recv_bytes}};
  const DirectMesh::Message apart[] = {{right, send, send_bytes, nullptr, 0, true, false},
                                       {left, nullptr, 0, recv, recv_bytes, false, true}};
  if (left == right) {
    mesh.transfer(both, tag);
  } else {
    mesh.transfer(apart, tag);
  }
}

// Ring all-reduce over DirectMesh (gloo's ring, driven by the calling thread): W - 1 reduce-scatter
// steps, each sending one of W chunks to the right neighbour and adding the chunk that arrives from
// the left, then W - 1 all-gather steps passing the finished chunks on. Each chunk is reduced once,
// along the ring, and copied to the others, so every rank ends with the same bits. `tmp` holds one
// chunk (n / W rounded up).
template <typename T>
void ring_all_reduce(DirectMesh& mesh, T* data, size_t n, ReduceFn reduce, uint32_t tag,
                     T* tmp) {
  const int W = mesh.size(), rank = mesh.rank();
  auto begin = [&](int c) { return static_cast<size_t>(c) * n / static_cast<size_t>(W); };
  auto length = [&](int c) { return begin(c + 1) - begin(c); };
  auto step = [&](int send_chunk, int recv_chunk, T* recv_to) {
    ring_step(mesh, data + begin(send_chunk), length(send_chunk) * sizeof(T), recv_to, length(recv_chunk) * sizeof(T),
              tag);
  };
  for (int s = 0; s < W - 1; ++s) {
    const int send_chunk = (rank - s + W) % W, recv_chunk = (rank - s - 1 + 2 * W) % W;
    step(send_chunk, recv_chunk, tmp);
    reduce(data + begin(recv_chunk), data + begin(recv_chunk), tmp, length(recv_chunk));
  }
  // This rank now holds the whole reduction of chunk rank + 1.
  for (int s = 0; s < W - 1; ++s) {
    const int send_chunk = (rank + 1 - s + W) % W, recv_chunk = (rank - s + W) % W;
    step(send_chunk, recv_chunk, data + begin(recv_chunk));
  }
}

// Ring reduce-scatter over DirectMesh on one flat input of W chunks of n elements: chunk c starts at
// rank c + 1, which sends its own chunk c to the right; every rank on the way adds its chunk c to what
// arrives and passes the sum on, until rank c adds the last one into `out`. W - 1 steps of one chunk
// each way; `in` is only read, and `out` may be its chunk rank (read only at the last step). `tmp`
// holds 2n elements: the chunk arriving and the partial sum (sent before the next is written).
template <typename T>
void ring_reduce_scatter(DirectMesh& mesh, const T* in, T* out, size_t n, ReduceFn reduce, uint32_t tag, T* tmp) {
  const int W = mesh.size(), rank = mesh.rank();
  T* received = tmp;
  T* partial = tmp + n;
  const T* sending = in + static_cast<size_t>((rank + W - 1) % W) * n;
  for (int s = 0; s < W - 1; ++s) {
    const int recv_chunk = (rank - s - 2 + 2 * W) % W;
    ring_step(mesh, sending, n * sizeof(T), received, n * sizeof(T), tag);
    T* sum = s == W - 2 ? out : partial;
    reduce(sum, in + static_cast<size_t>(recv_chunk) * n, received, n);
    sending = partial;
  }
}

// Ring all-gather over DirectMesh on one flat output of W chunks of `bytes`, chunk rank() already in
// place: W - 1 steps, each passing on the chunk that arrived last and receiving the next straight into
// its place. No staging.
inline void ring_all_gather(DirectMesh& mesh, char* out, size_t bytes, uint32_t tag) {
  const int W = mesh.size(), rank = mesh.rank();
  for (int s = 0; s < W - 1; ++s) {
    const int send_chunk = (rank - s + W) % W, recv_chunk = (rank - s - 1 + W) % W;
    ring_step(mesh, out + static_cast<size_t>(send_chunk) * bytes, bytes, out + static_cast<size_t>(recv_chunk) * bytes,
              bytes, tag);
  }
}

}  // namespace lockstep::dist::detail
