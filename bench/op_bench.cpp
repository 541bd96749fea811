// op_bench: times single ops on the shapes a small GPT uses (batch 8, 4 heads, 64 positions, 128
// channels), conv2d forward+backward on ResNet-20's and cnn_fashion's layers and BatchNorm2d's training
// forward and backward on the same shapes, the workload of bench/op_bench.py (PyTorch, same ops and
// shapes). One line per op: `op <name> <median_us> <best_us>`, over rounds of repeated calls; forward
// only, no graph, except the conv2d_*, batch_norm_* and sdpa_fwd_bwd_* rows; sdpa_* rows: causal
// attention at T = 256 and 1024 (batch 4, 4 heads of 32); *_bf16 rows: the op on bfloat16 tensors (add_f32_bf16:
// float32 + bfloat16 into float32; to_*: the conversions; attention in bfloat16); *_f16 rows: the same on
// float16 tensors.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "autograd/api.h"
#include "autograd/autocast.h"
#include "nn/conv.h"
#include "nn/functional.h"
#include "nn/group_norm.h"
#include "nn/upsampling.h"
#include "tensor/conv2d.h"
#include "tensor/parallel.h"

using namespace lockstep;

namespace {

struct Timing {
  double median_us, best_us;
};

Timing time_op(const std::function<Tensor()>& op, int iters, int rounds) {
  for (int i = 0; i < 3; ++i) op();  // warm the allocator and caches
  std::vector<double> us;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) op();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[0]};
}

// One convolution layer: x [N, C, H, W] -> O channels, k x k kernel. `input_grad`: false for a
// network's first layer (its input is data).
struct ConvShape {
  const char* name;
  int64_t N, C, H, W, O, k, stride, padding;
  bool bias, input_grad;
};

// ResNet-20 on CIFAR-10 (batch 128, no bias: BatchNorm follows) and cnn_fashion (batch 64), as
// bench/op_bench.py lists them.
const std::vector<ConvShape> kConvShapes = {
    {"r20_3_16_32x32", 128, 3, 32, 32, 16, 3, 1, 1, false, false},
    {"r20_16_16_32x32", 128, 16, 32, 32, 16, 3, 1, 1, false, true},
    {"r20_16_32_s2_32x32", 128, 16, 32, 32, 32, 3, 2, 1, false, true},
    {"r20_32_32_16x16", 128, 32, 16, 16, 32, 3, 1, 1, false, true},
    {"r20_16_32_1x1_s2", 128, 16, 32, 32, 32, 1, 2, 0, false, true},
    {"r20_32_64_s2_16x16", 128, 32, 16, 16, 64, 3, 2, 1, false, true},
    {"r20_64_64_8x8", 128, 64, 8, 8, 64, 3, 1, 1, false, true},
    {"r20_32_64_1x1_s2", 128, 32, 16, 16, 64, 1, 2, 0, false, true},
    {"fashion_1_32_28x28", 64, 1, 28, 28, 32, 3, 1, 0, true, false},
    {"fashion_32_64_26x26", 64, 32, 26, 26, 64, 3, 1, 0, true, true},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lockstep op microbenchmark (small-GPT shapes)"};
  int iters = 200, rounds = 7, threads = 0;
  std::string only;
  app.add_option("--iters", iters, "calls per timed round");
  app.add_option("--rounds", rounds, "timed rounds; median and best are reported");
  app.add_option("--threads", threads, "intra-op threads (default: lockstep's default)");
  app.add_option("--only", only, "run only the ops with these comma-separated names (NAME*: the ops whose names start with NAME)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) set_num_threads(threads);
    NoGradGuard no_grad;
    manual_seed(0);
    const int64_t B = 8, H = 4, T = 64, C = 128, hs = C / H;
    Tensor att = randn({B, H, T, T});
    Tensor x = randn({B, T, C}), w = randn({C}), b = randn({C});
    Tensor q = randn({B, H, T, hs}), kt = randn({B, H, hs, T});
    Tensor heads = randn({B, T, H, hs});
    Tensor h4 = randn({B, T, 4 * C});
    Tensor w_fc = randn({4 * C, C}), b_fc = randn({4 * C});  // the MLP's c_fc
    // BatchNorm2d in training, forward (running statistics updated) and backward to x, weight and bias.
    struct BnCase {
      Tensor x, g, w, b, rm, rv;
    };
    auto bn_case = [](int64_t n, int64_t c, int64_t hw) {
      BnCase k{randn({n, c, hw, hw}), randn({n, c, hw, hw}), rand({c}), randn({c}), zeros({c}), ones({c})};
      for (Tensor* t : {&k.x, &k.w, &k.b}) t->set_requires_grad(true);
      return k;
    };
    auto bn_step = [](BnCase& k) {
      EnableGradGuard grad;
      for (Tensor* t : {&k.x, &k.w, &k.b}) t->set_grad(Tensor());
      Tensor y = nn::functional::batch_norm(k.x, k.rm, k.rv, k.w, k.b, /*training=*/true);
      y.backward(k.g);
      return k.x.grad();
    };
    BnCase bn16 = bn_case(128, 16, 32), bn32 = bn_case(128, 32, 16), bn64 = bn_case(128, 64, 8);
    BnCase bn_c1 = bn_case(64, 32, 26), bn_c2 = bn_case(64, 64, 24);
    // The same tensors in bfloat16 (the *_bf16 rows): what runs in 16 bits under autocast.
    Tensor att16 = att.to(kBFloat16), x16 = x.to(kBFloat16), w16 = w.to(kBFloat16), b16 = b.to(kBFloat16);
    Tensor h4_16 = h4.to(kBFloat16), h4_16b = (h4 * 0.5).to(kBFloat16);
    Tensor h4_f16 = h4.to(kFloat16), h4_f16b = (h4 * 0.5).to(kFloat16);  // the *_f16 rows: float16
    std::vector<std::pair<std::string, std::function<Tensor()>>> ops = {
        {"softmax_last", [&] { return softmax(att, -1); }},
        {"softmax_last_bf16", [&] { return softmax(att16, -1); }},
        {"layer_norm_bf16", [&] { return nn::functional::layer_norm(x16, {C}, w16, b16); }},
        {"gelu_bf16", [&] { return gelu(h4_16); }},
        {"add_bf16", [&] { return h4_16 + h4_16b; }},
        {"add_f32_bf16", [&] { return h4 + h4_16; }},  // the residual stream under autocast
        {"mul_scalar_bf16", [&] { return h4_16 * 0.5; }},
        {"sum_dim1_bf16", [&] { return sum(h4_16, {1}); }},
        {"to_bf16", [&] { return h4.to(kBFloat16); }},
        {"to_f32_from_bf16", [&] { return h4_16.to(kFloat32); }},
        {"gelu_f16", [&] { return gelu(h4_f16); }},
        {"add_f16", [&] { return h4_f16 + h4_f16b; }},
        {"add_f32_f16", [&] { return h4 + h4_f16; }},
        {"sum_dim1_f16", [&] { return sum(h4_f16, {1}); }},
        {"to_f16", [&] { return h4.to(kFloat16); }},
        {"to_f32_from_f16", [&] { return h4_f16.to(kFloat32); }},
        {"max_dim1_bf16", [&] { return std::get<0>(max(h4_16, 1)); }},
        {"layer_norm_composed",
         [&] {
           Tensor mu = mean(x, {-1}, true);
           Tensor var_ = var(x, {-1}, /*unbiased=*/false, true);
           return (x - mu) / sqrt(var_ + 1e-5) * w + b;
         }},
        {"layer_norm", [&] { return nn::functional::layer_norm(x, {C}, w, b); }},
        {"bmm_8x4x64x32", [&] { return matmul(q, kt); }},
        {"transpose12_contiguous", [&] { return heads.transpose(1, 2).contiguous(); }},
        {"cat_last", [&] { return cat({x, x, x}, -1); }},
        {"gelu", [&] { return gelu(h4); }},
        {"linear_c_fc", [&] { return linear(x, w_fc, b_fc); }},
        // Reductions on both kernel layouts: along a middle dimension (inner 512) and along rows.
        {"sum_dim1", [&] { return sum(h4, {1}); }},
        {"sum_last", [&] { return sum(h4, {-1}); }},
        {"sum_all", [&] { return sum(h4); }},
        {"max_dim1", [&] { return std::get<0>(max(h4, 1)); }},
        {"argmax_last", [&] { return argmax(h4, -1); }},
        // Scans along rows (inner 1) and down columns: cumsum along the last and a middle dimension.
        {"cumsum_last_64x4096", [s = randn({64, 4096})] { return cumsum(s, -1); }},
        {"cumsum_dim0_64x4096", [s = randn({64, 4096})] { return cumsum(s, 0); }},
        {"cumsum_last_4096x64x64", [s = randn({4096, 64, 64})] { return cumsum(s, -1); }},
        {"cumsum_dim1_4096x64x64", [s = randn({4096, 64, 64})] { return cumsum(s, 1); }},
        // c_fc's weight gradient as linear's backward issues it: dy^T x, [512, 512 rows] x [512 rows, 128]
        {"matmul_c_fc_weight_grad", [&] { return matmul(h4.view({-1, 4 * C}).t(), x.view({-1, C})); }},
        {"batch_norm_128x16x32x32", [&] { return bn_step(bn16); }},
        {"batch_norm_128x32x16x16", [&] { return bn_step(bn32); }},
        {"batch_norm_128x64x8x8", [&] { return bn_step(bn64); }},
        {"batch_norm_64x32x26x26", [&] { return bn_step(bn_c1); }},
        {"batch_norm_64x64x24x24", [&] { return bn_step(bn_c2); }},
    };
    // conv2d forward + backward through autograd (the row PyTorch's twin times), and the same three
    // kernels called directly on each implementation (tensor/conv2d.h), which picks between them.
    std::vector<std::string> slow;  // rows that run iters / 50 calls per round
    for (const ConvShape& c : kConvShapes) {
      Tensor cx = randn({c.N, c.C, c.H, c.W}), cw = randn({c.O, c.C, c.k, c.k}), cb = c.bias ? randn({c.O}) : Tensor();
      cx.set_requires_grad(c.input_grad);
      cw.set_requires_grad(true);
      if (c.bias) cb.set_requires_grad(true);
      const int64_t out = (c.H + 2 * c.padding - c.k) / c.stride + 1;
      Tensor gy = randn({c.N, c.O, out, out});
      ops.push_back({std::string("conv2d_") + c.name, [=]() mutable {
                       EnableGradGuard grad;
                       Tensor y = nn::functional::conv2d(cx, cw, cb, c.stride, c.padding);
                       y.backward(gy);
                       for (Tensor* t : {&cx, &cw, &cb})
                         if (t->defined()) t->set_grad(Tensor());  // no accumulation into old gradients
                       return y;
                     }});
      for (auto [suffix, algo] : {std::pair{"_im2col", internal::Conv2dAlgo::Im2col},
                                  std::pair{"_onednn", internal::Conv2dAlgo::OneDNN}}) {
        internal::Conv2dParams p{.stride = {c.stride, c.stride}, .padding = {c.padding, c.padding}, .algo = algo};
        ops.push_back({std::string("conv2d_") + c.name + suffix, [=] {
                         Tensor x = cx.detach(), w = cw.detach(), b = c.bias ? cb.detach() : Tensor();
                         Tensor y = internal::conv2d_forward(x, w, b, p);
                         internal::conv2d_backward(gy, x, w, c.input_grad, true, c.bias, p);
                         return y;
                       }});
      }
      // bfloat16: forward + backward under autocast on the float32 leaves (the row PyTorch's twin times
      // under torch.autocast), and the bf16 kernels directly on oneDNN's AVX512-BF16 path (_bf16_onednn)
      // and on float32 copies rounded once (_bf16_via_f32, what bf16 took before).
      Tensor gyb = gy.to(kBFloat16);
      ops.push_back({std::string("conv2d_") + c.name + "_bf16", [=]() mutable {
                       EnableGradGuard grad;
                       Tensor y;
                       {
                         autocast guard(kCPU, kBFloat16);
                         y = nn::functional::conv2d(cx, cw, cb, c.stride, c.padding);
                       }
                       y.backward(gyb);
                       for (Tensor* t : {&cx, &cw, &cb})
                         if (t->defined()) t->set_grad(Tensor());
                       return y;
                     }});
      const Tensor xb = cx.detach().to(kBFloat16), wb = cw.detach().to(kBFloat16),
                   bb = c.bias ? cb.detach().to(kBFloat16) : Tensor();
      const internal::Conv2dParams pb{.stride = {c.stride, c.stride}, .padding = {c.padding, c.padding}};
      ops.push_back({std::string("conv2d_") + c.name + "_bf16_onednn", [=] {
                       Tensor y = internal::conv2d_forward(xb, wb, bb, pb);
                       internal::conv2d_backward(gyb, xb, wb, c.input_grad, true, c.bias, pb);
                       return y;
                     }});
      ops.push_back({std::string("conv2d_") + c.name + "_bf16_via_f32", [=] {
                       auto f32 = [](const Tensor& t) { return t.defined() ? t.to(kFloat32) : t; };
                       auto bf16 = [](const Tensor& t) { return t.defined() ? t.to(kBFloat16) : t; };
                       Tensor y = bf16(internal::conv2d_forward(f32(xb), f32(wb), f32(bb), pb));
                       auto g = internal::conv2d_backward(f32(gyb), f32(xb), f32(wb), c.input_grad, true, c.bias, pb);
                       bf16(g.input), bf16(g.weight), bf16(g.bias);
                       return y;
                     }});
      for (int i = 0; i < 6; ++i) slow.push_back(ops[ops.size() - 1 - i].first);
    }
    // The transposed convolutions of LibTorch's DCGAN generator (pytorch/examples cpp/dcgan, batch 64,
    // no bias) and Whisper's first Conv1d (80 -> 384 channels, kernel 3, 3000 frames, batch 4): forward
    // + backward through autograd, as op_bench.py's rows.
    struct ConvT {
      const char* name;
      int64_t N, C, H, O, k, stride, padding;
    };
    for (const ConvT& c : {ConvT{"dcgan_100_256_1x1", 64, 100, 1, 256, 4, 1, 0}, ConvT{"dcgan_256_128_4x4", 64, 256, 4, 128, 3, 2, 1},
                           ConvT{"dcgan_128_64_7x7", 64, 128, 7, 64, 4, 2, 1}, ConvT{"dcgan_64_1_14x14", 64, 64, 14, 1, 4, 2, 1}}) {
      Tensor tx = randn({c.N, c.C, c.H, c.H}), tw = randn({c.C, c.O, c.k, c.k});
      tx.set_requires_grad(c.C != 100);  // the generator's first layer takes the noise, no gradient
      tw.set_requires_grad(true);
      const int64_t out = (c.H - 1) * c.stride - 2 * c.padding + c.k;
      Tensor gy = randn({c.N, c.O, out, out});
      ops.push_back({std::string("convt2d_") + c.name, [=]() mutable {
                       EnableGradGuard grad;
                       Tensor y = nn::functional::conv_transpose2d(tx, tw, Tensor(), c.stride, c.padding);
                       y.backward(gy);
                       tx.set_grad(Tensor()), tw.set_grad(Tensor());
                       return y;
                     }});
      slow.push_back(ops.back().first);
    }
    {
      Tensor wx = randn({4, 80, 3000}).set_requires_grad(), ww = randn({384, 80, 3}).set_requires_grad(),
             wb = randn({384}).set_requires_grad(), wg = randn({4, 384, 3000});
      ops.push_back({"conv1d_whisper_80_384_3000", [=]() mutable {
                       EnableGradGuard grad;
                       Tensor y = nn::functional::conv1d(wx, ww, wb, 1, 1);
                       y.backward(wg);
                       wx.set_grad(Tensor()), ww.set_grad(Tensor()), wb.set_grad(Tensor());
                       return y;
                     }});
      slow.push_back(ops.back().first);
    }
    {  // GroupNorm(32, 256) on a diffusion U-Net's [8, 256, 32, 32], forward + backward
      Tensor gx = randn({8, 256, 32, 32}).set_requires_grad(), gw = randn({256}).set_requires_grad(),
             gb = randn({256}).set_requires_grad(), gg = randn({8, 256, 32, 32});
      ops.push_back({"group_norm_32_8x256x32x32", [=]() mutable {
                       EnableGradGuard grad;
                       Tensor y = nn::functional::group_norm(gx, 32, gw, gb);
                       y.backward(gg);
                       gx.set_grad(Tensor()), gw.set_grad(Tensor()), gb.set_grad(Tensor());
                       return y;
                     }});
      slow.push_back(ops.back().first);
    }
    {  // Bilinear 2x upsampling of [8, 128, 64, 64] (a U-Net decoder's), forward + backward
      Tensor ix = randn({8, 128, 64, 64}).set_requires_grad(), ig = randn({8, 128, 128, 128});
      ops.push_back({"interpolate_bilinear2x_8x128x64x64", [=]() mutable {
                       EnableGradGuard grad;
                       Tensor y = nn::functional::interpolate(
                           ix, nn::functional::InterpolateFuncOptions().scale_factor(std::vector<double>{2, 2})
                                   .mode(nn::kBilinear).align_corners(false));
                       y.backward(ig);
                       ix.set_grad(Tensor());
                       return y;
                     }});
      slow.push_back(ops.back().first);
    }
    {  // The tensor-op parity rows, forward only: a GNN's aggregation (1M edges of 64 features into 100k
       // nodes, the index expanded over the features as PyG passes it), einsum's attention scores and a
       // batched matmul, index_put_ accumulating 1M rows, unique over 1M int64.
      Tensor dst = randint(0, 100000, {1000000}), edges = randn({1000000, 64}), nodes = zeros({100000, 64});
      Tensor eidx = dst.unsqueeze(1).expand({1000000, 64});
      for (const char* r : {"amax", "mean"})
        ops.push_back({std::string("scatter_reduce_") + r + "_1Mx64_100k",
                       [=] { return nodes.scatter_reduce(0, eidx, edges, r, false); }});
      ops.push_back({"index_put_accumulate_1Mx64_100k", [=] { return nodes.index_put_({dst}, edges, true); }});
      ops.push_back({"unique_1M_int64", [=] { return std::get<0>(unique(dst)); }});
      Tensor eq = randn({8, 4, 256, 32}), ek = randn({8, 4, 256, 32}), ea = randn({64, 128, 128}),
             eb = randn({64, 128, 128});
      ops.push_back({"einsum_bhqd_bhkd_8x4x256x32", [=] { return einsum("bhqd,bhkd->bhqk", {eq, ek}); }});
      ops.push_back({"einsum_bij_bjk_64x128x128", [=] { return einsum("bij,bjk->bik", {ea, eb}); }});
      for (size_t i = ops.size() - 6; i < ops.size(); ++i) slow.push_back(ops[i].first);
    }
    // Causal attention with a GPT's heads (batch 4, 4 heads of 32) at T = 256 and 1024: the fused
    // kernels forward, and forward + backward through autograd; _composed rows time the composed path
    // (matmul, mask, softmax, matmul), which PyTorch's twin has no row for.
    for (int64_t T : {256, 1024}) {
      Tensor sq = randn({4, 4, T, 32}), sk = randn({4, 4, T, 32}), sv = randn({4, 4, T, 32}), sg = randn({4, 4, T, 32});
      for (Tensor* t : {&sq, &sk, &sv}) t->set_requires_grad(true);
      const std::string t_name = "_causal_T" + std::to_string(T);
      for (bool composed : {false, true}) {
        auto sdpa = [composed](const Tensor& q, const Tensor& k, const Tensor& v) {
          return composed ? nn::detail::scaled_dot_product_attention_math(q, k, v, Tensor(), 0.0, true)
                          : nn::functional::scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
        };
        const std::string suffix = t_name + (composed ? "_composed" : "");
        ops.push_back({"sdpa_fwd" + suffix, [=] { return sdpa(sq.detach(), sk.detach(), sv.detach()); }});
        ops.push_back({"sdpa_fwd_bwd" + suffix, [=]() mutable {
                         EnableGradGuard grad;
                         Tensor y = sdpa(sq, sk, sv);
                         y.backward(sg);
                         for (Tensor* t : {&sq, &sk, &sv}) t->set_grad(Tensor());
                         return y;
                       }});
        if (T == 1024) slow.insert(slow.end(), {"sdpa_fwd" + suffix, "sdpa_fwd_bwd" + suffix});
      }
      // The same in bfloat16: the fused kernels read and write bfloat16 (vdpbf16ps tile products).
      Tensor bq = sq.detach().to(kBFloat16), bk = sk.detach().to(kBFloat16), bv = sv.detach().to(kBFloat16),
             bg = sg.to(kBFloat16);
      for (Tensor* t : {&bq, &bk, &bv}) t->set_requires_grad(true);
      const std::string b_name = t_name + "_bf16";
      ops.push_back({"sdpa_fwd" + b_name, [=] {
                       return nn::functional::scaled_dot_product_attention(bq.detach(), bk.detach(), bv.detach(),
                                                                           Tensor(), 0.0, true);
                     }});
      ops.push_back({"sdpa_fwd_bwd" + b_name, [=]() mutable {
                       EnableGradGuard grad;
                       Tensor y = nn::functional::scaled_dot_product_attention(bq, bk, bv, Tensor(), 0.0, true);
                       y.backward(bg);
                       for (Tensor* t : {&bq, &bk, &bv}) t->set_grad(Tensor());
                       return y;
                     }});
      if (T == 1024) slow.insert(slow.end(), {"sdpa_fwd" + b_name, "sdpa_fwd_bwd" + b_name});
    }
    std::printf("lockstep op_bench threads=%d iters=%d rounds=%d\n", get_num_threads(), iters, rounds);
    // --only a,b,c*: any of the names (or prefixes) in the comma-separated list.
    auto wanted = [&](const std::string& name) {
      if (only.empty()) return true;
      for (size_t start = 0; start <= only.size();) {
        const size_t end = std::min(only.find(',', start), only.size());
        const std::string pick = only.substr(start, end - start);
        const bool prefix = !pick.empty() && pick.back() == '*';
        if (prefix ? name.rfind(pick.substr(0, pick.size() - 1), 0) == 0 : name == pick) return true;
        start = end + 1;
      }
      return false;
    };
    for (auto& [name, op] : ops) {
      if (!wanted(name)) continue;
      const bool is_slow = std::find(slow.begin(), slow.end(), name) != slow.end();
      Timing t = time_op(op, is_slow ? std::max(1, iters / 50) : iters, rounds);
      std::printf("op %s %.2f %.2f\n", name.c_str(), t.median_us, t.best_us);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "op_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
