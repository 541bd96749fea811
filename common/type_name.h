// The name of a C++ type as written in the source ("LinearFunction", "(anonymous namespace)::NetImpl"),
// for messages and for names derived from a user's class (custom autograd functions, module printing).
#pragma once

#include <cxxabi.h>

#include <cstdlib>
#include <string>
#include <typeinfo>

namespace lockstep {

inline std::string type_name(const std::type_info& type) {
  int status = 0;
  char* s = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string name = status == 0 && s ? s : type.name();
  std::free(s);
  return name;
}

}  // namespace lockstep
