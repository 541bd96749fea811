// Bad input to the public API is a lockstep::Error whose message names the op and the offending values:
// never a crash, a hang or a silently wrong result. One case per kind of mistake that the module
// suites (tensor_test, autograd_test, nn_test, optim_test, data_test) do not already cover: wrong
// dtypes into modules and losses, integer division by zero, out-of-range indices and dimensions,
// inconsistent optimizer state, bad loader options, and (where a GPU is visible) tensors on different
// devices and integer division by zero on the device.
#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <string>

#include "data/api.h"
#include "nn/api.h"
#include "optim/api.h"
#include "tensor/cuda/cuda.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tests/util/test_util.h"

namespace {

using lockstep::testing::contains;
using lockstep::testing::error_of;

using namespace lockstep;

bool has_gpu() { return cuda::device_count() > 0; }

}  // namespace

// --- tensor ----------------------------------------------------------------------------------------

TEST_CASE("integer division by zero is an error, not SIGFPE") {
  CHECK(error_of([] { internal::div(arange(3), tensor(std::vector<int64_t>{1, 0, 2})); }) ==
        "div: integer division by zero (a divisor element is 0; divide floating-point tensors for inf/nan)");
  CHECK(error_of([] { internal::binary_scalar(BinaryOp::Div, arange(3), 0.0); }) ==
        "div: integer division by zero (a divisor element is 0; divide floating-point tensors for inf/nan)");
  CHECK(error_of([] { internal::binary_scalar(BinaryOp::Div, arange(3), 6.0, /*reverse=*/true); }) ==
        "div: integer division by zero (a divisor element is 0; divide floating-point tensors for inf/nan)");
  CHECK(internal::div(arange(1, 4), tensor(std::vector<int64_t>{1, 2, 3})).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1});
  CHECK(std::isinf(internal::div(ones({1}), zeros({1})).item<float>()));  // floating point: inf, as PyTorch
}

TEST_CASE("fmod and remainder of integers: a zero divisor is an error naming the op; INT64_MIN % -1 is 0") {
  const Tensor x = tensor(std::vector<int64_t>{7, -7, 7, -7});
  const Tensor y = tensor(std::vector<int64_t>{2, 2, -2, -2});
  CHECK(fmod(x, y).to_vector<int64_t>() == std::vector<int64_t>{1, -1, 1, -1});       // the dividend's sign
  CHECK(remainder(x, y).to_vector<int64_t>() == std::vector<int64_t>{1, 1, -1, -1});  // the divisor's sign
  CHECK(error_of([&] { fmod(x, tensor(std::vector<int64_t>{1, 0, 1, 1})); }) ==
        "fmod: integer division by zero (a divisor element is 0)");
  CHECK(error_of([&] { remainder(x, 0.0); }) == "remainder: integer division by zero (a divisor element is 0)");
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  CHECK(remainder(tensor(std::vector<int64_t>{kMin}), -1.0).to_vector<int64_t>() == std::vector<int64_t>{0});
}

TEST_CASE("activations reject bad parameters with PyTorch's messages") {
  const Tensor x = randn({2, 3});
  CHECK(contains(error_of([&] { softshrink(x, -0.5); }), "softshrink: lambda must be greater or equal to 0"));
  CHECK(contains(error_of([&] { hardtanh(x, 1.0, -1.0); }), "hardtanh: max_val (-1) must be greater than or equal"));
  CHECK(contains(error_of([&] { celu(x, 0.0); }), "celu: alpha must not be 0"));
  CHECK(contains(error_of([&] { glu(x, 1); }), "glu: Halving dimension must be even, but dimension 1 is size 3"));
  CHECK(contains(error_of([&] { prelu(randn({2, 4}), randn({3})); }), "prelu: weight has 3 parameters"));
  CHECK(contains(error_of([&] { rrelu(x, 0.5, 0.1, true); }), "rrelu: lower bound (0.5) must not exceed"));
}

TEST_CASE("INT64_MIN / -1 wraps to INT64_MIN (NumPy's answer) instead of trapping with SIGFPE") {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  const Tensor a = tensor(std::vector<int64_t>{kMin, 7, -7}), minus_one = tensor(std::vector<int64_t>{-1, -1, -1});
  const std::vector<int64_t> want{kMin, -7, 7};
  CHECK(internal::div(a, minus_one).to_vector<int64_t>() == want);
  CHECK(internal::binary_scalar(BinaryOp::Div, a, -1.0).to_vector<int64_t>() == want);
  CHECK(internal::binary_scalar(BinaryOp::Div, minus_one, static_cast<double>(kMin), /*reverse=*/true)
            .to_vector<int64_t>() == std::vector<int64_t>(3, kMin));
  if (has_gpu()) {
    const Device gpu = Device::cuda(0);
    CHECK(internal::div(a.to(gpu), minus_one.to(gpu)).to_vector<int64_t>() == want);
    CHECK(internal::binary_scalar(BinaryOp::Div, a.to(gpu), -1.0).to_vector<int64_t>() == want);
  }
}

TEST_CASE("factories reject values that do not fit the shape, and bad ranges") {
  CHECK(error_of([] { tensor({1.0, 2.0, 3.0}, {2, 2}); }) == "tensor: 3 values do not fill shape [2, 2]");
  CHECK(error_of([] { arange(0, 5, 0); }) == "arange: step must be nonzero");
  CHECK(error_of([] { randint(3, 3, {2}); }) == "randint: empty range [3, 3)");
}

TEST_CASE("reshape, reductions and item name the shapes and dimensions") {
  CHECK(error_of([] { internal::reshape(arange(6), {4}); }) == "reshape: cannot reshape [6] (6 elements) into [4]");
  CHECK(error_of([] { internal::sum(zeros({2, 3}), 2); }) == "sum: dimension 2 out of range for a 2-D tensor");
  CHECK(error_of([] { internal::argmax(zeros({2, 0}), 1); }) == "argmax: cannot reduce an empty dimension 1 of shape [2, 0]");
  CHECK(error_of([] { zeros({2}).item<float>(); }) == "Tensor::item: expected a tensor with one element, got shape [2]");
  CHECK(error_of([] { arange(2).data<float>(); }) == "Tensor::data: requested float32 from a int64 tensor");
  CHECK(error_of([] { Tensor().shape(); }).find("undefined tensor") != std::string::npos);
}

TEST_CASE("index_add_ and copy_ reject indices and sizes that do not fit") {
  Tensor out = zeros({3, 2});
  CHECK(error_of([&] { internal::index_add_(out, tensor(std::vector<int64_t>{0, 5}), ones({2, 2})); }) ==
        "index_add_: index 5 at position 1 is out of range for a dimension of size 3");
  CHECK(error_of([&] { internal::index_add_(out, tensor(std::vector<int64_t>{0}), ones({1, 3})); }) ==
        "index_add_: source [1, 3] with index [1] does not fit into [3, 2] along dimension 0 (expected [1, 2])");
  CHECK(error_of([&] { internal::copy_(out, ones({5})); }) == "copy_: source [5] does not broadcast to destination [3, 2]");
}

// --- nn --------------------------------------------------------------------------------------------

TEST_CASE("Linear rejects an input of the wrong dtype or rank, naming the layer") {
  nn::Linear fc(4, 3);
  CHECK(error_of([&] { fc(zeros({2, 4}, kFloat64)); }) ==
        "Linear(4, 3): expected a float32 input, got float64 (convert the input with .to(kFloat32), or the layer "
        "with .to(kFloat64))");
  CHECK(error_of([&] { fc(arange(8).reshape({2, 4})); }) ==
        "Linear(4, 3): expected a float32 input, got int64 (convert the input with .to(kFloat32))");
  CHECK(error_of([&] { fc(zeros({2, 5})); }) == "Linear(4, 3): expected input [..., 4], got [2, 5]");
  CHECK(error_of([&] { linear(zeros({2, 4}), zeros({3, 4}, kFloat64)); }) ==
        "linear: input is float32 but weight is float64 (convert one with .to(dtype))");
}

TEST_CASE("losses reject inputs of the wrong dtype with their own name") {
  nn::CrossEntropyLoss ce;
  CHECK(error_of([&] { ce(arange(6).reshape({2, 3}), tensor(std::vector<int64_t>{0, 1})); }) ==
        "cross_entropy: expected floating-point logits, got int64");
  nn::MSELoss mse;
  CHECK(error_of([&] { mse(zeros({2}), zeros({2}, kFloat64)); }) == "mse_loss: input is float32 but target is float64");
}

TEST_CASE("Sequential rejects a null module") {
  nn::Sequential seq;
  CHECK(error_of([&] { seq->push_back(nullptr); }) == "Sequential: register_module('0'): null module");
}

// --- optim -----------------------------------------------------------------------------------------

TEST_CASE("SGD rejects bad options, an empty parameter list and mismatched state") {
  Tensor p = zeros({2}).set_requires_grad();
  CHECK(error_of([&] { optim::SGD({p}, optim::SGDOptions(0.1).momentum(-0.5)); }) == "SGD: Invalid momentum value: -0.5");
  CHECK(error_of([&] { optim::SGD({p}, optim::SGDOptions(0.1).weight_decay(-1)); }) == "SGD: Invalid weight_decay value: -1");
  CHECK(error_of([&] { optim::SGD({}, optim::SGDOptions(0.1)); }) == "SGD: got an empty parameter list");
  optim::SGD sgd({p}, optim::SGDOptions(0.1).momentum(0.9));
  CHECK(error_of([&] { sgd.set_lr(NAN); }) == "SGD: Invalid learning rate: nan");
  CHECK(error_of([&] { sgd.set_momentum_buffer(0, zeros({3})); }) == "SGD: momentum buffer [3] does not match parameter 0 [2]");
  CHECK(error_of([&] { sgd.set_momentum_buffer(1, zeros({2})); }) == "SGD: no parameter 1");
  CHECK(error_of([&] { p.set_grad(zeros({3})); }).find("Tensor::set_grad: gradient [3] float32 on cpu") == 0);
  // The update kernel takes its three arrays as distinct memory.
  Tensor q = zeros({2}), buf = zeros({2});
  CHECK(error_of([&] { internal::sgd_step_(q, q, buf, 0.1, 0.9, 0, 0, false, true); }) ==
        "sgd_step_: the parameter, its gradient and its momentum buffer must be distinct tensors");
  CHECK(error_of([&] { internal::sgd_step_(q, buf, buf, 0.1, 0.9, 0, 0, false, true); }) ==
        "sgd_step_: the parameter, its gradient and its momentum buffer must be distinct tensors");
}

// --- data ------------------------------------------------------------------------------------------

TEST_CASE("datasets and loaders reject bad sizes, options and indices") {
  CHECK(error_of([] { data::TensorDataset(zeros({4, 2}), arange(3)); }).find("TensorDataset") == 0);
  auto ds = std::make_shared<data::TensorDataset>(zeros({10, 2}), arange(10));
  CHECK(error_of([&] { ds->get(10); }) == "row: index 10 is out of range for [10, 2]");
  CHECK(error_of([&] { data::DataLoader(ds, {.batch_size = 4, .num_workers = -1}); }) ==
        "DataLoader: num_workers must be non-negative, got -1");
  // A sampler built for a larger dataset: the first index past the end is an error, not garbage.
  auto sampler = std::make_shared<data::DistributedSampler>(20, 1, 0, /*shuffle=*/false);
  data::DataLoader loader(ds, {.batch_size = 8, .sampler = sampler});
  std::string message = error_of([&] {
    for (auto& batch : loader) (void)batch;
  });
  CHECK(message == "index_select: index 10 at position 2 is out of range for a dimension of size 10");
}

// --- devices (need a GPU) --------------------------------------------------------------------------

TEST_CASE("tensors on different devices are errors naming both devices") {
  if (!has_gpu()) {
    MESSAGE("SKIPPED: no CUDA device (", cuda::unavailable_reason(), ")");
    return;
  }
  Device gpu = Device::cuda(0);
  CHECK(error_of([&] { internal::add(zeros({2}), zeros({2}, gpu)); }) == "add: tensors on different devices: cpu and cuda:0");
  nn::CrossEntropyLoss ce;
  CHECK(error_of([&] { ce(zeros({2, 3}), tensor(std::vector<int64_t>{0, 1}, {}, gpu)); }) ==
        "cross_entropy: devices differ: input on cpu, target on cuda:0");
  CHECK(error_of([&] { linear(zeros({2, 4}, gpu), zeros({3, 4})); }) ==
        "linear: input is on cuda:0 but weight is on cpu (move one with .to(device))");
  nn::Linear fc(4, 3);
  CHECK(error_of([&] { fc(zeros({2, 4}, gpu)); }) ==
        "Linear(4, 3): input on cuda:0 but the layer on cpu (move one with .to(device))");
  Tensor p = zeros({2}, gpu).set_requires_grad();
  optim::SGD sgd({p}, optim::SGDOptions(0.1));
  p.autograd_meta().grad = zeros({2});  // a gradient left on the host (set_grad would refuse it)
  CHECK(error_of([&] { sgd.step(); }).find("sgd_step_: gradient [2] float32 on cpu does not match parameter [2] "
                                           "float32 on cuda:0") == 0);
}

TEST_CASE("integer division by zero on a GPU is the CPU's error, raised at the next synchronization") {
  if (!has_gpu()) {
    MESSAGE("SKIPPED: no CUDA device (", cuda::unavailable_reason(), ")");
    return;
  }
  Device gpu = Device::cuda(0);
  // The divisor lives on the device: the kernel skips the division and records it (no sync per op).
  Tensor q = internal::div(arange(3, {kInt64, gpu}), tensor(std::vector<int64_t>{1, 0, 2}, {}, gpu));
  CHECK(error_of([&] { q.to_vector<int64_t>(); }) ==
        "div: integer division by zero (a divisor element is 0; divide floating-point tensors for inf/nan) "
        "(detected on cuda:0 at a synchronization after the op was queued)");
  CHECK(internal::div(arange(1, 4, 1, {kInt64, gpu}), tensor(std::vector<int64_t>{1, 2, 3}, {}, gpu)).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 1, 1});
}
