#include "tensor/cpu/isa.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "common/env.h"

namespace lockstep::cpu {

bool use_avx512() {
  static const bool yes = [] {
    if (env_string("LOCKSTEP_CPU_ISA") == "avx2") return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512cd");
  }();
  return yes;
}

const char* isa_name() { return use_avx512() ? "avx512" : "avx2"; }

bool use_avx512_bf16() {
  static const bool yes = [] {
    if (!use_avx512() || env_string("LOCKSTEP_CPU_ISA") == "avx512") return false;
    return __builtin_cpu_supports("avx512bf16") != 0;
  }();
  return yes;
}

bool has_amx_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("amx-bf16") != 0 && __builtin_cpu_supports("amx-tile") != 0;
}

bool use_amx_bf16() {
  static const bool yes = [] {
    if (!use_avx512_bf16() || !has_amx_bf16() || env_string("LOCKSTEP_CPU_AMX") == "0") return false;
    // The tiles' 8 KiB of state is off until a process asks for it (Linux 5.16+); without it the first
    // tile instruction faults.
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return yes;
}

}  // namespace lockstep::cpu
