// Device parsing ("cpu", "cuda", "cuda:1"), as torch.device.
#include "tensor/device.h"

#include "common/check.h"

namespace lockstep {

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.find_first_not_of("0123456789", 5) == std::string::npos)
    return cuda(std::stoi(s.substr(5)));
  fail("Device: cannot parse '", s, "' (expected cpu, cuda or cuda:N)");
}

}  // namespace lockstep
