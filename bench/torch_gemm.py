# PyTorch's matmul (one thread) on the products of bench/gemm_bench, printed in the same columns:
#   ~/.cache/torch-venv/bin/python bench/torch_gemm.py [reps] [--shapes gpt|gpt384] [--dtype float32|bfloat16]
#       [--cpu-time]
# float32 runs on MKL; bfloat16 (bfloat16 operands and result) on oneDNN's AVX512-BF16 / AMX kernels.
import argparse, sys, time
import torch

torch.set_num_threads(1)
SHAPES = {
    "gpt": [(False, True, 768, 384, 128), (False, False, 768, 128, 384), (True, False, 384, 128, 768),
            (False, True, 768, 512, 128), (False, False, 768, 128, 512), (True, False, 512, 128, 768),
            (False, True, 64, 64, 32), (False, False, 64, 32, 64), (True, False, 64, 32, 64)],
    # gemm_bench --shapes gpt384: a 6-layer, 384-wide GPT's linear layers at 2048 tokens.
    "gpt384": [(False, True, 2048, 1152, 384), (False, False, 2048, 384, 1152), (True, False, 1152, 384, 2048),
               (False, True, 2048, 384, 384), (False, False, 2048, 384, 384), (True, False, 384, 384, 2048),
               (False, True, 2048, 1536, 384), (False, False, 2048, 384, 1536), (True, False, 1536, 384, 2048),
               (False, True, 2048, 384, 1536), (False, False, 2048, 1536, 384), (True, False, 384, 1536, 2048),
               (False, True, 2048, 65, 384)],
}
ap = argparse.ArgumentParser()
ap.add_argument("reps", nargs="?", type=int, default=None)
ap.add_argument("--shapes", default="gpt", choices=sorted(SHAPES))
ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
# As gemm_bench --cpu-time: this thread's CPU time (torch runs one-thread ops on the caller).
ap.add_argument("--cpu-time", action="store_true")
args = ap.parse_args()
reps = args.reps or (5 if args.shapes == "gpt384" else 20)
dt = getattr(torch, args.dtype)
clock = time.thread_time if args.cpu_time else time.perf_counter
print("threads=%d torch=%s dtype=%s" % (torch.get_num_threads(), torch.__version__, args.dtype))
tot = 0
for ta, tb, m, n, k in SHAPES[args.shapes]:
    a = (torch.rand(k, m) * 2 - 1 if ta else torch.rand(m, k) * 2 - 1).to(dt)
    b = (torch.rand(n, k) * 2 - 1 if tb else torch.rand(k, n) * 2 - 1).to(dt)
    A = a.t() if ta else a
    B = b.t() if tb else b
    c = torch.empty(m, n, dtype=dt)
    for _ in range(20):
        torch.matmul(A, B, out=c)
    us = []
    for r in range(7):
        t0 = clock()
        for _ in range(reps):
            torch.matmul(A, B, out=c)
        us.append((clock() - t0) / reps * 1e6)
    us.sort()
    med = us[3]
    tot += med
    print("%s%s m=%4d n=%4d k=%4d  median_us %8.1f  best_us %8.1f  GFLOP/s %6.1f" % (
        "T" if ta else "N", "T" if tb else "N", m, n, k, med, us[0], 2e-3 * m * n * k / med))
print("total_us %.1f" % tot)
