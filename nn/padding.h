// Padding, as torch.nn.functional.pad and the padding modules, with LibTorch's options:
//   F::pad(x, F::PadFuncOptions({1, 1, 2, 0}).mode(nn::kReflect))
//   nn::ReflectionPad2d(nn::ReflectionPad2dOptions({1, 1, 2, 2}))    nn::ZeroPad2d(3)
// Constant padding (negative pads crop) is a narrow and a cat of filled blocks per dimension; reflect,
// replicate and circular padding an index_select per padded dimension with the source index of every
// output position, whose backward (index_add) sums the gradients of the positions that read one element.
#pragma once

#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "nn/functional.h"
#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

// The padding modes as LibTorch's tag types (torch::kReflect ...), so that another option (a
// convolution's padding_mode) can take a variant of the same tags.
namespace enumtype {
struct kConstant {};
struct kReflect {};
struct kReplicate {};
struct kCircular {};
}  // namespace enumtype
inline constexpr enumtype::kConstant kConstant{};
inline constexpr enumtype::kReflect kReflect{};
inline constexpr enumtype::kReplicate kReplicate{};
inline constexpr enumtype::kCircular kCircular{};

namespace functional {

// pad: (left, right) of the last dimension, then of the one before it, and so on.
struct PadFuncOptions {
  using mode_t = std::variant<enumtype::kConstant, enumtype::kReflect, enumtype::kReplicate, enumtype::kCircular>;
  PadFuncOptions(std::vector<int64_t> pad) : pad_(std::move(pad)) {}  // NOLINT: F::pad(x, {1, 1})
  LOCKSTEP_ARG(std::vector<int64_t>, pad, {});
  LOCKSTEP_ARG(mode_t, mode, enumtype::kConstant{});
  LOCKSTEP_ARG(double, value, 0.0);  // constant mode only
};

// torch.nn.functional.pad. Constant: any number of trailing dimensions (up to input.dim()), negative pads
// crop. Reflect, replicate, circular: 2 pads on [N, C, W] / [C, W], 4 on [N, C, H, W] / [C, H, W], 6 on
// [N, C, D, H, W] / [C, D, H, W]; reflect needs each pad smaller than its dimension, circular at most it.
Tensor pad(const Tensor& input, const PadFuncOptions& options);

}  // namespace functional

// ReflectionPad1d/2d/3d, ReplicationPad..., CircularPad..., ZeroPad...: padding as one number for every
// side or (left, right[, top, bottom[, front, back]]).
template <size_t D>
struct PadOptions {
  PadOptions(ExpandingArray<2 * D> padding) : padding_(padding) {}  // NOLINT
  LOCKSTEP_ARG(ExpandingArray<2 * D>, padding, 0);
};
template <size_t D>
struct ConstantPadOptions {
  ConstantPadOptions(ExpandingArray<2 * D> padding, double value) : padding_(padding), value_(value) {}
  LOCKSTEP_ARG(ExpandingArray<2 * D>, padding, 0);
  LOCKSTEP_ARG(double, value, 0.0);
};

namespace detail {
// One class for the fifteen modules: Mode the padding mode, D the number of padded dimensions.
template <size_t D, typename Mode, typename Options>
class PadNdImpl : public Module {
 public:
  PadNdImpl(const Options& options, const char* name) : Module(name), options(options) {}
  Tensor forward(const Tensor& input) {
    const auto& p = options.padding().values();
    auto o = functional::PadFuncOptions(std::vector<int64_t>(p.begin(), p.end())).mode(Mode{});
    if constexpr (std::is_same_v<Options, ConstantPadOptions<D>>) o.value(options.value());
    return functional::pad(input, o);
  }
  Options options;
};
}  // namespace detail

// Each module is built from its options or from what builds them: ReflectionPad2d(3),
// ConstantPad1d(2, 0.5), ZeroPad2d(ZeroPad2dOptions({1, 1, 2, 0})).
#define LOCKSTEP_PAD_MODULE(Name, D, Mode, OptionsT)                                                                \
  using Name##Options = OptionsT;                                                                                   \
  class Name##Impl : public detail::PadNdImpl<D, Mode, OptionsT> {                                                  \
   public:                                                                                                          \
    template <typename... A>                                                                                        \
    requires std::is_constructible_v<OptionsT, A...>                                                                \
    explicit Name##Impl(A&&... a) : detail::PadNdImpl<D, Mode, OptionsT>(OptionsT(std::forward<A>(a)...), #Name) {} \
  };                                                                                                                \
  LOCKSTEP_MODULE(Name)
#define LOCKSTEP_PAD_MODULES(Prefix, Mode)                 \
  LOCKSTEP_PAD_MODULE(Prefix##1d, 1, Mode, PadOptions<1>); \
  LOCKSTEP_PAD_MODULE(Prefix##2d, 2, Mode, PadOptions<2>); \
  LOCKSTEP_PAD_MODULE(Prefix##3d, 3, Mode, PadOptions<3>)
LOCKSTEP_PAD_MODULES(ReflectionPad, enumtype::kReflect);
LOCKSTEP_PAD_MODULES(ReplicationPad, enumtype::kReplicate);
LOCKSTEP_PAD_MODULES(CircularPad, enumtype::kCircular);  // Python's; LibTorch has none
LOCKSTEP_PAD_MODULES(ZeroPad, enumtype::kConstant);
LOCKSTEP_PAD_MODULE(ConstantPad1d, 1, enumtype::kConstant, ConstantPadOptions<1>);
LOCKSTEP_PAD_MODULE(ConstantPad2d, 2, enumtype::kConstant, ConstantPadOptions<2>);
LOCKSTEP_PAD_MODULE(ConstantPad3d, 3, enumtype::kConstant, ConstantPadOptions<3>);
#undef LOCKSTEP_PAD_MODULES
#undef LOCKSTEP_PAD_MODULE

}  // namespace lockstep::nn
