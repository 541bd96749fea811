// ModuleHolder: LibTorch's module holder. `nn::Linear` holds a std::shared_ptr<LinearImpl>: copies
// share the module, `->` reaches its members, and calling it runs its forward with any arguments.
//
//   struct NetImpl : nn::Module {
//     nn::Linear fc1{nullptr}, fc2{nullptr};          // empty until registered
//     NetImpl() : Module("Net") {
//       fc1 = register_module("fc1", nn::Linear(784, 128));
//       fc2 = register_module("fc2", nn::Linear(nn::LinearOptions(128, 10).bias(false)));
//     }
//     Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
//   };
//   LOCKSTEP_MODULE(Net);                                // Net: a holder of NetImpl
//   Net net;  net(x);  net->parameters();
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

#include "common/check.h"
#include "nn/module.h"

namespace lockstep::nn {

template <typename Contained>
class ModuleHolder {
 public:
  using ContainedType = Contained;

  // An empty holder, to be assigned later (nn::Linear fc{nullptr}).
  ModuleHolder(std::nullptr_t) {}  // NOLINT
  // A new module built from the arguments: nn::Linear(784, 10), nn::ReLU().
  template <typename... Args>
    requires std::is_constructible_v<Contained, Args...>
  explicit ModuleHolder(Args&&... args) : impl_(std::make_shared<Contained>(std::forward<Args>(args)...)) {
    impl_->template bind_forward<Contained>();
  }
  ModuleHolder(std::shared_ptr<Contained> module) : impl_(std::move(module)) {  // NOLINT
    if (impl_) impl_->template bind_forward<Contained>();
  }

  // Runs the module's forward with these arguments (any of its forward overloads, whatever it returns:
  // auto [recon, mu, logvar] = vae(x)).
  // Runs the module's forward hooks around it, if it has any (Module::register_forward_hook).
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) {
    Contained* m = get();
    using R = decltype(m->forward(std::forward<Args>(args)...));
    if constexpr (std::is_void_v<R> || std::is_reference_v<R>) {
      return m->forward(std::forward<Args>(args)...);
    } else {
      if (!m->has_forward_hooks()) return m->forward(std::forward<Args>(args)...);
      m->run_forward_pre_hooks();
      R out = m->forward(std::forward<Args>(args)...);
      m->run_forward_hooks(detail::output_tensors(out));
      return out;
    }
  }

  // Indexing reaches the module's operator[] (Sequential, ModuleList, ModuleDict).
  template <typename Arg>
  decltype(auto) operator[](Arg&& arg) const {
    return (*get())[std::forward<Arg>(arg)];
  }

  Contained* operator->() const { return get(); }
  Contained& operator*() const { return *get(); }
  Contained* get() const {
    LOCKSTEP_CHECK(impl_ != nullptr, "accessing an empty module holder (it was constructed from nullptr and never "
                   "assigned a module)");
    return impl_.get();
  }
  const std::shared_ptr<Contained>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }
  explicit operator bool() const { return impl_ != nullptr; }
  // Converts to the shared pointer that containers and DistributedDataParallel take.
  template <typename T>
    requires std::is_convertible_v<Contained*, T*>
  operator std::shared_ptr<T>() const {  // NOLINT
    return impl_;
  }

 private:
  std::shared_ptr<Contained> impl_;
};

// `std::cout << model`: the held module's tree (nn/module.h).
template <typename T>
std::ostream& operator<<(std::ostream& os, const ModuleHolder<T>& holder) {
  return os << *holder;
}

}  // namespace lockstep::nn

// Declares `Name` as the holder of `NameImpl`, as LibTorch's TORCH_MODULE.
#define LOCKSTEP_MODULE(Name)                                         \
  class Name : public ::lockstep::nn::ModuleHolder<Name##Impl> {      \
   public:                                                            \
    using ::lockstep::nn::ModuleHolder<Name##Impl>::ModuleHolder;     \
  }
