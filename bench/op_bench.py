"""PyTorch twin of //bench:op_bench: the same ops on the same small-GPT shapes, forward only, and
conv2d forward + backward on ResNet-20's and cnn_fashion's layers.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 ~/.cache/torch-venv/bin/python bench/op_bench.py [--iters N] [--rounds R]

Prints `op <name> <median_us> <best_us>` lines, as op_bench does; the batch_norm_* rows time
BatchNorm2d's training forward and backward (ResNet-20's and cnn_fashion's shapes), sdpa_fwd_bwd_* causal
attention's forward and backward (batch 4, 4 heads of 32, T = 256 and 1024; _bf16: in bfloat16), the rest forward only.
"""
import argparse
import time

import torch


def time_op(op, iters, rounds):
    for _ in range(3):
        op()
    us = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            op()
        us.append((time.perf_counter() - t0) / iters * 1e6)
    us.sort()
    return us[len(us) // 2], us[0]


# (name, N, C, H, W, O, k, stride, padding, bias, input_grad), as op_bench.cpp's kConvShapes.
CONV_SHAPES = [
    ("r20_3_16_32x32", 128, 3, 32, 32, 16, 3, 1, 1, False, False),
    ("r20_16_16_32x32", 128, 16, 32, 32, 16, 3, 1, 1, False, True),
    ("r20_16_32_s2_32x32", 128, 16, 32, 32, 32, 3, 2, 1, False, True),
    ("r20_32_32_16x16", 128, 32, 16, 16, 32, 3, 1, 1, False, True),
    ("r20_16_32_1x1_s2", 128, 16, 32, 32, 32, 1, 2, 0, False, True),
    ("r20_32_64_s2_16x16", 128, 32, 16, 16, 64, 3, 2, 1, False, True),
    ("r20_64_64_8x8", 128, 64, 8, 8, 64, 3, 1, 1, False, True),
    ("r20_32_64_1x1_s2", 128, 32, 16, 16, 64, 1, 2, 0, False, True),
    ("fashion_1_32_28x28", 64, 1, 28, 28, 32, 3, 1, 0, True, False),
    ("fashion_32_64_26x26", 64, 32, 26, 26, 64, 3, 1, 0, True, True),
]


def conv_op(N, C, H, W, O, k, stride, padding, bias, input_grad, bf16=False):
    """Forward + backward; bf16: under torch.autocast("cpu", bfloat16) on the float32 leaves."""
    x = torch.randn(N, C, H, W, requires_grad=input_grad)
    w = torch.randn(O, C, k, k, requires_grad=True)
    b = torch.randn(O, requires_grad=True) if bias else None
    out = (H + 2 * padding - k) // stride + 1
    gy = torch.randn(N, O, out, out, dtype=torch.bfloat16 if bf16 else torch.float32)

    def op():
        with torch.enable_grad():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                y = torch.nn.functional.conv2d(x, w, b, stride, padding)
            y.backward(gy)
        for t in (x, w, b):
            if t is not None:
                t.grad = None
        return y

    return op


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--only", default="")
    a = p.parse_args()
    torch.manual_seed(0)
    B, H, T, C = 8, 4, 64, 128
    hs = C // H
    att = torch.randn(B, H, T, T)
    x, w, b = torch.randn(B, T, C), torch.randn(C), torch.randn(C)
    q, kt = torch.randn(B, H, T, hs), torch.randn(B, H, hs, T)
    heads = torch.randn(B, T, H, hs)
    h4 = torch.randn(B, T, 4 * C)
    w_fc, b_fc = torch.randn(4 * C, C), torch.randn(4 * C)

    def layer_norm_composed():
        mu = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * w + b

    def bn_case(n, c, hw):
        x, g = torch.randn(n, c, hw, hw, requires_grad=True), torch.randn(n, c, hw, hw)
        w, b = torch.rand(c, requires_grad=True), torch.randn(c, requires_grad=True)
        rm, rv = torch.zeros(c), torch.ones(c)

        def step():
            with torch.enable_grad():
                x.grad = w.grad = b.grad = None
                y = torch.nn.functional.batch_norm(x, rm, rv, w, b, training=True)
                y.backward(g)
            return x.grad

        return step

    bf = torch.bfloat16
    att16, x16, w16, b16 = att.to(bf), x.to(bf), w.to(bf), b.to(bf)
    h4_16, h4_16b = h4.to(bf), (h4 * 0.5).to(bf)
    h4_f16, h4_f16b = h4.to(torch.float16), (h4 * 0.5).to(torch.float16)
    ops = [
        ("softmax_last", lambda: torch.softmax(att, -1)),
        ("softmax_last_bf16", lambda: torch.softmax(att16, -1)),
        ("layer_norm_bf16", lambda: torch.nn.functional.layer_norm(x16, (C,), w16, b16)),
        ("gelu_bf16", lambda: torch.nn.functional.gelu(h4_16)),
        ("add_bf16", lambda: h4_16 + h4_16b),
        ("add_f32_bf16", lambda: h4 + h4_16),
        ("mul_scalar_bf16", lambda: h4_16 * 0.5),
        ("sum_dim1_bf16", lambda: h4_16.sum(1)),
        ("to_bf16", lambda: h4.to(bf)),
        ("to_f32_from_bf16", lambda: h4_16.to(torch.float32)),
        ("gelu_f16", lambda: torch.nn.functional.gelu(h4_f16)),
        ("add_f16", lambda: h4_f16 + h4_f16b),
        ("add_f32_f16", lambda: h4 + h4_f16),
        ("sum_dim1_f16", lambda: h4_f16.sum(1)),
        ("to_f16", lambda: h4.to(torch.float16)),
        ("to_f32_from_f16", lambda: h4_f16.to(torch.float32)),
        ("max_dim1_bf16", lambda: h4_16.max(1)[0]),
        ("layer_norm_composed", layer_norm_composed),
        ("layer_norm", lambda: torch.nn.functional.layer_norm(x, (C,), w, b)),
        ("bmm_8x4x64x32", lambda: torch.matmul(q, kt)),
        ("transpose12_contiguous", lambda: heads.transpose(1, 2).contiguous()),
        ("cat_last", lambda: torch.cat([x, x, x], -1)),
        ("gelu", lambda: torch.nn.functional.gelu(h4)),
        ("linear_c_fc", lambda: torch.nn.functional.linear(x, w_fc, b_fc)),
        ("sum_dim1", lambda: h4.sum(1)),
        ("sum_last", lambda: h4.sum(-1)),
        ("sum_all", lambda: h4.sum()),
        ("max_dim1", lambda: h4.max(1).values),
        ("argmax_last", lambda: h4.argmax(-1)),
        ("cumsum_last_64x4096", lambda s=torch.randn(64, 4096): torch.cumsum(s, -1)),
        ("cumsum_dim0_64x4096", lambda s=torch.randn(64, 4096): torch.cumsum(s, 0)),
        ("cumsum_last_4096x64x64", lambda s=torch.randn(4096, 64, 64): torch.cumsum(s, -1)),
        ("cumsum_dim1_4096x64x64", lambda s=torch.randn(4096, 64, 64): torch.cumsum(s, 1)),
        ("matmul_c_fc_weight_grad", lambda: h4.view(-1, 4 * C).t() @ x.view(-1, C)),
        ("batch_norm_128x16x32x32", bn_case(128, 16, 32)),
        ("batch_norm_128x32x16x16", bn_case(128, 32, 16)),
        ("batch_norm_128x64x8x8", bn_case(128, 64, 8)),
        ("batch_norm_64x32x26x26", bn_case(64, 32, 26)),
        ("batch_norm_64x64x24x24", bn_case(64, 64, 24)),
    ]
    slow = set()
    for name, *shape in CONV_SHAPES:
        ops.append(("conv2d_" + name, conv_op(*shape)))
        ops.append(("conv2d_" + name + "_bf16", conv_op(*shape, bf16=True)))
        slow |= {"conv2d_" + name, "conv2d_" + name + "_bf16"}
    # LibTorch's DCGAN generator's transposed convolutions and Whisper's first Conv1d, as op_bench.cpp's rows.
    def convt_op(N, C, H, O, k, stride, padding):
        x = torch.randn(N, C, H, H, requires_grad=C != 100)
        w = torch.randn(C, O, k, k, requires_grad=True)
        out = (H - 1) * stride - 2 * padding + k
        gy = torch.randn(N, O, out, out)

        def op():
            with torch.enable_grad():
                y = torch.nn.functional.conv_transpose2d(x, w, None, stride, padding)
                y.backward(gy)
            x.grad = w.grad = None
            return y

        return op

    for name, shape in (("dcgan_100_256_1x1", (64, 100, 1, 256, 4, 1, 0)), ("dcgan_256_128_4x4", (64, 256, 4, 128, 3, 2, 1)),
                        ("dcgan_128_64_7x7", (64, 128, 7, 64, 4, 2, 1)), ("dcgan_64_1_14x14", (64, 64, 14, 1, 4, 2, 1))):
        ops.append(("convt2d_" + name, convt_op(*shape)))
        slow.add("convt2d_" + name)
    wx, ww, wb = (torch.randn(*s, requires_grad=True) for s in ((4, 80, 3000), (384, 80, 3), (384,)))
    wg = torch.randn(4, 384, 3000)

    def whisper_op():
        with torch.enable_grad():
            y = torch.nn.functional.conv1d(wx, ww, wb, 1, 1)
            y.backward(wg)
        wx.grad = ww.grad = wb.grad = None
        return y

    ops.append(("conv1d_whisper_80_384_3000", whisper_op))
    slow.add("conv1d_whisper_80_384_3000")
    gx, gw, gb = (torch.randn(*s, requires_grad=True) for s in ((8, 256, 32, 32), (256,), (256,)))
    gg = torch.randn(8, 256, 32, 32)

    def group_norm_op():
        with torch.enable_grad():
            y = torch.nn.functional.group_norm(gx, 32, gw, gb)
            y.backward(gg)
        gx.grad = gw.grad = gb.grad = None
        return y

    ops.append(("group_norm_32_8x256x32x32", group_norm_op))
    slow.add("group_norm_32_8x256x32x32")
    ix = torch.randn(8, 128, 64, 64, requires_grad=True)
    ig = torch.randn(8, 128, 128, 128)

    def interpolate_op():
        with torch.enable_grad():
            y = torch.nn.functional.interpolate(ix, scale_factor=2, mode="bilinear", align_corners=False)
            y.backward(ig)
        ix.grad = None
        return y

    ops.append(("interpolate_bilinear2x_8x128x64x64", interpolate_op))
    slow.add("interpolate_bilinear2x_8x128x64x64")
    # The tensor-op parity rows, as op_bench.cpp's: scatter_reduce, index_put_, unique, einsum.
    dst = torch.randint(0, 100000, (1000000,))
    edges, nodes = torch.randn(1000000, 64), torch.zeros(100000, 64)
    eidx = dst.unsqueeze(1).expand(1000000, 64)
    for r in ("amax", "mean"):
        ops.append((f"scatter_reduce_{r}_1Mx64_100k",
                    lambda r=r: nodes.scatter_reduce(0, eidx, edges, r, include_self=False)))
    ops.append(("index_put_accumulate_1Mx64_100k", lambda: nodes.index_put_((dst,), edges, accumulate=True)))
    ops.append(("unique_1M_int64", lambda: torch.unique(dst)))
    eq, ek = torch.randn(8, 4, 256, 32), torch.randn(8, 4, 256, 32)
    ea, eb = torch.randn(64, 128, 128), torch.randn(64, 128, 128)
    ops.append(("einsum_bhqd_bhkd_8x4x256x32", lambda: torch.einsum("bhqd,bhkd->bhqk", eq, ek)))
    ops.append(("einsum_bij_bjk_64x128x128", lambda: torch.einsum("bij,bjk->bik", ea, eb)))
    slow |= {name for name, _ in ops[-6:]}
    # Causal attention with a GPT's heads at T = 256 and 1024, as op_bench.cpp's sdpa_* rows.
    for T in (256, 1024):
        sq, sk, sv = (torch.randn(4, 4, T, 32, requires_grad=True) for _ in range(3))
        sg = torch.randn(4, 4, T, 32)

        def fwd(sq=sq, sk=sk, sv=sv):
            return torch.nn.functional.scaled_dot_product_attention(sq, sk, sv, is_causal=True)

        def fwd_bwd(sq=sq, sk=sk, sv=sv, sg=sg):
            with torch.enable_grad():
                y = torch.nn.functional.scaled_dot_product_attention(sq, sk, sv, is_causal=True)
                y.backward(sg)
            sq.grad = sk.grad = sv.grad = None
            return y

        ops += [(f"sdpa_fwd_causal_T{T}", fwd), (f"sdpa_fwd_bwd_causal_T{T}", fwd_bwd)]
        # The same in bfloat16.
        bq, bk, bv = (t.detach().to(torch.bfloat16).requires_grad_() for t in (sq, sk, sv))
        bg = sg.to(torch.bfloat16)
        ops += [(f"sdpa_fwd_causal_T{T}_bf16", lambda q=bq, k=bk, v=bv: fwd(q, k, v)),
                (f"sdpa_fwd_bwd_causal_T{T}_bf16", lambda q=bq, k=bk, v=bv, g=bg: fwd_bwd(q, k, v, g))]
        if T == 1024:
            slow |= {f"sdpa_fwd_causal_T{T}", f"sdpa_fwd_bwd_causal_T{T}", f"sdpa_fwd_causal_T{T}_bf16",
                     f"sdpa_fwd_bwd_causal_T{T}_bf16"}
    print(f"torch {torch.__version__} op_bench threads={torch.get_num_threads()} iters={a.iters} rounds={a.rounds}")
    with torch.no_grad():
        for name, op in ops:
            if a.only and not any(name.startswith(o[:-1]) if o.endswith("*") else name == o for o in a.only.split(",")):
                continue
            med, best = time_op(op, max(1, a.iters // 50) if name in slow else a.iters, a.rounds)
            print(f"op {name} {med:.2f} {best:.2f}")


if __name__ == "__main__":
    main()
