// The mpi backend under a real mpirun (tests/distributed/mpi_test.sh runs this at -np 2 and -np 3): every rank runs
// the same doctest cases, in the same order, on the default group init_process_group({.backend = "mpi"})
// made, and checks every collective's values on its own rank against hand-computable data (rank r holds
// values that depend on r, so each result is a small fold over the ranks).
//
//   mpi_ranks --built-with-mpi   prints "yes" or "no" (the script's skip), without starting MPI
//   mpi_ranks --kill-rank        all-reduces in a loop; the last rank kills itself (SIGKILL) at step 3
//   mpi_ranks --exit-after-timeout  rank 0's all-reduce times out and it leaves main with the group alive
//   mpi_ranks --blocking-timeout    the same with a blocking all-reduce, run on rank 0's own thread
//   mpi_ranks [doctest flags]    the cases below
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "distributed/api.h"
#include "tests/distributed/flat_values.h"
#include "tests/util/ddp_reference.h"

#ifdef LOCKSTEP_WITH_MPI
using namespace lockstep;
using Op = dist::ReduceOp;

namespace {

int W() { return dist::get_world_size(); }
int R() { return dist::get_rank(); }

const std::vector<Dtype> kDtypes = {kFloat32, kFloat64, kInt64, kUInt8, kBool};
const std::vector<Op> kOps = {Op::SUM, Op::AVG, Op::MIN, Op::MAX, Op::PRODUCT};
constexpr int64_t kN = 7;

bool is_signed(Dtype d) { return d == kFloat32 || d == kFloat64 || d == kInt64; }

// Rank r's element i: (r + 1) * (i % 3 + 1), negated at odd i for signed types (small: no uint8 wrap, no
// float rounding); bools are true where (i + r) % (W + 1) == 0 or i == 0.
double value(Dtype d, int r, int64_t i, int world) {
  if (d == kBool) return (i + r) % (world + 1) == 0 || i == 0;
  const double v = (r + 1) * (i % 3 + 1);
  return is_signed(d) && i % 2 ? -v : v;
}

Tensor make(Dtype d, int r, int64_t n, int world) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = value(d, r, i, world);
  return tensor(v).to(d);
}

// The fold over ranks, as the gloo backend defines it (bool: SUM/MAX/AVG or, MIN/PRODUCT and).
double expected(Dtype d, Op op, int64_t i, int world) {
  double acc = value(d, 0, i, world);
  for (int r = 1; r < world; ++r) {
    const double v = value(d, r, i, world);
    if (d == kBool) {
      acc = (op == Op::MIN || op == Op::PRODUCT) ? (acc && v) : (acc || v);
      continue;
    }
    switch (op) {
      case Op::SUM:
      case Op::AVG: acc += v; break;
      case Op::MIN: acc = std::min(acc, v); break;
      case Op::MAX: acc = std::max(acc, v); break;
      case Op::PRODUCT: acc *= v; break;
    }
  }
  if (op == Op::AVG && d != kBool) acc = d == kFloat32 || d == kFloat64 ? acc / world : std::trunc(acc / world);
  return acc;
}

std::vector<double> values(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

std::string where(Dtype d, Op op) {
  return std::string(dtype_name(d)) + " " + dist::reduce_op_name(op) + " on rank " + std::to_string(R()) + " of " +
         std::to_string(W());
}

}  // namespace

TEST_CASE("init_process_group(mpi) takes rank and world size from MPI") {
  CHECK(dist::get_backend() == "mpi");
  CHECK(dist::default_pg()->backend_name() == "mpi");
  CHECK(dist::default_pg()->transport() == "mpi");
  // mpirun's own variables say the same.
  CHECK(R() == std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  CHECK(W() == std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
}

TEST_CASE("all_reduce: every op and dtype, blocking and async") {
  for (Dtype d : kDtypes) {
    for (Op op : kOps) {
      for (bool async_op : {false, true}) {
        Tensor t = make(d, R(), kN, W());
        auto work = dist::default_pg()->all_reduce(t, op, async_op);
        work->wait();
        CHECK(work->is_success());
        CHECK(t.dtype() == d);
        const std::vector<double> got = values(t);
        for (int64_t i = 0; i < kN; ++i)
          CHECK_MESSAGE(got[i] == expected(d, op, i, W()), where(d, op), " element ", i);
      }
    }
  }
}

TEST_CASE("all_reduce and reduce_scatter of bfloat16 and float16 through lockstep's MPI ops; non-contiguous refused") {
  for (Dtype d : {kBFloat16, kFloat16}) {
    const double n = W();
    // Rank r: [r + 1, (r + 1) / 2, -r]; exact in both formats, whatever order MPI folds in.
    Tensor t = tensor({R() + 1.0, 0.5 * (R() + 1), -1.0 * R()}).to(d);
    dist::default_pg()->all_reduce(t, Op::SUM)->wait();
    const std::vector<double> sum = {n * (n + 1) / 2, n * (n + 1) / 4, -n * (n - 1) / 2};
    CHECK_MESSAGE(values(t) == sum, dtype_name(d));
    CHECK(t.dtype() == d);
    Tensor m = tensor({R() + 1.0, -0.5 * (R() + 1)}).to(d);
    dist::default_pg()->all_reduce(m, Op::MAX)->wait();
    const std::vector<double> max = {n, -0.5};
    CHECK(values(m) == max);
    Tensor a = tensor({R() + 1.0, 4.0}).to(d);
    dist::default_pg()->all_reduce(a, Op::AVG)->wait();
    const std::vector<double> avg = {(n + 1) / 2, 4};  // 1.5 or 2: exact
    CHECK_MESSAGE(values(a) == avg, dtype_name(d));
    if (W() == 2) {
      // 256 + 1 is a tie in bfloat16 (even: 256), exact in float16; 2048 + 1 a tie in both (2048).
      Tensor r = tensor({R() == 0 ? 256.0 : 1.0, R() == 0 ? 2048.0 : 1.0}).to(d);
      dist::default_pg()->all_reduce(r, Op::SUM)->wait();
      const std::vector<double> rounded = {d == kBFloat16 ? 256.0 : 257.0, 2048};
      CHECK_MESSAGE(values(r) == rounded, dtype_name(d));
    }
    // reduce_scatter: input k of rank r holds 10 k + r; output = 10 R() W + W (W - 1) / 2.
    std::vector<Tensor> inputs;
    for (int k = 0; k < W(); ++k) inputs.push_back(tensor({10.0 * k + R()}).to(d));
    Tensor out = zeros({1}).to(d);
    dist::default_pg()->reduce_scatter(out, inputs, Op::SUM)->wait();
    const std::vector<double> scattered = {10.0 * R() * n + n * (n - 1) / 2};
    CHECK_MESSAGE(values(out) == scattered, dtype_name(d));
  }
  Tensor m = zeros({3, 2}).t();
  try {
    dist::default_pg()->all_reduce(m);
    FAIL("non-contiguous all_reduce did not throw");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("all_reduce: the mpi backend needs contiguous tensors") != std::string::npos);
  }
}

TEST_CASE("DDP over mpi with bf16_compress_hook and fp16_compress_hook: within the formats' rounding of float32") {
  using namespace lockstep::testing;
  Data d = make_data();
  nn::CrossEntropyLoss ce;
  const int64_t per = kBatch / W();
  auto batch_x = [&](int r) { return rows(d.x[0], r * per, (r + 1) * per); };
  auto batch_y = [&](int r) { return rows(d.y[0], r * per, (r + 1) * per); };
  // Every rank's local gradients, for the bound.
  std::vector<std::vector<float>> sum_abs;
  for (int r = 0; r < W(); ++r) {
    auto local = make_model(0);
    ce((*local)(batch_x(r)), batch_y(r)).backward();
    auto ps = local->parameters();
    sum_abs.resize(ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      auto g = ps[i].grad().to_vector<float>();
      sum_abs[i].resize(g.size());
      for (size_t k = 0; k < g.size(); ++k) sum_abs[i][k] += std::abs(g[k]);
    }
  }
  auto grads = [&](auto hook) {
    auto model = make_model(0);
    dist::DistributedDataParallel ddp(model);
    if (hook) ddp.register_comm_hook(std::shared_ptr<dist::ProcessGroup>(), hook);
    ce(ddp(batch_x(R())), batch_y(R())).backward();
    std::vector<std::vector<float>> out;
    for (auto& p : model->parameters()) out.push_back(p.grad().to_vector<float>());
    return out;
  };
  using Hook = std::shared_ptr<dist::Future> (*)(const std::shared_ptr<dist::ProcessGroup>&, dist::GradBucket&);
  const auto plain = grads(Hook(nullptr));
  struct Case {
    Hook hook;
    const char* name;
    double u;  // unit roundoff
  };
  for (Case c : {Case{dist::default_hooks::bf16_compress_hook, "bf16", 0x1p-8},
                 Case{dist::default_hooks::fp16_compress_hook, "fp16", 0x1p-11}}) {
    const auto got = grads(c.hook);
    for (size_t i = 0; i < got.size(); ++i) {
      for (size_t k = 0; k < got[i].size(); ++k) {
        // A cast, a halving and W - 1 rounded sums: at most (W + 1) u of the mean of |g|.
        const double bound = (W() + 1.01) * c.u * sum_abs[i][k] / W() + 1e-7;
        CHECK_MESSAGE(std::abs(got[i][k] - plain[i][k]) <= bound, c.name, " parameter ", i, "[", k, "] ", got[i][k],
                      " vs ", plain[i][k], " on rank ", R());
      }
    }
  }
}

TEST_CASE("broadcast from every root, every dtype (bfloat16 too)") {
  for (Dtype d : {kFloat32, kFloat64, kInt64, kUInt8, kBool, kBFloat16}) {
    for (int root = 0; root < W(); ++root) {
      Tensor t = make(d, R(), kN, W());
      dist::default_pg()->broadcast(t, root)->wait();
      CHECK_MESSAGE(values(t) == values(make(d, root, kN, W())), dtype_name(d), " root ", root, " on rank ", R());
    }
  }
}

TEST_CASE("all_gather: separate outputs, chunks of one tensor, and in place") {
  for (Dtype d : {kFloat32, kInt64, kUInt8, kBool, kBFloat16}) {
    Tensor input = make(d, R(), kN, W());
    std::vector<Tensor> outs;
    for (int r = 0; r < W(); ++r) outs.push_back(zeros({kN}).to(d));
    dist::default_pg()->all_gather(outs, input)->wait();
    for (int r = 0; r < W(); ++r) CHECK_MESSAGE(values(outs[r]) == values(make(d, r, kN, W())), dtype_name(d), " from ", r);

    Tensor flat = zeros({W() * kN}).to(d);
    std::vector<Tensor> chunks = flat.chunk(W());
    dist::all_gather(chunks, input);
    Tensor flat2 = zeros({W() * kN}).to(d);
    std::vector<Tensor> chunks2 = flat2.chunk(W());
    chunks2[R()].copy_(input);
    dist::all_gather(chunks2, chunks2[R()]);  // the input is this rank's own slot: MPI_IN_PLACE
    for (int r = 0; r < W(); ++r) {
      CHECK(values(chunks[r]) == values(make(d, r, kN, W())));
      CHECK(values(chunks2[r]) == values(make(d, r, kN, W())));
    }
  }
}

TEST_CASE("reduce_scatter: every op, separate inputs and chunks of one tensor") {
  // Rank q's input for rank r is make(d, q + r, ...): rank r receives the fold over q of that.
  for (Dtype d : {kFloat32, kFloat64, kInt64}) {
    for (Op op : kOps) {
      std::vector<Tensor> inputs;
      Tensor flat = empty({W() * kN}, {d});
      std::vector<Tensor> chunks = flat.chunk(W());
      for (int r = 0; r < W(); ++r) {
        inputs.push_back(make(d, R() + r, kN, 2 * W()));
        chunks[r].copy_(inputs[r]);
      }
      Tensor out = zeros({kN}).to(d), out2 = zeros({kN}).to(d);
      dist::default_pg()->reduce_scatter(out, inputs, op)->wait();
      dist::reduce_scatter(out2, chunks, op);
      std::vector<double> want(kN);
      for (int64_t i = 0; i < kN; ++i) {
        double acc = value(d, R(), i, 2 * W());
        for (int q = 1; q < W(); ++q) {
          const double v = value(d, q + R(), i, 2 * W());
          acc = op == Op::MIN ? std::min(acc, v) : op == Op::MAX ? std::max(acc, v) : op == Op::PRODUCT ? acc * v : acc + v;
        }
        if (op == Op::AVG) acc = d == kInt64 ? std::trunc(acc / W()) : acc / W();
        want[i] = acc;
      }
      CHECK_MESSAGE(values(out) == want, where(d, op));
      CHECK_MESSAGE(values(out2) == want, where(d, op), " (chunks)");
    }
  }
}

TEST_CASE("flat all_gather_into_tensor and reduce_scatter_tensor: every dtype and op, odd counts, in place") {
  // MPI_Allgather and MPI_Reduce_scatter_block on the flat buffers; values from flat_values.h.
  namespace flat = lockstep::testing::flat;
  auto& pg = *dist::default_pg();
  for (Dtype d : {kFloat32, kFloat64, kInt64, kBFloat16, kFloat16}) {
    for (int64_t n : {1, 7, 1001}) {
      for (bool in_place : {false, true}) {
        const std::string how = where(d, Op::SUM) + ", " + std::to_string(n) + " per rank" + (in_place ? ", in place" : "");
        Tensor gathered = zeros({W() * n}).to(d);
        Tensor mine = flat::input(d, Op::SUM, R(), n);
        if (in_place) gathered.narrow(0, R() * n, n).copy_(mine);
        pg.all_gather_into_tensor(gathered, in_place ? gathered.narrow(0, R() * n, n) : mine)->wait();
        CHECK_MESSAGE(flat::check_gathered(gathered, W()) == "", "all_gather_into_tensor ", how);
        for (Op op : kOps) {
          Tensor whole = flat::input(d, op, R(), W() * n);
          Tensor out = in_place ? whole.narrow(0, R() * n, n) : zeros({n}).to(d);
          pg.reduce_scatter_tensor(out, whole, op)->wait();
          CHECK_MESSAGE(flat::check_reduced(out, op, W(), R()) == "", "reduce_scatter_tensor ", where(d, op), ", ", n,
                        in_place ? " in place" : "");
        }
      }
    }
  }
}

TEST_CASE("async collectives complete in order; barrier") {
  std::vector<Tensor> ts;
  std::vector<std::shared_ptr<dist::Work>> works;
  for (int k = 0; k < 12; ++k) {
    ts.push_back(full({1000}, k + R()));
    works.push_back(dist::default_pg()->all_reduce(ts.back(), Op::SUM));
  }
  works.push_back(dist::default_pg()->barrier());
  for (int k = 12; k-- > 0;) {
    works[k]->wait();
    CHECK(works[k]->is_completed());
    if (k > 0) CHECK(works[k - 1]->seq() < works[k]->seq());
    const double want = W() * k + W() * (W() - 1) / 2.0;
    CHECK_MESSAGE(values(ts[k]) == std::vector<double>(1000, want), "all_reduce #", k);
  }
  works.back()->wait();
  CHECK(works.back()->is_success());
}

TEST_CASE("Work::wait gives up after the group's timeout, naming the op and the rank") {
  const char* dir = std::getenv("LOCKSTEP_MPI_TEST_DIR");
  if (!dir) {
    MESSAGE("LOCKSTEP_MPI_TEST_DIR is not set: the timeout case needs a folder the ranks share");
    return;
  }
  // A group of its own, with a short timeout. Rank 0 waits for an all-reduce the others join only once
  // it has timed out and said so through a file: the timeout happens whatever the scheduling.
  dist::ProcessGroupMPI pg(dist::MPIOptions{std::chrono::milliseconds(200)});
  const std::string flag = std::string(dir) + "/timed_out." + std::getenv("OMPI_COMM_WORLD_SIZE");
  Tensor t = full({5}, R() + 1);
  if (R() == 0) {
    auto work = pg.all_reduce(t, Op::SUM);
    try {
      work->wait();
      FAIL("wait did not time out");
    } catch (const TimeoutError& e) {
      const std::string m = e.what();
      CHECK_MESSAGE(m.find("ProcessGroupMPI: all_reduce (float32, 5 elements, SUM) (collective #1) did not complete "
                           "within 0.2s on rank 0 of ") != std::string::npos, m);
      CHECK_MESSAGE(m.find("MPI has no timeout of its own") != std::string::npos, m);
    }
    std::ofstream(flag) << "1";
    work->wait(std::chrono::milliseconds(120'000));  // the others join now
  } else {
    for (int i = 0; i < 120'000 && !std::filesystem::exists(flag); i += 10)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(std::filesystem::exists(flag));
    pg.all_reduce(t, Op::SUM, /*async_op=*/false);
  }
  CHECK(values(t) == std::vector<double>(5, W() * (W() + 1) / 2.0));
}

TEST_CASE("DDP over mpi: N ranks at batch B equal one process at batch N*B") {
  using namespace lockstep::testing;
  Data d = make_data();
  auto ref = reference_trajectory(d);
  // Rank 0 starts from the reference weights, the others elsewhere: DDP broadcasts rank 0's.
  auto model = make_model(R() == 0 ? 0 : 100 + R());
  dist::DDPOptions opts;
  opts.bucket_cap_mb = 0.0001;  // several buckets, so that several all-reduces are in flight
  opts.first_bucket_cap_mb = 0.0001;
  dist::DistributedDataParallel ddp(model, opts);
  optim::SGD sgd(ddp.parameters(), optim::SGDOptions(0.1).momentum(0.9));
  nn::CrossEntropyLoss ce;
  const int64_t per = kBatch / W();
  for (int s = 0; s < kSteps; ++s) {
    sgd.zero_grad();
    ce(ddp(rows(d.x[s], R() * per, (R() + 1) * per)), rows(d.y[s], R() * per, (R() + 1) * per)).backward();
    sgd.step();
    auto params = model->named_parameters();
    for (size_t i = 0; i < params.size(); ++i)
      CHECK_MESSAGE(internal::allclose(params[i].second, ref[s][i].second, 1e-5, 1e-6), "step ", s, " ",
                    params[i].first, " on rank ", R());
  }
}

TEST_CASE("destroy, then init again (MPI stays initialized); bad options are refused") {
  dist::destroy_process_group();
  CHECK_FALSE(dist::is_initialized());
  try {
    dist::init_process_group({.backend = "mpi", .init_method = "tcp://127.0.0.1:1"});
    FAIL("tcp:// with mpi did not throw");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("backend \"mpi\" takes its ranks from MPI") != std::string::npos);
  }
  try {
    dist::init_process_group({.backend = "mpi", .world_size = 99});
    FAIL("a wrong world_size did not throw");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("world_size 99 was given but MPI_COMM_WORLD has") != std::string::npos);
  }
  dist::init_process_group({.backend = "mpi"});
  Tensor t = full({3}, 1.0);
  dist::all_reduce(t);
  CHECK(values(t) == std::vector<double>(3, W()));
}

namespace {

// The last rank dies at step 3 while the others are in an all-reduce: mpirun must end the job.
int kill_rank() {
  dist::init_process_group({.backend = "mpi"});
  for (int step = 0; step < 1000; ++step) {
    if (step == 3 && R() == W() - 1) std::raise(SIGKILL);
    Tensor t = full({1000}, 1.0);
    dist::all_reduce(t);
    std::printf("rank %d step %d\n", R(), step);
    std::fflush(stdout);
  }
  dist::destroy_process_group();
  return 0;  // not reached: mpirun ended the job
}

// Rank 0 waits for an all-reduce the others never join (they sleep), times out, and leaves main with
// the group alive, as an error path does: the exit handler must end the job with MPI_Abort rather than
// hang in MPI_Finalize.
// With `blocking`, rank 0's all-reduce is a blocking call that runs on its own thread (the group is
// idle after two blocking barriers): the worker, watching it, prints the error and ends the process.
int exit_after_timeout(bool blocking) {
  dist::init_process_group({.backend = "mpi", .timeout = std::chrono::milliseconds(300)});
  dist::barrier();
  dist::barrier();
  if (R() != 0) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // until mpirun ends it
  }
  Tensor t = full({4}, 1.0);
  if (blocking) {
    dist::all_reduce(t);  // the worker ends the process (or, had it been queued, throws TimeoutError)
  } else {
    dist::default_pg()->all_reduce(t)->wait();  // throws TimeoutError
  }
  return 0;
}

}  // namespace
#endif  // LOCKSTEP_WITH_MPI

int main(int argc, char** argv) {
#ifdef LOCKSTEP_WITH_MPI
  const bool built = true;
#else
  const bool built = false;
#endif
  if (argc > 1 && std::strcmp(argv[1], "--built-with-mpi") == 0) {
    std::puts(built ? "yes" : "no");
    return 0;
  }
#ifdef LOCKSTEP_WITH_MPI
  try {
    if (argc > 1 && std::strcmp(argv[1], "--kill-rank") == 0) return kill_rank();
    if (argc > 1 && std::strcmp(argv[1], "--exit-after-timeout") == 0) return exit_after_timeout(false);
    if (argc > 1 && std::strcmp(argv[1], "--blocking-timeout") == 0) return exit_after_timeout(true);
    dist::init_process_group({.backend = "mpi"});
    doctest::Context context(argc, argv);
    const int failed = context.run();
    if (dist::is_initialized()) dist::destroy_process_group();
    return failed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_ranks: %s\n", e.what());
    return 1;
  }
#else
  std::fprintf(stderr, "mpi_ranks: lockstep was built without MPI\n");
  return 1;
#endif
}
