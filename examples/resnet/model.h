// ResNet for CIFAR-sized images (He et al. 2015, "Deep Residual Learning", section 4.2), with
// torchvision's parameter names, so a state_dict saved here loads into tools/twins/resnet_twin.py's
// model (and back) strictly:
//   conv1 (3x3, in -> 16) bn1 ReLU,
//   layer1, layer2, layer3: n BasicBlocks each, 16 / 32 / 64 channels; the first block of layer2 and
//     layer3 halves the size with stride 2 and has a projection shortcut (1x1 conv stride 2 +
//     BatchNorm, the paper's option B) named downsample.0 / downsample.1, as torchvision's,
//   global average pool, fc (64 -> classes).
// 6n + 2 layers: n = 3 is ResNet-20 (0.27M parameters). Convolutions have no bias (each is followed
// by a BatchNorm) and are Kaiming-normal initialised (fan_out, ReLU gain) as torchvision's; BatchNorm
// weight 1, bias 0; fc keeps Linear's default. With sync_bn every BatchNorm is a SyncBatchNorm.
//
//   ResNet model(ResNetOptions{.in_channels = 1});   // ResNet-20 for 1-channel images
//   Tensor logits = model(x);                        // x: [N, 1, H, W] -> [N, 10]
#pragma once

#include <cstdint>
#include <memory>

#include "nn/api.h"

namespace lockstep::examples {

struct ResNetOptions {
  int64_t in_channels = 3, num_classes = 10;
  int64_t blocks_per_stage = 3;  // n: 3 gives ResNet-20, 5 ResNet-32, 9 ResNet-56
  int64_t width = 16;            // the first stage's channels; the others double it, twice
  bool sync_bn = false;          // SyncBatchNorm instead of BatchNorm2d (statistics over all ranks)
};

// conv3x3-BN-ReLU-conv3x3-BN, plus the input (or its projection), then ReLU.
struct BasicBlockImpl : nn::Module {
  BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride, bool sync_bn);
  Tensor forward(const Tensor& x);  // [N, in, H, W] -> [N, planes, H / stride, W / stride]

  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  std::shared_ptr<nn::BatchNormImpl> bn1, bn2;
  nn::Sequential downsample{nullptr};  // 1x1 conv + BatchNorm where the shape changes, else null
};
LOCKSTEP_MODULE(BasicBlock);

struct ResNetImpl : nn::Module {
  explicit ResNetImpl(const ResNetOptions& options);
  Tensor forward(const Tensor& x);  // [N, in_channels, H, W] -> logits [N, num_classes]

  ResNetOptions options;
  nn::Conv2d conv1{nullptr};
  std::shared_ptr<nn::BatchNormImpl> bn1;
  nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr};
  nn::Linear fc{nullptr};
};
LOCKSTEP_MODULE(ResNet);

}  // namespace lockstep::examples
