// allreduce_bench: all-reduce, reduce-scatter or all-gather sweep (--op all_reduce|reduce_scatter|all_gather)
// in nccl-tests' all_reduce_perf / reduce_scatter_perf / all_gather_perf format, for lockstep's process
// groups (gloo or mpi on CPU tensors, nccl on CUDA tensors) or for the baselines they are measured against:
//   --raw-gloo  gloo's own allreduce called directly on a gloo context of our making (gloo's default
//               algorithm, the ring, as PyTorch uses; bcube with --raw-algorithm bcube). ProcessGroupGloo
//               runs its own transport and algorithms (GlooOptions), so this is the bar it must clear.
//               All-reduce only.
//   --raw-nccl  ncclAllReduce / ncclReduceScatter / ncclAllGather called directly on the same CUDA tensors
//               (builds with NCCL only).
//   --raw-mpi   MPI_Allreduce / MPI_Reduce_scatter_block / MPI_Allgather called directly on the same CPU
//               tensors, on MPI_COMM_WORLD, under mpirun (builds with Open MPI only): the bar for the mpi
//               backend and for shared memory, in the same binary and allocator. tools/mpi/ holds the
//               all-reduce's twin in plain C.
//
//   launch --nproc_per_node=2 bazel-bin/bench/allreduce_bench -b 4 -e 64M -f 4
//   launch --nproc_per_node=2 bazel-bin/bench/allreduce_bench -b 1M -e 64M -f 4 --raw-gloo
//   launch --nproc_per_node=1 bazel-bin/bench/allreduce_bench -b 1M -e 256M --backend nccl   # and --raw-nccl
//   mpirun -np 2 bazel-bin/bench/allreduce_bench --backend mpi   # beside tools/mpi/run.sh 2 (MPI_Allreduce)
//   launch --nproc_per_node=2 bazel-bin/bench/allreduce_bench --op reduce_scatter -b 64K -e 64M
//   mpirun -np 2 bazel-bin/bench/allreduce_bench --op reduce_scatter -b 64K -e 64M --raw-mpi  # its bar
//
// Per size: -w untimed iterations, then -n timed ones, each timed on its own on every rank (host clock
// around the call and its wait; on a GPU also around cuda::synchronize). After the loop one MAX all-reduce
// gathers the per-iteration times, so the time reported is the median over iterations of the slowest rank.
// algbw = size / time; busbw = algbw * 2(n-1)/n for all-reduce, algbw * (n-1)/n for reduce-scatter and
// all-gather (nccl-tests' factors). The size is, as in nccl-tests, the whole buffer: for reduce-scatter
// the input (n chunks), for all-gather the output (n chunks); each rank's chunk is size / n.
//
// Out-of-place: lockstep's all_reduce works in place, so an out-of-place iteration copies the input
// buffer into the output buffer and all-reduces the output; the copy is inside the timed region.
// reduce_scatter_tensor and all_gather_into_tensor take separate buffers out of place; in place the
// output is chunk rank of the input (reduce-scatter), the input chunk rank of the output (all-gather).
//
// #wrong: after the timed loops, one more iteration of each kind on freshly filled buffers, compared
// element by element with the exact expected result: rank r holds r + 1 + (i % 4) at element i, so
// SUM = n(n+1)/2 + n(i % 4), MIN = 1 + (i % 4), MAX = n + (i % 4), AVG = SUM / n; for PROD rank r holds 2
// where (i + r) % n == 0 and 1 elsewhere, so every product is exactly 2 (i: the index in the whole
// buffer, for reduce-scatter too). For all-gather rank r's chunk holds r + 1 + (j % 4) at element j. All exact in every dtype (bfloat16
// and float16 up to 64 ranks); AVG on floats is allowed the rounding of its final division. Sizes and
// bandwidths are in bytes of the dtype: a bfloat16 row moves half the elements' bytes of a float row.
#include <arpa/inet.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#ifdef LOCKSTEP_WITH_MPI
#include <mpi.h>
#endif
#ifdef LOCKSTEP_WITH_NCCL
#include <cuda_runtime_api.h>

#include "distributed/nccl/nccl_util.h"
#endif

#include "distributed/api.h"
#include "distributed/gloo/gloo_store_adapter.h"
#include "distributed/net/job_token.h"
#include "distributed/net/socket.h"
#include "tensor/cuda/cuda.h"
#include "autograd/functions.h"
#include "tensor/factory.h"
#include "tensor/ops.h"  // internal:: for the raw buffers the benchmark drives

using namespace lockstep;
using Op = dist::ReduceOp;

namespace {

// --- The two things measured: lockstep's process group, or gloo called directly ---

class Collective {
 public:
  virtual ~Collective() = default;
  // Blocking, in place; on a GPU it returns once the device has finished.
  virtual void all_reduce(Tensor& t, Op op) = 0;
  // The flat forms (ProcessGroup::reduce_scatter_tensor, all_gather_into_tensor), blocking.
  virtual void reduce_scatter(Tensor& out, const Tensor& in, Op op) {
    fail("allreduce_bench: ", name(), " measures all_reduce only");
  }
  virtual void all_gather(Tensor& out, const Tensor& in) { fail("allreduce_bench: ", name(), " measures all_reduce only"); }
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;
};

// The default process group that init_process_group created.
class ProcessGroupCollective : public Collective {
 public:
  explicit ProcessGroupCollective(Device device) : pg_(dist::default_pg()), device_(device) {}
  void all_reduce(Tensor& t, Op op) override {
    pg_->all_reduce(t, op, /*async_op=*/false);
    if (device_.is_cuda()) cuda::synchronize(device_.index);
  }
  void reduce_scatter(Tensor& out, const Tensor& in, Op op) override {
    pg_->reduce_scatter_tensor(out, in, op, /*async_op=*/false);
    if (device_.is_cuda()) cuda::synchronize(device_.index);
  }
  void all_gather(Tensor& out, const Tensor& in) override {
    pg_->all_gather_into_tensor(out, in, /*async_op=*/false);
    if (device_.is_cuda()) cuda::synchronize(device_.index);
  }
  int rank() const override { return pg_->rank(); }
  int size() const override { return pg_->size(); }
  // "lockstep-gloo/shm": the backend and, where it has a choice, the transport that ran.
  std::string name() const override {
    const std::string transport = pg_->transport();
    return "lockstep-" + pg_->backend_name() + (transport == pg_->backend_name() ? "" : "/" + transport);
  }

 private:
  std::shared_ptr<dist::ProcessGroup> pg_;
  Device device_;
};

std::string env_or_fail(const char* name) {
  const char* v = std::getenv(name);
  LOCKSTEP_CHECK(v && *v, "allreduce_bench: ", name, " is not set (run under bazel-bin/distributed/launch/launch)");
  return v;
}

// gloo::allreduce on the calling thread, with gloo's own reduction functions, on a full mesh built as
// ProcessGroupGloo builds its own: a TCPStore on MASTER_ADDR:MASTER_PORT, a PrefixStore, the store
// adapter, and one gloo TCP device listening on the address that reaches MASTER_ADDR.
class RawGlooCollective : public Collective {
 public:
  RawGlooCollective(std::chrono::milliseconds timeout, bool bcube) : timeout_(timeout), bcube_(bcube) {
    rank_ = std::stoi(env_or_fail("RANK"));
    size_ = std::stoi(env_or_fail("WORLD_SIZE"));
    const std::string master = env_or_fail("MASTER_ADDR");
    auto store = std::make_shared<dist::TCPStore>(master, static_cast<uint16_t>(std::stoi(env_or_fail("MASTER_PORT"))),
                                                  rank_ == 0, timeout, std::nullopt, true, dist::JobToken::from_env());
    auto prefixed = std::make_shared<dist::PrefixStore>("raw_gloo", store);
    gloo::transport::tcp::attr attr;
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname && *ifname) {
      attr.iface = ifname;
    } else {
      attr.hostname = dist::local_address_towards(master);
      if (attr.hostname.empty()) attr.hostname = "127.0.0.1";
    }
    device_ = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    context->setTimeout(timeout);
    dist::GlooStoreAdapter adapter(prefixed);
    context->connectFullMesh(adapter, device_);
    context_ = std::move(context);
    store_ = std::move(store);  // kept until the end: rank 0 serves it
  }

  void all_reduce(Tensor& t, Op op) override {
    if (size_ == 1) return;
    dispatch_compute(t.dtype(), "allreduce_bench", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using ReduceFn = void (*)(void*, const void*, const void*, size_t);
      T* data = static_cast<T*>(t.data_ptr());
      const size_t n = static_cast<size_t>(t.numel());
      gloo::AllreduceOptions opts(context_);
      opts.setOutput<T>(data, n);
      switch (op) {
        case Op::SUM:
        case Op::AVG: opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<T>)); break;
        case Op::PRODUCT: opts.setReduceFunction(static_cast<ReduceFn>(&gloo::product<T>)); break;
        case Op::MIN: opts.setReduceFunction(static_cast<ReduceFn>(&gloo::min<T>)); break;
        case Op::MAX: opts.setReduceFunction(static_cast<ReduceFn>(&gloo::max<T>)); break;
      }
      opts.setTag(tag_++);
      opts.setTimeout(timeout_);
      if (bcube_) opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
      gloo::allreduce(opts);
      if (op == Op::AVG)
        for (size_t i = 0; i < n; ++i) data[i] /= static_cast<T>(size_);
    });
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return bcube_ ? "raw-gloo-bcube" : "raw-gloo"; }

 private:
  std::chrono::milliseconds timeout_;
  bool bcube_;
  int rank_ = 0, size_ = 1;
  uint32_t tag_ = 0;
  std::shared_ptr<dist::TCPStore> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
};

#ifdef LOCKSTEP_WITH_NCCL
// ncclAllReduce called directly on the same CUDA tensors, on a communicator of its own (the
// ncclUniqueId travels through a TCPStore on MASTER_ADDR:MASTER_PORT), queued on lockstep's stream for
// the device and waited for with cudaStreamSynchronize: what ProcessGroupNCCL adds to it (its own
// stream, the events between the two, the watchdog) is what is measured. lockstep's stream, because
// the inputs are written there (a host-to-device copy that may still be in flight when it returns): a
// stream of its own would need an event to wait for them. The CUDA emulator showed this: on a stream
// of its own, without that wait, the collective read the buffers before the copies had landed.
class RawNcclCollective : public Collective {
 public:
  explicit RawNcclCollective(std::chrono::milliseconds timeout) {
    rank_ = std::stoi(env_or_fail("RANK"));
    size_ = std::stoi(env_or_fail("WORLD_SIZE"));
    const char* local = std::getenv("LOCAL_RANK");
    device_ = local && *local ? std::stoi(local) : rank_;
    cuda::set_device(device_);
    store_ = std::make_shared<dist::TCPStore>(env_or_fail("MASTER_ADDR"),
                                              static_cast<uint16_t>(std::stoi(env_or_fail("MASTER_PORT"))), rank_ == 0,
                                              timeout, std::nullopt, true, dist::JobToken::from_env());
    ncclUniqueId id;
    if (rank_ == 0) {
      LOCKSTEP_NCCL_CALL("allreduce_bench", ncclGetUniqueId(&id), "raw NCCL");
      store_->set("raw_nccl/id", std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
    }
    const std::vector<uint8_t> bytes = store_->get("raw_nccl/id");
    LOCKSTEP_CHECK(bytes.size() == sizeof(id.internal), "allreduce_bench: bad ncclUniqueId in the store");
    std::copy(bytes.begin(), bytes.end(), id.internal);
    LOCKSTEP_NCCL_CALL("allreduce_bench", ncclCommInitRank(&comm_, size_, id, rank_), "raw NCCL");
    stream_ = static_cast<cudaStream_t>(cuda::current_stream(device_));
  }
  ~RawNcclCollective() override { ncclCommDestroy(comm_); }
  void all_reduce(Tensor& t, Op op) override {
    LOCKSTEP_NCCL_CALL("allreduce_bench",
                       ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                                     dist::detail::nccl_dtype(t.dtype()), dist::detail::nccl_op(op), comm_, stream_),
                       "raw NCCL");
    sync();
  }
  void reduce_scatter(Tensor& out, const Tensor& in, Op op) override {
    LOCKSTEP_NCCL_CALL("allreduce_bench",
                       ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()),
                                         dist::detail::nccl_dtype(out.dtype()), dist::detail::nccl_op(op), comm_, stream_),
                       "raw NCCL");
    sync();
  }
  void all_gather(Tensor& out, const Tensor& in) override {
    LOCKSTEP_NCCL_CALL("allreduce_bench",
                       ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()),
                                     dist::detail::nccl_dtype(in.dtype()), comm_, stream_),
                       "raw NCCL");
    sync();
  }
  void sync() {
    const cudaError_t err = cudaStreamSynchronize(stream_);
    LOCKSTEP_CHECK(err == cudaSuccess, "allreduce_bench: cudaStreamSynchronize: ", cudaGetErrorString(err));
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "raw-nccl"; }
  int device() const { return device_; }

 private:
  int rank_ = 0, size_ = 1, device_ = 0;
  std::shared_ptr<dist::TCPStore> store_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;  // lockstep's stream for device_ (not ours to destroy)
};
#endif

#ifdef LOCKSTEP_WITH_MPI
// MPI_Allreduce in place on the tensor's memory, on MPI_COMM_WORLD, MPI initialized as the mpi backend
// does it (MPI_THREAD_SERIALIZED, finalized at exit): what ProcessGroupMPI adds to it is what is measured.
class RawMpiCollective : public Collective {
 public:
  RawMpiCollective() { std::tie(rank_, size_) = dist::ProcessGroupMPI::world_rank_and_size(); }
  void all_reduce(Tensor& t, Op op) override {
    const int rc = MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), static_cast<int>(t.numel()), type(t), mpi_op(op),
                                 MPI_COMM_WORLD);
    LOCKSTEP_CHECK(rc == MPI_SUCCESS, "allreduce_bench: MPI_Allreduce failed with MPI error ", rc);
    if (op == Op::AVG) divide(t);
  }
  // In place (out is chunk rank of in) through MPI_IN_PLACE, whose result lands at the start of `in`.
  void reduce_scatter(Tensor& out, const Tensor& in, Op op) override {
    const bool in_place = out.data_ptr() == static_cast<char*>(in.data_ptr()) + out.nbytes() * rank_;
    const int rc = MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : in.data_ptr(),
                                            in_place ? in.data_ptr() : out.data_ptr(), static_cast<int>(out.numel()),
                                            type(out), mpi_op(op), MPI_COMM_WORLD);
    LOCKSTEP_CHECK(rc == MPI_SUCCESS, "allreduce_bench: MPI_Reduce_scatter_block failed with MPI error ", rc);
    if (in_place && rank_ != 0) std::memcpy(out.data_ptr(), in.data_ptr(), out.nbytes());
    if (op == Op::AVG) divide(out);
  }
  void all_gather(Tensor& out, const Tensor& in) override {
    const bool in_place = in.data_ptr() == static_cast<char*>(out.data_ptr()) + in.nbytes() * rank_;
    const int rc = MPI_Allgather(in_place ? MPI_IN_PLACE : in.data_ptr(), static_cast<int>(in.numel()), type(in),
                                 out.data_ptr(), static_cast<int>(in.numel()), type(in), MPI_COMM_WORLD);
    LOCKSTEP_CHECK(rc == MPI_SUCCESS, "allreduce_bench: MPI_Allgather failed with MPI error ", rc);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "raw-mpi"; }

 private:
  static MPI_Datatype type(const Tensor& t) {
    LOCKSTEP_CHECK(!is_reduced_floating_point(t.dtype()), "allreduce_bench: --raw-mpi has no ", t.dtype(),
                   " (MPI has no 16-bit float type)");
    return t.dtype() == kFloat32 ? MPI_FLOAT : t.dtype() == kFloat64 ? MPI_DOUBLE : MPI_INT64_T;
  }
  static MPI_Op mpi_op(Op op) {
    return op == Op::MIN ? MPI_MIN : op == Op::MAX ? MPI_MAX : op == Op::PRODUCT ? MPI_PROD : MPI_SUM;
  }
  void divide(Tensor& t) const {
    dispatch_compute(t.dtype(), "allreduce_bench", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* data = static_cast<T*>(t.data_ptr());
      for (int64_t i = 0; i < t.numel(); ++i) data[i] /= static_cast<T>(size_);
    });
  }

  int rank_ = 0, size_ = 1;
};
#endif

// --- Data and the expected result (see the header) ---

double input_value(Op op, int rank, int n, int64_t i) {
  if (op == Op::PRODUCT) return (i + rank) % n == 0 ? 2 : 1;
  return rank + 1 + i % 4;
}

template <typename T>
T expected_value(Op op, int n, int64_t i) {
  const int64_t k = i % 4, sum = int64_t(n) * (n + 1) / 2 + n * k;
  switch (op) {
    case Op::SUM: return static_cast<T>(sum);
    case Op::AVG:
      if constexpr (std::is_integral_v<T>) return static_cast<T>(sum / n);
      else return static_cast<T>(sum) / static_cast<T>(n);
    case Op::MIN: return static_cast<T>(1 + k);
    case Op::MAX: return static_cast<T>(n + k);
    case Op::PRODUCT: return static_cast<T>(2);
  }
  return 0;
}

// Fills `t` (any device) with this rank's input; element i of `t` is element i + base of the whole buffer.
void fill_input(Tensor& t, Op op, int rank, int n, int64_t base = 0) {
  Tensor host = t.device().is_cpu() ? t : empty(t.shape(), {t.dtype(), Device::cpu()});
  dispatch(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(host.data_ptr());
    for (int64_t i = 0; i < host.numel(); ++i) p[i] = static_cast<T>(input_value(op, rank, n, i + base));
  });
  if (!t.device().is_cpu()) t.copy_(host);
}

// All-gather: rank r's chunk holds r + 1 + (j % 4), as the all-reduce's SUM input (exact in every dtype).
void fill_chunk(Tensor& t, int rank) { fill_input(t, Op::SUM, rank, 1); }

// Elements of the gathered `t` (chunks of `chunk` elements) that differ from what each rank sent.
int64_t count_wrong_gathered(const Tensor& t, int64_t chunk) {
  Tensor host = lockstep::to(t, Device::cpu());
  return dispatch(t.dtype(), [&](auto tag) -> int64_t {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(host.data_ptr());
    int64_t wrong = 0;
    for (int64_t i = 0; i < host.numel(); ++i) {
      wrong += !(static_cast<double>(p[i]) == static_cast<double>(static_cast<T>(input_value(Op::SUM, i / chunk, 1,
                                                                                             i % chunk))));
    }
    return wrong;
  });
}

// Elements of `t` that differ from the reduction; element i of `t` is element i + base of the whole buffer.
int64_t count_wrong(const Tensor& t, Op op, int n, int64_t base = 0) {
  Tensor host = lockstep::to(t, Device::cpu());
  return dispatch(t.dtype(), [&](auto tag) -> int64_t {
    using T = typename decltype(tag)::type;
    // bfloat16 and float16 compare as float32; their epsilons are 2^-7 and 2^-10.
    constexpr bool kHalf = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;
    using V = std::conditional_t<kHalf, float, T>;
    double eps = std::is_same_v<T, BFloat16> ? 0x1p-7 : 0x1p-10;
    if constexpr (!kHalf && !std::is_integral_v<T>) eps = std::numeric_limits<T>::epsilon();
    const T* p = static_cast<const T*>(host.data_ptr());
    int64_t wrong = 0;
    for (int64_t i = 0; i < host.numel(); ++i) {
      const V want = static_cast<V>(expected_value<T>(op, n, i + base)), got = static_cast<V>(p[i]);
      bool ok = got == want;
      if constexpr (!std::is_integral_v<T>)
        if (op == Op::AVG) ok = std::abs(got - want) <= 2 * eps * std::abs(want);
      wrong += !ok;
    }
    return wrong;
  });
}

// --- Command line ---

// "64M", "1K", "4" -> bytes (K = 1024, as nccl-tests).
int64_t parse_bytes(const std::string& s) {
  LOCKSTEP_CHECK(!s.empty(), "allreduce_bench: empty size");
  size_t used = 0;
  int64_t v = std::stoll(s, &used);
  std::string suffix = s.substr(used);
  int64_t mult = 1;
  if (suffix == "K" || suffix == "k") mult = 1LL << 10;
  else if (suffix == "M" || suffix == "m") mult = 1LL << 20;
  else if (suffix == "G" || suffix == "g") mult = 1LL << 30;
  else LOCKSTEP_CHECK(suffix.empty(), "allreduce_bench: bad size '", s, "' (a number with an optional K, M or G)");
  return v * mult;
}

Dtype parse_dtype(const std::string& s) {
  if (s == "float" || s == "float32") return kFloat32;
  if (s == "double" || s == "float64") return kFloat64;
  if (s == "int64" || s == "long") return kInt64;
  if (s == "bfloat16" || s == "bf16") return kBFloat16;
  if (s == "float16" || s == "half" || s == "fp16") return kFloat16;
  fail("allreduce_bench: unknown dtype '", s, "' (float, double, int64, bfloat16 or float16)");
}

enum class Coll { kAllReduce, kReduceScatter, kAllGather };

Coll parse_collective(const std::string& s) {
  if (s == "all_reduce") return Coll::kAllReduce;
  if (s == "reduce_scatter") return Coll::kReduceScatter;
  if (s == "all_gather") return Coll::kAllGather;
  fail("allreduce_bench: unknown --op '", s, "' (all_reduce, reduce_scatter or all_gather)");
}

Op parse_op(const std::string& s) {
  if (s == "sum") return Op::SUM;
  if (s == "avg") return Op::AVG;
  if (s == "min") return Op::MIN;
  if (s == "max") return Op::MAX;
  if (s == "prod") return Op::PRODUCT;
  fail("allreduce_bench: unknown op '", s, "' (sum, avg, min, max or prod)");
}

const char* type_name(Dtype d) {
  switch (d) {
    case kFloat32: return "float";
    case kFloat64: return "double";
    case kBFloat16: return "bfloat16";
    case kFloat16: return "half";
    default: return "int64";
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

struct Result {
  double us = 0, algbw = 0, busbw = 0;  // from the median time
  double mean_us = 0;                   // the mean of the same per-iteration times (CSV only)
  int64_t wrong = -1;  // -1: not checked
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"all-reduce, reduce-scatter or all-gather bandwidth sweep (nccl-tests' columns) for lockstep or its "
               "baselines (raw gloo, NCCL, Open MPI)"};
  std::string min_s = "4", max_s = "64M", dtype_s = "float", op_s = "sum", backend = "gloo", coll_s = "all_reduce";
  int64_t factor = 4;
  int iters = 20, warmup = 5, check = 1;
  bool csv = false, raw_gloo = false, raw_nccl = false, raw_mpi = false;
  std::string raw_algorithm = "ring";
  double timeout_s = 300;
  app.add_option("-b,--minbytes", min_s, "smallest size in bytes (K, M, G suffixes)");
  app.add_option("-e,--maxbytes", max_s, "largest size in bytes (K, M, G suffixes)");
  app.add_option("-f,--stepfactor", factor, "multiply the size by this between rows");
  app.add_option("-n,--iters", iters, "timed iterations per size");
  app.add_option("-w,--warmup_iters", warmup, "untimed iterations per size");
  app.add_option("-c,--check", check, "check the results against the exact expected values (0 or 1)");
  app.add_option("-d,--datatype,--dtype", dtype_s, "float, double, int64, bfloat16 or float16");
  app.add_option("--op", coll_s, "the collective: all_reduce, reduce_scatter or all_gather");
  app.add_option("-o,--redop", op_s, "sum, avg, min, max or prod");
  app.add_option("--backend", backend, "gloo, nccl, mpi (under mpirun) or auto (nccl when a GPU is visible)");
  app.add_flag("--csv", csv, "print comma-separated rows (for bench/bench_report.py)");
  app.add_flag("--raw-gloo", raw_gloo, "measure gloo's allreduce called directly (the baseline), not lockstep");
  app.add_option("--raw-algorithm", raw_algorithm, "with --raw-gloo: ring (gloo's default) or bcube");
  app.add_flag("--raw-nccl", raw_nccl, "measure ncclAllReduce called directly on CUDA tensors (the NCCL baseline)");
  app.add_flag("--raw-mpi", raw_mpi,
               "measure MPI_Allreduce called directly on CPU tensors, under mpirun (the MPI baseline)");
  app.add_option("--timeout", timeout_s, "rendezvous and collective timeout in seconds");
  CLI11_PARSE(app, argc, argv);

  try {
    const int64_t min_bytes = parse_bytes(min_s), max_bytes = parse_bytes(max_s);
    const Dtype dtype = parse_dtype(dtype_s);
    const Op op = parse_op(op_s);
    const Coll what = parse_collective(coll_s);
    LOCKSTEP_CHECK(min_bytes > 0 && max_bytes >= min_bytes, "allreduce_bench: need 0 < -b <= -e, got ", min_bytes,
                   " and ", max_bytes);
    LOCKSTEP_CHECK(factor >= 2 || min_bytes == max_bytes, "allreduce_bench: -f must be at least 2");
    LOCKSTEP_CHECK(iters >= 1 && warmup >= 0, "allreduce_bench: need -n >= 1 and -w >= 0");
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));

    std::unique_ptr<Collective> coll;
    Device device = Device::cpu();
    LOCKSTEP_CHECK(int(raw_gloo) + int(raw_nccl) + int(raw_mpi) <= 1, "allreduce_bench: --raw-gloo, --raw-nccl and "
                   "--raw-mpi measure different things; pick one");
    if (raw_mpi) {
#ifdef LOCKSTEP_WITH_MPI
      coll = std::make_unique<RawMpiCollective>();
#else
      fail("allreduce_bench: --raw-mpi needs a build with Open MPI (this one has none; tools/bazel installs "
           "libopenmpi-dev)");
#endif
    } else if (raw_nccl) {
      LOCKSTEP_CHECK(!raw_gloo, "allreduce_bench: --raw-gloo and --raw-nccl measure different things; pick one");
#ifdef LOCKSTEP_WITH_NCCL
      auto nccl = std::make_unique<RawNcclCollective>(timeout);
      device = Device::cuda(nccl->device());
      coll = std::move(nccl);
#else
      fail("allreduce_bench: --raw-nccl needs a build with CUDA and NCCL (this one has none)");
#endif
    } else if (raw_gloo) {
      LOCKSTEP_CHECK(backend != "nccl", "allreduce_bench: --raw-gloo measures gloo; drop --backend nccl");
      LOCKSTEP_CHECK(raw_algorithm == "ring" || raw_algorithm == "bcube", "allreduce_bench: --raw-algorithm is ring or "
                     "bcube, got '", raw_algorithm, "'");
      coll = std::make_unique<RawGlooCollective>(timeout, raw_algorithm == "bcube");
    } else {
      dist::InitOptions init;
      init.backend = backend;
      init.timeout = timeout;
      dist::init_process_group(init);
      if (dist::get_backend() == "nccl") {
        cuda::set_device(dist::get_local_rank());
        device = Device::cuda(dist::get_local_rank());
      }
      coll = std::make_unique<ProcessGroupCollective>(device);
    }
    const int rank = coll->rank(), n = coll->size();
    const size_t esize = element_size(dtype);
    LOCKSTEP_CHECK(what == Coll::kAllReduce || !raw_gloo, "allreduce_bench: --raw-gloo measures all_reduce only");

    // Sizes, as whole elements (at least one; for reduce-scatter and all-gather a multiple of the ranks:
    // the whole buffer, n chunks).
    std::vector<int64_t> counts;
    const int64_t unit = what == Coll::kAllReduce ? 1 : n;
    for (int64_t b = min_bytes; b <= max_bytes; b = factor >= 2 ? b * factor : max_bytes + 1) {
      const int64_t c = std::max<int64_t>(1, b / static_cast<int64_t>(esize) / unit) * unit;
      if (counts.empty() || counts.back() != c) counts.push_back(c);
    }
    const int64_t max_count = counts.back();
    Tensor input = empty({max_count}, {dtype, device});
    Tensor output = empty({max_count}, {dtype, device});
    fill_input(input, op, rank, n);
    fill_input(output, op, rank, n);

    auto now = [] { return std::chrono::steady_clock::now(); };
    // Slowest rank per iteration: one MAX all-reduce of every rank's per-iteration times.
    auto slowest = [&](const std::vector<double>& mine) {
      Tensor t = lockstep::to(tensor(mine), device);
      coll->all_reduce(t, Op::MAX);
      return lockstep::to(t, Device::cpu()).to_vector<double>();
    };
    auto result = [&](int64_t bytes, const std::vector<double>& seconds) {
      Result r;
      const std::vector<double> per_iteration = slowest(seconds);
      const double s = median(per_iteration);
      r.us = s * 1e6;
      for (double t : per_iteration) r.mean_us += t * 1e6 / per_iteration.size();
      r.algbw = bytes / s / 1e9;
      r.busbw = r.algbw * (what == Coll::kAllReduce ? 2.0 : 1.0) * (n - 1) / n;
      return r;
    };

    if (rank == 0) {
      if (csv) {
        std::printf("impl,ranks,size_bytes,count,type,redop,oop_time_us,oop_algbw_gbs,oop_busbw_gbs,oop_wrong,"
                    "ip_time_us,ip_algbw_gbs,ip_busbw_gbs,ip_wrong,oop_mean_us,ip_mean_us,collective\n");
      } else {
        std::printf("# lockstep allreduce_bench --op %s: %s, %d rank(s), device %s, -n %d -w %d -c %d\n",
                    coll_s.c_str(), coll->name().c_str(), n, device.is_cuda() ? "cuda (one GPU per rank)" : "cpu",
                    iters, warmup, check);
        std::printf("# time: median over iterations of the slowest rank; %s\n#\n",
                    what == Coll::kAllReduce ? "out-of-place = copy input to output + in-place all-reduce"
                                             : "size = the whole buffer (n chunks); in-place: output and input share it");
        std::printf("# %39s   %-32s   %-32s\n", "", "          out-of-place", "            in-place");
        std::printf("# %10s %12s %8s %6s   %9s %7s %7s %6s   %9s %7s %7s %6s\n", "size", "count", "type", "redop",
                    "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
        std::printf("# %10s %12s %8s %6s   %9s %7s %7s %6s   %9s %7s %7s %6s\n", "(B)", "(elements)", "", "", "(us)",
                    "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
      }
    }

    double busbw_total = 0;
    int busbw_count = 0;
    int64_t wrong_total = 0;
    std::vector<double> seconds(iters);
    for (int64_t count : counts) {
      const int64_t bytes = count * static_cast<int64_t>(esize);
      const int64_t chunk = count / n;  // reduce-scatter and all-gather: each rank's share
      Tensor in = input.narrow(0, 0, count);
      Tensor out = output.narrow(0, 0, count);
      // The tensors each kind hands to the collective: out of place two buffers, in place one.
      Tensor rs_out = output.narrow(0, 0, chunk), rs_in_place = out.narrow(0, rank * chunk, chunk);
      Tensor ag_in = input.narrow(0, 0, chunk), ag_in_place = out.narrow(0, rank * chunk, chunk);
      std::function<void()> run[2];
      switch (what) {
        case Coll::kAllReduce:
          run[0] = [&] {
            out.copy_(in);
            coll->all_reduce(out, op);
          };
          run[1] = [&] { coll->all_reduce(out, op); };
          break;
        case Coll::kReduceScatter:
          run[0] = [&] { coll->reduce_scatter(rs_out, in, op); };
          run[1] = [&] { coll->reduce_scatter(rs_in_place, out, op); };
          break;
        case Coll::kAllGather:
          run[0] = [&] { coll->all_gather(out, ag_in); };
          run[1] = [&] { coll->all_gather(out, ag_in_place); };
          break;
      }
      // Fresh inputs for the check, then how many elements of the result are wrong on this rank.
      auto check_once = [&](int kind) -> int64_t {
        switch (what) {
          case Coll::kAllReduce:
            fill_input(in, op, rank, n);
            if (kind == 1) fill_input(out, op, rank, n);
            run[kind]();
            return count_wrong(out, op, n);
          case Coll::kReduceScatter:
            fill_input(kind == 0 ? in : out, op, rank, n);
            run[kind]();
            return count_wrong(kind == 0 ? rs_out : rs_in_place, op, n, rank * chunk);
          case Coll::kAllGather:
            fill_chunk(kind == 0 ? ag_in : ag_in_place, rank);
            run[kind]();
            return count_wrong_gathered(out, chunk);
        }
        return 0;
      };

      Result res[2];
      for (int kind = 0; kind < 2; ++kind) {
        auto iteration = [&] { run[kind](); };
        if (kind == 1) out.copy_(in);  // start from the input values (in place they grow, for SUM/PROD)
        for (int i = 0; i < warmup; ++i) iteration();
        for (int i = 0; i < iters; ++i) {
          auto t0 = now();
          iteration();
          seconds[i] = std::chrono::duration<double>(now() - t0).count();
        }
        res[kind] = result(bytes, seconds);
        if (check) {
          Tensor wrong = lockstep::to(tensor(std::vector<int64_t>{check_once(kind)}), device);
          coll->all_reduce(wrong, Op::SUM);
          res[kind].wrong = wrong.item<int64_t>();
          wrong_total += res[kind].wrong;
        }
        busbw_total += res[kind].busbw;
        ++busbw_count;
      }

      if (rank == 0) {
        auto wrong_str = [](int64_t w) { return w < 0 ? std::string("N/A") : std::to_string(w); };
        if (csv) {
          std::printf("%s,%d,%ld,%ld,%s,%s,%.2f,%.4f,%.4f,%s,%.2f,%.4f,%.4f,%s,%.2f,%.2f,%s\n", coll->name().c_str(), n,
                      long(bytes), long(count), type_name(dtype), op_s.c_str(), res[0].us, res[0].algbw, res[0].busbw,
                      wrong_str(res[0].wrong).c_str(), res[1].us, res[1].algbw, res[1].busbw,
                      wrong_str(res[1].wrong).c_str(), res[0].mean_us, res[1].mean_us, coll_s.c_str());
        } else {
          std::printf("  %10ld %12ld %8s %6s   %9.1f %7.3f %7.3f %6s   %9.1f %7.3f %7.3f %6s\n", long(bytes),
                      long(count), type_name(dtype), op_s.c_str(), res[0].us, res[0].algbw, res[0].busbw,
                      wrong_str(res[0].wrong).c_str(), res[1].us, res[1].algbw, res[1].busbw,
                      wrong_str(res[1].wrong).c_str());
        }
        std::fflush(stdout);
      }
    }
    if (rank == 0 && !csv) {
      std::printf("# Out of bounds values : %ld %s\n", long(wrong_total), wrong_total == 0 ? "OK" : "FAILED");
      std::printf("# Avg bus bandwidth    : %.4f\n", busbw_total / busbw_count);
    }
    coll.reset();
    if (!raw_gloo && !raw_mpi) dist::destroy_process_group();
    return wrong_total == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 1;
  }
}
