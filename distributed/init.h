// The default process group, as torch.distributed's init_process_group & co.
//
//   dist::init_process_group();                        // env://, as set by the launcher
//   dist::all_reduce(grad, dist::ReduceOp::AVG);       // on the default group, waits
//   dist::destroy_process_group();
//
// Rendezvous (init_method):
//   env://              MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK from the environment (world_size
//                       and rank in InitOptions, when given, take precedence over the variables);
//   tcp://HOST:PORT     world_size and rank must be given; rank 0 hosts the TCPStore on HOST:PORT;
//   file:///PATH        world_size and rank must be given; a FileStore at PATH (single host, or a
//                       shared file system). PATH must not be left over from another job.
// Every rank registers its rank in the store; a rank taken twice (rank 0 too: the second finds the port
// taken and joins the first's store to say so), a rank outside [0, world_size) or a world size that
// differs between ranks fails init on every rank that can see it, and ranks that do not show up within
// the timeout are named in the error. Ranks that start before rank 0 retry, with backoff, until the
// timeout. init_process_group returns once every rank has connected. RELIABILITY.md lists each fault
// with its message.
//
// The default group's world size and rank also reach data/ (DistributedSampler) through
// data::default_world_provider().
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/process_group.h"

namespace lockstep::dist {

struct InitOptions {
  // "gloo", "nccl", "mpi", or "auto": nccl when lockstep has NCCL and a CUDA device is visible, else
  // gloo. "mpi" (lockstep built with Open MPI, distributed/mpi/) runs under mpirun: rank and world size
  // come from MPI_COMM_WORLD, init_method stays env:// and no store is made; MPI is finalized at exit,
  // not by destroy_process_group (it cannot be initialized twice), so init may follow destroy.
  std::string backend = "auto";
  std::string init_method = "env://";
  int world_size = -1;  // -1: from the environment (env:// only)
  int rank = -1;
  // Bounds the rendezvous and every collective. Unset: LOCKSTEP_TIMEOUT (seconds) when set, else
  // PyTorch's defaults, 30 minutes for gloo and 10 minutes for nccl.
  std::optional<std::chrono::milliseconds> timeout = std::nullopt;
};

// Joins the default process group. Throws lockstep::Error on bad options, a missing environment
// variable, a failed rendezvous, or when a group is already initialized.
void init_process_group(const InitOptions& options = {});
// Leaves the default group: waits for its queued collectives, then closes its connections, threads and
// store. Does nothing when no group is initialized. init_process_group may be called again afterwards.
void destroy_process_group();

bool is_initialized();
// The default group (throws when none is initialized).
std::shared_ptr<ProcessGroup> default_pg();
int get_rank();
int get_world_size();
// LOCAL_RANK from the environment (set by the launcher), else get_rank().
int get_local_rank();
// "gloo", "nccl" or "mpi".
std::string get_backend();

// Collectives on the default group; each waits for completion (use default_pg() for asynchronous ones).
void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM);
void broadcast(Tensor& tensor, int root = 0);
void all_gather(std::vector<Tensor>& outputs, const Tensor& input);
void reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op = ReduceOp::SUM);
void all_gather_into_tensor(Tensor& output, const Tensor& input);
void reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::SUM);
void barrier();

}  // namespace lockstep::dist
