// LOCKSTEP_ARG: the one options style of lockstep (nn/, optim/), as LibTorch's TORCH_ARG: each option is
// a private field with a chaining setter and a getter of the same name:
//   nn::Conv2dOptions(1, 32, 3).stride(1).padding(1)    optim::SGDOptions(0.1).momentum(0.9)
//   opts.stride()                                       opts.momentum()
#pragma once

// Declares option `name` of type T with default `...` (the default may contain commas).
#define LOCKSTEP_ARG(T, name, ...)                         \
 public:                                                   \
  auto name(const T& new_##name)->decltype(*this) {        \
    this->name##_ = new_##name;                            \
    return *this;                                          \
  }                                                        \
  const T& name() const noexcept { return this->name##_; } \
                                                           \
 private:                                                  \
  T name##_ = __VA_ARGS__
