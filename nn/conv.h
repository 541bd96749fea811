// The convolutions, as torch.nn.Conv1d/2d/3d and ConvTranspose1d/2d/3d, with LibTorch's options:
//   nn::Conv1d(nn::Conv1dOptions(80, 384, 3).padding(1))
//   nn::ConvTranspose2d(nn::ConvTranspose2dOptions(100, 256, 4).stride(2).padding(1).bias(false))
// Every one runs on the 2-D kernels (tensor/conv2d.h: the backend's direct kernel, oneDNN on the CPU, or
// im2col): a 1-D convolution is a 2-D one of height 1; a transposed convolution is the 2-D convolution's
// backward-data (and its backward the forward); a 3-D one is a sum over the kernel's depth of 2-D
// convolutions of the matching depth slices.
#pragma once

#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

template <size_t D>
struct ConvOptions {
  ConvOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<D> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  LOCKSTEP_ARG(int64_t, in_channels, 0);
  LOCKSTEP_ARG(int64_t, out_channels, 0);
  LOCKSTEP_ARG(ExpandingArray<D>, kernel_size, 1);
  LOCKSTEP_ARG(ExpandingArray<D>, stride, 1);
  LOCKSTEP_ARG(ExpandingArray<D>, padding, 0);
  LOCKSTEP_ARG(ExpandingArray<D>, dilation, 1);
  LOCKSTEP_ARG(int64_t, groups, 1);
  LOCKSTEP_ARG(bool, bias, true);
};
using Conv1dOptions = ConvOptions<1>;
using Conv2dOptions = ConvOptions<2>;
using Conv3dOptions = ConvOptions<3>;

template <size_t D>
struct ConvTransposeOptions {
  ConvTransposeOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<D> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  LOCKSTEP_ARG(int64_t, in_channels, 0);
  LOCKSTEP_ARG(int64_t, out_channels, 0);
  LOCKSTEP_ARG(ExpandingArray<D>, kernel_size, 1);
  LOCKSTEP_ARG(ExpandingArray<D>, stride, 1);
  LOCKSTEP_ARG(ExpandingArray<D>, padding, 0);
  LOCKSTEP_ARG(ExpandingArray<D>, output_padding, 0);  // extra size on one side of each output dimension
  LOCKSTEP_ARG(int64_t, groups, 1);
  LOCKSTEP_ARG(bool, bias, true);
  LOCKSTEP_ARG(ExpandingArray<D>, dilation, 1);
};
using ConvTranspose1dOptions = ConvTransposeOptions<1>;
using ConvTranspose2dOptions = ConvTransposeOptions<2>;
using ConvTranspose3dOptions = ConvTransposeOptions<3>;

// One class for the six layers. weight: [out, in / groups, k...] (transposed: [in, out / groups, k...]),
// bias [out]; PyTorch's initialisation, kaiming_uniform(a = sqrt(5)) and U(+-1/sqrt(fan_in)) with fan_in
// = weight.size(1) * prod(k). Input [N, C, spatial...] or unbatched [C, spatial...].
template <size_t D, bool Transposed>
class ConvNdImpl : public Module {
 public:
  using Options = std::conditional_t<Transposed, ConvTransposeOptions<D>, ConvOptions<D>>;
  ConvNdImpl(const Options& options, const char* name);
  void reset_parameters();
  Tensor forward(const Tensor& input);
  void pretty_print(std::ostream& os) const override;

  Options options;
  Tensor weight;
  Tensor bias;  // undefined without bias
};

#define LOCKSTEP_CONV_MODULE(Name, D, Transposed)                                                          \
  class Name##Impl : public ConvNdImpl<D, Transposed> {                                                    \
   public:                                                                                                 \
    explicit Name##Impl(const Options& options) : ConvNdImpl(options, #Name) {}                            \
    Name##Impl(int64_t in_channels, int64_t out_channels, ExpandingArray<D> kernel_size)                   \
        : Name##Impl(Options(in_channels, out_channels, kernel_size)) {}                                   \
  };                                                                                                       \
  LOCKSTEP_MODULE(Name)
LOCKSTEP_CONV_MODULE(Conv1d, 1, false);
LOCKSTEP_CONV_MODULE(Conv2d, 2, false);
LOCKSTEP_CONV_MODULE(Conv3d, 3, false);
LOCKSTEP_CONV_MODULE(ConvTranspose1d, 1, true);
LOCKSTEP_CONV_MODULE(ConvTranspose2d, 2, true);
LOCKSTEP_CONV_MODULE(ConvTranspose3d, 3, true);
#undef LOCKSTEP_CONV_MODULE

namespace functional {

// LibTorch's functional options (the bias inside): F::conv1d(x, w, F::Conv1dFuncOptions().stride(2)).
template <size_t D>
struct ConvFuncOptions {
  LOCKSTEP_ARG(Tensor, bias, Tensor());
  LOCKSTEP_ARG(ExpandingArray<D>, stride, 1);
  LOCKSTEP_ARG(ExpandingArray<D>, padding, 0);
  LOCKSTEP_ARG(ExpandingArray<D>, dilation, 1);
  LOCKSTEP_ARG(int64_t, groups, 1);
};
using Conv1dFuncOptions = ConvFuncOptions<1>;
using Conv2dFuncOptions = ConvFuncOptions<2>;
using Conv3dFuncOptions = ConvFuncOptions<3>;
template <size_t D>
struct ConvTransposeFuncOptions {
  LOCKSTEP_ARG(Tensor, bias, Tensor());
  LOCKSTEP_ARG(ExpandingArray<D>, stride, 1);
  LOCKSTEP_ARG(ExpandingArray<D>, padding, 0);
  LOCKSTEP_ARG(ExpandingArray<D>, output_padding, 0);
  LOCKSTEP_ARG(int64_t, groups, 1);
  LOCKSTEP_ARG(ExpandingArray<D>, dilation, 1);
};
using ConvTranspose1dFuncOptions = ConvTransposeFuncOptions<1>;
using ConvTranspose2dFuncOptions = ConvTransposeFuncOptions<2>;
using ConvTranspose3dFuncOptions = ConvTransposeFuncOptions<3>;

// PyTorch's positional forms. input [N, C_in, L] (1d), [N, C_in, D, H, W] (3d), or without N.
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), ExpandingArray<1> stride = 1,
              ExpandingArray<1> padding = 0, ExpandingArray<1> dilation = 1, int64_t groups = 1);
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), ExpandingArray<3> stride = 1,
              ExpandingArray<3> padding = 0, ExpandingArray<3> dilation = 1, int64_t groups = 1);
// weight [C_in, C_out / groups, k...]; output size (in - 1) stride - 2 padding + dilation (k - 1) +
// output_padding + 1, output_padding smaller than stride or dilation.
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        ExpandingArray<1> stride = 1, ExpandingArray<1> padding = 0,
                        ExpandingArray<1> output_padding = 0, int64_t groups = 1, ExpandingArray<1> dilation = 1);
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        ExpandingArray<2> stride = 1, ExpandingArray<2> padding = 0,
                        ExpandingArray<2> output_padding = 0, int64_t groups = 1, ExpandingArray<2> dilation = 1);
Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        ExpandingArray<3> stride = 1, ExpandingArray<3> padding = 0,
                        ExpandingArray<3> output_padding = 0, int64_t groups = 1, ExpandingArray<3> dilation = 1);

inline Tensor conv1d(const Tensor& x, const Tensor& w, const Conv1dFuncOptions& o) {
  return conv1d(x, w, o.bias(), o.stride(), o.padding(), o.dilation(), o.groups());
}
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, ExpandingArray<2> stride,
              ExpandingArray<2> padding, ExpandingArray<2> dilation, int64_t groups);
inline Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dFuncOptions& o) {
  return conv2d(x, w, o.bias(), o.stride(), o.padding(), o.dilation(), o.groups());
}
inline Tensor conv3d(const Tensor& x, const Tensor& w, const Conv3dFuncOptions& o) {
  return conv3d(x, w, o.bias(), o.stride(), o.padding(), o.dilation(), o.groups());
}
inline Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const ConvTranspose1dFuncOptions& o) {
  return conv_transpose1d(x, w, o.bias(), o.stride(), o.padding(), o.output_padding(), o.groups(), o.dilation());
}
inline Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const ConvTranspose2dFuncOptions& o) {
  return conv_transpose2d(x, w, o.bias(), o.stride(), o.padding(), o.output_padding(), o.groups(), o.dilation());
}
inline Tensor conv_transpose3d(const Tensor& x, const Tensor& w, const ConvTranspose3dFuncOptions& o) {
  return conv_transpose3d(x, w, o.bias(), o.stride(), o.padding(), o.output_padding(), o.groups(), o.dilation());
}

}  // namespace functional
}  // namespace lockstep::nn
