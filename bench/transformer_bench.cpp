// transformer_bench: forward, and forward + backward, of one ViT-Tiny encoder layer (d_model 192, 3
// heads, feed-forward 768, GELU, pre-norm, batch first; 65 tokens: 8x8 patches and a cls token; batch
// 16) and of its MultiheadAttention alone, on the CPU, one intra-op thread by default;
// bench/torch_transformer.py times the same in PyTorch.
//   transformer_bench [--threads N] [--steps S] [--rounds R]
// Lines "BENCH <name> <median ms per call> ms": vit_layer_fwd, vit_layer_fwd_bwd, mha_fwd_bwd.
#include <cstdio>

#include "bench/ms_per_call.h"
#include "nn/api.h"
#include "tensor/parallel.h"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"lockstep ViT-Tiny encoder layer forward + backward"};
  bench::TimingFlags timing;
  timing.add_to(app);
  CLI11_PARSE(app, argc, argv);
  set_num_threads(timing.threads);
  manual_seed(0);
  const int64_t B = 16, T = 65, D = 192, H = 3, FF = 768;
  nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(D, H)
                                        .dim_feedforward(FF)
                                        .dropout(0.0)
                                        .activation("gelu")
                                        .batch_first(true)
                                        .norm_first(true));
  Tensor x = randn({B, T, D}).set_requires_grad();
  double fwd;
  {
    NoGradGuard no_grad;
    fwd = bench::ms_per_call(timing, [&] { layer(x); });
  }
  const double step = bench::ms_per_call(timing, [&] {
    layer->zero_grad();
    x.set_grad(Tensor());
    sum(layer(x)).backward();
  });
  nn::MultiheadAttention& attn = layer->self_attn;
  const double mha = bench::ms_per_call(timing, [&] {
    attn->zero_grad();
    x.set_grad(Tensor());
    sum(std::get<0>(attn(x, x, x, Tensor(), false))).backward();
  });
  std::printf("lockstep threads=%d d_model=%ld nhead=%ld ff=%ld T=%ld B=%ld\n", get_num_threads(), long(D), long(H),
              long(FF), long(T), long(B));
  std::printf("BENCH vit_layer_fwd %10.3f ms\n", fwd);
  std::printf("BENCH vit_layer_fwd_bwd %10.3f ms\n", step);
  std::printf("BENCH mha_fwd_bwd %10.3f ms\n", mha);
  return 0;
}
