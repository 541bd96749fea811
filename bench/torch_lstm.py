#!/usr/bin/env python3
"""PyTorch's side of bench/lstm_bench: forward + backward of a 2-layer LSTM or GRU on the CPU, one
intra-op thread by default, in float32 or under torch.autocast("cpu", dtype=torch.bfloat16) (--autocast).
The default shape is the word-language-model's (input 128, hidden 128, T 35, batch 20).

    python3 bench/torch_lstm.py [--mode lstm|gru] [--input I] [--hidden H] [--seq T] [--batch B]
                                [--autocast] [--threads N] [--steps S] [--rounds R]

Prints "BENCH torch_lstm2x<H>_fwd <ms>" and "BENCH torch_lstm2x<H>_fwd_bwd <ms>" (torch_gru2x<H>_... for
GRU, _bf16 appended under autocast; medians over rounds).
"""
import argparse
import contextlib

import torch

from ms_per_call import add_timing_flags, ms_per_call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["lstm", "gru"], default="lstm")
    ap.add_argument("--input", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seq", type=int, default=35)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--autocast", action="store_true")
    add_timing_flags(ap)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    T, B, IN, H = a.seq, a.batch, a.input, a.hidden
    lstm = (torch.nn.LSTM if a.mode == "lstm" else torch.nn.GRU)(IN, H, num_layers=2)
    x = torch.randn(T, B, IN)

    def region():
        return torch.autocast("cpu", dtype=torch.bfloat16) if a.autocast else contextlib.nullcontext()

    def fwd():
        with region():
            return lstm(x)[0]

    with torch.no_grad():
        fwd_ms = ms_per_call(a, fwd)

    def step():
        lstm.zero_grad()
        fwd().float().sum().backward()

    sfx = "_bf16" if a.autocast else ""
    print(f"torch {torch.__version__} threads={torch.get_num_threads()} {a.mode} layers=2 in={IN} hidden={H} "
          f"T={T} B={B} autocast={int(a.autocast)}")
    print(f"BENCH torch_{a.mode}2x{H}_fwd{sfx} {fwd_ms:10.3f} ms")
    print(f"BENCH torch_{a.mode}2x{H}_fwd_bwd{sfx} {ms_per_call(a, step):10.3f} ms")


if __name__ == "__main__":
    main()
