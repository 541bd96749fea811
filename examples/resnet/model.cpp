// ResNet's blocks, stages, forward and initialisation (model.h); torchvision's resnet.py where the
// port is not word for word.
#include "examples/resnet/model.h"

namespace lockstep::examples {

namespace {

std::shared_ptr<nn::BatchNormImpl> batch_norm(int64_t channels, bool sync) {
  if (sync) return std::make_shared<nn::SyncBatchNormImpl>(nn::BatchNormOptions(channels));
  return std::make_shared<nn::BatchNorm2dImpl>(nn::BatchNormOptions(channels));
}

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride, bool sync_bn)
    : Module("BasicBlock") {
  conv1 = register_module("conv1", conv(in_planes, planes, 3, stride));
  bn1 = register_module("bn1", batch_norm(planes, sync_bn));
  conv2 = register_module("conv2", conv(planes, planes, 3, 1));
  bn2 = register_module("bn2", batch_norm(planes, sync_bn));
  if (stride != 1 || in_planes != planes) {
    downsample = register_module("downsample", nn::Sequential(conv(in_planes, planes, 1, stride)));
    downsample->push_back(batch_norm(planes, sync_bn));
  }
}

Tensor BasicBlockImpl::forward(const Tensor& x) {
  namespace F = nn::functional;
  Tensor out = F::relu(bn1->forward(conv1(x)));
  out = bn2->forward(conv2(out));
  return F::relu(out + (downsample ? downsample(x) : x));
}

ResNetImpl::ResNetImpl(const ResNetOptions& o) : Module("ResNet"), options(o) {
  LOCKSTEP_CHECK(o.in_channels > 0 && o.num_classes > 0 && o.blocks_per_stage > 0 && o.width > 0,
                 "ResNet: in_channels (", o.in_channels, "), num_classes (", o.num_classes, "), blocks_per_stage (",
                 o.blocks_per_stage, ") and width (", o.width, ") must be positive");
  conv1 = register_module("conv1", conv(o.in_channels, o.width, 3, 1));
  bn1 = register_module("bn1", batch_norm(o.width, o.sync_bn));
  int64_t in = o.width;
  auto stage = [&](int64_t planes, int64_t stride) {
    nn::Sequential s;
    for (int64_t i = 0; i < o.blocks_per_stage; ++i, in = planes)
      s->push_back(BasicBlock(in, planes, i == 0 ? stride : 1, o.sync_bn));
    return s;
  };
  layer1 = register_module("layer1", stage(o.width, 1));
  layer2 = register_module("layer2", stage(2 * o.width, 2));
  layer3 = register_module("layer3", stage(4 * o.width, 2));
  fc = register_module("fc", nn::Linear(4 * o.width, o.num_classes));
  // torchvision: kaiming_normal_(mode="fan_out", nonlinearity="relu") on every conv (BatchNorm starts at
  // weight 1, bias 0 already).
  apply([](nn::Module& m) {
    if (auto* c = m.as<nn::Conv2d>()) nn::init::kaiming_normal_(c->weight, 0, "fan_out", "relu");
  });
}

Tensor ResNetImpl::forward(const Tensor& x) {
  Tensor h = nn::functional::relu(bn1->forward(conv1(x)));  // [N, w, H, W]
  h = layer3(layer2(layer1(h)));                            // [N, 4w, H / 4, W / 4]
  h = nn::functional::adaptive_avg_pool2d(h, 1).flatten(1);  // [N, 4w]
  return fc(h);
}

}  // namespace lockstep::examples
