// ModuleList, ModuleDict and Functional, as torch.nn.ModuleList / ModuleDict and LibTorch's
// nn::Functional. The lists register their entries as children ("0", "1", ... or the dict's keys), so
// parameters and state_dict names match PyTorch's ("h.0.attn.c_attn.weight").
//
//   nn::ModuleList blocks;
//   for (int i = 0; i < 4; ++i) blocks->push_back(Block(config));
//   for (auto& b : *blocks) x = b->forward(x);            // or blocks[i]->as<Block>()->forward(...)
//   nn::Sequential net(nn::Linear(4, 8), nn::Functional([](const Tensor& x) { return x * 2.0; }));
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/sequential.h"

namespace lockstep::nn {

class ModuleListImpl : public Module {
 public:
  ModuleListImpl() : Module("ModuleList") {}
  template <typename... M>
    requires(sizeof...(M) > 0)
  explicit ModuleListImpl(M&&... modules) : Module("ModuleList") {
    (push_back(as_module_ptr(std::forward<M>(modules))), ...);
  }
  template <typename M>
  void push_back(M&& m) {
    std::shared_ptr<Module> p = as_module_ptr(std::forward<M>(m));
    register_module(std::to_string(items_.size()), p);
    items_.push_back(std::move(p));
  }
  size_t size() const { return items_.size(); }
  bool is_empty() const { return items_.empty(); }
  const std::shared_ptr<Module>& operator[](size_t i) const {
    LOCKSTEP_CHECK(i < items_.size(), "ModuleList: index ", i, " out of range for ", items_.size(), " modules");
    return items_[i];
  }
  // The i-th module as T (a Module subclass or a holder type); throws when it is another type.
  template <typename T>
  auto* at(size_t i) const {
    auto* p = (*this)[i]->template as<T>();
    LOCKSTEP_CHECK(p != nullptr, "ModuleList: module ", i, " is a ", (*this)[i]->name(), ", not the type asked for");
    return p;
  }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};
LOCKSTEP_MODULE(ModuleList);

// Keys keep insertion order (as Python dicts), which is also parameters()' order.
class ModuleDictImpl : public Module {
 public:
  ModuleDictImpl() : Module("ModuleDict") {}
  template <typename M>
  void insert(const std::string& key, M&& m) {
    std::shared_ptr<Module> p = as_module_ptr(std::forward<M>(m));
    LOCKSTEP_CHECK(!contains(key), "ModuleDict: key '", key, "' is already present");
    register_module(key, p);
    items_.emplace_back(key, std::move(p));
  }
  bool contains(const std::string& key) const {
    for (const auto& [k, _] : items_)
      if (k == key) return true;
    return false;
  }
  const std::shared_ptr<Module>& operator[](const std::string& key) const {
    for (const auto& [k, m] : items_)
      if (k == key) return m;
    fail("ModuleDict: no key '", key, "' (keys: ", keys(), ")");
  }
  template <typename T>
  auto* at(const std::string& key) const {
    auto* p = (*this)[key]->template as<T>();
    LOCKSTEP_CHECK(p != nullptr, "ModuleDict: module '", key, "' is a ", (*this)[key]->name(),
                   ", not the type asked for");
    return p;
  }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const auto& [k, _] : items_) out.push_back(k);
    return out;
  }
  size_t size() const { return items_.size(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> items_;
};
LOCKSTEP_MODULE(ModuleDict);

// Parameters in a list or a dict, as LibTorch's ParameterList / ParameterDict: each one registered (named
// "0", "1", ... or by its key), so parameters(), state_dict() and DDP see them; no forward.
class ParameterListImpl : public Module {
 public:
  ParameterListImpl() : Module("ParameterList") {}
  explicit ParameterListImpl(const std::vector<Tensor>& params) : ParameterListImpl() {
    for (const Tensor& p : params) append(p);
  }
  // Registers t (requires_grad set, as register_parameter does) and returns the registered handle.
  Tensor& append(const Tensor& t, bool requires_grad = true) {
    LOCKSTEP_CHECK(t.defined(), "ParameterList::append: the tensor is undefined");
    return items_.emplace_back(register_parameter(std::to_string(items_.size()), t, requires_grad));
  }
  void extend(const std::vector<Tensor>& params) {
    for (const Tensor& p : params) append(p);
  }
  size_t size() const { return items_.size(); }
  bool is_empty() const { return items_.empty(); }
  const Tensor& operator[](size_t i) const {
    LOCKSTEP_CHECK(i < items_.size(), "ParameterList: index ", i, " out of range for ", items_.size(), " parameters");
    return items_[i];
  }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<Tensor> items_;
};
LOCKSTEP_MODULE(ParameterList);

class ParameterDictImpl : public Module {
 public:
  ParameterDictImpl() : Module("ParameterDict") {}
  Tensor& insert(const std::string& key, const Tensor& t, bool requires_grad = true) {
    LOCKSTEP_CHECK(t.defined(), "ParameterDict::insert: the tensor for '", key, "' is undefined");
    LOCKSTEP_CHECK(!contains(key), "ParameterDict: key '", key, "' is already present");
    return items_.emplace_back(key, register_parameter(key, t, requires_grad)).second;
  }
  bool contains(const std::string& key) const {
    for (const auto& [k, _] : items_)
      if (k == key) return true;
    return false;
  }
  const Tensor& operator[](const std::string& key) const {
    for (const auto& [k, t] : items_)
      if (k == key) return t;
    fail("ParameterDict: no key '", key, "' (keys: ", keys(), ")");
  }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const auto& [k, _] : items_) out.push_back(k);
    return out;
  }
  size_t size() const { return items_.size(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::pair<std::string, Tensor>> items_;
};
LOCKSTEP_MODULE(ParameterDict);

// A function as a module, for Sequential: Functional(f) or Functional(f, extra args...) calling
// f(input, extra args...), as LibTorch's nn::Functional.
class FunctionalImpl : public Module {
 public:
  template <typename F, typename... Extra>
  explicit FunctionalImpl(F f, Extra... extra)
      : Module("Functional"), fn_([f = std::move(f), extra...](const Tensor& x) { return Tensor(f(x, extra...)); }) {}
  Tensor forward(const Tensor& input) { return fn_(input); }

 private:
  std::function<Tensor(const Tensor&)> fn_;
};
LOCKSTEP_MODULE(Functional);

}  // namespace lockstep::nn
