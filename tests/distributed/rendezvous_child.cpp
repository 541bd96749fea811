// rendezvous_child: a rank program for launch_test that runs init_process_group under the launcher.
//   init DIR          rank 0 first reports whether MASTER_PORT is reserved (a plain bind fails), then
//                     every rank joins, all-reduces and prints "R ok port=MASTER_PORT"
//   steal_first DIR   on the first MASTER_PORT the job sees, rank 1 listens on it before rank 0 can
//                     (so rank 0 finds it taken); on later ports, as init
//   steal_always DIR  rank 1 takes every port first
// DIR is a scratch directory shared by the ranks (and by the attempts of one launch).
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "distributed/init.h"
#include "distributed/net/socket.h"
#include "tensor/factory.h"

using namespace lockstep;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The first MASTER_PORT any rank of this launch saw, agreed through a file created atomically.
std::string first_port(const std::string& dir, const std::string& port) {
  std::string tmp = dir + "/first_port." + std::to_string(::getpid());
  std::ofstream(tmp) << port;
  if (::link(tmp.c_str(), (dir + "/first_port").c_str()) != 0) {
    // Another rank was first: read its port below.
  }
  ::unlink(tmp.c_str());
  std::string first;
  std::ifstream(dir + "/first_port") >> first;
  return first;
}

// Whether a bind without SO_REUSEADDR to MASTER_PORT fails: the launcher holds the port.
bool port_reserved(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  bool reserved = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0;
  ::close(fd);
  return reserved;
}

void wait_for_file(const std::string& path) {
  for (int i = 0; i < 1000 && !std::filesystem::exists(path); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: rendezvous_child init|steal_first|steal_always DIR\n");
    return 64;
  }
  const std::string mode = argv[1], dir = argv[2], port = env("MASTER_PORT");
  const int rank = std::atoi(env("RANK").c_str());
  const bool steal = mode == "steal_always" || (mode == "steal_first" && first_port(dir, port) == port);
  try {
    if (steal && rank == 1) {
      dist::Socket thief = dist::Socket::listen("127.0.0.1", static_cast<uint16_t>(std::stoi(port)));
      std::ofstream(dir + "/stolen." + port) << "";
      std::this_thread::sleep_for(std::chrono::seconds(60));  // until the launcher stops this attempt
      return 0;
    }
    if (steal && rank == 0) wait_for_file(dir + "/stolen." + port);
    if (rank == 0) std::printf("0 reserved=%s\n", port_reserved(static_cast<uint16_t>(std::stoi(port))) ? "yes" : "no");
    std::fflush(stdout);
    dist::InitOptions o;
    o.backend = "gloo";
    o.timeout = std::chrono::seconds(10);
    dist::init_process_group(o);
    Tensor t = full({3}, 1.0);
    dist::all_reduce(t);
    if (t.to_vector<double>()[0] != dist::get_world_size()) throw Error("all_reduce gave the wrong sum");
    std::printf("%d ok port=%s\n", rank, port.c_str());
    std::fflush(stdout);
    dist::destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
  return 0;
}
