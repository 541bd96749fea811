#!/usr/bin/env python3
"""PyTorch's side of bench/linear_overhead_bench: the host's cost per call of Linear(5, 2) on a batch of 8.

    python3 bench/torch_linear_overhead.py [--device cuda] [--calls N] [--rounds R]

Prints "BENCH torch_linear5x2_<what>_<device>[_host] <median us per call> us", the same calls and timings as
lockstep's (_host: the time to issue the calls; the other: until the device has run them).
"""
import argparse
import statistics
import time

import torch


def us_per_call(dev, calls, rounds, fn):
    """Medians of µs per call: to issue the calls (host), and until the device has run them (total)."""
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(20):
        fn()
    sync()
    host, total = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        sync()
        host.append((t1 - t0) / calls * 1e6)
        total.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(host), statistics.median(total)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.manual_seed(0)
    layer = torch.nn.Linear(5, 2).to(dev)
    x = torch.randn(8, 5, device=dev)
    tag = dev.type

    def report(what, t):
        print(f"BENCH torch_linear5x2_{what}_{tag}_host {t[0]:10.2f} us", flush=True)
        print(f"BENCH torch_linear5x2_{what}_{tag} {t[1]:10.2f} us", flush=True)

    with torch.no_grad():
        report("forward_nograd", us_per_call(dev, a.calls, a.rounds, lambda: layer(x)))
    report("forward", us_per_call(dev, a.calls, a.rounds, lambda: layer(x)))

    def step():
        layer.zero_grad()
        layer(x).sum().backward()

    report("fwd_bwd", us_per_call(dev, a.calls, a.rounds, step))


if __name__ == "__main__":
    main()
