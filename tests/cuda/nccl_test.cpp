// ProcessGroupNCCL through init_process_group, world size 1: every collective on CUDA tensors, the
// async Work, the first barrier, destroy and init again. Builds everywhere; without NCCL or without a
// visible GPU its cases skip and the binary prints "SKIPPED: no CUDA device" once (tools/gpu/gpu_check.sh
// runs it on a GPU machine).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "distributed/api.h"
#include "tensor/cuda/cuda.h"
#include "tensor/factory.h"
#include "tests/util/multiprocess.h"

namespace {

using namespace lockstep;

#ifdef LOCKSTEP_WITH_NCCL
bool have_device() { return cuda::device_count() > 0; }
const std::string why_not = cuda::unavailable_reason();
#else
bool have_device() { return false; }
const std::string why_not = "lockstep was built without NCCL";
#endif

[[maybe_unused]] const bool announced = [] {
  if (!have_device()) std::printf("SKIPPED: no CUDA device (%s)\n", why_not.c_str());
  return true;
}();

#define REQUIRE_DEVICE()                                       \
  do {                                                         \
    if (!have_device()) {                                      \
      MESSAGE("no CUDA device (" << why_not << "): skipped");  \
      return;                                                  \
    }                                                          \
  } while (0)

dist::InitOptions nccl_options() {
  dist::InitOptions o;
  o.backend = "nccl";
  o.init_method = "tcp://127.0.0.1:" + std::to_string(testing::free_port());
  o.world_size = 1;
  o.rank = 0;
  o.timeout = std::chrono::seconds(60);
  return o;
}

TensorOptions on_gpu(Dtype dtype) { return TensorOptions(dtype, Device::cuda(0)); }

void check_all(const Tensor& t, double value) {
  for (double v : t.to_vector<double>()) REQUIRE(v == value);
}

}  // namespace

TEST_CASE("nccl, world size 1: init, every collective, barrier, destroy, init again") {
  REQUIRE_DEVICE();
  cuda::set_device(0);
  for (int round = 0; round < 2; ++round) {
    dist::init_process_group(nccl_options());
    CHECK(dist::get_backend() == "nccl");
    CHECK(dist::get_world_size() == 1);
    auto pg = dist::default_pg();
    CHECK(pg->backend_name() == "nccl");

    for (Dtype dtype : {kFloat32, kFloat64, kInt64}) {
      for (auto op : {dist::ReduceOp::SUM, dist::ReduceOp::AVG, dist::ReduceOp::MIN, dist::ReduceOp::MAX,
                      dist::ReduceOp::PRODUCT}) {
        Tensor t = full({(1 << 20) + 3}, 3.0, on_gpu(dtype));
        dist::all_reduce(t, op);
        check_all(t, 3.0);  // one rank: every reduction is the identity
      }
    }
    // Asynchronous: the compute stream waits for the collective, the host does not.
    Tensor t = full({1000}, 2.0, on_gpu(kFloat32));
    auto work = pg->all_reduce(t);
    work->wait();
    check_all(t, 2.0);
    CHECK(work->is_completed());
    CHECK(work->is_success());

    Tensor b = full({7}, 5.0, on_gpu(kInt64));
    dist::broadcast(b, 0);
    check_all(b, 5.0);

    std::vector<Tensor> gathered = {zeros({7}, on_gpu(kFloat64))};
    dist::all_gather(gathered, full({7}, 4.0, on_gpu(kFloat64)));
    check_all(gathered[0], 4.0);

    Tensor out = zeros({5}, on_gpu(kFloat32));
    dist::reduce_scatter(out, {full({5}, 6.0, on_gpu(kFloat32))}, dist::ReduceOp::SUM);
    check_all(out, 6.0);

    dist::barrier();

    Tensor cpu = zeros({3});
    CHECK_THROWS_WITH_AS(dist::all_reduce(cpu), doctest::Contains("the nccl backend takes CUDA tensors"), Error);
    dist::destroy_process_group();
    CHECK(!dist::is_initialized());
  }
}

TEST_CASE("nccl: a communicator per group, created on the given device") {
  REQUIRE_DEVICE();
#ifdef LOCKSTEP_WITH_NCCL
  auto store = std::make_shared<dist::TCPStore>("127.0.0.1", 0, /*is_master=*/true, std::chrono::seconds(30));
  dist::ProcessGroupNCCL::Options options;
  options.device = 0;
  options.blocking_wait = true;
  dist::ProcessGroupNCCL pg(store, 0, 1, options);
  CHECK(pg.device() == 0);
  Tensor t = full({100}, 1.5, on_gpu(kFloat32));
  pg.all_reduce(t, dist::ReduceOp::AVG)->wait(std::chrono::seconds(30));
  check_all(t, 1.5);
  pg.barrier()->wait();
#endif
}
