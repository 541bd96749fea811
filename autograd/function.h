// Custom autograd functions, as LibTorch's torch::autograd::Function<T>: a class with a static
// forward(ctx, args...) and a static backward(ctx, grad_outputs) becomes a differentiable op through
// T::apply(args...). forward runs without recording (its own ops are not in the graph); backward
// returns one gradient per argument of forward, an undefined Tensor for the arguments that are not
// tensors or need none:
//
//   struct MulConstant : Function<MulConstant> {
//     static Tensor forward(AutogradContext* ctx, Tensor x, double c) {
//       ctx->saved_data["c"] = c;
//       return x * c;
//     }
//     static variable_list backward(AutogradContext* ctx, variable_list g) {
//       return {g[0] * ctx->saved_data["c"].toDouble(), Tensor()};
//     }
//   };
//   Tensor y = MulConstant::apply(x, 5.5);
//
// forward may return one Tensor or a variable_list; a std::vector<Tensor> or std::optional<Tensor>
// argument counts one gradient per tensor it holds. Not provided: mark_dirty (in-place forwards).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <variant>
#include <vector>

#include "autograd/grad_mode.h"
#include "common/type_name.h"
#include "tensor/tensor.h"

namespace lockstep::autograd {

using Variable = Tensor;
using variable_list = std::vector<Tensor>;
using tensor_list = std::vector<Tensor>;

// A value kept in AutogradContext::saved_data, as LibTorch's IValue: none, a double, an integer, a bool,
// a string, a tensor or a list of integers or doubles, read back with the matching to*() (a wrong one
// is an error naming both types).
class IValue {
 public:
  IValue() = default;
  IValue(double v) : v_(v) {}  // NOLINT: implicit, as LibTorch's
  IValue(float v) : v_(static_cast<double>(v)) {}  // NOLINT
  template <typename I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  IValue(I v) : v_(static_cast<int64_t>(v)) {}  // NOLINT
  IValue(bool v) : v_(v) {}  // NOLINT
  IValue(std::string v) : v_(std::move(v)) {}  // NOLINT
  IValue(const char* v) : v_(std::string(v)) {}  // NOLINT
  IValue(Tensor v) : v_(std::move(v)) {}  // NOLINT
  IValue(std::vector<int64_t> v) : v_(std::move(v)) {}  // NOLINT
  IValue(std::vector<double> v) : v_(std::move(v)) {}  // NOLINT

  bool isNone() const { return v_.index() == 0; }
  bool isDouble() const { return std::holds_alternative<double>(v_); }
  bool isInt() const { return std::holds_alternative<int64_t>(v_); }
  bool isBool() const { return std::holds_alternative<bool>(v_); }
  bool isString() const { return std::holds_alternative<std::string>(v_); }
  bool isTensor() const { return std::holds_alternative<Tensor>(v_); }
  bool isIntList() const { return std::holds_alternative<std::vector<int64_t>>(v_); }
  bool isDoubleList() const { return std::holds_alternative<std::vector<double>>(v_); }

  double toDouble() const { return get<double>("toDouble"); }
  int64_t toInt() const { return get<int64_t>("toInt"); }
  bool toBool() const { return get<bool>("toBool"); }
  const std::string& toStringRef() const { return get<std::string>("toStringRef"); }
  const Tensor& toTensor() const { return get<Tensor>("toTensor"); }
  const std::vector<int64_t>& toIntVector() const { return get<std::vector<int64_t>>("toIntVector"); }
  const std::vector<double>& toDoubleVector() const { return get<std::vector<double>>("toDoubleVector"); }
  // The held type's name: "None", "double", "int", "bool", "string", "Tensor", "int[]", "double[]".
  const char* tagKind() const;

 private:
  template <typename T>
  const T& get(const char* op) const {
    const T* p = std::get_if<T>(&v_);
    if (!p) fail_type(op);
    return *p;
  }
  [[noreturn]] void fail_type(const char* op) const;
  std::variant<std::monostate, double, int64_t, bool, std::string, Tensor, std::vector<int64_t>, std::vector<double>> v_;
};

// What forward leaves for backward: saved tensors (version-checked as every op's are), saved_data,
// which outputs are not differentiable, and which inputs need a gradient.
class AutogradContext {
 public:
  std::unordered_map<std::string, IValue> saved_data;

  // Tensors backward reads (inputs or outputs of forward); undefined entries are kept as such.
  void save_for_backward(variable_list to_save);
  // The tensors saved above; an error once the graph has been freed by a backward without retain_graph.
  variable_list get_saved_variables() const;
  // Outputs of forward that get no gradient (indices, masks): they do not require grad.
  void mark_non_differentiable(const variable_list& outputs);
  // With false, backward receives undefined tensors for the outputs that got no gradient instead of
  // zeros (the default, as LibTorch's).
  void set_materialize_grads(bool value) { materialize_grads_ = value; }
  // Whether forward's argument `index` (counting each tensor of a list argument) needs a gradient.
  bool needs_input_grad(size_t index) const;

 private:
  friend struct CustomFunctionNode;
  friend variable_list wrap_outputs(const std::shared_ptr<AutogradContext>&, const std::string&, const variable_list&,
                                    const std::vector<bool>&, variable_list,
                                    variable_list (*)(AutogradContext*, variable_list));
  variable_list saved_;
  bool released_ = false;
  std::vector<const TensorImpl*> non_differentiable_;  // identities
  std::vector<bool> needs_input_grad_;
  bool materialize_grads_ = true;
};

// The non-template part of Function<T>::apply: connects forward's outputs to a node running `backward`.
// `is_tensor[i]` says whether forward's flattened argument i is a tensor; `inputs` holds those tensors.
variable_list wrap_outputs(const std::shared_ptr<AutogradContext>& ctx, const std::string& name,
                           const variable_list& inputs, const std::vector<bool>& is_tensor, variable_list outputs,
                           variable_list (*backward)(AutogradContext*, variable_list));

namespace detail {
// forward's arguments flattened: a tensor is one input, a list or optional of tensors one per tensor,
// anything else one non-tensor position.
inline void flatten(variable_list& inputs, std::vector<bool>& is_tensor, const Tensor& t) {
  inputs.push_back(t);
  is_tensor.push_back(true);
}
inline void flatten(variable_list& inputs, std::vector<bool>& is_tensor, const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts) flatten(inputs, is_tensor, t);
}
inline void flatten(variable_list& inputs, std::vector<bool>& is_tensor, const std::optional<Tensor>& t) {
  flatten(inputs, is_tensor, t.value_or(Tensor()));
}
template <typename T>
  requires(!std::is_convertible_v<const T&, const Tensor&> && !std::is_same_v<T, std::vector<Tensor>> &&
           !std::is_same_v<T, std::optional<Tensor>>)
void flatten(variable_list&, std::vector<bool>& is_tensor, const T&) {
  is_tensor.push_back(false);
}
}  // namespace detail

template <class T>
struct Function {
  // Runs T::forward without recording and returns its outputs connected to one node whose backward is
  // T::backward. Returns what forward returns (a Tensor or a variable_list).
  template <typename X = T, typename... Args>
  static auto apply(Args&&... args) {
    variable_list inputs;
    std::vector<bool> is_tensor;
    (detail::flatten(inputs, is_tensor, args), ...);
    auto ctx = std::make_shared<AutogradContext>();
    using Out = decltype(X::forward(ctx.get(), std::forward<Args>(args)...));
    Out out;
    {
      NoGradGuard no_grad;
      out = X::forward(ctx.get(), std::forward<Args>(args)...);
    }
    static const std::string name = type_name(typeid(X)) + "Backward";  // "LinearFunctionBackward"
    if constexpr (std::is_convertible_v<Out, Tensor>) {
      return wrap_outputs(ctx, name, inputs, is_tensor, {Tensor(out)}, &X::backward)[0];
    } else {
      return wrap_outputs(ctx, name, inputs, is_tensor, variable_list(std::move(out)), &X::backward);
    }
  }
};

}  // namespace lockstep::autograd
