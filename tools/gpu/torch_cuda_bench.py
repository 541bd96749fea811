#!/usr/bin/env python3
"""PyTorch's side of bench/cuda_bench's bfloat16 rows, on the same GPU, under the same names:

  gemm_4096_bfloat16          torch.matmul, 4096^3 bf16 (TFLOP/s)
  gemm_4096_bfloat16_cublas   cublasGemmEx called directly (ctypes), the same product: the library's ceiling
  sdpa_causal_fwd_bwd_T<T>_bf16 (+ _tflops)   F.scaled_dot_product_attention on the flash backend,
                              forward + backward, q/k/v [8192 / T, 12, T, 64], causal, the output's gradient given

Each value is timed as cuda_bench times it (two warm-up calls, then calls until 0.3 s have passed, the
device synchronised every 4). Prints "BENCH <name> <value> <unit>" lines.

  python3 tools/gpu/torch_cuda_bench.py                      # on cuda:0
  python3 tools/gpu/torch_cuda_bench.py --device cpu --n 256 --tokens 512 --seq 128   # plumbing, on a CPU
"""
import argparse
import ctypes
import glob
import os
import time

import torch
import torch.nn.functional as F


def seconds_per_call(fn, sync):
    fn()
    fn()
    sync()
    calls, start, elapsed = 0, time.perf_counter(), 0.0
    while calls < 3 or elapsed < 0.3:
        fn()
        calls += 1
        if calls % 4 == 0 or calls < 4:
            sync()
            elapsed = time.perf_counter() - start
    sync()
    return (time.perf_counter() - start) / calls


def report(name, value, unit):
    print(f"BENCH {name:<28s} {value:10.2f} {unit}", flush=True)


def load_cublas():
    """libcublas.so.13 as PyTorch loaded it (its nvidia-cublas wheel), else wherever the loader finds it."""
    candidates = []
    try:
        import nvidia.cublas
        for root in nvidia.cublas.__path__:
            candidates += glob.glob(os.path.join(root, "lib", "libcublas.so.*"))
    except ImportError:
        pass
    candidates += ["libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13"]
    errors = []
    for c in candidates:
        try:
            return ctypes.CDLL(c)
        except OSError as e:
            errors.append(f"{c}: {e}")
    raise OSError("torch_cuda_bench: cannot load cuBLAS: " + "; ".join(errors))


def raw_cublas_gemm(a, b, c):
    """c = a @ b (row-major bf16) by one cublasGemmEx per call, on PyTorch's current stream: computed as
    c^T = b^T a^T in cuBLAS's column-major terms, float32 accumulation, the default algorithm."""
    lib = load_cublas()
    handle = ctypes.c_void_p()
    assert lib.cublasCreate_v2(ctypes.byref(handle)) == 0, "cublasCreate failed"
    lib.cublasSetStream_v2(handle, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT, OP_N = 14, 68, -1, 0
    m, k = a.shape
    n = b.shape[1]
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    p = lambda t: ctypes.c_void_p(t.data_ptr())

    def call():
        status = lib.cublasGemmEx(handle, OP_N, OP_N, n, m, k, ctypes.byref(one), p(b), CUDA_R_16BF, n, p(a),
                                  CUDA_R_16BF, k, ctypes.byref(zero), p(c), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT)
        assert status == 0, f"cublasGemmEx returned {status}"
    return call


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--n", type=int, default=4096, help="GEMM size")
    p.add_argument("--tokens", type=int, default=8192, help="B * T of the attention rows")
    p.add_argument("--seq", type=int, nargs="+", default=[1024, 4096], help="attention sequence lengths")
    a = p.parse_args()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print("SKIPPED: no CUDA device (torch.cuda.is_available() is False)")
        return
    sync = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False  # as cublasGemmEx above: fp32 sums
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(dev) if cuda else 'cpu'}", flush=True)

    n = a.n
    x = torch.randn(n, n, device=dev).to(torch.bfloat16)
    y = torch.randn(n, n, device=dev).to(torch.bfloat16)
    out = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    s = seconds_per_call(lambda: torch.matmul(x, y, out=out), sync)
    report(f"gemm_{n}_bfloat16", 2.0 * n ** 3 / s / 1e12, "TFLOP/s")
    if cuda:
        raw = raw_cublas_gemm(x, y, out)
        s = seconds_per_call(raw, sync)
        report(f"gemm_{n}_bfloat16_cublas", 2.0 * n ** 3 / s / 1e12, "TFLOP/s")
        # The raw call and torch.matmul must agree on the product, else the figure times something else.
        ref = torch.matmul(x, y)
        raw()
        sync()
        assert torch.equal(out, ref) or (out.float() - ref.float()).abs().max() < 1e-2 * ref.float().abs().max(), \
            "raw cublasGemmEx and torch.matmul disagree"

    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = SDPBackend.FLASH_ATTENTION if cuda else SDPBackend.MATH
    for T in a.seq:
        B, H, D = max(1, a.tokens // T), 12, 64
        q, k, v = (torch.randn(B, H, T, D, device=dev).to(torch.bfloat16).requires_grad_() for _ in range(3))
        gy = torch.randn(B, H, T, D, device=dev).to(torch.bfloat16)

        def step():
            q.grad = k.grad = v.grad = None
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(gy)
        with sdpa_kernel(backend):
            s = seconds_per_call(step, sync)
        name = f"sdpa_causal_fwd_bwd_T{T}_bf16"
        report(name, s * 1e3, "ms")
        report(name + "_tflops", 7.0 * B * H * T * T * D / s / 1e12, "TFLOP/s")


if __name__ == "__main__":
    main()
