// Autocast: torch.autocast as an RAII guard. Inside it, on the guarded device, the ops PyTorch runs in
// lower precision (matmul, linear, conv2d, scaled_dot_product_attention; whole nn::LSTM layers, and on
// CUDA nn::GRU and nn::RNN ones, states included) cast their float32 operands to the autocast dtype and
// return that dtype; the
// losses and prod, and on CUDA also softmax, layer_norm, sum, exp, log, pow and rsqrt, cast to float32. Everything else runs in the dtype of
// its inputs. Casts are recorded, so gradients reach float32 parameters in float32 (master weights);
// the casts of a leaf that requires grad (a parameter) are made once per outermost autocast region and
// reused by every op that takes it. float64 operands are never cast, as PyTorch's.
//
//   { autocast guard(kCPU, kBFloat16); Tensor loss = F::cross_entropy(model(x), y); }  // bf16 GEMMs
//   loss.backward();  // outside the region, as PyTorch recommends
#pragma once

#include <array>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace lockstep {

class autocast {
 public:
  // dtype: kBFloat16 (CPU and CUDA) or kFloat16 (CUDA, with amp::GradScaler); anything else is an
  // error naming it. enabled = false turns autocast off for the region (as torch.autocast(enabled=False)).
  explicit autocast(DeviceType device, Dtype dtype = kBFloat16, bool enabled = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  DeviceType device_;
  bool prev_enabled_;
  Dtype prev_dtype_;
};

bool is_autocast_enabled(DeviceType device);
Dtype get_autocast_dtype(DeviceType device);

namespace autograd::amp {

// The ops autocast knows, by the policy PyTorch's lists give them (autocast.cpp has the table).
enum class AutocastOp {
  Matmul, Linear, Conv2d, ScaledDotProductAttention, Softmax, LayerNorm, Sum, Exp, Loss, Prod, LSTM, GRU, RNN, RNNCell
};

extern thread_local bool any_enabled;  // on some device type, on this thread

// One operand of `op` as autocast wants it (an undefined one stays so).
Tensor cast_when_enabled(AutocastOp op, const Tensor& t);
inline Tensor cast_input(AutocastOp op, const Tensor& t) { return any_enabled ? cast_when_enabled(op, t) : t; }
// The op's operands as autocast wants them: with autocast off on this thread (the common case) one
// thread-local read and handles on the operands themselves, no allocation.
template <typename... Ts>
std::array<Tensor, sizeof...(Ts)> cast_inputs(AutocastOp op, const Ts&... ts) {
  if (!any_enabled) return {ts...};
  return {cast_when_enabled(op, ts)...};
}
// Whether autocast on `device` casts op's float32 operands to the autocast dtype (PyTorch's
// lower-precision list for that device); the table's column, readable without a device (tests).
bool lowers(AutocastOp op, DeviceType device);
// Whether autocast on `device` runs op as PyTorch's composite: each op inside by its own row (the table's
// Composite policy: nn::RNN on the CPU), rather than as one op.
bool runs_composite(AutocastOp op, DeviceType device);
// The number of casts held for reuse in the current region (tests).
size_t cached_casts();

// A whole layer (LSTM, GRU, RNN) under autocast as PyTorch runs it, by its row of the table: as a
// composite, `body(operands)` runs as it is; otherwise as one op: the operands (input, states, weights)
// cast as the row says, then `body` with autocast off, one dtype throughout (so a CUDA LSTM keeps h and
// c at 16 bits, as cuDNN does, and a CPU GRU stays float32, PyTorch's dtype for it).
template <typename Body>
auto run_layer(AutocastOp op, DeviceType device, std::vector<Tensor> operands, Body&& body) {
  if (!any_enabled || !is_autocast_enabled(device) || runs_composite(op, device)) return body(operands);
  for (Tensor& t : operands) t = cast_when_enabled(op, t);
  autocast off(device, get_autocast_dtype(device), /*enabled=*/false);
  return body(operands);
}

}  // namespace autograd::amp
}  // namespace lockstep
