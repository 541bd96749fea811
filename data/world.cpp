// The one process-wide world provider (see world.h).
#include "data/world.h"

namespace lockstep::data {

std::function<std::pair<int, int>()>& default_world_provider() {
  static std::function<std::pair<int, int>()> provider;
  return provider;
}

}  // namespace lockstep::data
