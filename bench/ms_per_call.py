"""The timing loop of PyTorch's side of the layer benchmarks (torch_lstm.py, torch_transformer.py), as
bench/ms_per_call.h does for lockstep's: the median over rounds of the milliseconds per call."""
import statistics
import time


def add_timing_flags(ap):
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)


def ms_per_call(a, fn):
    for _ in range(3):
        fn()
    ms = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            fn()
        ms.append((time.perf_counter() - t0) / a.steps * 1e3)
    return statistics.median(ms)
