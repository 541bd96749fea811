// The CUDA emulator's NCCL: ranks are processes on one machine; each collective, when its stream
// reaches it, writes this rank's contribution to FOLDER/SEQ.RANK (FOLDER named by the unique id, under
// $TMPDIR) and reads every rank's file for SEQ. Reductions fold in rank order, so every rank gets the
// same bits. Checked as NCCL checks: ranks and counts, that buffers are device memory of the
// communicator's device, and a wait for peers bounded by LOCKSTEP_CUDA_EMU_NCCL_TIMEOUT_S (default 600)
// and cut short by ncclCommAbort; a failed collective sets the asynchronous error, as in NCCL.
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "emu.h"

namespace fs = std::filesystem;
using namespace lockstep_emu;

namespace {

constexpr char kMagic[] = "lockstep-nccl-emu:";

struct CommState {
  std::string dir;
  int nranks, rank, device;
  std::atomic<bool> aborted{false};
  std::atomic<ncclResult_t> async{ncclSuccess};
  std::atomic<int> pending{0};  // collectives queued and not yet executed
  std::mutex mu;
  std::string last_error;
  uint64_t next_seq = 0;  // the order collectives were issued in, which must match across ranks
};

std::chrono::seconds peer_timeout() {
  const char* v = std::getenv("LOCKSTEP_CUDA_EMU_NCCL_TIMEOUT_S");
  return std::chrono::seconds(v && *v ? std::atol(v) : 600);
}

size_t dtype_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
  }
  return 0;
}

thread_local std::string tl_last_error;

ncclResult_t refuse(ncclResult_t r, const std::string& why) {
  tl_last_error = why;
  note("NCCL: " + why);
  return r;
}

void write_file(const fs::path& path, const void* data, size_t bytes) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  }
  fs::rename(tmp, path);  // readers never see a half-written file
}

// Waits for FOLDER/NAME.R for every rank R and returns their contents; false on abort or timeout
// (recorded as the communicator's asynchronous error).
bool gather_files(CommState& c, const std::string& name, std::vector<std::vector<char>>& out) {
  out.assign(c.nranks, {});
  const auto deadline = std::chrono::steady_clock::now() + peer_timeout();
  auto pause = std::chrono::microseconds(20);
  for (int r = 0; r < c.nranks;) {
    const fs::path p = fs::path(c.dir) / (name + "." + std::to_string(r));
    std::error_code ec;
    if (fs::exists(p, ec)) {
      std::ifstream in(p, std::ios::binary);
      out[r].assign(std::istreambuf_iterator<char>(in), {});
      ++r;
      pause = std::chrono::microseconds(20);
      continue;
    }
    if (c.aborted) return false;
    if (std::chrono::steady_clock::now() > deadline) {
      std::lock_guard<std::mutex> lock(c.mu);
      c.last_error = "rank " + std::to_string(r) + " did not reach " + name + " within the emulator's timeout";
      c.async = ncclRemoteError;
      return false;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
  return true;
}

template <typename T>
void fold(T* acc, const T* x, size_t n, ncclRedOp_t op) {
  for (size_t i = 0; i < n; ++i) switch (op) {
      case ncclSum:
      case ncclAvg: acc[i] = acc[i] + x[i]; break;
      case ncclProd: acc[i] = acc[i] * x[i]; break;
      case ncclMax: acc[i] = acc[i] < x[i] ? x[i] : acc[i]; break;
      case ncclMin: acc[i] = x[i] < acc[i] ? x[i] : acc[i]; break;
    }
}

template <typename T>
void reduce_typed(void* out, const std::vector<const char*>& parts, size_t n, ncclRedOp_t op) {
  T* acc = static_cast<T*>(out);
  std::memmove(acc, parts[0], n * sizeof(T));
  for (size_t r = 1; r < parts.size(); ++r) fold(acc, reinterpret_cast<const T*>(parts[r]), n, op);
  if (op == ncclAvg)
    for (size_t i = 0; i < n; ++i) acc[i] = static_cast<T>(acc[i] / static_cast<T>(parts.size()));
}

// out = op over parts (rank order), n elements of `type`.
bool reduce(void* out, const std::vector<const char*>& parts, size_t n, ncclDataType_t type, ncclRedOp_t op) {
  switch (type) {
    case ncclInt8: reduce_typed<int8_t>(out, parts, n, op); return true;
    case ncclUint8: reduce_typed<uint8_t>(out, parts, n, op); return true;
    case ncclInt32: reduce_typed<int32_t>(out, parts, n, op); return true;
    case ncclUint32: reduce_typed<uint32_t>(out, parts, n, op); return true;
    case ncclInt64: reduce_typed<int64_t>(out, parts, n, op); return true;
    case ncclUint64: reduce_typed<uint64_t>(out, parts, n, op); return true;
    case ncclFloat32: reduce_typed<float>(out, parts, n, op); return true;
    case ncclFloat64: reduce_typed<double>(out, parts, n, op); return true;
    case ncclFloat16: return false;
  }
  return false;
}

// What every collective shares: the checks at the call, then at execution the exchange of `send_bytes`
// from `send` and finish(contributions) to place the result.
ncclResult_t collective(const char* name, ncclComm_t comm, cudaStream_t stream, ncclDataType_t type,
                        std::vector<std::pair<const void*, size_t>> device_buffers, const void* send, size_t send_bytes,
                        std::function<void(const std::vector<const char*>&)> finish) {
  if (!comm) return refuse(ncclInvalidArgument, std::string(name) + ": null communicator");
  std::shared_ptr<CommState> c = *reinterpret_cast<std::shared_ptr<CommState>*>(comm);
  if (c->aborted) return refuse(ncclInvalidUsage, std::string(name) + ": the communicator was aborted");
  if (dtype_size(type) == 0 || type == ncclFloat16)
    return refuse(ncclInvalidArgument, std::string(name) + ": datatype not emulated");
  for (auto [p, bytes] : device_buffers)
    if (bytes > 0 && device_of(p, bytes) != c->device)
      return refuse(ncclInvalidArgument, std::string(name) + ": buffer is not " + std::to_string(bytes) +
                                             " bytes of memory on the communicator's device " +
                                             std::to_string(c->device));
  CUstream_st* s = resolve(stream);
  if (!s) return refuse(ncclInvalidArgument, std::string(name) + ": not a live stream");
  if (stream_device(s) != c->device)
    return refuse(ncclInvalidUsage, std::string(name) + ": stream of device " + std::to_string(stream_device(s)) +
                                        ", communicator of device " + std::to_string(c->device));
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    seq = ++c->next_seq;
  }
  ++c->pending;
  enqueue(s, [c, seq, send, send_bytes, finish] {
    struct Done {
      CommState& c;
      ~Done() { --c.pending; }
    } done{*c};
    if (c->aborted || c->async != ncclSuccess) return;
    const std::string tag = std::to_string(seq);
    write_file(fs::path(c->dir) / (tag + "." + std::to_string(c->rank)), send, send_bytes);
    std::vector<std::vector<char>> data;
    if (!gather_files(*c, tag, data)) return;
    std::vector<const char*> parts;
    for (auto& d : data) parts.push_back(d.data());
    finish(parts);
    // Every rank has read SEQ-2's files: it reached SEQ-1, which needed their SEQ-1 files, written
    // only after they had finished SEQ-2.
    std::error_code ec;
    if (seq > 2) fs::remove(fs::path(c->dir) / (std::to_string(seq - 2) + "." + std::to_string(c->rank)), ec);
  });
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return refuse(ncclInvalidArgument, "ncclGetUniqueId: null id");
  std::memset(id, 0, sizeof *id);
  std::random_device rd;
  const std::string token = kMagic + std::to_string(::getpid()) + "-" + std::to_string(rd()) + std::to_string(rd());
  std::memcpy(id->internal, token.data(), std::min(token.size(), sizeof id->internal - 1));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm) return refuse(ncclInvalidArgument, "ncclCommInitRank: null comm");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return refuse(ncclInvalidArgument,
                  "ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  const std::string token(id.internal, strnlen(id.internal, sizeof id.internal));
  if (token.rfind(kMagic, 0) != 0)
    return refuse(ncclInvalidArgument, "ncclCommInitRank: not an id from ncclGetUniqueId");
  if (device_count() == 0) return refuse(ncclUnhandledCudaError, "ncclCommInitRank: no CUDA device");
  const char* tmp = std::getenv("TMPDIR");
  auto c = std::make_shared<CommState>();
  c->dir = (fs::path(tmp && *tmp ? tmp : "/tmp") / ("lockstep-nccl-emu-" + token.substr(sizeof kMagic - 1))).string();
  c->nranks = nranks, c->rank = rank, c->device = current_device();
  std::error_code ec;
  fs::create_directories(c->dir, ec);
  if (ec) return refuse(ncclSystemError, "ncclCommInitRank: cannot create " + c->dir + ": " + ec.message());
  // Blocks until every rank has joined, as NCCL's init does; each says how many ranks it expects.
  const std::string n = std::to_string(nranks);
  write_file(fs::path(c->dir) / ("init." + std::to_string(rank)), n.data(), n.size());
  std::vector<std::vector<char>> joined;
  if (!gather_files(*c, "init", joined)) return refuse(ncclSystemError, "ncclCommInitRank: " + c->last_error);
  for (int r = 0; r < nranks; ++r)
    if (std::string(joined[r].begin(), joined[r].end()) != n)
      return refuse(ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(r) + " expects " +
                                          std::string(joined[r].begin(), joined[r].end()) + " ranks, this one " + n);
  *comm = reinterpret_cast<ncclComm_t>(new std::shared_ptr<CommState>(std::move(c)));
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return refuse(ncclInvalidArgument, "ncclCommDestroy: null communicator");
  auto* handle = reinterpret_cast<std::shared_ptr<CommState>*>(comm);
  CommState& c = **handle;
  // Outstanding collectives finish first (NCCL's destroy waits for them too); then the last rank to
  // leave removes the folder.
  while (c.pending > 0 && !c.aborted && c.async == ncclSuccess)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  std::error_code ec;
  const std::string r = std::to_string(c.rank);
  write_file(fs::path(c.dir) / ("done." + r), r.data(), r.size());
  bool all = true;
  for (int i = 0; i < c.nranks && all; ++i) all = fs::exists(fs::path(c.dir) / ("done." + std::to_string(i)), ec);
  if (all) fs::remove_all(c.dir, ec);
  delete handle;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  auto* handle = reinterpret_cast<std::shared_ptr<CommState>*>(comm);
  (*handle)->aborted = true;  // queued collectives end without exchanging; the folder is left behind
  delete handle;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!comm || !async_error) return refuse(ncclInvalidArgument, "ncclCommGetAsyncError: null argument");
  *async_error = (*reinterpret_cast<std::shared_ptr<CommState>*>(comm))->async;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(ncclComm_t comm, int* count) {
  if (!comm || !count) return ncclInvalidArgument;
  *count = (*reinterpret_cast<std::shared_ptr<CommState>*>(comm))->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(ncclComm_t comm, int* rank) {
  if (!comm || !rank) return ncclInvalidArgument;
  *rank = (*reinterpret_cast<std::shared_ptr<CommState>*>(comm))->rank;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t comm) {
  if (comm) {
    CommState& c = **reinterpret_cast<std::shared_ptr<CommState>*>(comm);
    std::lock_guard<std::mutex> lock(c.mu);
    if (!c.last_error.empty()) {
      tl_last_error = c.last_error;
      return tl_last_error.c_str();
    }
  }
  return tl_last_error.c_str();
}

// Collectives are exchanged one by one in issue order, which every rank shares, so a group needs no
// fusing to avoid deadlock here.
ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * dtype_size(type);
  return collective("ncclAllReduce", comm, stream, type, {{send, bytes}, {recv, bytes}}, send, bytes,
                    [=](const std::vector<const char*>& parts) { reduce(recv, parts, count, type, op); });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  const size_t bytes = count * dtype_size(type);
  int rank = -1, n = 0;
  if (comm) ncclCommUserRank(comm, &rank), ncclCommCount(comm, &n);
  if (comm && (root < 0 || root >= n))
    return refuse(ncclInvalidArgument, "ncclBroadcast: root " + std::to_string(root) + " of " + std::to_string(n));
  const bool me = rank == root;
  return collective("ncclBroadcast", comm, stream, type, {{me ? send : recv, bytes}, {recv, bytes}}, send,
                    me ? bytes : 0,
                    [=](const std::vector<const char*>& parts) { std::memmove(recv, parts[root], bytes); });
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * dtype_size(type);
  int rank = -1, n = 0;
  if (comm) ncclCommUserRank(comm, &rank), ncclCommCount(comm, &n);
  if (comm && (root < 0 || root >= n))
    return refuse(ncclInvalidArgument, "ncclReduce: root " + std::to_string(root) + " of " + std::to_string(n));
  const bool me = rank == root;
  return collective("ncclReduce", comm, stream, type, {{send, bytes}, {me ? recv : send, bytes}}, send, bytes,
                    [=](const std::vector<const char*>& parts) {
                      if (me) reduce(recv, parts, count, type, op);
                    });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  const size_t bytes = sendcount * dtype_size(type);
  int n = 0;
  if (comm) ncclCommCount(comm, &n);
  return collective("ncclAllGather", comm, stream, type, {{send, bytes}, {recv, bytes * n}}, send, bytes,
                    [=](const std::vector<const char*>& parts) {
                      for (size_t r = 0; r < parts.size(); ++r)
                        std::memmove(static_cast<char*>(recv) + r * bytes, parts[r], bytes);
                    });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = recvcount * dtype_size(type);
  int rank = 0, n = 0;
  if (comm) ncclCommUserRank(comm, &rank), ncclCommCount(comm, &n);
  return collective("ncclReduceScatter", comm, stream, type, {{send, bytes * n}, {recv, bytes}}, send, bytes * n,
                    [=](const std::vector<const char*>& parts) {
                      std::vector<const char*> mine;
                      for (const char* p : parts) mine.push_back(p + rank * bytes);
                      reduce(recv, mine, recvcount, type, op);
                    });
}
