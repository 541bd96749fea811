// The registry of device backends. The CPU backend registers itself from tensor/cpu/; the CUDA
// backend from tensor/cuda/ when lockstep is built with the CUDA toolkit.
#include "tensor/backend.h"

#include "common/check.h"

namespace lockstep {

static Backend*& slot(DeviceType t) {
  static Backend* backends[2] = {nullptr, nullptr};
  return backends[static_cast<int>(t)];
}

void register_backend(DeviceType type, Backend* backend) { slot(type) = backend; }
bool has_backend(DeviceType type) { return slot(type) != nullptr; }

Backend& backend_for(DeviceType type) {
  Backend* b = slot(type);
  if (!b) {
    if (type == DeviceType::CUDA) fail("lockstep was built without CUDA: cannot use a cuda device");
    fail("backend_for: no CPU backend registered (link //tensor:cpu)");
  }
  return *b;
}

}  // namespace lockstep
