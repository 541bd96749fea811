#!/usr/bin/env python3
"""PyTorch's side of bench/lstm_bench: forward + backward of a 2-layer LSTM or GRU (input 128, hidden 128,
T 35, batch 20) on the CPU, one intra-op thread by default.

    python3 bench/torch_lstm.py [--mode lstm|gru] [--threads N] [--steps S] [--rounds R]

Prints "BENCH torch_lstm2x128_fwd <ms>" and "BENCH torch_lstm2x128_fwd_bwd <ms>" (torch_gru2x128_... for
GRU; medians over rounds).
"""
import argparse

import torch

from ms_per_call import add_timing_flags, ms_per_call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["lstm", "gru"], default="lstm")
    add_timing_flags(ap)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    T, B, IN, H = 35, 20, 128, 128
    lstm = (torch.nn.LSTM if a.mode == "lstm" else torch.nn.GRU)(IN, H, num_layers=2)
    x = torch.randn(T, B, IN)
    with torch.no_grad():
        fwd = ms_per_call(a, lambda: lstm(x))

    def step():
        lstm.zero_grad()
        out, _ = lstm(x)
        out.sum().backward()

    print(f"torch {torch.__version__} threads={torch.get_num_threads()} {a.mode} layers=2 in={IN} hidden={H} T={T} B={B}")
    print(f"BENCH torch_{a.mode}2x128_fwd {fwd:10.3f} ms")
    print(f"BENCH torch_{a.mode}2x128_fwd_bwd {ms_per_call(a, step):10.3f} ms")


if __name__ == "__main__":
    main()
