// The Vision Transformer of model.h.
#include "examples/vit/model.h"

namespace lockstep::examples {

ViTImpl::ViTImpl(const ViTOptions& o) : Module("ViT"), options(o) {
  LOCKSTEP_CHECK(o.patch_size > 0 && o.image_size % o.patch_size == 0, "ViT: image_size ", o.image_size,
                 " is not a multiple of patch_size ", o.patch_size);
  const int64_t side = o.image_size / o.patch_size;
  patch_embed = register_module(
      "patch_embed", nn::Conv2d(nn::Conv2dOptions(o.in_channels, o.dim, o.patch_size).stride(o.patch_size)));
  cls_token = register_parameter("cls_token", zeros({1, 1, o.dim}));
  pos_embed = register_parameter("pos_embed", zeros({1, 1 + side * side, o.dim}));
  nn::init::trunc_normal_(cls_token, 0, 0.02);
  nn::init::trunc_normal_(pos_embed, 0, 0.02);
  nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(o.dim, o.heads)
                                        .dim_feedforward(o.mlp_dim)
                                        .dropout(o.dropout)
                                        .activation("gelu")
                                        .batch_first(true)
                                        .norm_first(true));
  encoder = register_module("encoder", nn::TransformerEncoder(layer, o.depth));
  norm = register_module("norm", nn::LayerNorm(nn::LayerNormOptions(o.dim).eps(1e-6)));
  head = register_module("head", nn::Linear(o.dim, o.classes));
}

Tensor ViTImpl::forward(const Tensor& images) {
  Tensor x = patch_embed(images).flatten(2).transpose(1, 2);  // [N, patches, dim]
  x = cat({cls_token.expand({x.size(0), -1, -1}), x}, 1) + pos_embed;
  return head(norm(encoder(x)).select(1, 0));  // the cls token's features -> [N, classes]
}

}  // namespace lockstep::examples
