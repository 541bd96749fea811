// The optimizer state_dict's key format (state_keys.h).
#include "optim/state_keys.h"

#include <charconv>

#include "common/check.h"
#include "tensor/factory.h"

namespace lockstep::optim {

namespace {
constexpr std::string_view kState = "state.", kGroups = "param_groups.";
}  // namespace

std::string state_key(size_t param, std::string_view name) {
  return std::string(kState) + std::to_string(param) + "." + std::string(name);
}

std::string group_key(size_t group, std::string_view name) {
  return std::string(kGroups) + std::to_string(group) + "." + std::string(name);
}

bool is_group_key(std::string_view key) { return key.starts_with(kGroups); }

StateKey parse_state_key(std::string_view key, std::string_view who) {
  StateKey out;
  std::string_view rest;
  if (key.starts_with(kState)) {
    out.kind = StateKey::Kind::kState, rest = key.substr(kState.size());
  } else if (key.starts_with(kGroups)) {
    out.kind = StateKey::Kind::kGroup, rest = key.substr(kGroups.size());
  } else {
    LOCKSTEP_CHECK(false, who, ": unexpected key '", key, "' (an optimizer's keys are state.<i>.<name> and ",
                   "param_groups.<g>.<name>)");
  }
  const size_t dot = rest.find('.');
  const char* end = rest.data() + (dot == std::string_view::npos ? rest.size() : dot);
  const auto [ptr, ec] = std::from_chars(rest.data(), end, out.index);
  LOCKSTEP_CHECK(dot != std::string_view::npos && dot > 0 && dot + 1 < rest.size() && ec == std::errc() && ptr == end,
                 who, ": malformed key '", key, "' (expected ", out.kind == StateKey::Kind::kState ? kState : kGroups,
                 "<decimal index>.<name>)");
  out.name = std::string(rest.substr(dot + 1));
  return out;
}

StateDict group_params_entries(const std::vector<size_t>& sizes) {
  StateDict out;
  int64_t first = 0;
  for (size_t g = 0; g < sizes.size(); ++g) {
    const auto n = static_cast<int64_t>(sizes[g]);
    out.emplace_back(group_key(g, "params"), arange(first, first + n));
    first += n;
  }
  return out;
}

bool is_scalar_state(std::string_view name) { return name == "step" || name == "mu_product"; }

}  // namespace lockstep::optim
