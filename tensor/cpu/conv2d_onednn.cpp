// 2-D convolutions on the CPU through oneDNN's direct (JIT) kernels: forward, backward-data and
// backward-weight(+bias), in float32, or in bfloat16 where the processor has AVX512-BF16 (bf16 operands
// and results, float32 accumulation inside oneDNN: its avx512_core_bf16 kernels, vdpbf16ps).
//
// Layouts: lockstep's tensors stay NCHW / OIHW; oneDNN chooses its own (format_tag::any: nChw16c
// activations, blocked weights), and each call reorders into and out of it: on plain NCHW memory
// oneDNN 2.6 falls back to im2col + its GEMM ("gemm:jit"), slower than the blocked direct kernels with
// the reorders counted (BENCHMARKS.md, the conv2d rows).
//
// Each convolution shape's primitive is built once and kept (building one JITs code); the work
// buffers (blocked copies, scratchpad) are lockstep tensors, so the CPU allocator's block cache
// reuses them from step to step. oneDNN here runs on OpenMP (Debian's libdnnl links libgomp): every
// call sets OpenMP's thread count to lockstep's (get_num_threads(), 1 inside a parallel_for).
#include "tensor/cpu/conv2d_onednn.h"

#include <omp.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "tensor/cpu/isa.h"
#include "tensor/factory.h"
#include "tensor/parallel.h"

namespace lockstep::cpu {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using internal::Conv2dParams;

enum class Kind { Forward, BackwardData, BackwardWeight };

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// One shape's primitive and the layouts it chose for x (src or diff_src), the weight (weights or
// diff_weights) and y (dst or diff_dst).
struct Plan {
  dnnl::primitive prim;
  memory::desc x, w, y, scratchpad;
};

memory::data_type dnnl_type(Dtype dtype) {
  return dtype == kBFloat16 ? memory::data_type::bf16 : memory::data_type::f32;
}

// The plain layouts of lockstep's tensors: x [N, C, H, W], y [N, O, OH, OW], weight [O, C / G, kh, kw]
// (as [G, O / G, C / G, kh, kw] with groups), all of one dtype.
struct Plain {
  memory::desc x, w, y, bias;

  Plain(const Shape& xs, const Shape& ws, const Conv2dParams& p, Dtype dtype) {
    const auto out = p.output_size(xs[2], xs[3], ws[2], ws[3]);
    const memory::dim G = p.groups;
    const memory::data_type t = dnnl_type(dtype);
    x = memory::desc({xs[0], xs[1], xs[2], xs[3]}, t, Tag::nchw);
    y = memory::desc({xs[0], ws[0], out[0], out[1]}, t, Tag::nchw);
    w = G == 1 ? memory::desc({ws[0], ws[1], ws[2], ws[3]}, t, Tag::oihw)
               : memory::desc({G, ws[0] / G, ws[1], ws[2], ws[3]}, t, Tag::goihw);
    bias = memory::desc({ws[0]}, t, Tag::x);
  }
};

memory::desc any(const memory::desc& d) { return memory::desc(d.dims(), d.data_type(), Tag::any); }

// Builds the primitive for one kind, shape and dtype. The backward kinds take a forward descriptor as
// a hint.
Plan make_plan(Kind kind, const Shape& xs, const Shape& ws, bool bias, const Conv2dParams& p, Dtype dtype) {
  const Plain plain(xs, ws, p, dtype);
  const memory::dims strides{p.stride[0], p.stride[1]}, pad{p.padding[0], p.padding[1]},
      dil{p.dilation[0] - 1, p.dilation[1] - 1};  // oneDNN counts dilation from 0
  const memory::desc x = any(plain.x), w = any(plain.w), y = any(plain.y);
  const auto algo = dnnl::algorithm::convolution_direct;
  auto& eng = cpu_engine();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // Padding on the right as on the left: oneDNN's output size rounds down as PyTorch's does.
  using Fwd = dnnl::convolution_forward;
  auto fwd_desc = bias ? Fwd::desc(dnnl::prop_kind::forward_training, algo, x, w, plain.bias, y, strides, dil, pad, pad)
                       : Fwd::desc(dnnl::prop_kind::forward_training, algo, x, w, y, strides, dil, pad, pad);
  Fwd::primitive_desc fwd(fwd_desc, attr, eng);
  switch (kind) {
    case Kind::Forward:
      return {Fwd(fwd), fwd.src_desc(), fwd.weights_desc(), fwd.dst_desc(), fwd.scratchpad_desc()};
    case Kind::BackwardData: {
      using Bwd = dnnl::convolution_backward_data;
      Bwd::primitive_desc pd(Bwd::desc(algo, x, w, y, strides, dil, pad, pad), attr, eng, fwd);
      return {Bwd(pd), pd.diff_src_desc(), pd.weights_desc(), pd.diff_dst_desc(), pd.scratchpad_desc()};
    }
    case Kind::BackwardWeight: {
      using Bww = dnnl::convolution_backward_weights;
      auto d = bias ? Bww::desc(algo, x, w, plain.bias, y, strides, dil, pad, pad)
                    : Bww::desc(algo, x, w, y, strides, dil, pad, pad);
      Bww::primitive_desc pd(d, attr, eng, fwd);
      return {Bww(pd), pd.src_desc(), pd.diff_weights_desc(), pd.diff_dst_desc(), pd.scratchpad_desc()};
    }
  }
  throw Error("conv2d: unknown oneDNN primitive kind");
}

// The plan for one kind, shape and dtype, built on first use and kept for the process's life (a
// network has a handful of convolution shapes).
const Plan& plan_for(Kind kind, const Shape& xs, const Shape& ws, bool bias, const Conv2dParams& p, Dtype dtype) {
  using Key = std::array<int64_t, 17>;
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<Plan>> plans;
  const Key key{int64_t(kind), xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], p.stride[0], p.stride[1],
                p.padding[0], p.padding[1], p.dilation[0], p.dilation[1], p.groups, bias, int64_t(dtype)};
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = plans[key];
  if (!slot) slot = std::make_unique<Plan>(make_plan(kind, xs, ws, bias, p, dtype));
  return *slot;
}

// A tensor as oneDNN memory of a plain layout (no copy).
memory wrap(const memory::desc& d, const Tensor& t) { return memory(d, cpu_engine(), t.data_ptr()); }

// A buffer for `d` held by a lockstep tensor (kept alive in `keep`), so that the block cache reuses it.
memory buffer(const memory::desc& d, std::vector<Tensor>& keep) {
  keep.push_back(empty({int64_t((d.get_size() + 3) / 4)}, kFloat32));
  return memory(d, cpu_engine(), keep.back().data_ptr());
}

// One call's operands: the plain tensors reordered into the plan's layouts where they differ, and
// outputs written to blocked buffers reordered back afterwards.
class Call {
 public:
  explicit Call(const Plan& plan) : plan_(plan), stream_(cpu_engine()) {
    // One thread means one thread: OpenMP's count (per calling thread) follows lockstep's.
    const int threads = in_parallel_region() ? 1 : get_num_threads();
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
    if (plan.scratchpad.get_size()) args_[DNNL_ARG_SCRATCHPAD] = buffer(plan.scratchpad, keep_);
  }

  // Returns the memory passed, for another call that wants the same operand in the same layout.
  memory input(int arg, const memory::desc& want, const memory::desc& plain, const Tensor& t) {
    memory m = wrap(plain, t);
    if (want != plain) {
      memory b = buffer(want, keep_);
      dnnl::reorder(m, b).execute(stream_, m, b);
      m = b;
    }
    return args_[arg] = m;
  }
  void input(int arg, const memory& m) { args_[arg] = m; }

  void output(int arg, const memory::desc& want, const memory::desc& plain, const Tensor& t) {
    memory m = wrap(plain, t);
    if (want != plain) {
      memory b = buffer(want, keep_);
      back_.emplace_back(b, m);
      m = b;
    }
    args_[arg] = m;
  }

  void run() {
    plan_.prim.execute(stream_, args_);
    for (auto& [from, to] : back_) dnnl::reorder(from, to).execute(stream_, from, to);
    stream_.wait();
  }

 private:
  const Plan& plan_;
  dnnl::stream stream_;
  std::unordered_map<int, memory> args_;
  std::vector<std::pair<memory, memory>> back_;
  std::vector<Tensor> keep_;
};

}  // namespace

bool onednn_conv2d_supports(Dtype dtype) {
  // bfloat16 without AVX512-BF16 would run oneDNN's emulation or reference kernels.
  return dtype == kFloat32 || (dtype == kBFloat16 && use_avx512_bf16());
}

void onednn_conv2d(Tensor& y, const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  const Plain plain(x.shape(), weight.shape(), p, x.dtype());
  const Plan& plan = plan_for(Kind::Forward, x.shape(), weight.shape(), bias.defined(), p, x.dtype());
  Call call(plan);
  call.input(DNNL_ARG_SRC, plan.x, plain.x, x);
  call.input(DNNL_ARG_WEIGHTS, plan.w, plain.w, weight);
  if (bias.defined()) call.input(DNNL_ARG_BIAS, plain.bias, plain.bias, bias);
  call.output(DNNL_ARG_DST, plan.y, plain.y, y);
  call.run();
}

void onednn_conv2d_backward(Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias, const Tensor& grad_y,
                            const Tensor& x, const Tensor& weight, const Conv2dParams& p) {
  const Dtype dt = grad_y.dtype();
  const Shape& xs = grad_x.defined() ? grad_x.shape() : x.shape();
  const Shape& ws = grad_weight.defined() ? grad_weight.shape() : weight.shape();
  const Plain plain(xs, ws, p, dt);
  const bool want_bias = grad_bias.defined();
  // The weight kernel's call outlives the data kernel's: `gy`, grad_y in its layout, lives in its buffers
  // and is reused by the data kernel when that wants the same layout.
  std::optional<Call> wc;
  memory gy;
  const Plan* wgt = nullptr;
  if (grad_weight.defined()) {
    wgt = &plan_for(Kind::BackwardWeight, xs, ws, want_bias, p, dt);
    wc.emplace(*wgt);
    gy = wc->input(DNNL_ARG_DIFF_DST, wgt->y, plain.y, grad_y);
    wc->input(DNNL_ARG_SRC, wgt->x, plain.x, x);
    wc->output(DNNL_ARG_DIFF_WEIGHTS, wgt->w, plain.w, grad_weight);
    if (want_bias) wc->output(DNNL_ARG_DIFF_BIAS, plain.bias, plain.bias, grad_bias);
    wc->run();
  }
  if (grad_x.defined()) {
    const Plan& data = plan_for(Kind::BackwardData, xs, ws, false, p, dt);
    Call dc(data);
    if (wgt && data.y == wgt->y) {  // both want nChw16c: grad_y is reordered once
      dc.input(DNNL_ARG_DIFF_DST, gy);
    } else {
      dc.input(DNNL_ARG_DIFF_DST, data.y, plain.y, grad_y);
    }
    dc.input(DNNL_ARG_WEIGHTS, data.w, plain.w, weight);
    dc.output(DNNL_ARG_DIFF_SRC, data.x, plain.x, grad_x);
    dc.run();
  }
}

}  // namespace lockstep::cpu
