// The pooling layers, as torch.nn with LibTorch's options and F:: forms, for 1, 2 and 3 spatial
// dimensions: MaxPool, AvgPool, AdaptiveMaxPool, AdaptiveAvgPool, LPPool, MaxUnpool and
// FractionalMaxPool (2d, 3d). Input [N, C, spatial...] or unbatched [C, spatial...]:
//   nn::MaxPool3d(nn::MaxPool3dOptions(3).stride(2).padding(1))
//   auto [y, indices] = F::max_pool2d_with_indices(x, F::MaxPool2dFuncOptions(2));
//   F::max_unpool2d(y, indices, F::MaxUnpool2dFuncOptions(2))
// Indices are, as PyTorch's, flat positions within each input plane (d * H * W + h * W + w).
// 2-D max and average pooling run the backend's fused kernels (1-D ones as height-1 2-D ones); the
// others are compositions (nn/pooling_nd.cpp): maxima of windows taken one dimension at a time,
// averages as a product of per-dimension averaging matrices.
#pragma once

#include <optional>
#include <tuple>
#include <vector>

#include "nn/functional.h"
#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

template <size_t D>
struct MaxPoolOptions {
  MaxPoolOptions(ExpandingArray<D> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}  // NOLINT
  LOCKSTEP_ARG(ExpandingArray<D>, kernel_size, 1);
  LOCKSTEP_ARG(ExpandingArray<D>, stride, 1);  // defaults to kernel_size
  LOCKSTEP_ARG(ExpandingArray<D>, padding, 0);
  LOCKSTEP_ARG(ExpandingArray<D>, dilation, 1);
  LOCKSTEP_ARG(bool, ceil_mode, false);
};
using MaxPool1dOptions = MaxPoolOptions<1>;
using MaxPool2dOptions = MaxPoolOptions<2>;
using MaxPool3dOptions = MaxPoolOptions<3>;

template <size_t D>
struct AvgPoolOptions {
  AvgPoolOptions(ExpandingArray<D> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}  // NOLINT
  LOCKSTEP_ARG(ExpandingArray<D>, kernel_size, 1);
  LOCKSTEP_ARG(ExpandingArray<D>, stride, 1);  // defaults to kernel_size
  LOCKSTEP_ARG(ExpandingArray<D>, padding, 0);
  LOCKSTEP_ARG(bool, ceil_mode, false);
  LOCKSTEP_ARG(bool, count_include_pad, true);
  LOCKSTEP_ARG(std::optional<int64_t>, divisor_override, std::nullopt);  // 2d and 3d, as PyTorch
};
using AvgPool1dOptions = AvgPoolOptions<1>;
using AvgPool2dOptions = AvgPoolOptions<2>;
using AvgPool3dOptions = AvgPoolOptions<3>;

// output_size: one size for all or one per dimension.
template <size_t D>
struct AdaptivePoolOptions {
  AdaptivePoolOptions(ExpandingArray<D> output_size) : output_size_(output_size) {}  // NOLINT
  LOCKSTEP_ARG(ExpandingArray<D>, output_size, 1);
};
template <size_t D>
using AdaptiveMaxPoolOptions = AdaptivePoolOptions<D>;
template <size_t D>
using AdaptiveAvgPoolOptions = AdaptivePoolOptions<D>;
using AdaptiveMaxPool1dOptions = AdaptivePoolOptions<1>;
using AdaptiveMaxPool2dOptions = AdaptivePoolOptions<2>;
using AdaptiveMaxPool3dOptions = AdaptivePoolOptions<3>;
using AdaptiveAvgPool1dOptions = AdaptivePoolOptions<1>;
using AdaptiveAvgPool2dOptions = AdaptivePoolOptions<2>;
using AdaptiveAvgPool3dOptions = AdaptivePoolOptions<3>;

// Power-average pooling: (sum over the window of x^p)^(1/p).
template <size_t D>
struct LPPoolOptions {
  LPPoolOptions(double norm_type, ExpandingArray<D> kernel_size)
      : norm_type_(norm_type), kernel_size_(kernel_size), stride_(kernel_size) {}
  LOCKSTEP_ARG(double, norm_type, 2);
  LOCKSTEP_ARG(ExpandingArray<D>, kernel_size, 1);
  LOCKSTEP_ARG(ExpandingArray<D>, stride, 1);  // defaults to kernel_size
  LOCKSTEP_ARG(bool, ceil_mode, false);
};
using LPPool1dOptions = LPPoolOptions<1>;
using LPPool2dOptions = LPPoolOptions<2>;
using LPPool3dOptions = LPPoolOptions<3>;

// The inverse of max pooling: each value written back to where its indices say, zeros elsewhere.
template <size_t D>
struct MaxUnpoolOptions {
  MaxUnpoolOptions(ExpandingArray<D> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}  // NOLINT
  LOCKSTEP_ARG(ExpandingArray<D>, kernel_size, 1);
  LOCKSTEP_ARG(ExpandingArray<D>, stride, 1);  // defaults to kernel_size
  LOCKSTEP_ARG(ExpandingArray<D>, padding, 0);
};
using MaxUnpool1dOptions = MaxUnpoolOptions<1>;
using MaxUnpool2dOptions = MaxUnpoolOptions<2>;
using MaxUnpool3dOptions = MaxUnpoolOptions<3>;

// Max pooling over pseudo-random windows (Graham's fractional max pooling): exactly one of output_size
// and output_ratio; _random_samples [N, C, D] in [0, 1) fixes the windows (drawn when undefined).
template <size_t D>
struct FractionalMaxPoolOptions {
  using Size = std::optional<ExpandingArray<D>>;
  using Ratio = std::optional<ExpandingArray<D, double>>;
  FractionalMaxPoolOptions(ExpandingArray<D> kernel_size) : kernel_size_(kernel_size) {}  // NOLINT
  LOCKSTEP_ARG(ExpandingArray<D>, kernel_size, 1);
  LOCKSTEP_ARG(Size, output_size, std::nullopt);
  LOCKSTEP_ARG(Ratio, output_ratio, std::nullopt);
  LOCKSTEP_ARG(Tensor, _random_samples, Tensor());
};
using FractionalMaxPool2dOptions = FractionalMaxPoolOptions<2>;
using FractionalMaxPool3dOptions = FractionalMaxPoolOptions<3>;

namespace functional {

template <size_t D>
using MaxPoolFuncOptions = MaxPoolOptions<D>;
using MaxPool1dFuncOptions = MaxPoolOptions<1>;
using MaxPool2dFuncOptions = MaxPoolOptions<2>;
using MaxPool3dFuncOptions = MaxPoolOptions<3>;
using AvgPool1dFuncOptions = AvgPoolOptions<1>;
using AvgPool2dFuncOptions = AvgPoolOptions<2>;
using AvgPool3dFuncOptions = AvgPoolOptions<3>;
using AdaptiveMaxPool1dFuncOptions = AdaptivePoolOptions<1>;
using AdaptiveMaxPool2dFuncOptions = AdaptivePoolOptions<2>;
using AdaptiveMaxPool3dFuncOptions = AdaptivePoolOptions<3>;
using AdaptiveAvgPool1dFuncOptions = AdaptivePoolOptions<1>;
using AdaptiveAvgPool2dFuncOptions = AdaptivePoolOptions<2>;
using AdaptiveAvgPool3dFuncOptions = AdaptivePoolOptions<3>;
using LPPool1dFuncOptions = LPPoolOptions<1>;
using LPPool2dFuncOptions = LPPoolOptions<2>;
using LPPool3dFuncOptions = LPPoolOptions<3>;
using FractionalMaxPool2dFuncOptions = FractionalMaxPoolOptions<2>;
using FractionalMaxPool3dFuncOptions = FractionalMaxPoolOptions<3>;
// MaxUnpool's functional options also take the output size (default: from the pooling's geometry).
template <size_t D>
struct MaxUnpoolFuncOptions {
  MaxUnpoolFuncOptions(ExpandingArray<D> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}  // NOLINT
  LOCKSTEP_ARG(ExpandingArray<D>, kernel_size, 1);
  LOCKSTEP_ARG(ExpandingArray<D>, stride, 1);
  LOCKSTEP_ARG(ExpandingArray<D>, padding, 0);
  using Size = std::optional<std::vector<int64_t>>;
  LOCKSTEP_ARG(Size, output_size, std::nullopt);
};
using MaxUnpool1dFuncOptions = MaxUnpoolFuncOptions<1>;
using MaxUnpool2dFuncOptions = MaxUnpoolFuncOptions<2>;
using MaxUnpool3dFuncOptions = MaxUnpoolFuncOptions<3>;

// The D-dimensional forms every layer below calls (nn/pooling_nd.cpp); (values, indices) where named.
template <size_t D>
std::tuple<Tensor, Tensor> max_pool_with_indices(const Tensor& x, const MaxPoolOptions<D>& o);
template <size_t D>
Tensor max_pool(const Tensor& x, const MaxPoolOptions<D>& o);
template <size_t D>
Tensor avg_pool(const Tensor& x, const AvgPoolOptions<D>& o);
template <size_t D>
std::tuple<Tensor, Tensor> adaptive_max_pool_with_indices(const Tensor& x, ExpandingArray<D> output_size);
template <size_t D>
Tensor adaptive_avg_pool(const Tensor& x, ExpandingArray<D> output_size);
template <size_t D>
Tensor lp_pool(const Tensor& x, const LPPoolOptions<D>& o);
template <size_t D>
Tensor max_unpool(const Tensor& x, const Tensor& indices, const MaxUnpoolFuncOptions<D>& o);
template <size_t D>
std::tuple<Tensor, Tensor> fractional_max_pool_with_indices(const Tensor& x, const FractionalMaxPoolOptions<D>& o);

// LibTorch's names, each one of the forms above.
#define LOCKSTEP_POOL_FUNCTIONS(D)                                                                          \
  inline Tensor max_pool##D##d(const Tensor& x, const MaxPoolOptions<D>& o) { return max_pool<D>(x, o); }   \
  inline std::tuple<Tensor, Tensor> max_pool##D##d_with_indices(const Tensor& x, const MaxPoolOptions<D>& o) { \
    return max_pool_with_indices<D>(x, o);                                                                  \
  }                                                                                                         \
  inline Tensor avg_pool##D##d(const Tensor& x, const AvgPoolOptions<D>& o) { return avg_pool<D>(x, o); }   \
  inline std::tuple<Tensor, Tensor> adaptive_max_pool##D##d_with_indices(const Tensor& x,                  \
                                                                          const AdaptivePoolOptions<D>& o) { \
    return adaptive_max_pool_with_indices<D>(x, o.output_size());                                           \
  }                                                                                                         \
  inline Tensor adaptive_max_pool##D##d(const Tensor& x, const AdaptivePoolOptions<D>& o) {                 \
    return std::get<0>(adaptive_max_pool_with_indices<D>(x, o.output_size()));                              \
  }                                                                                                         \
  inline Tensor adaptive_avg_pool##D##d(const Tensor& x, const AdaptivePoolOptions<D>& o) {                 \
    return adaptive_avg_pool<D>(x, o.output_size());                                                        \
  }                                                                                                         \
  inline Tensor lp_pool##D##d(const Tensor& x, const LPPoolOptions<D>& o) { return lp_pool<D>(x, o); }      \
  inline Tensor max_unpool##D##d(const Tensor& x, const Tensor& indices, const MaxUnpoolFuncOptions<D>& o) { \
    return max_unpool<D>(x, indices, o);                                                                    \
  }
LOCKSTEP_POOL_FUNCTIONS(1)
LOCKSTEP_POOL_FUNCTIONS(2)
LOCKSTEP_POOL_FUNCTIONS(3)
#undef LOCKSTEP_POOL_FUNCTIONS
inline std::tuple<Tensor, Tensor> fractional_max_pool2d_with_indices(const Tensor& x,
                                                                     const FractionalMaxPoolOptions<2>& o) {
  return fractional_max_pool_with_indices<2>(x, o);
}
inline Tensor fractional_max_pool2d(const Tensor& x, const FractionalMaxPoolOptions<2>& o) {
  return std::get<0>(fractional_max_pool_with_indices<2>(x, o));
}
inline std::tuple<Tensor, Tensor> fractional_max_pool3d_with_indices(const Tensor& x,
                                                                     const FractionalMaxPoolOptions<3>& o) {
  return fractional_max_pool_with_indices<3>(x, o);
}
inline Tensor fractional_max_pool3d(const Tensor& x, const FractionalMaxPoolOptions<3>& o) {
  return std::get<0>(fractional_max_pool_with_indices<3>(x, o));
}

}  // namespace functional

// One module class per family and dimension count; forward_with_indices where PyTorch's return_indices.
#define LOCKSTEP_POOL_MODULE(Name, D, Options, Ctor, Call)                              \
  class Name##Impl : public Module {                                                    \
   public:                                                                              \
    explicit Name##Impl(const Options& options) : Module(#Name), options(options) {}    \
    explicit Name##Impl(Ctor arg) : Name##Impl(Options(arg)) {}                         \
    Tensor forward(const Tensor& x) { return functional::Call(x, options); }            \
    Options options;                                                                    \
  };                                                                                    \
  LOCKSTEP_MODULE(Name)
#define LOCKSTEP_POOL_MODULE_WITH_INDICES(Name, D, Options, Ctor, Call)                       \
  class Name##Impl : public Module {                                                          \
   public:                                                                                    \
    explicit Name##Impl(const Options& options) : Module(#Name), options(options) {}          \
    explicit Name##Impl(Ctor arg) : Name##Impl(Options(arg)) {}                               \
    Tensor forward(const Tensor& x) { return std::get<0>(forward_with_indices(x)); }          \
    std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& x) {                        \
      return functional::Call(x, options);                                                    \
    }                                                                                         \
    Options options;                                                                          \
  };                                                                                          \
  LOCKSTEP_MODULE(Name)

LOCKSTEP_POOL_MODULE_WITH_INDICES(MaxPool1d, 1, MaxPoolOptions<1>, ExpandingArray<1>, max_pool_with_indices<1>);
LOCKSTEP_POOL_MODULE_WITH_INDICES(MaxPool3d, 3, MaxPoolOptions<3>, ExpandingArray<3>, max_pool_with_indices<3>);
LOCKSTEP_POOL_MODULE(AvgPool1d, 1, AvgPoolOptions<1>, ExpandingArray<1>, avg_pool<1>);
LOCKSTEP_POOL_MODULE(AvgPool3d, 3, AvgPoolOptions<3>, ExpandingArray<3>, avg_pool<3>);
LOCKSTEP_POOL_MODULE_WITH_INDICES(AdaptiveMaxPool1d, 1, AdaptivePoolOptions<1>, ExpandingArray<1>,
                                  adaptive_max_pool1d_with_indices);
LOCKSTEP_POOL_MODULE_WITH_INDICES(AdaptiveMaxPool2d, 2, AdaptivePoolOptions<2>, ExpandingArray<2>,
                                  adaptive_max_pool2d_with_indices);
LOCKSTEP_POOL_MODULE_WITH_INDICES(AdaptiveMaxPool3d, 3, AdaptivePoolOptions<3>, ExpandingArray<3>,
                                  adaptive_max_pool3d_with_indices);
LOCKSTEP_POOL_MODULE(AdaptiveAvgPool1d, 1, AdaptivePoolOptions<1>, ExpandingArray<1>, adaptive_avg_pool1d);
LOCKSTEP_POOL_MODULE(AdaptiveAvgPool3d, 3, AdaptivePoolOptions<3>, ExpandingArray<3>, adaptive_avg_pool3d);
LOCKSTEP_POOL_MODULE_WITH_INDICES(FractionalMaxPool2d, 2, FractionalMaxPoolOptions<2>, ExpandingArray<2>,
                                  fractional_max_pool2d_with_indices);
LOCKSTEP_POOL_MODULE_WITH_INDICES(FractionalMaxPool3d, 3, FractionalMaxPoolOptions<3>, ExpandingArray<3>,
                                  fractional_max_pool3d_with_indices);
#undef LOCKSTEP_POOL_MODULE
#undef LOCKSTEP_POOL_MODULE_WITH_INDICES

// MaxPool2d, AvgPool2d and AdaptiveAvgPool2d keep their own classes: their forward is the fused path's.
class MaxPool2dImpl : public Module {
 public:
  explicit MaxPool2dImpl(const MaxPool2dOptions& options) : Module("MaxPool2d"), options(options) {}
  explicit MaxPool2dImpl(ExpandingArray<2> kernel_size) : MaxPool2dImpl(MaxPool2dOptions(kernel_size)) {}
  Tensor forward(const Tensor& x) { return functional::max_pool<2>(x, options); }
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& x) {
    return functional::max_pool_with_indices<2>(x, options);
  }
  MaxPool2dOptions options;
};
LOCKSTEP_MODULE(MaxPool2d);

class AvgPool2dImpl : public Module {
 public:
  explicit AvgPool2dImpl(const AvgPool2dOptions& options) : Module("AvgPool2d"), options(options) {}
  explicit AvgPool2dImpl(ExpandingArray<2> kernel_size) : AvgPool2dImpl(AvgPool2dOptions(kernel_size)) {}
  Tensor forward(const Tensor& x) { return functional::avg_pool<2>(x, options); }
  AvgPool2dOptions options;
};
LOCKSTEP_MODULE(AvgPool2d);

class AdaptiveAvgPool2dImpl : public Module {
 public:
  explicit AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& options)
      : Module("AdaptiveAvgPool2d"), options(options) {}
  explicit AdaptiveAvgPool2dImpl(ExpandingArray<2> output_size)
      : AdaptiveAvgPool2dImpl(AdaptiveAvgPool2dOptions(output_size)) {}
  Tensor forward(const Tensor& x) { return functional::adaptive_avg_pool<2>(x, options.output_size()); }
  AdaptiveAvgPool2dOptions options;
};
LOCKSTEP_MODULE(AdaptiveAvgPool2d);

template <size_t D>
class LPPoolImpl : public Module {
 public:
  explicit LPPoolImpl(const LPPoolOptions<D>& options) : Module(D == 1 ? "LPPool1d" : D == 2 ? "LPPool2d" : "LPPool3d"),
                                                          options(options) {}
  LPPoolImpl(double norm_type, ExpandingArray<D> kernel_size) : LPPoolImpl(LPPoolOptions<D>(norm_type, kernel_size)) {}
  Tensor forward(const Tensor& x) { return functional::lp_pool<D>(x, options); }
  LPPoolOptions<D> options;
};
class LPPool1dImpl : public LPPoolImpl<1> { using LPPoolImpl<1>::LPPoolImpl; };
class LPPool2dImpl : public LPPoolImpl<2> { using LPPoolImpl<2>::LPPoolImpl; };
class LPPool3dImpl : public LPPoolImpl<3> { using LPPoolImpl<3>::LPPoolImpl; };
LOCKSTEP_MODULE(LPPool1d);
LOCKSTEP_MODULE(LPPool2d);
LOCKSTEP_MODULE(LPPool3d);

// forward(input, indices, output_size): output_size [..., spatial] (as PyTorch, the last D entries count).
template <size_t D>
class MaxUnpoolImpl : public Module {
 public:
  explicit MaxUnpoolImpl(const MaxUnpoolOptions<D>& options)
      : Module(D == 1 ? "MaxUnpool1d" : D == 2 ? "MaxUnpool2d" : "MaxUnpool3d"), options(options) {}
  explicit MaxUnpoolImpl(ExpandingArray<D> kernel_size) : MaxUnpoolImpl(MaxUnpoolOptions<D>(kernel_size)) {}
  Tensor forward(const Tensor& x, const Tensor& indices,
                 const std::optional<std::vector<int64_t>>& output_size = std::nullopt) {
    return functional::max_unpool<D>(x, indices, functional::MaxUnpoolFuncOptions<D>(options.kernel_size())
                                                     .stride(options.stride())
                                                     .padding(options.padding())
                                                     .output_size(output_size));
  }
  MaxUnpoolOptions<D> options;
};
class MaxUnpool1dImpl : public MaxUnpoolImpl<1> { using MaxUnpoolImpl<1>::MaxUnpoolImpl; };
class MaxUnpool2dImpl : public MaxUnpoolImpl<2> { using MaxUnpoolImpl<2>::MaxUnpoolImpl; };
class MaxUnpool3dImpl : public MaxUnpoolImpl<3> { using MaxUnpoolImpl<3>::MaxUnpoolImpl; };
LOCKSTEP_MODULE(MaxUnpool1d);
LOCKSTEP_MODULE(MaxUnpool2d);
LOCKSTEP_MODULE(MaxUnpool3d);

}  // namespace lockstep::nn
