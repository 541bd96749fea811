#!/usr/bin/env python3
"""Writes tests/fixtures/optim_fixtures.safetensors: PyTorch's optimizer trajectories, scheduler lr
sequences and clip_grad_norm_ results, which tests/optim/optim_fixtures_test.cpp compares lockstep against
(the tests read the file; they do not need PyTorch).

    ~/.cache/torch-venv/bin/python tools/make_optim_fixtures.py

Optimizers. Two parameters, w [3, 4] and b [4], start from init.w / init.b. At every step each gets the
gradient grad = coef * p + shift (coef.*, shift.* in the file), computed the same way on both sides
(one multiply, one add, float64), except that b has no gradient at step 3 (the optimizer must skip
it). Keys: <case>.step<t>.w / .b after step t = 1..STEPS, and <case>.state.* the optimizer's
state_dict after the last step, flattened as lockstep's Optimizer::state_dict names it (state.<i>.<name>,
param_groups.<g>.<option>). Cases named *_f32 run in float32. The options of each case are in
CASES below and in the C++ test, side by side.

Schedulers. SGD(lr=base) with one or two groups; <sched>.lr is [STEPS_SCHED + 1, groups]: the lrs after
construction, then after each step().

clip_grad_norm_. Three gradients clip.g0..g2; clip.<case>.total and clip.<case>.g<k> after clipping.
"""
import math
import os

import torch
from safetensors.torch import save_file

STEPS = 5
STEPS_SCHED = 30
OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "optim_fixtures.safetensors")

# name: (class, options, groups) -- groups None: one group of [w, b]; else per-group option overrides
# for [w] and [b].
CASES = {
    "sgd": (torch.optim.SGD, dict(lr=0.1), None),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.1, momentum=0.9), None),
    "sgd_dampening": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.3), None),
    "sgd_nesterov": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True), None),
    "sgd_weight_decay": (torch.optim.SGD, dict(lr=0.1, momentum=0.5, weight_decay=0.05), None),
    "sgd_maximize": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.05, maximize=True), None),
    "sgd_groups": (torch.optim.SGD, dict(lr=0.1, momentum=0.9), [dict(), dict(lr=0.03, momentum=0.5)]),
    "adam": (torch.optim.Adam, dict(lr=0.01), None),
    "adam_weight_decay": (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1), None),
    "adam_amsgrad": (torch.optim.Adam, dict(lr=0.01, amsgrad=True), None),
    "adam_amsgrad_weight_decay": (torch.optim.Adam, dict(lr=0.01, amsgrad=True, weight_decay=0.1), None),
    "adam_betas_eps": (torch.optim.Adam, dict(lr=0.02, betas=(0.5, 0.8), eps=1e-3), None),
    "adam_maximize": (torch.optim.Adam, dict(lr=0.01, maximize=True, weight_decay=0.1), None),
    "adamw": (torch.optim.AdamW, dict(lr=0.01), None),
    "adamw_weight_decay": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1), None),
    "adamw_amsgrad": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, amsgrad=True), None),
    "adamw_groups": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1), [dict(), dict(lr=0.003, weight_decay=0.0)]),
    "adamw_f32": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1), None),
    "adam_amsgrad_f32": (torch.optim.Adam, dict(lr=0.01, amsgrad=True, weight_decay=0.1), None),
    "adadelta": (torch.optim.Adadelta, dict(), None),
    "adadelta_rho_eps": (torch.optim.Adadelta, dict(lr=0.5, rho=0.6, eps=1e-3), None),
    "adadelta_weight_decay": (torch.optim.Adadelta, dict(lr=1.0, weight_decay=0.1), None),
    "adadelta_maximize": (torch.optim.Adadelta, dict(lr=1.0, weight_decay=0.1, maximize=True), None),
    "adadelta_groups": (torch.optim.Adadelta, dict(lr=1.0), [dict(), dict(lr=0.3, rho=0.95, weight_decay=0.05)]),
    "adadelta_f32": (torch.optim.Adadelta, dict(lr=1.0, weight_decay=0.1), None),
}


def flat_state(opt, dtype_of_options=torch.float64):
    """PyTorch's optimizer state_dict in lockstep's flat naming."""
    sd = opt.state_dict()
    out = {}
    for i, st in sd["state"].items():
        for k, v in st.items():
            out[f"state.{i}.{k}"] = v.detach().clone()
    for g, group in enumerate(sd["param_groups"]):
        for k, v in group.items():
            if k in ("foreach", "capturable", "differentiable", "fused"):
                continue  # PyTorch's implementation switches; lockstep has one implementation
            if k == "params":
                out[f"param_groups.{g}.params"] = torch.tensor(v, dtype=torch.int64)
            elif isinstance(v, bool):
                out[f"param_groups.{g}.{k}"] = torch.tensor(v)
            elif isinstance(v, (int, float)):
                out[f"param_groups.{g}.{k}"] = torch.tensor(float(v), dtype=torch.float64)
            elif isinstance(v, tuple):
                out[f"param_groups.{g}.{k}"] = torch.tensor([float(x) for x in v], dtype=torch.float64)
    return out


def optimizer_cases(t):
    gen = torch.Generator().manual_seed(0)
    init = {"w": torch.randn(3, 4, generator=gen, dtype=torch.float64),
            "b": torch.randn(4, generator=gen, dtype=torch.float64)}
    coef = {k: torch.rand(v.shape, generator=gen, dtype=torch.float64) + 0.5 for k, v in init.items()}
    shift = {k: torch.randn(v.shape, generator=gen, dtype=torch.float64) for k, v in init.items()}
    for k in init:
        t[f"init.{k}"], t[f"coef.{k}"], t[f"shift.{k}"] = init[k], coef[k], shift[k]
    for name, (cls, opts, groups) in CASES.items():
        dtype = torch.float32 if name.endswith("_f32") else torch.float64
        p = {k: v.to(dtype).clone().requires_grad_() for k, v in init.items()}
        c = {k: v.to(dtype) for k, v in coef.items()}
        s = {k: v.to(dtype) for k, v in shift.items()}
        if groups is None:
            opt = cls([p["w"], p["b"]], foreach=False, **opts)
        else:
            opt = cls([dict(params=[p["w"]], **groups[0]), dict(params=[p["b"]], **groups[1])], foreach=False, **opts)
        for step in range(1, STEPS + 1):
            opt.zero_grad()
            with torch.no_grad():
                for k in p:
                    if k == "b" and step == 3:
                        continue
                    p[k].grad = c[k] * p[k] + s[k]
            opt.step()
            for k in p:
                t[f"{name}.step{step}.{k}"] = p[k].detach().clone()
        for k, v in flat_state(opt).items():
            t[f"{name}.{k}"] = v


def scheduler_cases(t):
    def run(name, make, lrs=(0.1,)):
        params = [torch.zeros(1, requires_grad=True) for _ in lrs]
        opt = torch.optim.SGD([dict(params=[q], lr=lr) for q, lr in zip(params, lrs)], lr=lrs[0])
        sched = make(opt)
        seq = [[g["lr"] for g in opt.param_groups]]
        for _ in range(STEPS_SCHED):
            opt.step()
            sched.step()
            seq.append([g["lr"] for g in opt.param_groups])
        t[f"sched.{name}.lr"] = torch.tensor(seq, dtype=torch.float64)

    S = torch.optim.lr_scheduler
    run("step", lambda o: S.StepLR(o, step_size=3, gamma=0.5))
    run("multistep", lambda o: S.MultiStepLR(o, milestones=[2, 5, 5, 9], gamma=0.3))
    run("cosine", lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=0.001))
    run("cosine_groups", lambda o: S.CosineAnnealingLR(o, T_max=7), lrs=(0.1, 0.02))
    run("linear", lambda o: S.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=5))
    run("linear_down", lambda o: S.LinearLR(o, start_factor=1.0, end_factor=0.25, total_iters=8), lrs=(0.1, 0.3))
    run("lambda", lambda o: S.LambdaLR(o, lambda e: 0.95 ** e))
    run("lambda_groups", lambda o: S.LambdaLR(o, [lambda e: 1.0 / (e + 1), lambda e: 0.9 ** e]), lrs=(0.1, 0.3))
    run("warmup_cosine", lambda o: S.SequentialLR(
        o, [S.LinearLR(o, start_factor=0.01, end_factor=1.0, total_iters=5),
            S.CosineAnnealingLR(o, T_max=20, eta_min=1e-4)], milestones=[5]))
    run("step_then_lambda", lambda o: S.SequentialLR(
        o, [S.StepLR(o, step_size=2, gamma=0.5), S.LambdaLR(o, lambda e: 0.9 ** e),
            S.MultiStepLR(o, milestones=[3], gamma=0.1)], milestones=[6, 15]), lrs=(0.1, 0.05))


def clip_cases(t):
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(shape, generator=gen, dtype=torch.float64) for shape in [(3, 4), (4,), (2, 2, 2)]]
    for k, g in enumerate(grads):
        t[f"clip.g{k}"] = g
    for name, max_norm, norm_type, dtype in [("l2", 1.0, 2.0, torch.float64), ("inf", 0.5, math.inf, torch.float64),
                                             ("l1", 2.0, 1.0, torch.float64), ("p3", 1.0, 3.0, torch.float64),
                                             ("no_clip", 100.0, 2.0, torch.float64), ("l2_f32", 1.0, 2.0, torch.float32)]:
        params = [g.to(dtype).clone().requires_grad_() for g in grads]
        for q, g in zip(params, grads):
            q.grad = g.to(dtype).clone()
        total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type, foreach=False)
        t[f"clip.{name}.total"] = total.detach().clone()
        for k, q in enumerate(params):
            t[f"clip.{name}.g{k}"] = q.grad.clone()


def main():
    t = {}
    optimizer_cases(t)
    scheduler_cases(t)
    clip_cases(t)
    t = {k: v.contiguous() for k, v in t.items()}
    save_file(t, OUT, metadata={"generator": "tools/make_optim_fixtures.py", "torch": torch.__version__})
    print(f"wrote {len(t)} tensors to {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
