// Autocast's state (per thread, per device type), its op table and the cast cache (autocast.h).
#include "autograd/autocast.h"

#include <iterator>
#include <unordered_map>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "common/check.h"

namespace lockstep {

namespace {

using autograd::amp::AutocastOp;

// Keep: run in the operands' dtype. Lower: cast float32 operands to the autocast dtype. Float32: cast
// reduced-precision operands to float32. Composite (whole layers only): no cast of the layer's own;
// each op inside follows its row.
enum class Policy : uint8_t { Keep, Lower, Float32, Composite };

struct Row {
  AutocastOp op;
  Policy cpu, cuda;  // PyTorch's CPU and CUDA lists (aten/src/ATen/autocast_mode.h) differ
};

// One row per op family lockstep has; tools/fixtures/autocast_policy.py prints what PyTorch does with
// each, and tests/autograd/autocast_test.cpp checks the CPU column against it.
constexpr Row kTable[] = {
    {AutocastOp::Matmul, Policy::Lower, Policy::Lower},  // matmul, mm, bmm, @
    {AutocastOp::Linear, Policy::Lower, Policy::Lower},
    {AutocastOp::Conv2d, Policy::Lower, Policy::Lower},
    {AutocastOp::ScaledDotProductAttention, Policy::Lower, Policy::Lower},
    {AutocastOp::Softmax, Policy::Keep, Policy::Float32},   // softmax, log_softmax
    {AutocastOp::LayerNorm, Policy::Keep, Policy::Float32},
    {AutocastOp::Sum, Policy::Keep, Policy::Float32},       // sum, cumsum, cumprod
    // exp, log, pow, rsqrt; acos, asin, cosh, sinh, tan, erfinv, expm1, log1p, log2, log10, reciprocal, softplus
    {AutocastOp::Exp, Policy::Keep, Policy::Float32},
    {AutocastOp::Loss, Policy::Float32, Policy::Float32},   // cross_entropy, nll, mse, bce, bce_with_logits
    {AutocastOp::Prod, Policy::Float32, Policy::Float32},
    // Whole recurrent layers, states included (amp::run_layer): CUDA casts every cuDNN RNN (_cudnn_rnn),
    // the CPU only LSTM (mkldnn_rnn_layer). On the CPU an RNN (tanh, relu) runs as PyTorch's composite
    // (bfloat16 products and output) and a GRU in float32 as one op, input projection included: the
    // dtype PyTorch's gives (its composite GRU runs the products in bfloat16; lockstep's fused layer
    // does not).
    {AutocastOp::LSTM, Policy::Lower, Policy::Lower},
    {AutocastOp::GRU, Policy::Keep, Policy::Lower},
    {AutocastOp::RNN, Policy::Composite, Policy::Lower},  // tanh, relu
    // The cells with their states: lstm_cell, gru_cell, rnn_tanh_cell, rnn_relu_cell (and the fused
    // _thnn cells) are on CUDA's lower-precision list and on no CPU list, so on the CPU only the cell's
    // products (Linear) run in bfloat16 and its gates follow type promotion with the float32 states.
    {AutocastOp::RNNCell, Policy::Keep, Policy::Lower},
};
static_assert(std::size(kTable) == static_cast<size_t>(AutocastOp::RNNCell) + 1, "one row per AutocastOp, in order");

Policy policy(AutocastOp op, DeviceType device) {
  const Row& row = kTable[static_cast<size_t>(op)];
  return device == kCPU ? row.cpu : row.cuda;
}

struct DeviceState {
  bool enabled = false;
  Dtype dtype = kBFloat16;
};

// Casts of leaves that require grad, reused within the outermost region: the version tells a leaf
// changed in place since (an optimizer step inside the region) from one that did not.
struct CachedCast {
  Tensor source, cast;
  uint64_t version;
};

struct State {
  DeviceState device[2];  // by DeviceType
  int depth = 0;          // nesting of enabled regions; the cache empties when it returns to 0
  std::unordered_map<const TensorImpl*, CachedCast> cache;

  void refresh() { autograd::amp::any_enabled = device[0].enabled || device[1].enabled; }
};

thread_local State state;

DeviceState& of(DeviceType d) { return state.device[static_cast<int>(d)]; }

bool eligible(const Tensor& t, DeviceType device) {
  return t.defined() && t.device().type == device && t.is_floating_point() && t.dtype() != kFloat64;
}

Tensor cast(const Tensor& t, Dtype dtype) {
  if (t.dtype() == dtype) return t;
  if (!t.is_leaf() || !t.requires_grad() || !GradMode::is_enabled()) return to(t, dtype);
  auto it = state.cache.find(t.impl());
  if (it != state.cache.end() && it->second.cast.dtype() == dtype && it->second.version == t.version())
    return it->second.cast;
  Tensor c = to(t, dtype);
  state.cache[t.impl()] = {t, c, t.version()};
  return c;
}

}  // namespace

autocast::autocast(DeviceType device, Dtype dtype, bool enabled) : device_(device) {
  LOCKSTEP_CHECK(dtype == kBFloat16 || (dtype == kFloat16 && device == kCUDA), "autocast: ", dtype,
                 " is not an autocast dtype on ", device == kCPU ? "the CPU (expected bfloat16)" : "CUDA (expected bfloat16 or float16)");
  DeviceState& s = of(device);
  prev_enabled_ = s.enabled;
  prev_dtype_ = s.dtype;
  s.enabled = enabled;
  s.dtype = dtype;
  if (enabled) ++state.depth;
  state.refresh();
}

autocast::~autocast() {
  DeviceState& s = of(device_);
  if (s.enabled && --state.depth == 0) state.cache.clear();
  s.enabled = prev_enabled_;
  s.dtype = prev_dtype_;
  state.refresh();
}

bool is_autocast_enabled(DeviceType device) { return of(device).enabled; }
Dtype get_autocast_dtype(DeviceType device) { return of(device).dtype; }

namespace autograd::amp {

thread_local bool any_enabled = false;

Tensor cast_when_enabled(AutocastOp op, const Tensor& t) {
  if (!t.defined()) return t;
  const DeviceType device = t.device().type;
  const DeviceState& s = of(device);
  if (!s.enabled || !eligible(t, device)) return t;
  switch (policy(op, device)) {
    case Policy::Keep:
    case Policy::Composite: return t;
    case Policy::Lower: return cast(t, s.dtype);
    case Policy::Float32: return cast(t, kFloat32);
  }
  return t;
}

bool lowers(AutocastOp op, DeviceType device) { return policy(op, device) == Policy::Lower; }
bool runs_composite(AutocastOp op, DeviceType device) { return policy(op, device) == Policy::Composite; }

size_t cached_casts() { return state.cache.size(); }

}  // namespace autograd::amp
}  // namespace lockstep
