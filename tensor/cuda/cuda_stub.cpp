// tensor/cuda/cuda.h where lockstep is built without CUDA: no devices; calls that need one throw.
#include "common/check.h"
#include "tensor/cuda/cuda.h"

namespace lockstep::cuda {
namespace {

constexpr const char* kWithout = "lockstep was built without CUDA";
bool tf32 = false;

[[noreturn]] void without(const char* call) {
  fail(kWithout, ": cannot call cuda::", call, " (rebuild where the CUDA toolkit is found, without --config=nocuda)");
}

}  // namespace

bool is_available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return kWithout; }
void set_device(int) { without("set_device"); }
int current_device() { without("current_device"); }
void synchronize(int) { without("synchronize"); }
void* current_stream(int) { without("current_stream"); }
void set_allow_tf32(bool allow) { tf32 = allow; }
bool allow_tf32() { return tf32; }
size_t memory_allocated(int) { return 0; }
size_t memory_reserved(int) { return 0; }
void empty_cache() {}

}  // namespace lockstep::cuda
