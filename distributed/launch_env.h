// Where env:// learns this process's place in the job: rank, world size, local rank and the master's
// address, from whichever engine started it.
//
//   PyTorch's variables   RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (lockstep's launcher,
//                         torchrun, Kubernetes jobs). When RANK is set, the ranks come from these alone:
//                         a launcher run by srun or mpirun numbers its children itself
//   Slurm (srun)          SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the master is the first host of
//                         SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), the port derived from SLURM_JOB_ID
//   Open MPI (mpirun)     OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   MPICH / PMI           PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
//
// Otherwise a value given by two sources that disagree (SLURM_PROCID=1 but PMI_RANK=0, or WORLD_SIZE=4
// but SLURM_NTASKS=2) is an error naming both. Under
// MPI with every rank on one host (OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS equal to the size) the
// master defaults to 127.0.0.1; across hosts MASTER_ADDR must be set. A master found this way (not from
// MASTER_ADDR) listens on MASTER_PORT if set, else on 29500 (torchrun's default). The rank's range is
// checked by init_process_group, which tells the other ranks.
#pragma once

#include <string>

#include "common/env.h"

namespace lockstep::dist {

struct LaunchEnv {
  int rank = -1, world_size = -1, local_rank = -1;  // -1: not found
  std::string master_addr;
  int master_port = -1;
  // "rank 1 from SLURM_PROCID, world_size 2 from SLURM_NTASKS, ...": what LOCKSTEP_DISTRIBUTED_DEBUG=INFO
  // prints.
  std::string describe() const;
  std::string rank_from, world_size_from, local_rank_from, master_addr_from, master_port_from;
};

// Reads the variables through `getenv` (common/env.h; a test passes a recorded environment). Throws
// lockstep::Error on a malformed value or a conflict, naming the variables.
using lockstep::GetEnv;
LaunchEnv discover_launch_env(const GetEnv& getenv);
LaunchEnv discover_launch_env();  // the process's environment (process_env)

// How many ranks MPI started on this host: OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI), else MPI_LOCALNRANKS
// (MPICH); -1 when neither is set. `from`, when given, receives the variable's name. Throws on a value
// that is not a positive integer.
int mpi_local_size(const GetEnv& getenv, std::string* from = nullptr);
int mpi_local_size();  // the process's environment

// The first host of a Slurm node list: "cn[07-09,12],gpu1" -> "cn07", "a-1,b" -> "a-1".
std::string slurm_first_host(const std::string& nodelist);

}  // namespace lockstep::dist
