// A test rank's default process group, met over loopback at tcp://127.0.0.1:PORT (the multi-process
// tests' common rendezvous; tests/util/multiprocess.h runs the ranks and finds the free port).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "distributed/init.h"

namespace lockstep::testing {

inline dist::InitOptions tcp_options(uint16_t port, int world_size, int rank, std::chrono::milliseconds timeout,
                                     const std::string& backend = "gloo") {
  dist::InitOptions o;
  o.backend = backend;
  o.init_method = "tcp://127.0.0.1:" + std::to_string(port);
  o.world_size = world_size;
  o.rank = rank;
  o.timeout = timeout;
  return o;
}

inline void init_tcp_group(uint16_t port, int world_size, int rank, std::chrono::milliseconds timeout,
                           const std::string& backend = "gloo") {
  dist::init_process_group(tcp_options(port, world_size, rank, timeout, backend));
}

}  // namespace lockstep::testing
