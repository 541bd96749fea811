// How many GPUs a multi-process NCCL test can give its ranks, and why its cases skip when there are too
// few. The test's own process never calls CUDA (a forked rank cannot use a context made before the
// fork): a short-lived child counts the devices.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "tensor/cuda/cuda.h"

namespace lockstep::testing {

// cuda::device_count() as a forked child sees it (0 if the child fails).
inline int device_count_in_child() {
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid == 0) _exit(std::min(cuda::device_count(), 100));
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;
  return WEXITSTATUS(status);
}

struct NcclDevices {
  int count;            // 0 where lockstep was built without NCCL
  std::string why_not;  // what a skipped case says
};

// The devices for a test whose cases need `needed` of them (one per rank: NCCL refuses two ranks on one
// device); with fewer, prints the "SKIPPED:" line that .ci/run counts. Call once, at static
// initialisation, before any rank is forked.
inline NcclDevices nccl_devices(int needed) {
#ifdef LOCKSTEP_WITH_NCCL
  const int n = device_count_in_child();
  NcclDevices d{n, std::to_string(n) + " CUDA device(s) visible, " + std::to_string(needed) + " needed"};
#else
  NcclDevices d{0, "lockstep was built without NCCL"};
#endif
  if (d.count < needed) std::printf("SKIPPED: %s\n", d.why_not.c_str());
  return d;
}

}  // namespace lockstep::testing
