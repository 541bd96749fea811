#!/usr/bin/env python3
"""PyTorch's side of bench/transformer_bench: forward, and forward + backward, of one ViT-Tiny encoder layer
(d_model 192, 3 heads, feed-forward 768, GELU, pre-norm, batch first; 65 tokens; batch 16) and of its
MultiheadAttention alone, on the CPU, one intra-op thread by default.

    python3 bench/torch_transformer.py [--threads N] [--steps S] [--rounds R]

Prints "BENCH torch_<name> <ms>" for vit_layer_fwd, vit_layer_fwd_bwd and mha_fwd_bwd (medians over rounds).
The forward runs under no_grad in training mode, so PyTorch takes its composite path, not the fused
inference fast path (which needs eval()).
"""
import argparse

import torch

from ms_per_call import add_timing_flags, ms_per_call


def main():
    ap = argparse.ArgumentParser()
    add_timing_flags(ap)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    B, T, D, H, FF = 16, 65, 192, 3, 768
    layer = torch.nn.TransformerEncoderLayer(D, H, FF, 0.0, activation="gelu", batch_first=True, norm_first=True)
    x = torch.randn(B, T, D, requires_grad=True)
    with torch.no_grad():
        fwd = ms_per_call(a, lambda: layer(x))

    def step():
        layer.zero_grad()
        x.grad = None
        layer(x).sum().backward()

    def mha():
        layer.self_attn.zero_grad()
        x.grad = None
        layer.self_attn(x, x, x, need_weights=False)[0].sum().backward()

    print(f"torch {torch.__version__} threads={torch.get_num_threads()} d_model={D} nhead={H} ff={FF} T={T} B={B}")
    print(f"BENCH torch_vit_layer_fwd {fwd:10.3f} ms")
    print(f"BENCH torch_vit_layer_fwd_bwd {ms_per_call(a, step):10.3f} ms")
    print(f"BENCH torch_mha_fwd_bwd {ms_per_call(a, mha):10.3f} ms")


if __name__ == "__main__":
    main()
