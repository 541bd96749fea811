"""PyTorch's AdamW step on the CPU for bench/adam_bench.cpp's ~1M-parameter model (1024x512, 512,
512x1024, 1024; lr 1e-3, weight decay 0.1), or with `gpt` its 10.7M GPT 6x384 parameters, one thread:
fused=True, foreach=True and the single-tensor loop, on float32 and on bfloat16 parameters, gradients
and state. Prints "BENCH <name> <value> <unit>" lines.
    ~/.cache/torch-venv/bin/python bench/torch_adam.py [gpt | optims]

With `optims`: Adagrad, RMSprop, NAdam, Adamax and RAdam (default options) on the GPT's 10.7M parameters,
as `adam_bench optims`.
"""
import sys
import time

import torch

torch.set_num_threads(1)
torch.manual_seed(0)
OPTIMS = len(sys.argv) > 1 and sys.argv[1] == "optims"
GPT = OPTIMS or (len(sys.argv) > 1 and sys.argv[1] == "gpt")
D = 384
LAYER = [(D,), (D,), (3 * D, D), (3 * D,), (D, D), (D,), (D,), (D,), (4 * D, D), (4 * D,), (D, 4 * D), (D,)]
SHAPES = [(256, D)] + LAYER * 6 if GPT else [(1024, 512), (512,), (512, 1024), (1024,)]
STEPS = 20 if GPT else 200

if OPTIMS:
    for cls in (torch.optim.Adagrad, torch.optim.RMSprop, torch.optim.NAdam, torch.optim.Adamax, torch.optim.RAdam):
        impls = [("single_tensor", {"foreach": False}), ("foreach", {"foreach": True})]
        if cls is torch.optim.Adagrad:
            impls.append(("fused", {"fused": True}))
        for impl, kwargs in impls:
            params = [torch.randn(s, requires_grad=True) for s in SHAPES]
            for p in params:
                p.grad = torch.randn(p.shape)
            opt = cls(params, **kwargs)
            opt.step()
            t0 = time.perf_counter()
            for _ in range(STEPS):
                opt.step()
            ms = (time.perf_counter() - t0) / STEPS * 1e3
            print(f"BENCH torch_{cls.__name__.lower()}_step_{impl} {ms:.3f} ms", flush=True)
    sys.exit(0)

for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
    for impl, kwargs in (("fused", {"fused": True}), ("foreach", {"foreach": True}),
                         ("single_tensor", {"foreach": False})):
        params = [torch.randn(s, dtype=dtype, requires_grad=True) for s in SHAPES]
        for p in params:
            p.grad = torch.randn(p.shape, dtype=dtype)
        opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1, **kwargs)
        opt.step()  # warm-up: allocates the state
        t0 = time.perf_counter()
        for _ in range(STEPS):
            opt.step()
        ms = (time.perf_counter() - t0) / STEPS * 1e3
        print(f"BENCH torch_adamw_step_{impl}_{tag} {ms:.3f} ms", flush=True)
