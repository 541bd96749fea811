// The CUDA emulator's NCCL: ranks are processes on one machine; each collective, when its stream
// reaches it, writes this rank's contribution to FOLDER/SEQ.RANK (FOLDER named by the unique id, under
// $TMPDIR) and reads every rank's file for SEQ. Reductions fold in rank order, so every rank gets the
// same bits; integers wrap, as in NCCL. A communicator's collectives execute in issue order, as NCCL's
// do, even when they are queued on different streams.
//
// Checked at the call: ranks and roots, that buffers are device memory of the communicator's device,
// the stream's device, and no sticky device fault (ncclUnhandledCudaError). Checked at execution:
// every rank's file starts with a header (collective, count, datatype, op, root, rank count, payload
// bytes) that must match this rank's own; a mismatch (the ranks issued different collectives at the same
// position, which hangs or corrupts memory under NCCL) or an unreadable file is ncclInvalidUsage, with a
// message naming the collective, its number, the rank and the field, printed to stderr. The wait for
// peers is bounded by LOCKSTEP_CUDA_EMU_NCCL_TIMEOUT_S (default 600; then ncclRemoteError) and cut
// short by ncclCommAbort. A failed collective sets the asynchronous error, as in NCCL, and the
// communicator's later collectives do nothing.
#include <Eigen/Core>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
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
  std::atomic<int> pending{0};  // collectives queued whose closures still exist (run or not)
  std::mutex mu;
  std::condition_variable cv;  // signalled when `started` or `completed` grows, on abort and on failure
  std::string last_error;
  uint64_t next_seq = 0;   // the order collectives were issued in, which must match across ranks
  uint64_t started = 0;    // the last collective that began its exchange
  uint64_t completed = 0;  // every collective up to this one has completed, failed or been skipped
};

// Read at each wait, so that a test can shorten it after init. A value that is not a number keeps the
// default (atol read it as 0 s, failing every collective at once).
std::chrono::seconds peer_timeout() { return std::chrono::seconds(env_int("LOCKSTEP_CUDA_EMU_NCCL_TIMEOUT_S", 600)); }

size_t dtype_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
  }
  return 0;
}

std::string dtype_name(int t) {
  static const char* const names[] = {"ncclInt8",    "ncclUint8",   "ncclInt32",   "ncclUint32",  "ncclInt64",
                                      "ncclUint64",  "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16"};
  return t >= 0 && t < 10 ? names[t] : "datatype " + std::to_string(t);
}

std::string op_name(int op) {
  static const char* const names[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
  return op >= 0 && op < 5 ? names[op] : op == -1 ? "none" : "op " + std::to_string(op);
}

enum Kind : int32_t { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter };

std::string kind_name(int k) {
  static const char* const names[] = {"ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather",
                                      "ncclReduceScatter"};
  return k >= 0 && k < 5 ? names[k] : "collective " + std::to_string(k);
}

// One collective as this rank issued it.
struct Call {
  Kind kind;
  size_t count;  // as passed: AllGather's sendcount, ReduceScatter's recvcount
  ncclDataType_t type;
  int op = -1;    // -1: none (Broadcast, AllGather)
  int root = -1;  // -1: none (AllReduce, AllGather, ReduceScatter)
};

// The bytes rank `r` of `nranks` contributes to a collective of `kind` with `count` elements of `type`.
size_t payload_bytes(int kind, uint64_t count, int type, int root, int nranks, int r) {
  const size_t bytes = count * dtype_size(ncclDataType_t(type));
  switch (kind) {
    case kBroadcast: return r == root ? bytes : 0;
    case kReduceScatter: return bytes * nranks;
    default: return bytes;
  }
}

// What precedes each contribution in its file, so every rank can check that all of them issued the same
// collective at this position.
struct Header {
  char magic[8];
  int32_t kind, type, op, root, nranks, reserved;
  uint64_t count, bytes;  // bytes: the payload that follows
};
constexpr char kHeaderMagic[8] = "lsnccl1";
static_assert(std::is_trivially_copyable_v<Header> && sizeof(Header) == 48);

Header header_of(const Call& call, int nranks, int rank) {
  Header h{};
  std::memcpy(h.magic, kHeaderMagic, sizeof h.magic);
  h.kind = call.kind, h.type = call.type, h.op = call.op, h.root = call.root, h.nranks = nranks;
  h.count = call.count, h.bytes = payload_bytes(call.kind, call.count, call.type, call.root, nranks, rank);
  return h;
}

// "" when rank `r`'s file `data` holds the same collective as `mine` with the payload its header
// announces; else what differs.
std::string check_contribution(const std::vector<char>& data, const Header& mine, int r) {
  const std::string who = "rank " + std::to_string(r);
  Header h;
  if (data.size() < sizeof h) return who + "'s contribution is " + std::to_string(data.size()) + " bytes, no header";
  std::memcpy(&h, data.data(), sizeof h);
  if (std::memcmp(h.magic, kHeaderMagic, sizeof h.magic) != 0) return who + "'s contribution has no header";
  const std::string issued = who + " issued " + kind_name(h.kind);
  if (h.kind != mine.kind) return issued + ", this rank " + kind_name(mine.kind);
  auto differs = [&](const char* field, const std::string& theirs, const std::string& ours) {
    return issued + " with " + field + " " + theirs + ", this rank " + field + " " + ours;
  };
  if (h.nranks != mine.nranks) return differs("nranks", std::to_string(h.nranks), std::to_string(mine.nranks));
  if (h.count != mine.count) return differs("count", std::to_string(h.count), std::to_string(mine.count));
  if (h.type != mine.type) return differs("datatype", dtype_name(h.type), dtype_name(mine.type));
  if (h.op != mine.op) return differs("op", op_name(h.op), op_name(mine.op));
  if (h.root != mine.root) return differs("root", std::to_string(h.root), std::to_string(mine.root));
  const size_t expected = payload_bytes(mine.kind, mine.count, mine.type, mine.root, mine.nranks, r);
  if (h.bytes != expected)
    return who + "'s header announces " + std::to_string(h.bytes) + " payload bytes, " + std::to_string(expected) +
           " expected";
  if (data.size() - sizeof h != h.bytes)
    return who + "'s contribution has " + std::to_string(data.size() - sizeof h) + " payload bytes, its header says " +
           std::to_string(h.bytes);
  return "";
}

thread_local std::string tl_last_error;

ncclResult_t refuse(ncclResult_t r, const std::string& why) {
  tl_last_error = why;
  note("NCCL: " + why);
  return r;
}

// Records the communicator's asynchronous error (the first one stays) and wakes collectives waiting
// for their turn. With `print`, the message goes to stderr whatever the verbosity: a bug in the caller,
// like a device fault.
void fail_comm(CommState& c, ncclResult_t r, const std::string& why, bool print) {
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.async == ncclSuccess) {
      c.last_error = why;
      c.async = r;
    }
  }
  c.cv.notify_all();
  if (print) std::fprintf(stderr, "cuda_emu: NCCL error on rank %d: %s\n", c.rank, why.c_str());
}

bool write_file(const fs::path& path, const void* head, size_t head_bytes, const void* data, size_t bytes) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(static_cast<const char*>(head), static_cast<std::streamsize>(head_bytes));
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    out.close();
    if (!out) return false;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);  // readers never see a half-written file
  return !ec;
}

bool write_file(const fs::path& path, const void* data, size_t bytes) { return write_file(path, "", 0, data, bytes); }

bool read_file(const fs::path& path, std::vector<char>& out) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return false;
  const std::streamoff size = in.tellg();
  if (size < 0) return false;
  out.resize(static_cast<size_t>(size));
  in.seekg(0);
  in.read(out.data(), size);
  return in.good() && in.gcount() == size;
}

// Waits for FOLDER/NAME.R for every rank R and reads them into out[R]. kStopped on abort or timeout
// (the timeout recorded as the communicator's asynchronous error); kUnreadable with *bad the rank
// whose file could not be read.
enum class Gathered { kAll, kStopped, kUnreadable };
Gathered gather_files(CommState& c, const std::string& name, std::vector<std::vector<char>>& out, int* bad) {
  out.assign(c.nranks, {});
  const auto deadline = std::chrono::steady_clock::now() + peer_timeout();
  auto pause = std::chrono::microseconds(20);
  for (int r = 0; r < c.nranks;) {
    const fs::path p = fs::path(c.dir) / (name + "." + std::to_string(r));
    std::error_code ec;
    if (fs::exists(p, ec)) {
      if (!read_file(p, out[r])) {
        *bad = r;
        return Gathered::kUnreadable;
      }
      ++r;
      pause = std::chrono::microseconds(20);
      continue;
    }
    if (c.aborted) return Gathered::kStopped;
    if (std::chrono::steady_clock::now() > deadline) {
      fail_comm(c, ncclRemoteError, "rank " + std::to_string(r) + " did not reach " + name + " within the emulator's timeout",
                false);
      return Gathered::kStopped;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
  return Gathered::kAll;
}

// Integers fold in their unsigned type, so sums and products wrap as NCCL's do (signed overflow would be
// undefined behaviour); int8's and uint8's through unsigned int, which their product cannot overflow.
template <typename T>
T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(W(a) + W(b)));
  } else {
    return a + b;
  }
}

template <typename T>
T mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(W(a) * W(b)));
  } else {
    return a * b;
  }
}

template <typename T>
void fold(T* acc, const T* x, size_t n, ncclRedOp_t op) {
  for (size_t i = 0; i < n; ++i) switch (op) {
      case ncclSum:
      case ncclAvg: acc[i] = add(acc[i], x[i]); break;
      case ncclProd: acc[i] = mul(acc[i], x[i]); break;
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

// 16-bit floats (H: Eigen::half or Eigen::bfloat16, both rounding to nearest even): every part converted to
// float32, folded there in rank order and rounded once, as NCCL's kernels reduce them in float. `out` may
// be one of the parts.
template <typename H>
void reduce_half(void* out, const std::vector<const char*>& parts, size_t n, ncclRedOp_t op) {
  std::vector<float> acc(n), x(n);
  auto load = [n](const char* p, std::vector<float>& to) {
    for (size_t i = 0; i < n; ++i) to[i] = static_cast<float>(reinterpret_cast<const H*>(p)[i]);
  };
  load(parts[0], acc);
  for (size_t r = 1; r < parts.size(); ++r) {
    load(parts[r], x);
    fold(acc.data(), x.data(), n, op);
  }
  if (op == ncclAvg)
    for (float& a : acc) a /= static_cast<float>(parts.size());
  for (size_t i = 0; i < n; ++i) static_cast<H*>(out)[i] = H(acc[i]);
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
    case ncclFloat16: reduce_half<Eigen::half>(out, parts, n, op); return true;
    case ncclBfloat16: reduce_half<Eigen::bfloat16>(out, parts, n, op); return true;
  }
  return false;
}

// Marks collective `seq` (and so every earlier one) as done with, and wakes the next.
void complete(CommState& c, uint64_t seq) {
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.completed = std::max(c.completed, seq);
  }
  c.cv.notify_all();
}

// Waits until collective seq - 1 has completed (NCCL executes a communicator's collectives in issue
// order, whatever streams they are queued on). False when the communicator was aborted or has failed
// meanwhile, or (ncclRemoteError) when for the peer timeout no earlier collective was exchanging and none
// started or completed: the stream of one is held up. An exchanging one is waited for without a bound
// of its own, since its wait for peers has one.
bool wait_turn(CommState& c, const std::string& what, uint64_t seq) {
  std::unique_lock<std::mutex> lock(c.mu);
  auto progress = std::make_pair(c.started, c.completed);
  auto deadline = std::chrono::steady_clock::now() + peer_timeout();
  while (!c.aborted && c.async == ncclSuccess && c.completed + 1 < seq) {
    if (std::make_pair(c.started, c.completed) != progress) {
      progress = std::make_pair(c.started, c.completed);
      deadline = std::chrono::steady_clock::now() + peer_timeout();
    }
    if (c.started > c.completed) {  // an earlier collective is exchanging
      c.cv.wait(lock);
    } else if (std::chrono::steady_clock::now() >= deadline) {
      const uint64_t stuck = c.completed + 1;
      lock.unlock();
      fail_comm(c, ncclRemoteError,
                what + ": this communicator's collective #" + std::to_string(stuck) +
                    ", issued earlier, was not reached by its stream within the emulator's timeout",
                false);
      return false;
    } else {
      c.cv.wait_until(lock, deadline);
    }
  }
  if (c.aborted || c.async != ncclSuccess) return false;
  c.started = std::max(c.started, seq);
  lock.unlock();
  c.cv.notify_all();
  return true;
}

// Held by a queued collective's closure through a shared_ptr, so whether the stream runs the closure or
// drops it unrun (after a device fault), its destruction ends the collective: complete, and no longer
// pending for ncclCommDestroy.
struct Queued {
  std::shared_ptr<CommState> c;
  uint64_t seq;
  ~Queued() {
    complete(*c, seq);
    --c->pending;
  }
};

// What every collective shares: the checks at the call, then at execution its turn (wait_turn), the
// exchange of this rank's header and payload (the header's `bytes` from `send`), the check of every
// rank's contribution against this one's, and finish(payloads, in rank order) to place the result.
ncclResult_t collective(const Call& call, ncclComm_t comm, cudaStream_t stream,
                        std::vector<std::pair<const void*, size_t>> device_buffers, const void* send,
                        std::function<void(const std::vector<const char*>&)> finish) {
  const std::string name = kind_name(call.kind);
  if (!comm) return refuse(ncclInvalidArgument, name + ": null communicator");
  if (cudaError_t e = sticky_error(); e != cudaSuccess)
    return refuse(ncclUnhandledCudaError, name + ": the CUDA context has a sticky error (" +
                                              cudaGetErrorName(e) + "): nothing more can be queued");
  std::shared_ptr<CommState> c = *reinterpret_cast<std::shared_ptr<CommState>*>(comm);
  if (c->aborted) return refuse(ncclInvalidUsage, name + ": the communicator was aborted");
  if (dtype_size(call.type) == 0)
    return refuse(ncclInvalidArgument, name + ": datatype not emulated");
  for (auto [p, bytes] : device_buffers)
    if (bytes > 0 && device_of(p, bytes) != c->device)
      return refuse(ncclInvalidArgument, name + ": buffer is not " + std::to_string(bytes) +
                                             " bytes of memory on the communicator's device " +
                                             std::to_string(c->device));
  CUstream_st* s = resolve(stream);
  if (!s) return refuse(ncclInvalidArgument, name + ": not a live stream");
  if (stream_device(s) != c->device)
    return refuse(ncclInvalidUsage, name + ": stream of device " + std::to_string(stream_device(s)) +
                                        ", communicator of device " + std::to_string(c->device));
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    seq = ++c->next_seq;
  }
  ++c->pending;
  std::shared_ptr<Queued> queued(new Queued{c, seq});
  const Header mine = header_of(call, c->nranks, c->rank);
  enqueue(s, [queued, mine, send, finish, what = name + " #" + std::to_string(seq)] {
    CommState& c = *queued->c;
    const uint64_t seq = queued->seq;
    if (!wait_turn(c, what, seq) || sticky_error() != cudaSuccess) return;
    const std::string tag = std::to_string(seq);
    if (!write_file(fs::path(c.dir) / (tag + "." + std::to_string(c.rank)), &mine, sizeof mine, send, mine.bytes)) {
      fail_comm(c, ncclSystemError, what + ": cannot write this rank's contribution to " + c.dir, true);
      return;
    }
    std::vector<std::vector<char>> data;
    int bad = -1;
    switch (gather_files(c, tag, data, &bad)) {
      case Gathered::kAll: break;
      case Gathered::kStopped: return;
      case Gathered::kUnreadable:
        fail_comm(c, ncclInvalidUsage, what + ": cannot read rank " + std::to_string(bad) + "'s contribution", true);
        return;
    }
    std::vector<const char*> parts;
    for (int r = 0; r < c.nranks; ++r) {
      if (std::string why = check_contribution(data[r], mine, r); !why.empty()) {
        fail_comm(c, ncclInvalidUsage, what + ": " + why, true);
        return;
      }
      parts.push_back(data[r].data() + sizeof(Header));
    }
    finish(parts);
    // Every rank has read SEQ-2's files: each executes the communicator's collectives in issue order
    // (wait_turn), so a rank that wrote its SEQ-1 file, which this rank read in SEQ-1, had completed
    // SEQ-2 by then.
    std::error_code ec;
    if (seq > 2) fs::remove(fs::path(c.dir) / (std::to_string(seq - 2) + "." + std::to_string(c.rank)), ec);
    complete(c, seq);  // the successor need not wait for this closure's destruction
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
  if (!write_file(fs::path(c->dir) / ("init." + std::to_string(rank)), n.data(), n.size()))
    return refuse(ncclSystemError, "ncclCommInitRank: cannot write to " + c->dir);
  std::vector<std::vector<char>> joined;
  int bad = -1;
  switch (gather_files(*c, "init", joined, &bad)) {
    case Gathered::kAll: break;
    case Gathered::kStopped: return refuse(ncclSystemError, "ncclCommInitRank: " + c->last_error);
    case Gathered::kUnreadable:
      return refuse(ncclSystemError, "ncclCommInitRank: cannot read rank " + std::to_string(bad) + "'s init file");
  }
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
  // Outstanding collectives finish first (NCCL's destroy waits for them too), unless the communicator
  // has failed or a device fault stopped the streams; then the last rank to leave removes the folder.
  while (c.pending > 0 && !c.aborted && c.async == ncclSuccess && sticky_error() == cudaSuccess)
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
  CommState& c = **handle;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.aborted = true;  // queued collectives end without exchanging; the folder is left behind
  }
  c.cv.notify_all();
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

// Collectives are exchanged one by one in issue order (wait_turn), which every rank shares, so a group
// needs no fusing to avoid deadlock here.
ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * dtype_size(type);
  return collective({kAllReduce, count, type, op}, comm, stream, {{send, bytes}, {recv, bytes}}, send,
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
  return collective({kBroadcast, count, type, -1, root}, comm, stream, {{me ? send : recv, bytes}, {recv, bytes}}, send,
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
  return collective({kReduce, count, type, op, root}, comm, stream, {{send, bytes}, {me ? recv : send, bytes}}, send,
                    [=](const std::vector<const char*>& parts) {
                      if (me) reduce(recv, parts, count, type, op);
                    });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  const size_t bytes = sendcount * dtype_size(type);
  int n = 0;
  if (comm) ncclCommCount(comm, &n);
  return collective({kAllGather, sendcount, type}, comm, stream, {{send, bytes}, {recv, bytes * n}}, send,
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
  return collective({kReduceScatter, recvcount, type, op}, comm, stream, {{send, bytes * n}, {recv, bytes}}, send,
                    [=](const std::vector<const char*>& parts) {
                      std::vector<const char*> mine;
                      for (const char* p : parts) mine.push_back(p + rank * bytes);
                      reduce(recv, mine, recvcount, type, op);
                    });
}
