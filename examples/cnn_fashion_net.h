// The CNN of pytorch/examples mnist/main.py (its `Net`), with its parameter names, for Fashion-MNIST:
//   conv1 (1 -> c1, 3x3) ReLU, conv2 (c1 -> c2, 3x3) ReLU, MaxPool2d(2), Dropout(0.25), Flatten,
//   fc1 (c2 * 12 * 12 -> hidden) ReLU, Dropout(0.5), fc2 (hidden -> 10)
// with mnist/main.py's widths c1 = 32, c2 = 64, hidden = 128 by default (1.2M parameters). Optional
// BatchNorm2d (or SyncBatchNorm) bn1, bn2 after each convolution, before its ReLU. Dropout can be
// switched off (for runs compared step by step with PyTorch).
#pragma once

#include "nn/api.h"

namespace lockstep::examples {

struct CnnOptions {
  int64_t conv1_channels = 32, conv2_channels = 64, hidden = 128;
  bool dropout = true;
  enum class Norm { kNone, kBatch, kSync } norm = Norm::kNone;
};

class CnnNetImpl : public nn::Module {
 public:
  explicit CnnNetImpl(const CnnOptions& o) : Module("Net"), options(o) {
    LOCKSTEP_CHECK(o.conv1_channels > 0 && o.conv2_channels > 0 && o.hidden > 0, "Net: widths (", o.conv1_channels,
                   ", ", o.conv2_channels, ", ", o.hidden, ") must be positive");
    conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, o.conv1_channels, 3).stride(1)));
    conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(o.conv1_channels, o.conv2_channels, 3).stride(1)));
    if (o.norm == CnnOptions::Norm::kBatch) {
      bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2dImpl>(nn::BatchNormOptions(o.conv1_channels)));
      bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2dImpl>(nn::BatchNormOptions(o.conv2_channels)));
    } else if (o.norm == CnnOptions::Norm::kSync) {
      bn1 = register_module("bn1", std::make_shared<nn::SyncBatchNormImpl>(nn::BatchNormOptions(o.conv1_channels)));
      bn2 = register_module("bn2", std::make_shared<nn::SyncBatchNormImpl>(nn::BatchNormOptions(o.conv2_channels)));
    }
    // 28x28 -> 26x26 (conv1) -> 24x24 (conv2) -> 12x12 (pool)
    fc1 = register_module("fc1", nn::Linear(o.conv2_channels * 12 * 12, o.hidden));
    fc2 = register_module("fc2", nn::Linear(o.hidden, 10));
  }

  // x: [N, 1, 28, 28] -> logits [N, 10]
  Tensor forward(const Tensor& x) {
    namespace F = nn::functional;
    Tensor h = conv1(x);
    if (bn1) h = bn1->forward(h);
    h = F::relu(h);
    h = conv2(h);
    if (bn2) h = bn2->forward(h);
    h = F::max_pool2d(F::relu(h), 2);
    if (options.dropout) h = F::dropout(h, 0.25, is_training());
    h = F::relu(fc1(h.flatten(1)));  // [N, c2 * 144] -> [N, hidden]
    if (options.dropout) h = F::dropout(h, 0.5, is_training());
    return fc2(h);
  }

  CnnOptions options;
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  std::shared_ptr<nn::BatchNormImpl> bn1, bn2;  // null without --batch-norm / --sync-bn
  nn::Linear fc1{nullptr}, fc2{nullptr};
};
LOCKSTEP_MODULE(CnnNet);

}  // namespace lockstep::examples
