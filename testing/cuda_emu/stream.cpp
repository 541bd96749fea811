// The CUDA emulator's streams and events. Each stream has a worker thread that executes its queued
// work in order while the host goes on, as a GPU does; so a missing synchronization shows up here as
// it would on a GPU (stale or half-written data), not hidden by running work at once.
//
// An event is a (stream, ticket) pair: recording it queues a marker; it is complete once the stream has
// executed its ticket. cudaStreamWaitEvent queues, on the waiting stream, work that blocks its worker
// until then. The legacy default stream (0) is one stream per device that, as in CUDA, waits for the
// device's blocking streams and is waited for by them; cudaStreamNonBlocking streams skip that.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "emu.h"

struct CUstream_st {
  CUstream_st(int d, bool b) : device(d), blocking(b) {}
  int device;
  bool blocking;  // takes part in the legacy default stream's implicit synchronization
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  uint64_t enqueued = 0, executed = 0;
};

struct CUevent_st {
  CUevent_st(int d, bool t) : device(d), timing(t) {}
  int device;
  bool timing;
  std::mutex mu;
  CUstream_st* stream = nullptr;  // where it was last recorded; nullptr: never recorded (complete)
  uint64_t ticket = 0;
  std::chrono::steady_clock::time_point when;  // set when the marker executes
};

namespace lockstep_emu {
namespace {

struct Registry {
  std::mutex mu;
  std::set<CUstream_st*> streams;  // live handles
  std::vector<CUstream_st*> all;   // every stream ever made, destroyed ones too (device synchronization)
  // Live events. A queued marker holds its event too, so destroying one while its record is still
  // queued is safe (CUDA defers the release likewise) and nothing leaks.
  std::map<CUevent_st*, std::shared_ptr<CUevent_st>> events;
  CUstream_st* legacy[64] = {};
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: workers run until the process ends
  return *r;
}

void worker(CUstream_st* s) {
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock<std::mutex> lock(s->mu);
      s->cv.wait(lock, [&] { return !s->queue.empty(); });
      work = std::move(s->queue.front());
      s->queue.pop_front();
    }
    // After a device fault nothing more runs, as on a GPU whose context is lost.
    if (sticky_error() == cudaSuccess) work();
    {
      std::lock_guard<std::mutex> lock(s->mu);
      ++s->executed;
    }
    s->cv.notify_all();
  }
}

CUstream_st* create(int device, bool blocking) {
  mark_used();
  auto* s = new CUstream_st(device, blocking);
  std::thread(worker, s).detach();
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().streams.insert(s);
  registry().all.push_back(s);
  return s;
}

uint64_t push(CUstream_st* s, std::function<void()> work) {
  std::lock_guard<std::mutex> lock(s->mu);
  s->queue.push_back(std::move(work));
  s->cv.notify_all();
  return ++s->enqueued;
}

uint64_t tail(CUstream_st* s) {
  std::lock_guard<std::mutex> lock(s->mu);
  return s->enqueued;
}

bool event_done(CUevent_st* e) {
  std::lock_guard<std::mutex> lock(e->mu);
  if (!e->stream) return true;
  std::lock_guard<std::mutex> slock(e->stream->mu);
  return e->stream->executed >= e->ticket;
}

std::shared_ptr<CUevent_st> live_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto it = registry().events.find(e);
  return it == registry().events.end() ? nullptr : it->second;
}

}  // namespace

CUstream_st* resolve(cudaStream_t s) {
  Registry& r = registry();
  if (s == nullptr) {
    const int d = current_device();
    {
      std::lock_guard<std::mutex> lock(r.mu);
      if (r.legacy[d]) return r.legacy[d];
    }
    CUstream_st* created = create(d, /*blocking=*/false);
    std::lock_guard<std::mutex> lock(r.mu);
    r.streams.erase(created);  // not a handle the caller may name or destroy
    if (!r.legacy[d]) r.legacy[d] = created;
    return r.legacy[d];
  }
  std::lock_guard<std::mutex> lock(r.mu);
  return r.streams.count(s) ? s : nullptr;
}

uint64_t enqueue(CUstream_st* s, std::function<void()> work) {
  // The legacy default stream's implicit synchronization with the device's blocking streams.
  Registry& r = registry();
  std::vector<std::pair<CUstream_st*, uint64_t>> before;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    CUstream_st* legacy = r.legacy[s->device];
    if (s == legacy) {
      for (CUstream_st* o : r.streams)
        if (o->device == s->device && o->blocking) before.emplace_back(o, 0);
    } else if (s->blocking && legacy) {
      before.emplace_back(legacy, 0);
    }
  }
  for (auto& [o, t] : before) t = tail(o);
  before.erase(std::remove_if(before.begin(), before.end(), [](auto& p) { return p.second == 0; }), before.end());
  if (!before.empty())
    push(s, [before] {
      for (auto& [o, t] : before) wait(o, t);
    });
  return push(s, std::move(work));
}

void wait(CUstream_st* s, uint64_t ticket) {
  std::unique_lock<std::mutex> lock(s->mu);
  s->cv.wait(lock, [&] { return s->executed >= ticket; });
}

int stream_device(const CUstream_st* s) { return s->device; }

void wait_all_streams(int device) {
  std::vector<CUstream_st*> all;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    all = registry().all;
  }
  for (CUstream_st* s : all)
    if (device < 0 || s->device == device) wait(s, tail(s));
}

}  // namespace lockstep_emu

using namespace lockstep_emu;

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (cudaError_t e = sticky_error(); e != cudaSuccess) return e;
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  *stream = create(current_device(), !(flags & cudaStreamNonBlocking));
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int) {
  return cudaStreamCreateWithFlags(stream, flags);  // priorities only reorder work; not emulated
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  CUstream_st* s = stream ? resolve(stream) : nullptr;
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a live stream");
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().streams.erase(s);
  }
  // Queued work still runs (as in CUDA); the worker and the stream stay, unnamed, until the process
  // ends, since an event may still refer to them.
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (cudaError_t e = sticky_error(); e != cudaSuccess) return e;
  CUstream_st* s = resolve(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: not a live stream");
  wait(s, tail(s));
  return sticky_error();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (cudaError_t e = sticky_error(); e != cudaSuccess) return e;
  CUstream_st* s = resolve(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery: not a live stream");
  std::lock_guard<std::mutex> lock(s->mu);
  return s->executed == s->enqueued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (cudaError_t e = sticky_error(); e != cudaSuccess) return e;
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  auto e = std::make_shared<CUevent_st>(current_device(), !(flags & cudaEventDisableTiming));
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().events[e.get()] = e;
  *event = e.get();
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(registry().mu);
  if (!registry().events.erase(event))
    return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: not a live event");
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (cudaError_t e = sticky_error(); e != cudaSuccess) return e;
  std::shared_ptr<CUevent_st> e = live_event(event);
  CUstream_st* s = resolve(stream);
  if (!e || !s) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: not a live event or stream");
  if (e->device != s->device)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: event of device " + std::to_string(e->device) +
                                                    " recorded on a stream of device " + std::to_string(s->device));
  std::lock_guard<std::mutex> lock(e->mu);
  e->stream = s;
  // The marker stamps the time only if this is still the event's latest record (a re-record may have
  // replaced it while it was queued).
  e->ticket = enqueue(s, [e, s] {
    std::lock_guard<std::mutex> elock(e->mu);
    if (e->stream == s && s->executed + 1 == e->ticket) e->when = std::chrono::steady_clock::now();
  });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (cudaError_t e = sticky_error(); e != cudaSuccess) return e;
  std::shared_ptr<CUevent_st> e = live_event(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: not a live event");
  return event_done(e.get()) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (cudaError_t e = sticky_error(); e != cudaSuccess) return e;
  std::shared_ptr<CUevent_st> e = live_event(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: not a live event");
  CUstream_st* s;
  uint64_t t;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    s = e->stream, t = e->ticket;
  }
  if (s) wait(s, t);
  return sticky_error();
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (cudaError_t e = sticky_error(); e != cudaSuccess) return e;
  std::shared_ptr<CUevent_st> e = live_event(event);
  CUstream_st* s = resolve(stream);
  if (!e || !s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: not a live event or stream");
  CUstream_st* on;
  uint64_t t;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    on = e->stream, t = e->ticket;  // the most recent record at the time of the call, as in CUDA
  }
  if (on) enqueue(s, [on, t] { wait(on, t); });
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (cudaError_t e = sticky_error(); e != cudaSuccess) return e;
  std::shared_ptr<CUevent_st> a = live_event(start), b = live_event(end);
  if (!a || !b) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: not a live event");
  auto recorded = [](CUevent_st& e) {
    std::lock_guard<std::mutex> lock(e.mu);
    return e.stream != nullptr;
  };
  if (!recorded(*a) || !recorded(*b))
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was never recorded");
  if (!a->timing || !b->timing) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: timing disabled");
  if (!event_done(a.get()) || !event_done(b.get())) return cudaErrorNotReady;
  if (a == b) {
    *ms = 0;
    return cudaSuccess;
  }
  std::scoped_lock lock(a->mu, b->mu);
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return cudaSuccess;
}
