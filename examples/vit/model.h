// A Vision Transformer (Dosovitskiy et al. 2020, "An Image is Worth 16x16 Words") for small images,
// written with nn::TransformerEncoderLayer, with timm's VisionTransformer parameter names where they
// meet PyTorch's nn.TransformerEncoder (patch_embed, cls_token, pos_embed, encoder.layers.N...., norm,
// head):
//   patch_embed: a Conv2d with kernel and stride patch_size (one token of dim per patch),
//   a learned cls token before the patches and a learned position embedding added to every token,
//   depth pre-norm encoder layers (GELU feed-forward of mlp_dim, dropout), a final LayerNorm (eps 1e-6),
//   head: a Linear on the cls token.
// cls_token and pos_embed start as N(0, 0.02) (timm's trunc_normal_, whose bounds ±2 are absolute); the
// rest keep PyTorch's defaults.
//
//   ViT model(ViTOptions{});              // 28 x 28 x 1 images, 7 x 7 patches -> 16 tokens + cls
//   Tensor logits = model(x);             // x: [N, 1, 28, 28] -> [N, 10]
#pragma once

#include <cstdint>

#include "nn/api.h"

namespace lockstep::examples {

struct ViTOptions {
  int64_t image_size = 28, patch_size = 7, in_channels = 1, classes = 10;
  int64_t dim = 64, depth = 4, heads = 4, mlp_dim = 128;
  double dropout = 0.1;
};

class ViTImpl : public nn::Module {
 public:
  explicit ViTImpl(const ViTOptions& options);
  Tensor forward(const Tensor& images);  // [N, C, H, W] -> [N, classes]

  ViTOptions options;
  nn::Conv2d patch_embed{nullptr};
  Tensor cls_token, pos_embed;  // [1, 1, dim], [1, 1 + patches, dim]
  nn::TransformerEncoder encoder{nullptr};
  nn::LayerNorm norm{nullptr};
  nn::Linear head{nullptr};
};
LOCKSTEP_MODULE(ViT);

}  // namespace lockstep::examples
