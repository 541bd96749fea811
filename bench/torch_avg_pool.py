"""PyTorch's side of bench/avg_pool_bench.cpp: F.avg_pool2d on the CPU, one thread, in bfloat16, float16
and float32, forward and forward + backward, on [32, 64, 56, 56] (3x3 stride 2 padding 1, and 2x2
stride 2); rounds alternate between the dtypes, medians. Prints "BENCH <case> <ms> ms" lines.

    ~/.cache/torch-venv/bin/python bench/torch_avg_pool.py --rounds 7 --steps 5
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def ms_per_call(fn, steps):
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t0) * 1e3 / steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x32 = torch.randn(32, 64, 56, 56)
    for name, k, s, pad in (("3x3s2p1", 3, 2, 1), ("2x2s2", 2, 2, 0)):
        for backward in (False, True):
            gy32 = torch.randn(F.avg_pool2d(x32, k, s, pad).shape)
            variants = {str(dt).replace("torch.", ""): (x32.to(dt), gy32.to(dt))
                        for dt in (torch.bfloat16, torch.float16, torch.float32)}

            def step(x, gy):
                if not backward:
                    with torch.no_grad():
                        F.avg_pool2d(x, k, s, pad)
                    return
                x = x.detach().requires_grad_()
                F.avg_pool2d(x, k, s, pad).backward(gy)

            ms = {v: [] for v in variants}
            for v, (x, gy) in variants.items():
                for _ in range(3):
                    step(x, gy)
            for _ in range(a.rounds):  # alternate, as the lockstep side does
                for v, (x, gy) in variants.items():
                    ms[v].append(ms_per_call(lambda: step(x, gy), a.steps))
            for v in variants:
                print(f"BENCH {name}_{'fwd_bwd' if backward else 'fwd'}_{v} {statistics.median(ms[v]):.3f} ms")


if __name__ == "__main__":
    main()
