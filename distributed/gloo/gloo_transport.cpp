// GlooTransport: gloo's TCP pairs and gloo's algorithms, gloo's errors explained.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <cstring>

#include "distributed/gloo/algorithms.h"
#include "distributed/gloo/direct_mesh.h"
#include "distributed/gloo/gloo_store_adapter.h"
#include "distributed/gloo/transport.h"
#include "distributed/net/socket.h"
#include "distributed/process_group.h"

namespace lockstep::dist {

using lockstep::detail::str_cat;

GlooTransport::GlooTransport(std::shared_ptr<Store> store, int rank, int size, const std::string& hostname,
                             const std::string& iface, std::chrono::milliseconds timeout, bool bcube, Scratch& scratch)
    : rank_(rank), size_(size), timeout_(timeout), bcube_(bcube), scratch_(scratch) {
  gloo::transport::tcp::attr attr;
  attr.hostname = hostname;
  if (hostname.empty()) attr.iface = iface;
  BlockSigpipe no_sigpipe;  // in gloo's event-loop thread, which the device starts
  device_ = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(timeout);
  GlooStoreAdapter adapter(store);
  const std::vector<PeerSockets::Socket> sockets_before = PeerSockets::snapshot();
  context->connectFullMesh(adapter, device_);
  context_ = std::move(context);
  peer_sockets_.identify(*store, rank, size, sockets_before);
}

GlooTransport::~GlooTransport() {
  context_.reset();  // closes the pairs' sockets
  device_.reset();   // stops gloo's event loop thread
}

std::string GlooTransport::address() const { return device_->str(); }

std::string GlooTransport::summary() const {
  return str_cat("gloo's TCP pairs: all_reduce gloo ", bcube_ ? "bcube" : "ring",
                 ", broadcast, all_gather and barrier gloo's, reduce_scatter ring");
}

template <typename F>
void GlooTransport::guarded(F&& fn) {
  try {
    fn();
  } catch (const PeerError&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerError(explain(e.what()));
  }
}

std::string GlooTransport::explain(const std::string& gloo_error) const {
  auto has = [&](const char* part) { return gloo_error.find(part) != std::string::npos; };
  // A rank that times out closes all its connections itself: its own error is the timeout, and the
  // ranks it was connected to see it go.
  if (has("Timed out") || has("timed out") || has("Timeout") || has("timeout")) {
    return str_cat("timed out after ", format_seconds(timeout_),
                   " waiting for the other ranks (one may be hung, dead, or not calling this "
                   "collective; LOCKSTEP_DISTRIBUTED_DEBUG=DETAIL names it) [gloo: ",
                   gloo_error, "]");
  }
  const std::vector<int> lost = peer_sockets_.lost();
  if (lost.empty()) return gloo_error;
  std::string ranks;
  for (int r : lost) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  const char* how = has("closed by peer")  ? "peer closed the connection"
                    : has("reset by peer") ? "connection reset by peer"
                    : has("Broken pipe")   ? "broken pipe"
                                           : "connection error";
  return str_cat("lost connection to rank", lost.size() > 1 ? "s " : " ", ranks, " (", how,
                 "; its process may have died or failed) [gloo: ", gloo_error, "]");
}

void GlooTransport::all_reduce(const Tensor& tensor, ReduceOp op, uint32_t tag) {
  guarded([&] {
    dispatch(tensor.dtype(), [&](auto t) {
      using T = typename decltype(t)::type;
      T* data = static_cast<T*>(tensor.data_ptr());
      const size_t n = static_cast<size_t>(tensor.numel());
      gloo::AllreduceOptions opts(context_);
      opts.setOutput<T>(data, n);
      opts.setReduceFunction(detail::reduce_fn<T>(op));
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      if (bcube_) opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
      gloo::allreduce(opts);
    });
  });
}

void GlooTransport::broadcast(const Tensor& tensor, int root, uint32_t tag) {
  guarded([&] {
    dispatch(tensor.dtype(), [&](auto t) {
      using T = typename decltype(t)::type;
      gloo::BroadcastOptions opts(context_);
      opts.setOutput<T>(static_cast<T*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel()));
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  });
}

void GlooTransport::all_gather(const std::vector<Tensor>& outputs, const Tensor& input, uint32_t tag) {
  guarded([&] {
    const size_t nbytes = input.nbytes();
    // Straight into the outputs when they are one run (chunks of one tensor), else through scratch.
    char* flat = static_cast<char*>(detail::contiguous_base(outputs));
    char* gathered = flat ? flat : static_cast<char*>(scratch_.get(nbytes * size_));
    char* mine = gathered + nbytes * rank_;
    dispatch(input.dtype(), [&](auto t) {
      using T = typename decltype(t)::type;
      const size_t n = static_cast<size_t>(input.numel());
      gloo::AllgatherOptions opts(context_);
      // Without an input gloo gathers in place: this rank's slot already holds the input.
      if (mine != input.data_ptr()) opts.setInput<T>(static_cast<T*>(input.data_ptr()), n);
      opts.setOutput<T>(reinterpret_cast<T*>(gathered), n * size_);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
    if (!flat) {
      for (int r = 0; r < size_; ++r) std::memcpy(outputs[r].data_ptr(), gathered + nbytes * r, nbytes);
    }
  });
}

void GlooTransport::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                   uint32_t tag) {
  guarded([&] {
    dispatch(output.dtype(), [&](auto t) {
      using T = typename decltype(t)::type;
      const size_t n = static_cast<size_t>(output.numel());
      detail::ring_reduce_scatter<T>(context_, inputs, static_cast<T*>(output.data_ptr()), n, detail::reduce_fn<T>(op),
                                     tag, timeout_, static_cast<T*>(scratch_.get(3 * output.nbytes())));
    });
  });
}

void GlooTransport::barrier(uint32_t tag) {
  guarded([&] {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

}  // namespace lockstep::dist
