// nn's layers and losses against PyTorch: tests/fixtures/nn_fixtures.safetensors (written by
// tools/fixtures/make_nn_fixtures.py) holds, per case, the inputs, PyTorch's output and the gradients of
// sum(out * gout) in float64; each case runs the same computation through nn::functional or a module
// and compares. Then gradcheck in float64, modes (train/eval), running statistics, and shape errors.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nn/api.h"
#include "tests/util/fixtures.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::contains;
using lockstep::testing::error_of;
namespace F = lockstep::nn::functional;

namespace {

const testing::Fixtures fx("tests/fixtures/nn_fixtures.safetensors", "make_nn_fixtures.py");

void check_close(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-9) {
  testing::check_close(got, want, what, tol);
}

// Runs fn on case c's named inputs (leaves requiring grad) and compares out and every input's gradient.
void check_case(const std::string& c, const std::vector<std::string>& inputs,
                const std::function<Tensor(const std::vector<Tensor>&)>& fn) {
  INFO("case ", c);
  std::vector<Tensor> leaves;
  for (auto& n : inputs) leaves.push_back(fx(c + "." + n).set_requires_grad());
  Tensor out = fn(leaves);
  check_close(out, fx(c + ".out"), c + ".out");
  sum(out * fx(c + ".gout")).backward();
  for (size_t i = 0; i < inputs.size(); ++i) check_close(leaves[i].grad(), fx(c + ".grad." + inputs[i]), c + ".grad." + inputs[i]);
}

}  // namespace

TEST_CASE("Conv2d matches PyTorch: padding, stride, dilation, groups, bias") {
  check_case("conv_basic", {"x", "weight", "bias"},
             [](auto& v) { return F::conv2d(v[0], v[1], v[2], 1, 1); });
  check_case("conv_strided", {"x", "weight", "bias"},
             [](auto& v) { return F::conv2d(v[0], v[1], v[2], {2, 1}, {1, 2}, {2, 1}, 2); });
  check_case("conv_nobias", {"x", "weight"}, [](auto& v) { return F::conv2d(v[0], v[1], Tensor(), 2); });
  // The module with the same weights.
  nn::Conv2d conv(nn::Conv2dOptions(4, 6, {3, 2}).stride({2, 1}).padding({1, 2}).dilation({2, 1}).groups(2));
  conv->to(kFloat64);
  conv->load_state_dict({{"weight", fx("conv_strided.weight")}, {"bias", fx("conv_strided.bias")}});
  check_close(conv(fx("conv_strided.x")), fx("conv_strided.out"), "Conv2d module");
  check_close(conv(fx("conv_strided.x").select(0, 1)), fx("conv_strided.out").select(0, 1), "Conv2d unbatched");
}

TEST_CASE("Conv1d, Conv3d and the transposed convolutions match PyTorch: stride, padding, dilation, groups, output_padding") {
  check_case("conv1d", {"x", "weight", "bias"}, [](auto& v) { return F::conv1d(v[0], v[1], v[2], 2, 1, 2, 2); });
  check_case("conv1d_nobias", {"x", "weight"}, [](auto& v) {
    return F::conv1d(v[0], v[1], F::Conv1dFuncOptions().padding(1));
  });
  check_case("conv3d", {"x", "weight", "bias"}, [](auto& v) {
    return F::conv3d(v[0], v[1], v[2], {2, 1, 2}, {1, 0, 1}, {1, 2, 1}, 2);
  });
  check_case("conv3d_plain", {"x", "weight"}, [](auto& v) { return F::conv3d(v[0], v[1]); });
  check_case("convt2d", {"x", "weight", "bias"}, [](auto& v) {
    return F::conv_transpose2d(v[0], v[1], F::ConvTranspose2dFuncOptions().bias(v[2]).stride(2).padding(1).output_padding(1));
  });
  check_case("convt2d_groups", {"x", "weight", "bias"}, [](auto& v) {
    return F::conv_transpose2d(v[0], v[1], v[2], {2, 3}, {0, 1}, {1, 2}, 2, {2, 1});
  });
  check_case("convt2d_dilated_pad", {"x", "weight"}, [](auto& v) {
    return F::conv_transpose2d(v[0], v[1], Tensor(), 1, 2, 2, 1, 3);
  });
  check_case("convt1d", {"x", "weight", "bias"}, [](auto& v) { return F::conv_transpose1d(v[0], v[1], v[2], 3, 1, 2); });
  check_case("convt2d_1x1", {"x", "weight", "bias"}, [](auto& v) { return F::conv_transpose2d(v[0], v[1], v[2], 2); });
  check_case("convt3d", {"x", "weight", "bias"}, [](auto& v) {
    return F::conv_transpose3d(v[0], v[1], v[2], {2, 1, 2}, {1, 0, 1}, {1, 0, 1}, 1, {1, 2, 1});
  });
  check_case("convt3d_groups", {"x", "weight"}, [](auto& v) {
    return F::conv_transpose3d(v[0], v[1], Tensor(), 2, 0, 0, 2);
  });

  // The modules: PyTorch's weight layouts, so the fixtures' tensors load strictly, and the same outputs.
  nn::ConvTranspose2d ct(nn::ConvTranspose2dOptions(4, 3, 4).stride(2).padding(1).output_padding(1));
  ct->to(kFloat64);
  CHECK(ct->weight.shape() == Shape{4, 3, 4, 4});
  ct->load_state_dict({{"weight", fx("convt2d.weight")}, {"bias", fx("convt2d.bias")}});
  check_close(ct(fx("convt2d.x")), fx("convt2d.out"), "ConvTranspose2d module");
  nn::Conv3d c3(nn::Conv3dOptions(4, 6, {3, 2, 3}).stride({2, 1, 2}).padding({1, 0, 1}).dilation({1, 2, 1}).groups(2));
  c3->to(kFloat64);
  c3->load_state_dict({{"weight", fx("conv3d.weight")}, {"bias", fx("conv3d.bias")}});
  check_close(c3(fx("conv3d.x")), fx("conv3d.out"), "Conv3d module");
  nn::Conv1d c1(nn::Conv1dOptions(4, 6, 3).stride(2).padding(1).dilation(2).groups(2));
  c1->to(kFloat64);
  c1->load_state_dict({{"weight", fx("conv1d.weight")}, {"bias", fx("conv1d.bias")}});
  check_close(c1(fx("conv1d.x")), fx("conv1d.out"), "Conv1d module");
  check_close(c1(fx("conv1d.x").select(0, 1)), fx("conv1d.out").select(0, 1), "Conv1d unbatched");
  nn::ConvTranspose1d ct1(nn::ConvTranspose1dOptions(3, 2, 4).stride(3).padding(1).output_padding(2));
  nn::ConvTranspose3d ct3(nn::ConvTranspose3dOptions(4, 2, {2, 3, 2}).stride(2).groups(2).bias(false));
  CHECK(ct1->weight.shape() == Shape{3, 2, 4});
  CHECK(ct3->weight.shape() == Shape{4, 1, 2, 3, 2});
  CHECK(ct3->state_dict().size() == 1);
}

TEST_CASE("the convolution family rejects bad arguments, naming the op and the shapes") {
  CHECK(contains(error_of([] { nn::ConvTranspose2d(nn::ConvTranspose2dOptions(2, 2, 3).stride(2).output_padding(2)); }),
                 "ConvTranspose2d: output_padding (2, 2) must be smaller than either stride (2, 2) or dilation (1, 1)"));
  CHECK(contains(error_of([] { F::conv_transpose2d(randn({1, 3, 4, 4}), randn({2, 2, 3, 3})); }),
                 "conv_transpose2d: input [1, 3, 4, 4] has 3 channels but weight [2, 2, 3, 3] expects 2"));
  CHECK(contains(error_of([] { F::conv_transpose2d(randn({1, 4, 4, 4}), randn({4, 2, 3, 3}), Tensor(), 1, 0, 0, 3); }),
                 "input channels are not divisible by groups = 3"));
  CHECK(contains(error_of([] { F::conv1d(randn({2, 3, 4, 5}), randn({2, 3, 3})); }),
                 "conv1d: expected input of 2 or 3 dimensions, got [2, 3, 4, 5]"));
  CHECK(contains(error_of([] { F::conv3d(randn({1, 2, 2, 4, 4}), randn({3, 2, 3, 1, 1})); }),
                 "conv3d: input [1, 2, 2, 4, 4] padded to depth 2 is shallower than the kernel"));
  CHECK(contains(error_of([] { nn::Conv1d(nn::Conv1dOptions(3, 4, 3).groups(2)); }),
                 "Conv1d: in_channels (3) and out_channels (4) must be divisible by groups (2)"));
  CHECK(contains(error_of([] { nn::Conv3d(2, 4, 3)(randn({1, 3, 4, 4, 4})); }), "Conv3d(2, 4, kernel_size=(3, 3, 3)): expected input [N, 2, D, H, W] or [2, D, H, W], got [1, 3, 4, 4, 4]"));
}

TEST_CASE("conv2d over a batch in chunks equals it image by image, gradients included") {
  // 7 images of 8 x 40 x 40: about 104K column elements per image, so the CPU path takes chunks of
  // 2 images (2, 2, 2 and a last one of 1); each image alone is a one-image chunk.
  manual_seed(4);
  Tensor x0 = randn({7, 8, 40, 40}, kFloat64), w0 = randn({6, 4, 3, 3}, kFloat64), b0 = randn({6}, kFloat64);
  Tensor x = x0.detach().set_requires_grad(), w = w0.detach().set_requires_grad(), b = b0.detach().set_requires_grad();
  Tensor y = F::conv2d(x, w, b, 1, 1, 1, 2);
  Tensor gy = randn(y.shape(), kFloat64);
  (y * gy).sum().backward();
  Tensor wi = w0.detach().set_requires_grad(), bi = b0.detach().set_requires_grad();
  for (int64_t n = 0; n < 7; ++n) {
    Tensor xi = x0.narrow(0, n, 1).detach().set_requires_grad();
    Tensor yi = F::conv2d(xi, wi, bi, 1, 1, 1, 2);
    check_close(yi, y.narrow(0, n, 1), "conv2d image " + std::to_string(n), 1e-12);
    (yi * gy.narrow(0, n, 1)).sum().backward();
    check_close(xi.grad(), x.grad().narrow(0, n, 1), "conv2d input gradient " + std::to_string(n), 1e-12);
  }
  check_close(wi.grad(), w.grad(), "conv2d weight gradient", 1e-10);
  check_close(bi.grad(), b.grad(), "conv2d bias gradient", 1e-10);
}

TEST_CASE("pooling matches PyTorch") {
  check_case("maxpool", {"x"}, [](auto& v) { return nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1))(v[0]); });
  check_case("maxpool_ceil", {"x"},
             [](auto& v) { return F::max_pool2d(v[0], 2, 2, 0, {1, 2}, /*ceil_mode=*/true); });
  check_case("avgpool", {"x"}, [](auto& v) { return nn::AvgPool2d(nn::AvgPool2dOptions(3).stride(2).padding(1))(v[0]); });
  check_case("avgpool_nopad", {"x"},
             [](auto& v) { return F::avg_pool2d(v[0], {3, 2}, {2, 1}, 1, false, /*count_include_pad=*/false); });
  check_case("avgpool_ceil", {"x"}, [](auto& v) { return F::avg_pool2d(v[0], 2, 2, 1, /*ceil_mode=*/true); });
  // A non-contiguous input (a transposed view) pools like its contiguous copy.
  Tensor xt = fx("avgpool.x").transpose(2, 3);
  check_close(F::avg_pool2d(xt, 2), F::avg_pool2d(xt.contiguous(), 2), "avg_pool2d on a view");
  check_close(F::max_pool2d(xt, 2), F::max_pool2d(xt.contiguous(), 2), "max_pool2d on a view");
  {
    // Ties (a window of ReLU's zeros): the whole gradient goes to the window's first maximum, as
    // PyTorch's indices (stride 1: overlapping windows).
    Tensor x = tensor({0.f, 0.f, 2.f, 0.f, 0.f, 2.f, 1.f, 1.f, 1.f}, {1, 1, 3, 3}).requires_grad_();
    F::max_pool2d(x, 2, 1).sum().backward();
    CHECK(x.grad().to_vector<float>() == std::vector<float>{1, 0, 1, 0, 0, 1, 1, 0, 0});
  }
  check_close(F::conv2d(xt, fx("conv_basic.weight")), F::conv2d(xt.contiguous(), fx("conv_basic.weight")),
              "conv2d on a view");
  check_case("adaptive", {"x"}, [](auto& v) { return nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({3, 4}))(v[0]); });
}

TEST_CASE("LayerNorm and BatchNorm match PyTorch, running statistics included") {
  check_case("layernorm", {"x", "weight", "bias"}, [](auto& v) { return F::layer_norm(v[0], {3, 4}, v[1], v[2]); });

  nn::BatchNorm2d bn(nn::BatchNormOptions(3).momentum(0.2));
  bn->to(kFloat64);
  bn->load_state_dict({{"weight", fx("batchnorm.weight")},
                       {"bias", fx("batchnorm.bias")},
                       {"running_mean", fx("batchnorm.running_mean_before")},
                       {"running_var", fx("batchnorm.running_var_before")},
                       {"num_batches_tracked", zeros({}, kInt64)}});
  check_case("batchnorm", {"x", "weight", "bias"}, [&](auto& v) {
    bn->weight.set_data(v[1]);  // the case's leaves stand in for the parameters
    bn->bias.set_data(v[2]);
    return F::batch_norm(v[0], bn->running_mean, bn->running_var, v[1], v[2], true, 0.2);
  });
  check_close(bn->running_mean, fx("batchnorm.running_mean_after"), "running_mean");
  check_close(bn->running_var, fx("batchnorm.running_var_after"), "running_var");

  // The module: same values, same running statistics, num_batches_tracked counts.
  nn::BatchNorm2d m(nn::BatchNormOptions(3).momentum(0.2));
  m->to(kFloat64);
  m->load_state_dict({{"weight", fx("batchnorm.weight")},
                      {"bias", fx("batchnorm.bias")},
                      {"running_mean", fx("batchnorm.running_mean_before")},
                      {"running_var", fx("batchnorm.running_var_before")},
                      {"num_batches_tracked", zeros({}, kInt64)}});
  check_close(m(fx("batchnorm.x")), fx("batchnorm.out"), "BatchNorm2d module");
  check_close(m->running_var, fx("batchnorm.running_var_after"), "BatchNorm2d module running_var");
  CHECK(m->num_batches_tracked.item<int64_t>() == 1);
  std::vector<std::string> keys;
  for (auto& [k, _] : m->state_dict()) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});

  check_case("batchnorm_eval", {"x", "weight", "bias"}, [](auto& v) {
    return F::batch_norm(v[0], fx("batchnorm.running_mean_before"), fx("batchnorm.running_var_before"), v[1], v[2]);
  });
  m->eval();
  m->load_state_dict({{"weight", fx("batchnorm_eval.weight")},
                      {"bias", fx("batchnorm_eval.bias")},
                      {"running_mean", fx("batchnorm.running_mean_before")},
                      {"running_var", fx("batchnorm.running_var_before")},
                      {"num_batches_tracked", zeros({}, kInt64)}});
  check_close(m(fx("batchnorm_eval.x")), fx("batchnorm_eval.out"), "BatchNorm2d eval");
  CHECK(m->num_batches_tracked.item<int64_t>() == 0);  // eval does not count
}

TEST_CASE("GroupNorm, InstanceNorm, RMSNorm, LocalResponseNorm and BatchNorm3d match PyTorch") {
  check_case("groupnorm", {"x", "weight", "bias"}, [](auto& v) { return F::group_norm(v[0], 2, v[1], v[2]); });
  check_case("groupnorm_1d_noaffine", {"x"}, [](auto& v) { return F::group_norm(v[0], 3, Tensor(), Tensor(), 1e-3); });
  nn::GroupNorm gn(nn::GroupNormOptions(2, 4));
  gn->to(kFloat64);
  gn->load_state_dict({{"weight", fx("groupnorm.weight")}, {"bias", fx("groupnorm.bias")}});
  check_close(gn(fx("groupnorm.x")), fx("groupnorm.out"), "GroupNorm module");

  // The function with running statistics: each instance's update, averaged over the batch.
  Tensor rm = fx("instancenorm.running_mean_before"), rv = fx("instancenorm.running_var_before");
  check_case("instancenorm", {"x", "weight", "bias"}, [&](auto& v) {
    return F::instance_norm(v[0], F::InstanceNormFuncOptions().running_mean(rm).running_var(rv).weight(v[1]).bias(
                                      v[2]).momentum(0.3));
  });
  check_close(rm, fx("instancenorm.running_mean_after"), "instance_norm running_mean");
  check_close(rv, fx("instancenorm.running_var_after"), "instance_norm running_var");
  // The module: same values and statistics; in eval() the running statistics normalize.
  nn::InstanceNorm2d in(nn::InstanceNormOptions(3).affine(true).track_running_stats(true).momentum(0.3));
  in->to(kFloat64);
  in->load_state_dict({{"weight", fx("instancenorm.weight")},
                       {"bias", fx("instancenorm.bias")},
                       {"running_mean", fx("instancenorm.running_mean_before")},
                       {"running_var", fx("instancenorm.running_var_before")},
                       {"num_batches_tracked", zeros({}, kInt64)}});
  check_close(in(fx("instancenorm.x")), fx("instancenorm.out"), "InstanceNorm2d module");
  check_close(in->running_var, fx("instancenorm.running_var_after"), "InstanceNorm2d running_var");
  check_case("instancenorm_eval", {"x"}, [](auto& v) {
    return F::instance_norm(v[0], F::InstanceNormFuncOptions()
                                      .running_mean(fx("instancenorm.running_mean_before"))
                                      .running_var(fx("instancenorm.running_var_before"))
                                      .use_input_stats(false));
  });
  nn::InstanceNorm1d in1(nn::InstanceNormOptions(3).track_running_stats(true));
  in1->to(kFloat64);
  in1->load_state_dict({{"running_mean", fx("instancenorm.running_mean_before")},
                        {"running_var", fx("instancenorm.running_var_before")},
                        {"num_batches_tracked", zeros({}, kInt64)}});
  in1->eval();
  check_close(in1(fx("instancenorm_eval.x")), fx("instancenorm_eval.out"), "InstanceNorm1d eval");
  // Unbatched input [C, L]: the batched result's one sample.
  check_close(in1(fx("instancenorm_eval.x").select(0, 1)), fx("instancenorm_eval.out").select(0, 1),
              "InstanceNorm1d unbatched");
  check_case("instancenorm3d", {"x"}, [](auto& v) { return nn::InstanceNorm3d(nn::InstanceNormOptions(2))(v[0]); });

  check_case("rmsnorm", {"x", "weight"}, [](auto& v) { return F::rms_norm(v[0], {3, 4}, v[1], 1e-6); });
  check_case("rmsnorm_default_eps", {"x"}, [](auto& v) {
    return nn::RMSNorm(nn::RMSNormOptions(5).elementwise_affine(false))(v[0]);
  });
  check_case("lrn", {"x"}, [](auto& v) {
    return nn::LocalResponseNorm(nn::LocalResponseNormOptions(3).alpha(0.1).beta(0.6).k(2.0))(v[0]);
  });
  check_case("lrn_even_3d", {"x"}, [](auto& v) { return F::local_response_norm(v[0], 4); });

  nn::BatchNorm3d b3(nn::BatchNormOptions(2));
  b3->to(kFloat64);
  b3->load_state_dict({{"weight", fx("batchnorm3d.weight")},
                       {"bias", fx("batchnorm3d.bias")},
                       {"running_mean", fx("batchnorm3d.running_mean_before")},
                       {"running_var", fx("batchnorm3d.running_var_before")},
                       {"num_batches_tracked", zeros({}, kInt64)}});
  Tensor y3 = b3(fx("batchnorm3d.x"));
  check_close(y3, fx("batchnorm3d.out"), "BatchNorm3d");
  check_close(b3->running_mean, fx("batchnorm3d.running_mean_after"), "BatchNorm3d running_mean");
  check_close(b3->running_var, fx("batchnorm3d.running_var_after"), "BatchNorm3d running_var");
  sum(y3 * fx("batchnorm3d.gout")).backward();
  check_close(b3->weight.grad(), fx("batchnorm3d.grad.weight"), "BatchNorm3d weight.grad");
  check_close(b3->bias.grad(), fx("batchnorm3d.grad.bias"), "BatchNorm3d bias.grad");

  // PyTorch's state-dict names, loaded strictly.
  std::vector<std::string> keys;
  for (auto& [k, _] : in->state_dict()) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  CHECK(nn::RMSNorm(nn::RMSNormOptions({3, 4}))->state_dict().size() == 1);
}

TEST_CASE("normalization layers reject bad shapes with PyTorch's messages") {
  CHECK(contains(error_of([] { F::group_norm(randn({2, 6, 3}), 4); }),
                 "group_norm: Expected number of channels in input to be divisible by num_groups"));
  CHECK(contains(error_of([] { nn::GroupNorm(4, 6); }), "GroupNorm: num_channels must be divisible by num_groups"));
  CHECK(contains(error_of([] { nn::InstanceNorm2d(nn::InstanceNormOptions(3))(randn({2, 3})); }),
                 "InstanceNorm2d: expected 3D or 4D input (got 2D input)"));
  CHECK(contains(error_of([] { nn::BatchNorm3d(nn::BatchNormOptions(3))(randn({2, 3, 4, 4})); }),
                 "BatchNorm3d(3): expected input [N, 3, D, H, W]"));
  CHECK(contains(error_of([] { F::rms_norm(randn({2, 3}), {4}); }), "rms_norm: input [2, 3] does not end with"));
  CHECK(contains(error_of([] { F::local_response_norm(randn({2, 3}), 2); }),
                 "local_response_norm: Expected 3D or higher dimensionality input (got 2 dimensions)"));
}

TEST_CASE("activation modules match PyTorch and keep PReLU's weight as PyTorch names it") {
  nn::PReLU p(nn::PReLUOptions().num_parameters(3));
  p->to(kFloat64);
  CHECK(p->weight.to_vector<double>() == std::vector<double>{0.25, 0.25, 0.25});
  p->load_state_dict({{"weight", fx("prelu_module.weight")}});
  check_case("prelu_module", {"x", "weight"}, [](auto& v) { return F::prelu(v[0], v[1]); });
  Tensor yp = p(fx("prelu_module.x"));
  check_close(yp, fx("prelu_module.out"), "PReLU");
  sum(yp * fx("prelu_module.gout")).backward();
  check_close(p->weight.grad(), fx("prelu_module.grad.weight"), "PReLU weight.grad");
  // Each module computes its function: the table's rows with LibTorch's options.
  Tensor x = randn({3, 4}, kFloat64);
  auto same = [&](Tensor got, Tensor want, const char* what) { check_close(got, want, what, 0); };
  same(nn::ELU(nn::ELUOptions().alpha(0.5))(x), elu(x, 0.5), "ELU");
  same(nn::CELU(nn::CELUOptions().alpha(2))(x), celu(x, 2), "CELU");
  same(nn::SELU()(x), selu(x), "SELU");
  same(nn::Softplus(nn::SoftplusOptions().beta(2).threshold(3))(x), softplus(x, 2, 3), "Softplus");
  same(nn::Hardtanh(nn::HardtanhOptions().min_val(-0.5).max_val(0.5))(x), hardtanh(x, -0.5, 0.5), "Hardtanh");
  same(nn::ReLU6()(x * 4.0), relu6(x * 4.0), "ReLU6");
  same(nn::Hardshrink(nn::HardshrinkOptions(0.3))(x), hardshrink(x, 0.3), "Hardshrink");
  same(nn::Softshrink(nn::SoftshrinkOptions().lambda(0.3))(x), softshrink(x, 0.3), "Softshrink");
  same(nn::Threshold(0.1, 20)(x), threshold(x, 0.1, 20), "Threshold");
  same(nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2))(x), F::leaky_relu(x, 0.2), "LeakyReLU");
  same(nn::Mish()(x), mish(x), "Mish");
  same(nn::Hardswish()(x), hardswish(x), "Hardswish");
  same(nn::Hardsigmoid()(x), hardsigmoid(x), "Hardsigmoid");
  same(nn::LogSigmoid()(x), logsigmoid(x), "LogSigmoid");
  same(nn::Softsign()(x), softsign(x), "Softsign");
  same(nn::Tanhshrink()(x), tanhshrink(x), "Tanhshrink");
  same(nn::GLU()(x), glu(x, -1), "GLU");
  same(nn::Softmin(1)(x), softmax(-x, 1), "Softmin");
  same(nn::LogSoftmax(nn::LogSoftmaxOptions(1))(x), log_softmax(x, 1), "LogSoftmax");
  Tensor img = randn({2, 3, 2, 2}, kFloat64);
  same(nn::Softmax2d()(img), softmax(img, 1), "Softmax2d");
  nn::RReLU rr;
  rr->eval();
  same(rr(x), F::leaky_relu(x, (1.0 / 8 + 1.0 / 3) / 2), "RReLU eval");
  rr->train();
  Tensor y = rr(x);  // training: a slope in [lower, upper] per negative element
  auto xs = x.to_vector<double>(), ys = y.to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i] >= 0) CHECK(ys[i] == xs[i]);
    else CHECK((ys[i] / xs[i] >= 1.0 / 8 - 1e-12 && ys[i] / xs[i] <= 1.0 / 3 + 1e-12));
  }
}

TEST_CASE("Embedding matches PyTorch; the padding row gets no gradient") {
  check_case("embedding", {"weight"}, [](auto& v) { return F::embedding(fx("embedding.idx"), v[0], 0); });
  nn::Embedding e(nn::EmbeddingOptions(5, 3).padding_idx(0));
  CHECK(e->weight.select(0, 0).abs().sum().item<float>() == 0);
  CHECK(e(fx("embedding.idx")).shape() == Shape{2, 3, 3});
}

TEST_CASE("activations match PyTorch") {
  check_case("gelu", {"x"}, [](auto& v) { return nn::GELU()(v[0]); });
  check_case("gelu_tanh", {"x"}, [](auto& v) { return nn::GELU("tanh")(v[0]); });
  check_case("silu", {"x"}, [](auto& v) { return nn::SiLU()(v[0]); });
  check_case("tanh", {"x"}, [](auto& v) { return nn::Tanh()(v[0]); });
  check_case("sigmoid", {"x"}, [](auto& v) { return nn::Sigmoid()(v[0]); });
  check_case("leaky_relu", {"x"}, [](auto& v) { return nn::LeakyReLU(0.2)(v[0]); });
}

TEST_CASE("losses match PyTorch: ignore_index, label_smoothing, weights, [N, C, d...], probabilities, reductions") {
  using nn::CrossEntropyLossOptions;
  check_case("ce_mean", {"x"}, [](auto& v) { return nn::CrossEntropyLoss()(v[0], fx("ce_mean.target")); });
  check_case("ce_options", {"x"}, [](auto& v) {
    auto o = CrossEntropyLossOptions().weight(fx("ce_options.weight")).ignore_index(2).label_smoothing(0.1);
    return nn::CrossEntropyLoss(o)(v[0], fx("ce_options.target"));
  });
  check_case("ce_nd_none", {"x"}, [](auto& v) {
    return F::cross_entropy(v[0], fx("ce_nd_none.target"),
                            CrossEntropyLossOptions().reduction(nn::kNone).label_smoothing(0.2));
  });
  check_case("ce_nd_mean", {"x"}, [](auto& v) { return F::cross_entropy(v[0], fx("ce_nd_mean.target")); });
  check_case("ce_prob", {"x"}, [](auto& v) {
    return F::cross_entropy(v[0], fx("ce_prob.target"),
                            CrossEntropyLossOptions().weight(fx("ce_prob.weight")).reduction(nn::kSum).label_smoothing(0.05));
  });
  check_case("ce_prob_mean", {"x"}, [](auto& v) { return F::cross_entropy(v[0], fx("ce_prob_mean.target")); });
  check_case("nll", {"x"}, [](auto& v) {
    return nn::NLLLoss(nn::NLLLossOptions().weight(fx("nll.weight")).ignore_index(1))(v[0], fx("nll.target"));
  });
  check_case("bce", {"x"}, [](auto& v) {
    auto o = nn::BCEWithLogitsLossOptions().weight(fx("bce.weight")).pos_weight(fx("bce.pos_weight"));
    return nn::BCEWithLogitsLoss(o)(v[0], fx("bce.target"));
  });
  check_case("bce_sum", {"x"}, [](auto& v) {
    return F::binary_cross_entropy_with_logits(v[0], fx("bce_sum.target"), nn::BCEWithLogitsLossOptions().reduction(nn::kSum));
  });
  check_case("mse_sum", {"x"}, [](auto& v) { return nn::MSELoss(nn::kSum)(v[0], fx("mse_sum.target")); });
  check_case("mse_none", {"x"}, [](auto& v) { return F::mse_loss(v[0], fx("mse_none.target"), nn::kNone); });
}

// --- gradcheck in float64 ------------------------------------------------------------------------

TEST_CASE("gradcheck: conv, pooling, normalization, embedding, losses") {
  using testing::gradcheck;
  manual_seed(1);
  auto r = [](Shape s) { return randn(s, kFloat64); };
  gradcheck([](auto& v) { return F::conv2d(v[0], v[1], v[2], {2, 1}, {1, 0}, {1, 2}, 2); },
            {r({1, 4, 5, 5}), r({2, 2, 2, 2}), r({2})});
  gradcheck([](auto& v) { return F::max_pool2d(v[0], 2, 1, 1); }, {r({1, 2, 4, 4})});
  gradcheck([](auto& v) { return F::avg_pool2d(v[0], 3, 2, 1, true, false); }, {r({1, 2, 5, 4})});
  gradcheck([](auto& v) { return F::adaptive_avg_pool2d(v[0], {2, 3}); }, {r({1, 2, 5, 4})});
  gradcheck([](auto& v) { return F::layer_norm(v[0], {4}, v[1], v[2]); }, {r({3, 4}), r({4}), r({4})});
  // The fused kernel's other forms: several normalized dims, a strided input, weight only, neither.
  gradcheck([](auto& v) { return F::layer_norm(v[0], {2, 3}, v[1]); }, {r({2, 2, 3}), r({2, 3})});
  gradcheck([](auto& v) { return F::layer_norm(v[0].transpose(0, 1), {3}); }, {r({3, 4})});
  gradcheck([](auto& v) { return F::layer_norm(v[0], {20}, Tensor(), v[1]); }, {r({2, 20}), r({20})});
  gradcheck([](auto& v) { return F::batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); },
            {r({3, 2, 2, 2}), r({2}), r({2})});
  Tensor idx = tensor(std::vector<int64_t>{2, 0, 2, 1});
  gradcheck([&](auto& v) { return F::embedding(idx, v[0]); }, {r({3, 2})});  // padding_idx: in the fixtures
  Tensor t = tensor(std::vector<int64_t>{0, 2, -100, 1});
  gradcheck([&](auto& v) {
    return F::cross_entropy(v[0], t, nn::CrossEntropyLossOptions().label_smoothing(0.3).weight(tensor({1.0, 2.0, 0.5})));
  }, {r({4, 3})});
  gradcheck([](auto& v) { return F::cross_entropy(v[0], softmax(v[1], 1)); }, {r({2, 3, 2}), r({2, 3, 2})});
  gradcheck([](auto& v) { return F::binary_cross_entropy_with_logits(v[0], sigmoid(v[1])); }, {r({5}), r({5})});
  gradcheck([](auto& v) { return F::leaky_relu(v[0], 0.1); }, {r({6})});
  // Probabilities away from 0 and 1 (where PyTorch's eps clamp changes the gradient), a weight.
  gradcheck([](auto& v) { return F::binary_cross_entropy(sigmoid(v[0]), sigmoid(v[1]), tensor({1.0, 2.0, 0.5})); },
            {r({2, 3}), r({2, 3})});
}

TEST_CASE("binary_cross_entropy and BCELoss: PyTorch's -100 clamp of each log, its gradient, its errors") {
  // x = 0 with y = 1 clamps -log(0) to 100; x = 1, y = 1 gives 0 (0 * clamped log(0) = 0, not NaN).
  Tensor x = tensor({0.2, 0.9, 0.0, 1.0}).requires_grad_();
  Tensor y = tensor({0.0, 1.0, 1.0, 1.0});
  Tensor loss = nn::BCELoss()(x, y);
  const double l0 = -std::log(0.8), l1 = -std::log(0.9);
  CHECK(loss.item<double>() == doctest::Approx((l0 + l1 + 100 + 0) / 4).epsilon(1e-6));
  loss.backward();
  // (x - y) / max((1 - x) x, 1e-12) / 4: 0.2 / 0.16 / 4, -0.1 / 0.09 / 4, -1 / 1e-12 / 4, 0.
  auto g = x.grad().to_vector<double>();
  CHECK(g[0] == doctest::Approx(0.3125));
  CHECK(g[1] == doctest::Approx(-0.1 / 0.09 / 4));
  CHECK(g[2] == doctest::Approx(-2.5e11));
  CHECK(g[3] == 0);
  // weight broadcasts; sum and none reductions.
  Tensor w = tensor({0.5, 2.0, 1.0, 1.0});
  CHECK(F::binary_cross_entropy(x, y, w, nn::kSum).item<double>() ==
        doctest::Approx(0.5 * l0 + 2 * l1 + 100).epsilon(1e-6));
  Tensor none = nn::BCELoss(nn::BCELossOptions().weight(w).reduction(nn::kNone))(x, y);
  CHECK(none.shape() == Shape{4});
  CHECK(none.to_vector<double>()[1] == doctest::Approx(2 * l1));
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy(tensor({0.5, 1.5}), tensor({0.0, 1.0})),
                       doctest::Contains("binary_cross_entropy: all elements of input should be between 0 and 1"),
                       Error);
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy(tensor({0.5, 0.5}), tensor({1.0})),
                       doctest::Contains("must have the input's shape [2]"), Error);
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy(tensor({0.5}), tensor(std::vector<int64_t>{1})),
                       doctest::Contains("expected floating-point input and target"), Error);
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy(tensor({0.5, 0.5}), tensor({1.0, 0.0}), tensor({1.0, 2.0, 3.0})),
                       doctest::Contains("does not broadcast to the input"), Error);
}

// --- modes, initialisation, containers ---------------------------------------------------------

TEST_CASE("scaled_dot_product_attention equals its definition: masks, causal, scale, broadcast batches") {
  manual_seed(3);
  const double inf = std::numeric_limits<double>::infinity();
  Tensor q0 = randn({2, 3, 4, 8}, kFloat64), k0 = randn({2, 3, 5, 8}, kFloat64), v0 = randn({1, 3, 5, 6}, kFloat64);
  // Random, but every row may attend to key 0 (a row with no key at all gives NaN, in PyTorch too).
  Tensor bool_mask = logical_or(rand({4, 5}, kFloat64) > 0.3, arange(5) == int64_t(0));
  Tensor float_mask = randn({4, 5}, kFloat64);
  // softmax(q k^T * scale + mask) v, written out; then the function, both with gradients.
  auto both = [&](auto&& manual, auto&& fused) {
    std::vector<Tensor> a{q0.detach().set_requires_grad(), k0.detach().set_requires_grad(), v0.detach().set_requires_grad()};
    std::vector<Tensor> b{q0.detach().set_requires_grad(), k0.detach().set_requires_grad(), v0.detach().set_requires_grad()};
    Tensor want = manual(a[0], a[1], a[2]), got = fused(b[0], b[1], b[2]);
    check_close(got, want, "sdpa output", 1e-12);
    (want * want).sum().backward();
    (got * got).sum().backward();
    for (int i = 0; i < 3; ++i) check_close(b[i].grad(), a[i].grad(), "sdpa gradient " + std::to_string(i), 1e-12);
  };
  auto scores = [](const Tensor& q, const Tensor& k, double s) { return matmul(q, k.transpose(-2, -1)) * s; };
  const double s8 = 1 / std::sqrt(8.0);
  both([&](auto& q, auto& k, auto& v) { return matmul(softmax(scores(q, k, s8), -1), v); },
       [&](auto& q, auto& k, auto& v) { return F::scaled_dot_product_attention(q, k, v); });
  both([&](auto& q, auto& k, auto& v) { return matmul(softmax(scores(q, k, 0.5).masked_fill(logical_not(bool_mask), -inf), -1), v); },
       [&](auto& q, auto& k, auto& v) { return F::scaled_dot_product_attention(q, k, v, bool_mask, 0.0, false, 0.5); });
  both([&](auto& q, auto& k, auto& v) { return matmul(softmax(scores(q, k, s8) + float_mask, -1), v); },
       [&](auto& q, auto& k, auto& v) { return F::scaled_dot_product_attention(q, k, v, float_mask); });
  // Causal with L < S, as PyTorch: position i attends to j <= i (a top-left triangle).
  Tensor causal = tril(ones({4, 5}, kBool));
  both([&](auto& q, auto& k, auto& v) { return matmul(softmax(scores(q, k, s8).masked_fill(logical_not(causal), -inf), -1), v); },
       [&](auto& q, auto& k, auto& v) { return F::scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true); });
  testing::gradcheck([](auto& t) { return F::scaled_dot_product_attention(t[0], t[1], t[2], Tensor(), 0.0, true); },
                     {randn({2, 3, 4}, kFloat64), randn({2, 3, 4}, kFloat64), randn({2, 3, 2}, kFloat64)});
  // dropout_p = 1 drops every weight.
  CHECK(F::scaled_dot_product_attention(q0, k0, v0, Tensor(), 1.0).abs().sum().item<double>() == 0.0);
  CHECK(error_of([&] { F::scaled_dot_product_attention(q0, k0, v0, bool_mask, 0.0, true); }) ==
        "scaled_dot_product_attention: give attn_mask or is_causal, not both");
  CHECK(error_of([&] { F::scaled_dot_product_attention(q0, randn({2, 3, 5, 7}), v0); }).find(
            "scaled_dot_product_attention: q [2, 3, 4, 8], k [2, 3, 5, 7] and v [1, 3, 5, 6] do not fit") == 0);
  CHECK(error_of([&] { F::scaled_dot_product_attention(q0, k0, v0, Tensor(), 1.5); }) ==
        "scaled_dot_product_attention: dropout_p must be in [0, 1], got 1.5");
}

TEST_CASE("Dropout honours train() and eval()") {
  manual_seed(0);
  nn::Dropout drop(0.25);
  Tensor x = ones({4000});
  Tensor y = drop(x);
  auto v = y.to_vector<float>();
  int64_t zeros_n = 0;
  for (float e : v) {
    if (e == 0) ++zeros_n;
    else CHECK(e == doctest::Approx(1 / 0.75));
  }
  CHECK(zeros_n > 900);
  CHECK(zeros_n < 1100);
  drop->eval();
  CHECK(drop(x).is_same(x));
  CHECK_THROWS_WITH_AS(nn::Dropout(1.5), doctest::Contains("between 0 and 1"), Error);
}

TEST_CASE("default initialisations follow PyTorch's bounds") {
  manual_seed(0);
  nn::Conv2d conv(nn::Conv2dOptions(4, 8, 3).groups(2));
  double bound = 1 / std::sqrt(2.0 * 9);  // fan_in = in / groups * kh * kw
  for (Tensor t : {conv->weight, conv->bias}) {
    CHECK(t.abs().max().item<float>() <= bound);
    CHECK(t.abs().max().item<float>() > 0.8 * bound);
  }
  nn::LayerNorm ln(nn::LayerNormOptions({2, 3}));
  CHECK(ln->weight.sum().item<float>() == 6);
  CHECK(ln->bias.abs().sum().item<float>() == 0);
  nn::Embedding emb(1000, 10);
  float m = emb->weight.mean().item<float>(), s = emb->weight.std().item<float>();
  CHECK(std::abs(m) < 0.05);
  CHECK(std::abs(s - 1) < 0.05);
}

TEST_CASE("nn::init uses PyTorch's fans and gains") {
  manual_seed(0);
  Tensor w = empty({64, 32, 3, 3});
  auto [fan_in, fan_out] = nn::init::calculate_fan_in_and_fan_out(w);
  CHECK(fan_in == 32 * 9);
  CHECK(fan_out == 64 * 9);
  CHECK(nn::init::calculate_gain("relu") == doctest::Approx(std::sqrt(2.0)));
  CHECK(nn::init::calculate_gain("leaky_relu", 0.2) == doctest::Approx(std::sqrt(2 / 1.04)));
  nn::init::kaiming_uniform_(w, 0, "fan_in", "relu");
  double b = std::sqrt(6.0 / (32 * 9));
  CHECK(w.abs().max().item<float>() <= b);
  CHECK(w.abs().max().item<float>() > 0.95 * b);
  nn::init::kaiming_normal_(w, 0, "fan_out", "relu");
  CHECK(w.std().item<float>() == doctest::Approx(std::sqrt(2.0 / (64 * 9))).epsilon(0.05));
  nn::init::xavier_uniform_(w);
  CHECK(w.abs().max().item<float>() <= std::sqrt(6.0 / (32 * 9 + 64 * 9)));
  nn::init::xavier_normal_(w, 2);
  CHECK(w.std().item<float>() == doctest::Approx(2 * std::sqrt(2.0 / (32 * 9 + 64 * 9))).epsilon(0.05));
  nn::init::trunc_normal_(w, 0, 1, -0.5, 0.5);
  CHECK(w.abs().max().item<float>() <= 0.5);
  nn::init::normal_(w, 3, 0.1);
  CHECK(w.mean().item<float>() == doctest::Approx(3).epsilon(0.01));
  nn::init::constant_(w, 0.5);
  CHECK(w.sum().item<float>() == doctest::Approx(0.5 * w.numel()));
  Tensor v = zeros({3});
  CHECK_THROWS_WITH_AS(nn::init::xavier_uniform_(v), doctest::Contains("fewer than 2 dimensions"), Error);
}

namespace {

// nanoGPT's shape: a forward taking (idx, targets) and returning (logits, loss), a ModuleDict and a
// ModuleList, and lm_head.weight tied to wte.weight.
struct TinyGPTImpl : nn::Module {
  nn::ModuleDict transformer{nullptr};
  nn::Linear lm_head{nullptr};
  TinyGPTImpl(int64_t vocab, int64_t dim, int layers) : Module("TinyGPT") {
    transformer = register_module("transformer", nn::ModuleDict());
    transformer->insert("wte", nn::Embedding(vocab, dim));
    nn::ModuleList h;
    for (int i = 0; i < layers; ++i) h->push_back(nn::Sequential(nn::LayerNorm(dim), nn::Linear(dim, dim), nn::GELU()));
    transformer->insert("h", h);
    transformer->insert("ln_f", nn::LayerNorm(dim));
    lm_head = register_module("lm_head", nn::Linear(nn::LinearOptions(dim, vocab).bias(false)));
    lm_head->weight = lm_head->register_parameter("weight", transformer->at<nn::Embedding>("wte")->weight);
  }
  std::pair<Tensor, Tensor> forward(const Tensor& idx, const Tensor& targets) {
    Tensor x = (*transformer)["wte"]->forward(idx);
    for (auto& block : *transformer->at<nn::ModuleList>("h")) x = x + block->forward(x);
    Tensor logits = lm_head(transformer->at<nn::LayerNorm>("ln_f")->forward(x));
    Tensor loss = F::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
                                   nn::CrossEntropyLossOptions().ignore_index(-1));
    return {logits, loss};
  }
};
LOCKSTEP_MODULE(TinyGPT);

}  // namespace

TEST_CASE("a module with two inputs and two outputs, containers' names, and a tied weight counted once") {
  manual_seed(0);
  TinyGPT gpt(11, 8, 2);
  auto named = gpt->named_parameters();
  std::vector<std::string> names;
  for (auto& [n, _] : named) names.push_back(n);
  CHECK(names.front() == "transformer.wte.weight");
  CHECK(std::find(names.begin(), names.end(), "transformer.h.1.2.weight") == names.end());  // GELU has none
  CHECK(std::find(names.begin(), names.end(), "transformer.h.1.1.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "lm_head.weight") == names.end());  // tied: yielded once
  CHECK(gpt->parameters().size() == 1 + 2 * 4 + 2);
  auto sd = gpt->state_dict();
  CHECK(std::count_if(sd.begin(), sd.end(), [](auto& kv) { return kv.first == "lm_head.weight"; }) == 1);

  Tensor idx = tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor targets = tensor(std::vector<int64_t>{2, 3, 4, 5, 6, -1}, {2, 3});
  auto [logits, loss] = gpt(idx, targets);
  CHECK(logits.shape() == Shape{2, 3, 11});
  loss.backward();
  Tensor wte = gpt->transformer->at<nn::Embedding>("wte")->weight;
  CHECK(wte.is_same(gpt->lm_head->weight));
  CHECK(wte.grad().defined());
  // The gradient holds both uses: rows never looked up (0, 7..10) still get lm_head's part.
  CHECK(wte.grad().select(0, 9).abs().sum().item<float>() > 0);
}

TEST_CASE("apply visits children before parents, for re-initialisation") {
  manual_seed(0);
  nn::Sequential net(nn::Linear(4, 8), nn::ReLU(), nn::Sequential(nn::Linear(8, 2)));
  std::vector<std::string> order;
  net->apply([&](nn::Module& m) {
    order.push_back(m.name());
    if (auto* l = m.as<nn::Linear>()) nn::init::zeros_(l->weight);
  });
  CHECK(order == std::vector<std::string>{"Linear", "ReLU", "Linear", "Sequential", "Sequential"});
  for (auto& [name, p] : net->named_parameters())
    if (name.find("weight") != std::string::npos) CHECK(p.abs().sum().item<float>() == 0);
}

TEST_CASE("holders: empty, shared copies, Sequential of holders, Functional, Flatten") {
  nn::Linear empty_holder{nullptr};
  CHECK(empty_holder.is_empty());
  CHECK_THROWS_WITH_AS(empty_holder->weight, doctest::Contains("empty module holder"), Error);
  nn::Linear a(3, 2);
  nn::Linear b = a;
  CHECK(b->weight.is_same(a->weight));
  nn::Sequential seq(nn::Flatten(), nn::Linear(6, 4), nn::Functional([](const Tensor& x) { return x * 2.0; }),
                     nn::Functional(F::leaky_relu, 0.5), nn::Identity());
  CHECK(seq(ones({5, 2, 3})).shape() == Shape{5, 4});
  CHECK(seq->size() == 5);
  CHECK(seq[1]->as<nn::Linear>() != nullptr);
  CHECK(seq[1]->as<nn::Conv2d>() == nullptr);
  std::shared_ptr<nn::Module> as_ptr = seq;
  CHECK(as_ptr->parameters().size() == 2);
  nn::ModuleList list(nn::Linear(2, 2), nn::ReLU());
  CHECK(list->at<nn::Linear>(0)->in_features == 2);
  CHECK_THROWS_WITH_AS(list->at<nn::Linear>(1), "ModuleList: module 1 is a ReLU, not the type asked for", Error);
  CHECK_THROWS_WITH_AS(list[7], "ModuleList: index 7 out of range for 2 modules", Error);
  nn::ModuleDict dict;
  dict->insert("fc", nn::Linear(2, 2));
  CHECK_THROWS_WITH_AS(dict->insert("fc", nn::ReLU()), "ModuleDict: key 'fc' is already present", Error);
  CHECK_THROWS_WITH_AS((*dict)["nope"], "ModuleDict: no key 'nope' (keys: [fc])", Error);
}

TEST_CASE("layers name themselves and the shapes in their errors") {
  nn::Conv2d conv(3, 8, 3);
  CHECK(error_of([&] { conv(zeros({2, 4, 8, 8})); }) ==
        "Conv2d(3, 8, kernel_size=(3, 3)): expected input [N, 3, H, W] or [3, H, W], got [2, 4, 8, 8]");
  CHECK(error_of([&] { conv(zeros({1, 3, 2, 2})); }) ==
        "conv2d: input [1, 3, 2, 2] padded to [2, 2] is smaller than the kernel [3, 3] with dilation (1, 1)");
  CHECK(error_of([&] { nn::Conv2d(nn::Conv2dOptions(3, 8, 3).groups(2)); }) ==
        "Conv2d: in_channels (3) and out_channels (8) must be divisible by groups (2)");
  CHECK(error_of([&] { F::max_pool2d(zeros({4, 4}), 2); }) ==
        "max_pool2d: expected input [N, C, H, W] or [C, H, W], got [4, 4]");
  CHECK(error_of([&] { F::max_pool2d(zeros({1, 1, 4, 4}), 2, 2, 2); }) ==
        "max_pool2d: padding (2, 2) must be non-negative and at most half the kernel size (2, 2)");
  nn::BatchNorm2d bn(3);
  CHECK(error_of([&] { bn(zeros({2, 4, 5, 5})); }) == "BatchNorm2d(3): expected input [N, 3, H, W], got [2, 4, 5, 5]");
  CHECK(error_of([&] { bn(zeros({1, 3, 1, 1})); }) ==
        "BatchNorm2d: expected more than 1 value per channel when training, got input [1, 3, 1, 1]");
  nn::LayerNorm ln(8);
  CHECK(error_of([&] { ln(zeros({2, 7})); }) == "layer_norm: input [2, 7] does not end with normalized_shape [8]");
  CHECK(error_of([&] { F::layer_norm(zeros({2, 8}), {8}, Tensor(), Tensor(), -1e-5); }) ==
        "layer_norm: eps must be non-negative, got -1e-05");
  CHECK(error_of([&] { F::layer_norm(zeros({2, 8}, kInt64), {8}); }).find("layer_norm") == 0);
  nn::Embedding emb(10, 4);
  CHECK(error_of([&] { emb(zeros({3})); }) == "Embedding(10, 4): expected int64 or int32 indices, got float32");
  CHECK(error_of([&] { F::cross_entropy(zeros({4, 3}), tensor(std::vector<int64_t>{0, 1, 2})); }) ==
        "cross_entropy: input [4, 3] needs target [4], got [3]");
  CHECK(error_of([&] { F::cross_entropy(zeros({2, 3}), tensor(std::vector<int64_t>{0, 3})); }) ==
        "cross_entropy: target 3 at position 1 is out of range for 3 classes (input [2, 3], ignore_index -100)");
  CHECK(error_of([&] { F::cross_entropy(zeros({2, 3}), zeros({2, 4})); }) ==
        "cross_entropy: target [2, 4] float32 is neither int64 class indices [2] nor probabilities of the input's shape [2, 3]");
  CHECK(error_of([&] { F::binary_cross_entropy_with_logits(zeros({2}), zeros({3})); }) ==
        "binary_cross_entropy_with_logits: target [3] must have the input's shape [2]");
}

TEST_CASE("SyncBatchNorm without a process group is BatchNorm") {
  manual_seed(0);
  Tensor x = randn({4, 3, 2, 2});
  nn::SyncBatchNorm sbn(3);
  nn::BatchNorm2d bn(3);
  CHECK(allclose(sbn(x), bn(x)));
  CHECK(allclose(sbn->running_var, bn->running_var));
}

namespace {

// pytorch/examples' VAE: forward returns (recon, mu, logvar), which a virtual Tensor forward could not.
struct TinyVAEImpl : nn::Module {
  nn::Linear enc{nullptr}, mu{nullptr}, logvar{nullptr}, dec{nullptr};
  TinyVAEImpl() : Module("TinyVAE") {
    enc = register_module("enc", nn::Linear(4, 3));
    mu = register_module("mu", nn::Linear(3, 2));
    logvar = register_module("logvar", nn::Linear(3, 2));
    dec = register_module("dec", nn::Linear(2, 4));
  }
  std::tuple<Tensor, Tensor, Tensor> forward(const Tensor& x) {
    Tensor h = relu(enc(x));
    Tensor m = mu(h), lv = logvar(h);
    return {sigmoid(dec(m)), m, lv};
  }
};
LOCKSTEP_MODULE(TinyVAE);

}  // namespace

TEST_CASE("a forward returning a tuple runs through the holder; Module::forward names what to do instead") {
  manual_seed(0);
  TinyVAE vae;
  Tensor x = rand({5, 4});
  auto [recon, m, lv] = vae(x);
  CHECK(recon.shape() == Shape{5, 4});
  CHECK(m.shape() == Shape{5, 2});
  CHECK(lv.shape() == Shape{5, 2});
  auto [recon2, m2, lv2] = vae->forward(x);
  CHECK(internal::allclose(recon, recon2, 0, 0));
  (recon.sum() + m.sum() + lv.sum()).backward();
  CHECK(vae->enc->weight.grad().defined());
  // Through a std::shared_ptr<Module>, the tuple forward is not a Tensor forward: a clear error.
  std::shared_ptr<nn::Module> as_module = vae.ptr();
  CHECK_THROWS_WITH_AS(as_module->forward(x), doctest::Contains("TinyVAE: forward(input) is not implemented"), Error);
  // A single-output module reached through std::shared_ptr<Module> runs its own forward.
  nn::Sequential seq(std::make_shared<nn::LinearImpl>(4, 2), nn::ReLU());
  std::shared_ptr<nn::Module> first = seq[0];
  CHECK(internal::allclose(first->forward(x), seq[0]->as<nn::Linear>()->forward(x), 0, 0));
  CHECK(seq(x).shape() == Shape{5, 2});
}
