"""PyTorch twin of //bench:op_bench: the same ops on the same small-GPT shapes, forward only.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 ~/.cache/torch-venv/bin/python bench/op_bench.py [--iters N] [--rounds R]

Prints `op <name> <median_us> <best_us>` lines, as op_bench does.
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

    ops = [
        ("softmax_last", lambda: torch.softmax(att, -1)),
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
        ("matmul_c_fc_weight_grad", lambda: h4.view(-1, 4 * C).t() @ x.view(-1, C)),
    ]
    print(f"torch {torch.__version__} op_bench threads={torch.get_num_threads()} iters={a.iters} rounds={a.rounds}")
    with torch.no_grad():
        for name, op in ops:
            if a.only and name != a.only:
                continue
            med, best = time_op(op, a.iters, a.rounds)
            print(f"op {name} {med:.2f} {best:.2f}")


if __name__ == "__main__":
    main()
