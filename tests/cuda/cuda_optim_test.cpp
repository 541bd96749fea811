// Optimizers on the GPU: Adam/AdamW (every option), SGD and Adadelta steps on cuda:0 equal the CPU's, their
// state_dict moves between devices, and clip_grad_norm_ agrees. Without a visible device every case
// skips, and the binary prints "SKIPPED: no CUDA device" (CI counts it as skipped).
#include <doctest/doctest.h>

#include <cstdio>

#include "nn/utils/clip_grad.h"
#include "optim/api.h"
#include "tensor/cuda/cuda.h"
#include "tests/cuda/cuda_test_util.h"
#include "tensor/factory.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

using namespace lockstep;

namespace {

// Parameters [64, 37] and [37] on `device`, the same values on every device: several blocks of the
// kernels' launches and a ragged tail, small enough that the emulator under the sanitizers runs the
// whole file in well under its timeout (at [300, 70] it took minutes there on a busy machine).
std::vector<Tensor> make_params(Device device, Dtype dtype) {
  manual_seed(5);
  return {internal::to_device(randn({64, 37}, TensorOptions(dtype)), device).set_requires_grad(),
          internal::to_device(randn({37}, TensorOptions(dtype)), device).set_requires_grad()};
}

void set_grads(std::vector<Tensor>& ps, int step) {
  for (size_t i = 0; i < ps.size(); ++i) {
    manual_seed(100 + step * 10 + i);
    Tensor g = randn(ps[i].shape(), TensorOptions(ps[i].dtype()));
    ps[i].set_grad(internal::to_device(internal::add(g, internal::to_device(ps[i], Device::cpu())), ps[i].device()));
  }
}

}  // namespace

template <class Opt, class O>
void compare(O options, Dtype dtype, double rtol) {
  std::vector<Tensor> cpu = make_params(Device::cpu(), dtype), gpu = make_params(Device::cuda(0), dtype);
  Opt cpu_opt(cpu, options), gpu_opt(gpu, options);
  for (int step = 0; step < 4; ++step) {
    set_grads(cpu, step);
    set_grads(gpu, step);
    cpu_opt.step();
    gpu_opt.step();
  }
  for (size_t i = 0; i < cpu.size(); ++i)
    CHECK_MESSAGE(internal::allclose(internal::to_device(gpu[i], Device::cpu()), cpu[i], rtol, rtol), "parameter ", i);
  // The GPU optimizer's state, loaded into a CPU optimizer, continues as the CPU one.
  std::vector<Tensor> moved;
  for (auto& p : gpu) moved.push_back(internal::to_device(p, Device::cpu()).detach().set_requires_grad());
  Opt from_gpu(moved, options);
  from_gpu.load_state_dict(gpu_opt.state_dict());
  set_grads(cpu, 9);
  set_grads(moved, 9);
  cpu_opt.step();
  from_gpu.step();
  for (size_t i = 0; i < cpu.size(); ++i) CHECK(internal::allclose(moved[i], cpu[i], rtol, rtol));
}

TEST_CASE("Adam, AdamW, SGD, Adadelta, Adagrad and RMSprop steps on the GPU equal the CPU's") {
  REQUIRE_DEVICE();
  for (Dtype dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype);
    const double rtol = dtype == kFloat32 ? 1e-5 : 1e-12;
    compare<optim::AdamW>(optim::AdamOptions(optim::AdamWOptions(1e-2).weight_decay(0.1)), dtype, rtol);
    compare<optim::AdamW>(optim::AdamOptions(optim::AdamWOptions(1e-2).amsgrad(true)), dtype, rtol);
    compare<optim::Adam>(optim::AdamOptions(1e-2).weight_decay(0.1).maximize(true), dtype, rtol);
    compare<optim::Adam>(optim::AdamOptions(1e-2).amsgrad(true).betas(0.5, 0.8).eps(1e-4), dtype, rtol);
    compare<optim::SGD>(optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01), dtype,
                        rtol);
    compare<optim::Adadelta>(optim::AdadeltaOptions(1.0).weight_decay(0.1).maximize(true), dtype, rtol);
    compare<optim::Adadelta>(optim::AdadeltaOptions(0.5).rho(0.6).eps(1e-3), dtype, rtol);
    // The optimizer-step table's rows (tensor/optim_step.h), one kernel each on both devices.
    compare<optim::Adagrad>(optim::AdagradOptions(0.1).lr_decay(0.01).weight_decay(0.1).initial_accumulator_value(0.5),
                            dtype, rtol);
    compare<optim::Adagrad>(optim::AdagradOptions(0.1).maximize(true).eps(1e-3), dtype, rtol);
    compare<optim::RMSprop>(optim::RMSpropOptions(0.01).centered(true).momentum(0.9).weight_decay(0.1), dtype, rtol);
    compare<optim::RMSprop>(optim::RMSpropOptions(0.01).alpha(0.9).maximize(true), dtype, rtol);
  }
}

TEST_CASE("clip_grad_norm_ on the GPU equals the CPU's") {
  REQUIRE_DEVICE();
  for (double norm_type : {2.0, std::numeric_limits<double>::infinity()}) {
    std::vector<Tensor> cpu = make_params(Device::cpu(), kFloat32), gpu = make_params(Device::cuda(0), kFloat32);
    set_grads(cpu, 0);
    set_grads(gpu, 0);
    Tensor a = nn::utils::clip_grad_norm_(cpu, 1.0, norm_type), b = nn::utils::clip_grad_norm_(gpu, 1.0, norm_type);
    CHECK(b.device() == Device::cuda(0));
    CHECK(b.item<float>() == doctest::Approx(a.item<float>()).epsilon(1e-5));
    for (size_t i = 0; i < cpu.size(); ++i)
      CHECK(internal::allclose(internal::to_device(gpu[i].grad(), Device::cpu()), cpu[i].grad(), 1e-5, 1e-6));
  }
}
