#include "distributed/launch_env.h"

#include <charconv>
#include <utility>

#include "common/check.h"

namespace lockstep::dist {
namespace {

// One field's value from the first source that sets it; a later source that sets it differently is a
// conflict. Sources are listed in priority order.
struct Field {
  explicit Field(const char* w, std::string v = {}, std::string f = {})
      : what(w), value(std::move(v)), from(std::move(f)) {}
  const char* what;
  std::string value, from;
  void offer(const GetEnv& getenv, const char* var) {
    const char* v = getenv(var);
    if (!v || !*v) return;
    if (from.empty()) {
      value = v, from = var;
      return;
    }
    LOCKSTEP_CHECK(value == v, "init_process_group: env:// found two different ", what, "s: ", from, "=", value,
                   " and ", var, "=", v, " (unset one, or make them agree)");
  }
};

int to_int(const Field& f, int lo) {
  int value = 0;
  const std::string& s = f.value;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  LOCKSTEP_CHECK(ec == std::errc() && ptr == s.data() + s.size() && !s.empty(), "init_process_group: ", f.from, "=\"",
                 s, "\" is not an integer");
  LOCKSTEP_CHECK(value >= lo, "init_process_group: ", f.from, "=", value, " is not a valid ", f.what, " (must be >= ",
                 lo, ")");
  return value;
}

}  // namespace

std::string slurm_first_host(const std::string& nodelist) {
  // Hosts are separated by commas outside brackets; a bracket holds ranges and numbers.
  size_t end = 0;
  for (int depth = 0; end < nodelist.size(); ++end) {
    char c = nodelist[end];
    if (c == '[') ++depth;
    else if (c == ']') --depth;
    else if (c == ',' && depth == 0) break;
  }
  const std::string first = nodelist.substr(0, end);
  const size_t open = first.find('[');
  if (open == std::string::npos) {
    LOCKSTEP_CHECK(!first.empty(), "init_process_group: the Slurm node list \"", nodelist, "\" is empty");
    return first;
  }
  const size_t close = first.find(']', open);
  LOCKSTEP_CHECK(close != std::string::npos && close > open + 1, "init_process_group: the Slurm node list \"",
                 nodelist, "\" has an unclosed or empty bracket");
  // The first number of the first range keeps its zero padding: "cn[007-010]" -> "cn007".
  const std::string inside = first.substr(open + 1, close - open - 1);
  const std::string lead = inside.substr(0, inside.find_first_of(",-"));
  LOCKSTEP_CHECK(!lead.empty() && lead.find_first_not_of("0123456789") == std::string::npos,
                 "init_process_group: the Slurm node list \"", nodelist, "\" has a bracket that does not start with a number");
  return first.substr(0, open) + lead + first.substr(close + 1);
}

int mpi_local_size(const GetEnv& getenv, std::string* from) {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    const char* s = getenv(v);
    if (!s || !*s) continue;
    if (from) *from = v;
    return to_int(Field{"local size", s, v}, 1);
  }
  return -1;
}

int mpi_local_size() { return mpi_local_size(process_env); }

LaunchEnv discover_launch_env(const GetEnv& getenv) {
  Field rank{"rank"}, size{"world size"}, local{"local rank"}, addr{"master address"}, port{"master port"};
  if (const char* r = getenv("RANK"); r && *r) {
    // A launcher set the ranks (lockstep's, torchrun): one started by srun or mpirun gives its children
    // their own ranks, so the engine's variables they inherit describe the launcher, not them.
    rank.offer(getenv, "RANK");
    size.offer(getenv, "WORLD_SIZE");
    local.offer(getenv, "LOCAL_RANK");
  } else {
    for (const char* v : {"SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) rank.offer(getenv, v);
    for (const char* v : {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) size.offer(getenv, v);
    for (const char* v : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"})
      local.offer(getenv, v);
  }
  addr.offer(getenv, "MASTER_ADDR");
  port.offer(getenv, "MASTER_PORT");

  LaunchEnv e;
  if (!rank.from.empty()) e.rank = to_int(rank, 0), e.rank_from = rank.from;
  if (!size.from.empty()) e.world_size = to_int(size, 1), e.world_size_from = size.from;
  if (!local.from.empty()) e.local_rank = to_int(local, 0), e.local_rank_from = local.from;
  if (!addr.from.empty()) {
    e.master_addr = addr.value, e.master_addr_from = addr.from;
  } else if (const char* nodes = getenv("SLURM_STEP_NODELIST"); nodes && *nodes) {
    e.master_addr = slurm_first_host(nodes), e.master_addr_from = "SLURM_STEP_NODELIST";
  } else if (const char* nodes = getenv("SLURM_JOB_NODELIST"); nodes && *nodes) {
    e.master_addr = slurm_first_host(nodes), e.master_addr_from = "SLURM_JOB_NODELIST";
  } else if (std::string from; e.world_size > 0 && mpi_local_size(getenv, &from) == e.world_size) {
    // mpirun on one host: every rank is local, so the master is this host.
    e.master_addr = "127.0.0.1", e.master_addr_from = from + " (every rank on this host)";
  }
  if (!port.from.empty()) {
    e.master_port = to_int(port, 1), e.master_port_from = port.from;
    LOCKSTEP_CHECK(e.master_port < 65536, "init_process_group: MASTER_PORT=", e.master_port,
                   " is not a port (1..65535)");
  } else if (const char* job = getenv("SLURM_JOB_ID"); job && *job) {
    // Two jobs sharing a node get different ports; every task of one job computes the same one.
    Field id{"Slurm job id", job, "SLURM_JOB_ID"};
    e.master_port = 20000 + to_int(id, 0) % 10000, e.master_port_from = "SLURM_JOB_ID (20000 + id % 10000)";
  } else if (!e.master_addr.empty() && e.master_addr_from != "MASTER_ADDR") {
    e.master_port = 29500, e.master_port_from = "the default";  // PyTorch's own variables come as a pair
  }
  return e;
}

LaunchEnv discover_launch_env() { return discover_launch_env(process_env); }

std::string LaunchEnv::describe() const {
  auto part = [](const char* what, const std::string& value, const std::string& from) {
    return std::string(what) + " " + (from.empty() ? "not found" : value + " from " + from);
  };
  return part("rank", std::to_string(rank), rank_from) + ", " +
         part("world_size", std::to_string(world_size), world_size_from) + ", " +
         part("local_rank", std::to_string(local_rank), local_rank_from) + ", " +
         part("master_addr", master_addr, master_addr_from) + ", " +
         part("master_port", std::to_string(master_port), master_port_from);
}

}  // namespace lockstep::dist
