// ProcessGroupNCCL's flat collectives (ncclAllGather / ncclReduceScatter on the flat buffers) at world
// sizes 1 to 4, one GPU per rank: every dtype NCCL reduces and every ReduceOp, odd element counts, out of
// place and in place, with the values of flat_values.h. World sizes beyond the visible devices skip
// (NCCL refuses two ranks on one device); under --config=cudaemu the CUDA emulator shows four.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "autograd/functions.h"
#include "distributed/api.h"
#include "tensor/cuda/cuda.h"
#include "tensor/factory.h"
#include "tests/distributed/flat_values.h"
#include "tests/util/multiprocess.h"
#include "tests/util/nccl_devices.h"
#include "tests/util/tcp_group.h"

using namespace lockstep;
using dist::ReduceOp;
namespace flat = lockstep::testing::flat;

namespace {

const testing::NcclDevices kDevices = testing::nccl_devices(1);

std::string describe(const char* what, Dtype dtype, ReduceOp op, int64_t n, bool in_place) {
  return lockstep::detail::str_cat(what, " (", dtype_name(dtype), ", ", dist::reduce_op_name(op), ", ", n,
                                   " per rank, ", in_place ? "in place" : "out of place", ")");
}

}  // namespace

TEST_CASE("nccl flat collectives: every dtype and op, world sizes 1 to 4, out of place and in place") {
  if (kDevices.count < 1) {
    MESSAGE(kDevices.why_not << ": skipped");
    return;
  }
  for (int W = 1; W <= std::min(4, kDevices.count); ++W) {
    CAPTURE(W);
    const uint16_t port = testing::free_port();
    auto results = testing::run_ranks(W, [&](int rank) {
      cuda::set_device(rank);
      testing::init_tcp_group(port, W, rank, std::chrono::seconds(60), "nccl");
      const Device gpu = Device::cuda(rank);
      auto& pg = *dist::default_pg();
      for (Dtype dtype : {kFloat32, kFloat64, kInt64, kBFloat16, kFloat16}) {
        for (int64_t n : {1, 7, 1001}) {
          for (bool in_place : {false, true}) {
            Tensor gathered = zeros({W * n}, TensorOptions(dtype, gpu));
            Tensor mine = lockstep::to(flat::input(dtype, ReduceOp::SUM, rank, n), gpu);
            if (in_place) gathered.narrow(0, rank * n, n).copy_(mine);
            pg.all_gather_into_tensor(gathered, in_place ? gathered.narrow(0, rank * n, n) : mine)->wait();
            const std::string wrong = flat::check_gathered(lockstep::to(gathered, Device::cpu()), W);
            RANK_CHECK(wrong.empty(), describe("all_gather_into_tensor", dtype, ReduceOp::SUM, n, in_place), ": ",
                       wrong);
            for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX}) {
              Tensor whole = lockstep::to(flat::input(dtype, op, rank, W * n), gpu);
              Tensor out = in_place ? whole.narrow(0, rank * n, n) : zeros({n}, TensorOptions(dtype, gpu));
              pg.reduce_scatter_tensor(out, whole, op)->wait();
              const std::string bad = flat::check_reduced(lockstep::to(out, Device::cpu()), op, W, rank);
              RANK_CHECK(bad.empty(), describe("reduce_scatter_tensor", dtype, op, n, in_place), ": ", bad);
            }
          }
        }
      }
      dist::destroy_process_group();
    });
    CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
  }
}
