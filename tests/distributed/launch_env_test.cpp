// distributed/launch_env: rank, world size, local rank and master from recorded environments of
// lockstep's launcher, srun, Open MPI's mpirun and MPICH's mpiexec, and the conflicts it refuses.
#include "distributed/launch_env.h"

#include <doctest/doctest.h>

#include <map>
#include <string>

#include "tests/util/test_util.h"

using lockstep::dist::discover_launch_env;
using lockstep::dist::LaunchEnv;
using lockstep::dist::slurm_first_host;
using lockstep::testing::contains;
using lockstep::testing::error_of;

namespace {

using Env = std::map<std::string, std::string>;

LaunchEnv discover(const Env& env) {
  return discover_launch_env([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// Task 1 of `srun -N 2 -n 2 --ntasks-per-node=1` in job 4242 (the variables env:// reads, as Slurm sets them).
const Env kSlurmTask1 = {{"SLURM_JOB_ID", "4242"},        {"SLURM_STEP_ID", "0"},
                         {"SLURM_PROCID", "1"},           {"SLURM_NTASKS", "2"},
                         {"SLURM_LOCALID", "0"},          {"SLURM_NODEID", "1"},
                         {"SLURM_STEP_NODELIST", "cn[007-008]"}, {"SLURM_JOB_NODELIST", "cn[007-008]"}};

}  // namespace

TEST_CASE("the first host of a Slurm node list") {
  CHECK(slurm_first_host("cn07") == "cn07");
  CHECK(slurm_first_host("cn[07-09,12],gpu1") == "cn07");
  CHECK(slurm_first_host("cn[007-010]") == "cn007");  // zero padding kept
  CHECK(slurm_first_host("rack1-[3,5]-n") == "rack1-3-n");
  CHECK(slurm_first_host("a-1,b[1-2]") == "a-1");
  CHECK(contains(error_of([] { slurm_first_host("cn[07-09"); }), "unclosed or empty bracket"));
  CHECK(contains(error_of([] { slurm_first_host("cn[]"); }), "unclosed or empty bracket"));
  CHECK(contains(error_of([] { slurm_first_host(""); }), "is empty"));
  CHECK(contains(error_of([] { slurm_first_host("cn[x-y]"); }), "does not start with a number"));
}

TEST_CASE("PyTorch's variables, as lockstep's launcher and torchrun set them") {
  LaunchEnv e = discover({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"},
                          {"MASTER_PORT", "29400"}});
  CHECK(e.rank == 3);
  CHECK(e.world_size == 4);
  CHECK(e.local_rank == 1);
  CHECK(e.master_addr == "10.0.0.1");
  CHECK(e.master_port == 29400);
  CHECK(e.describe() ==
        "rank 3 from RANK, world_size 4 from WORLD_SIZE, local_rank 1 from LOCAL_RANK, master_addr 10.0.0.1 from "
        "MASTER_ADDR, master_port 29400 from MASTER_PORT");
  // MASTER_ADDR without MASTER_PORT: no port is made up (env:// then asks for MASTER_PORT).
  CHECK(discover({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}}).master_port == -1);
}

TEST_CASE("srun: ranks from Slurm, the master from the node list, the port from the job id") {
  LaunchEnv e = discover(kSlurmTask1);
  CHECK(e.rank == 1);
  CHECK(e.world_size == 2);
  CHECK(e.local_rank == 0);
  CHECK(e.master_addr == "cn007");
  CHECK(e.master_port == 20000 + 4242);
  CHECK(e.rank_from == "SLURM_PROCID");
  CHECK(e.master_addr_from == "SLURM_STEP_NODELIST");
  // MASTER_ADDR and MASTER_PORT, when the job script sets them, are used.
  Env with = kSlurmTask1;
  with["MASTER_ADDR"] = std::string("login1");
  with["MASTER_PORT"] = std::string("31000");
  LaunchEnv w = discover(with);
  CHECK(w.master_addr == "login1");
  CHECK(w.master_port == 31000);
}

TEST_CASE("a launcher started by srun numbers its children itself") {
  Env child = kSlurmTask1;  // inherited from the srun task that runs the launcher
  child.insert({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "cn007"},
                {"MASTER_PORT", "29500"}});
  LaunchEnv e = discover(child);
  CHECK(e.rank == 3);
  CHECK(e.world_size == 4);
  CHECK(e.local_rank == 1);
}

TEST_CASE("mpirun on one host (Open MPI) and mpiexec (MPICH)") {
  LaunchEnv o = discover({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}});
  CHECK(o.rank == 2);
  CHECK(o.world_size == 3);
  CHECK(o.local_rank == 2);
  CHECK(o.master_addr == "127.0.0.1");
  CHECK(o.master_port == 29500);
  LaunchEnv m = discover({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"},
                          {"MASTER_PORT", "29600"}});
  CHECK(m.rank == 0);
  CHECK(m.world_size == 2);
  CHECK(m.master_addr == "127.0.0.1");
  CHECK(m.master_port == 29600);
  // Ranks on several hosts: no master can be guessed.
  LaunchEnv across = discover({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  CHECK(across.master_addr.empty());
  CHECK(across.master_port == -1);
}

TEST_CASE("sources that disagree, and malformed values, are errors naming the variables") {
  Env both = kSlurmTask1;
  both["PMI_RANK"] = std::string("0");  // std::string(): GCC 12 falsely warns (-Wrestrict) on a literal
  CHECK(error_of([&] { discover(both); }) ==
        "init_process_group: env:// found two different ranks: SLURM_PROCID=1 and PMI_RANK=0 (unset one, or make them "
        "agree)");
  both["PMI_RANK"] = std::string("1");  // agreeing sources are fine
  CHECK(discover(both).rank == 1);
  Env sizes = kSlurmTask1;
  sizes["WORLD_SIZE"] = std::string("4");
  CHECK(contains(error_of([&] { discover(sizes); }), "two different world sizes: WORLD_SIZE=4 and SLURM_NTASKS=2"));
  CHECK(error_of([] { discover({{"SLURM_PROCID", "one"}}); }) == "init_process_group: SLURM_PROCID=\"one\" is not an integer");
  CHECK(contains(error_of([] { discover({{"SLURM_NTASKS", "0"}}); }), "SLURM_NTASKS=0 is not a valid world size"));
  CHECK(contains(error_of([] { discover({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}); }),
                 "MASTER_PORT=70000 is not a port"));
  CHECK(contains(error_of([] { discover({{"SLURM_JOB_NODELIST", "cn[1"}}); }), "cn[1"));
}

TEST_CASE("nothing set: nothing found") {
  LaunchEnv e = discover({});
  CHECK(e.rank == -1);
  CHECK(e.world_size == -1);
  CHECK(e.local_rank == -1);
  CHECK(e.master_addr.empty());
  CHECK(e.describe() ==
        "rank not found, world_size not found, local_rank not found, master_addr not found, master_port not found");
}

TEST_CASE("mpi_local_size: Open MPI's variable, else MPICH's; -1 without either; a bad value is an error naming it") {
  auto local_size = [](const Env& env, std::string* from = nullptr) {
    return lockstep::dist::mpi_local_size(
        [&](const char* name) -> const char* {
          auto it = env.find(name);
          return it == env.end() ? nullptr : it->second.c_str();
        },
        from);
  };
  std::string from;
  CHECK(local_size({{"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}, {"MPI_LOCALNRANKS", "5"}}, &from) == 3);
  CHECK(from == "OMPI_COMM_WORLD_LOCAL_SIZE");
  CHECK(local_size({{"MPI_LOCALNRANKS", "5"}}, &from) == 5);
  CHECK(from == "MPI_LOCALNRANKS");
  CHECK(local_size({}) == -1);
  CHECK(contains(error_of([&] { local_size({{"OMPI_COMM_WORLD_LOCAL_SIZE", "two"}}); }),
                 "OMPI_COMM_WORLD_LOCAL_SIZE=\"two\" is not an integer"));
  CHECK(contains(error_of([&] { local_size({{"MPI_LOCALNRANKS", "0"}}); }), "MPI_LOCALNRANKS=0 is not a valid local size"));
}
