#!/usr/bin/env python3
"""make_op_fixtures: PyTorch's values and gradients for lockstep's ops, written to
tests/fixtures/op_fixtures.safetensors (read by tests/autograd/op_fixtures_test.cpp and tests/autograd/attention_test.cpp, which
need no PyTorch).

Regenerate (from the repository root, with PyTorch 2.x from PyPI):
    ~/.cache/torch-venv/bin/python tools/make_op_fixtures.py [--out tests/fixtures/op_fixtures.safetensors]
The inputs are drawn from a fixed seed, so the file only changes when a case (or PyTorch) changes.

File layout. Every case NAME has float64 inputs (int64 for indices):
    NAME/in0, NAME/in1, ...   the op's tensor inputs, in the order of the C++ call
    NAME/out                  its output (or NAME/out0, NAME/out1, ... for ops that return several)
    NAME/w                    a fixed random weight per floating-point output (NAME/w0, ...)
    NAME/grad0, ...           d/d in_k of sum(out * w) (summed over outputs), for each differentiable input
and the header's __metadata__ maps NAME to the PyTorch expression that made it (its non-tensor arguments
are there and in the name), e.g. "sum_dims02_keepdim": "torch.sum(a, dim=(0, 2), keepdim=True)", with
the inputs named a, b, c, d. Bool tensors are stored as int64 0/1 (lockstep's safetensors reader reads
F32, F64 and I64), each marked by a metadata entry "NAME/KEY": "bool".

The "attention" case is nanoGPT's CausalSelfAttention (model.py, karpathy/nanoGPT at 3adf61e, manual
attention path, dropout 0) with B=2, T=5, C=8, n_head=2: attention/x, attention/c_attn.weight,
attention/c_attn.bias, attention/c_proj.weight, attention/c_proj.bias, attention/w, attention/out, and
attention/grad.<name> for the input and each of the four parameters.
"""

import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
from torch.nn import functional as F

D = torch.float64
tensors = {}
metadata = {}


def rn(*shape):
    return torch.randn(shape, dtype=D)


def pos(*shape):
    """Values in [0.5, 1.5): for log, sqrt, rsqrt, pow's base and divisors."""
    return torch.rand(shape, dtype=D) + 0.5


def away(*shape):
    """Normal values at least 0.1 from 0: abs, relu and sign have a kink there."""
    x = rn(*shape)
    return x + 0.1 * torch.sign(x)


def idx(values, shape=None):
    t = torch.tensor(values, dtype=torch.int64)
    return t.view(*shape) if shape else t


def mask(*shape):
    return torch.rand(*shape) < 0.5


def partly_equal(a):
    """A tensor equal to `a` in about half of its elements (for eq/ne/le/ge)."""
    return torch.where(torch.rand(a.shape) < 0.5, a, rn(*a.shape))


def store(name, key, t):
    if t.dtype == torch.bool:
        metadata[f"{name}/{key}"] = "bool"
        t = t.to(torch.int64)
    assert t.dtype in (D, torch.int64), (name, key, t.dtype)
    tensors[f"{name}/{key}"] = t.detach().contiguous().clone()


def case(name, expr, inputs, no_grad=()):
    """One fixture: `expr` is evaluated with the inputs bound to a, b, c, d; floating-point inputs
    (except those listed in no_grad) are differentiated."""
    assert name not in metadata and "/" not in name, name
    fn = eval("lambda a=None, b=None, c=None, d=None: " + expr, {"torch": torch, "F": F, "math": math})
    leaves = []
    for k, t in enumerate(inputs):
        store(name, f"in{k}", t)
        leaf = t.clone()
        if t.is_floating_point() and k not in no_grad:
            leaf.requires_grad_(True)
        leaves.append(leaf)
    result = fn(*leaves)
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    single = not isinstance(result, (tuple, list))
    loss = None
    for k, o in enumerate(outs):
        suffix = "" if single else str(k)
        store(name, "out" + suffix, o)
        if o.is_floating_point() and o.requires_grad:
            w = rn(*o.shape)
            store(name, "w" + suffix, w)
            term = (o * w).sum()
            loss = term if loss is None else loss + term
    wanted = [k for k, leaf in enumerate(leaves) if leaf.requires_grad]
    if wanted and loss is not None:  # None: the op is not differentiable (comparisons, argmax, ...)
        grads = torch.autograd.grad(loss, [leaves[k] for k in wanted], allow_unused=True)
        for k, g in zip(wanted, grads):
            store(name, f"grad{k}", torch.zeros_like(leaves[k]) if g is None else g)
    metadata[name] = expr


def elementwise_cases():
    case("add", "torch.add(a, b)", [rn(3, 4), rn(4)])
    case("add_bcast_both", "torch.add(a, b)", [rn(3, 1), rn(1, 4)])
    case("sub", "torch.sub(a, b)", [rn(2, 3, 4), rn(3, 1)])
    case("mul", "torch.mul(a, b)", [rn(2, 3, 4), rn(3, 1)])
    case("div", "torch.div(a, b)", [rn(3, 4), pos(4)])
    case("add_scalar_2.5", "a + 2.5", [rn(3, 4)])
    case("sub_scalar_1.25", "a - 1.25", [rn(3, 4)])
    case("mul_scalar_-1.5", "a * -1.5", [rn(3, 4)])
    case("div_scalar_4", "a / 4.0", [rn(3, 4)])
    case("rsub_2.5", "2.5 - a", [rn(3, 4)])
    case("rdiv_2", "2.0 / a", [pos(3, 4)])
    case("pow_scalar_2", "torch.pow(a, 2.0)", [rn(3, 4)])
    case("pow_scalar_3", "torch.pow(a, 3.0)", [rn(3, 4)])
    case("pow_scalar_0.5", "torch.pow(a, 0.5)", [pos(3, 4)])
    case("pow_scalar_-1.5", "torch.pow(a, -1.5)", [pos(3, 4)])
    case("pow_tensor", "torch.pow(a, b)", [pos(3, 4), rn(3, 4)])
    case("pow_tensor_bcast", "torch.pow(a, b)", [pos(2, 3), rn(3)])
    case("maximum", "torch.maximum(a, b)", [rn(3, 4), rn(4)])
    case("minimum", "torch.minimum(a, b)", [rn(3, 4), rn(4)])
    case("clamp_-0.5_0.5", "torch.clamp(a, -0.5, 0.5)", [rn(3, 4)])
    case("clamp_min_-0.3", "torch.clamp(a, min=-0.3)", [rn(3, 4)])
    case("clamp_max_0.2", "torch.clamp(a, max=0.2)", [rn(3, 4)])
    case("neg", "torch.neg(a)", [rn(3, 4)])
    case("abs", "torch.abs(a)", [away(3, 4)])
    case("sign", "torch.sign(a)", [away(3, 4)])
    case("exp", "torch.exp(a)", [rn(3, 4)])
    case("log", "torch.log(a)", [pos(3, 4)])
    case("sqrt", "torch.sqrt(a)", [pos(3, 4)])
    case("rsqrt", "torch.rsqrt(a)", [pos(3, 4)])
    case("square", "torch.square(a)", [rn(3, 4)])
    case("sin", "torch.sin(a)", [rn(3, 4)])
    case("cos", "torch.cos(a)", [rn(3, 4)])
    case("tanh", "torch.tanh(a)", [rn(3, 4)])
    case("sigmoid", "torch.sigmoid(a)", [rn(3, 4)])
    case("relu", "torch.relu(a)", [away(3, 4)])
    case("silu", "F.silu(a)", [rn(3, 4)])
    case("gelu_none", "F.gelu(a)", [rn(3, 4)])
    case("gelu_tanh", "F.gelu(a, approximate='tanh')", [rn(3, 4)])
    case("where", "torch.where(a, b, c)", [mask(3, 4), rn(3, 4), rn(4)])
    case("where_bcast_cond", "torch.where(a, b, c)", [mask(4), rn(3, 4), rn(3, 1)])
    case("where_scalar_0.5", "torch.where(a, b, 0.5)", [mask(3, 4), rn(3, 4)])
    case("masked_fill_-2", "a.masked_fill(b, -2.0)", [rn(2, 3, 3), mask(3, 3)])
    case("masked_fill_neginf", "a.masked_fill(b, float('-inf'))", [rn(2, 3, 3), torch.ones(3, 3).tril() == 0])
    case("tril", "torch.tril(a)", [rn(4, 5)])
    case("tril_diag-1", "torch.tril(a, -1)", [rn(4, 5)])
    case("tril_batched_diag1", "torch.tril(a, 1)", [rn(2, 3, 4)])
    case("triu", "torch.triu(a)", [rn(4, 5)])
    case("triu_diag2", "torch.triu(a, 2)", [rn(4, 5)])
    case("triu_batched_diag-1", "torch.triu(a, -1)", [rn(2, 4, 3)])
    for op in ("eq", "ne", "lt", "le", "gt", "ge"):
        a = rn(3, 4)
        case(op, f"torch.{op}(a, b)", [a, partly_equal(a)])
    case("lt_bcast", "torch.lt(a, b)", [rn(3, 4), rn(4)])
    case("gt_scalar_0.1", "a > 0.1", [rn(3, 4)])
    case("le_scalar_-0.2", "a <= -0.2", [rn(3, 4)])
    case("eq_scalar_1", "a == 1.0", [torch.tensor([[1.0, 0.0, 1.0], [2.0, 1.0, -1.0]], dtype=D)])
    case("logical_and", "torch.logical_and(a, b)", [mask(3, 4), mask(3, 4)])
    case("logical_or", "torch.logical_or(a, b)", [mask(3, 4), mask(4)])
    case("logical_not", "torch.logical_not(a)", [mask(3, 4)])


def view_cases():
    case("reshape", "torch.reshape(a, (4, 6))", [rn(2, 3, 4)])
    case("reshape_-1", "torch.reshape(a, (-1, 4))", [rn(2, 3, 4)])
    case("view", "a.view(6, 4)", [rn(2, 3, 4)])
    case("reshape_0d_as_1", "torch.reshape(a, (1,))", [torch.tensor(1.5, dtype=D)])
    case("view_0d_as_1", "a.view(1)", [torch.tensor(1.5, dtype=D)])
    case("t", "a.t()", [rn(3, 4)])
    case("transpose_0_2", "torch.transpose(a, 0, 2)", [rn(2, 3, 4)])
    case("transpose_-1_-2", "torch.transpose(a, -1, -2)", [rn(2, 3, 4)])
    case("permute_2_0_1", "torch.permute(a, (2, 0, 1))", [rn(2, 3, 4)])
    case("expand_2_3_4", "a.expand(2, 3, 4)", [rn(3, 1)])
    case("expand_keep_-1", "a.expand(2, -1, 4)", [rn(1, 3, 1)])
    case("slice_1_1_5_2", "a[:, 1:5:2]", [rn(3, 6)])
    case("slice_0_0_4_3", "a[0:4:3]", [rn(5, 2)])
    case("slice_negative_-4_-1", "a[:, -4:-1]", [rn(3, 6)])
    case("narrow_0_1_2", "torch.narrow(a, 0, 1, 2)", [rn(4, 3)])
    case("select_1_-1", "torch.select(a, 1, -1)", [rn(2, 3, 4)])
    case("select_0_1", "torch.select(a, 0, 1)", [rn(3, 4)])
    case("unsqueeze_1", "torch.unsqueeze(a, 1)", [rn(3, 4)])
    case("unsqueeze_-1", "torch.unsqueeze(a, -1)", [rn(3, 4)])
    case("squeeze_1", "torch.squeeze(a, 1)", [rn(3, 1, 4)])
    case("squeeze_all", "torch.squeeze(a)", [rn(1, 3, 1, 4)])
    case("contiguous_of_t", "a.t().contiguous()", [rn(3, 4)])
    case("flatten", "torch.flatten(a)", [rn(2, 3, 4)])
    case("flatten_1", "torch.flatten(a, 1)", [rn(2, 3, 4)])
    case("flatten_0_1", "torch.flatten(a, 0, 1)", [rn(2, 3, 4)])
    case("unflatten_1_3_4", "a.unflatten(1, (3, 4))", [rn(2, 12)])
    case("cat_0", "torch.cat([a, b], 0)", [rn(2, 3), rn(4, 3)])
    case("cat_1", "torch.cat([a, b], 1)", [rn(2, 3), rn(2, 1)])
    case("cat_-1_three", "torch.cat([a, b, c], -1)", [rn(2, 2, 1), rn(2, 2, 3), rn(2, 2, 2)])
    case("stack_0", "torch.stack([a, b], 0)", [rn(3, 4), rn(3, 4)])
    case("stack_1_three", "torch.stack([a, b, c], 1)", [rn(3, 4), rn(3, 4), rn(3, 4)])
    case("stack_-1", "torch.stack([a, b], -1)", [rn(2, 3), rn(2, 3)])
    case("split_2_0", "torch.split(a, 2, 0)", [rn(5, 3)])
    case("split_sizes_1_2_3_dim1", "torch.split(a, [1, 2, 3], 1)", [rn(3, 6)])
    case("chunk_3_1", "torch.chunk(a, 3, 1)", [rn(2, 7)])
    case("chunk_2_0", "torch.chunk(a, 2, 0)", [rn(4, 3)])
    case("index_all_-1", "a[:, -1]", [rn(2, 3, 4)])
    case("index_ellipsis_1_3", "a[..., 1:3]", [rn(2, 3, 4)])
    case("index_none_step2", "a[None, :, ::2]", [rn(3, 5)])
    case("index_int_slice_step3", "a[1, :, 0:4:3]", [rn(2, 3, 4)])
    case("index_tensor", "a[b]", [rn(4, 3), idx([2, 0, 2])])
    case("as_strided_overlapping", "torch.as_strided(a, (3, 3), (2, 1), 1)", [rn(3, 4)])
    case("as_strided_3d", "torch.as_strided(a, (2, 2, 3), (6, 1, 2))", [rn(12)])
    case("unfold_1_2_1", "a.unfold(1, 2, 1)", [rn(3, 5)])
    case("unfold_0_2_2", "a.unfold(0, 2, 2)", [rn(5, 3)])
    case("unfold_-1_3_2_batched", "a.unfold(-1, 3, 2)", [rn(2, 2, 7)])


def indexing_cases():
    case("index_select_0", "torch.index_select(a, 0, b)", [rn(4, 3), idx([2, 0, 2, 1])])
    case("index_select_1", "torch.index_select(a, 1, b)", [rn(2, 5), idx([4, 0, 4])])
    case("gather_1", "torch.gather(a, 1, b)", [rn(3, 4), idx([3, 0, 0, 1, 2, 2], (3, 2))])
    case("gather_0", "torch.gather(a, 0, b)", [rn(3, 4), idx([2, 0, 1, 1, 0, 2, 2, 0], (2, 4))])
    case("scatter_add_1", "torch.scatter_add(a, 1, b, c)", [rn(3, 5), idx([4, 4, 0, 1, 2, 1], (3, 2)), rn(3, 2)])
    case("scatter_add_0", "torch.scatter_add(a, 0, b, c)", [rn(3, 4), idx([2, 0, 2, 1, 0, 0, 1, 2], (2, 4)), rn(2, 4)])
    case("index_add_0", "torch.index_add(a, 0, b, c)", [rn(5, 3), idx([4, 0, 4, 2]), rn(4, 3)])
    case("index_add_1", "torch.index_add(a, 1, b, c)", [rn(2, 4), idx([1, 1, 3]), rn(2, 3)])
    case("sort_-1", "torch.sort(a, dim=-1)", [rn(3, 5)])
    case("sort_0_descending", "torch.sort(a, dim=0, descending=True)", [rn(4, 3)])
    case("argsort_1_descending", "torch.argsort(a, dim=1, descending=True)", [rn(3, 5)])
    case("topk_2_-1", "torch.topk(a, 2, dim=-1)", [rn(3, 6)])
    case("topk_2_0_smallest", "torch.topk(a, 2, dim=0, largest=False)", [rn(4, 3)])


def reduction_cases():
    case("sum_all", "torch.sum(a)", [rn(2, 3, 4)])
    case("sum_of_0d", "torch.sum(a)", [torch.tensor(1.5, dtype=D)])
    case("sum_1", "torch.sum(a, 1)", [rn(2, 3, 4)])
    case("sum_-1_keepdim", "torch.sum(a, -1, keepdim=True)", [rn(2, 3, 4)])
    case("sum_dims02", "torch.sum(a, dim=(0, 2))", [rn(2, 3, 4)])
    case("sum_dims02_keepdim", "torch.sum(a, dim=(0, 2), keepdim=True)", [rn(2, 3, 4)])
    case("mean_all", "torch.mean(a)", [rn(2, 3, 4)])
    case("mean_0", "torch.mean(a, 0)", [rn(2, 3, 4)])
    case("mean_dims12_keepdim", "torch.mean(a, dim=(1, 2), keepdim=True)", [rn(2, 3, 4)])
    case("var_all_unbiased", "torch.var(a)", [rn(3, 4)])
    case("var_all_biased", "torch.var(a, correction=0)", [rn(3, 4)])
    case("var_1_biased", "torch.var(a, dim=(1,), correction=0)", [rn(3, 4)])
    case("var_dims02_unbiased_keepdim", "torch.var(a, dim=(0, 2), correction=1, keepdim=True)", [rn(2, 3, 4)])
    case("std_all_unbiased", "torch.std(a)", [rn(3, 4)])
    case("std_0_biased", "torch.std(a, dim=(0,), correction=0)", [rn(3, 4)])
    case("std_dims12_unbiased", "torch.std(a, dim=(1, 2), correction=1)", [rn(2, 3, 4)])
    case("max_all", "torch.max(a)", [rn(3, 4)])
    case("min_all", "torch.min(a)", [rn(3, 4)])
    case("max_1", "torch.max(a, 1).values", [rn(2, 3, 4)])
    case("max_0_keepdim", "torch.max(a, 0, keepdim=True).values", [rn(3, 4)])
    case("min_-1", "torch.min(a, -1).values", [rn(3, 4)])
    case("amax_dims02", "torch.amax(a, dim=(0, 2))", [rn(2, 3, 4)])
    case("amin_1_keepdim", "torch.amin(a, dim=(1,), keepdim=True)", [rn(3, 4)])
    case("argmax_1", "torch.argmax(a, 1)", [rn(3, 4)])
    case("argmin_0_keepdim", "torch.argmin(a, 0, keepdim=True)", [rn(3, 4)])
    case("logsumexp_1", "torch.logsumexp(a, dim=(1,))", [rn(3, 4)])
    case("logsumexp_dims02_keepdim", "torch.logsumexp(a, dim=(0, 2), keepdim=True)", [rn(2, 3, 4)])
    case("norm_p1_all", "torch.linalg.vector_norm(a, ord=1)", [away(3, 4)])
    case("norm_p2_all", "torch.linalg.vector_norm(a, ord=2)", [rn(3, 4)])
    case("norm_p2_dims02", "torch.linalg.vector_norm(a, ord=2, dim=(0, 2))", [rn(2, 3, 4)])
    case("norm_p3_1", "torch.linalg.vector_norm(a, ord=3, dim=(1,))", [rn(3, 4)])
    case("norm_pinf_0_keepdim", "torch.linalg.vector_norm(a, ord=float('inf'), dim=(0,), keepdim=True)", [rn(3, 4)])
    case("norm_pinf_all", "torch.linalg.vector_norm(a, ord=float('inf'))", [rn(3, 4)])
    case("softmax_0", "torch.softmax(a, 0)", [rn(3, 4)])
    case("softmax_1", "torch.softmax(a, 1)", [rn(2, 3, 4)])
    case("softmax_-1", "torch.softmax(a, -1)", [rn(2, 3, 4)])
    case("log_softmax_0", "torch.log_softmax(a, 0)", [rn(3, 4)])
    case("log_softmax_1", "torch.log_softmax(a, 1)", [rn(2, 3, 4)])


def linalg_cases():
    case("matmul_1d_1d", "torch.matmul(a, b)", [rn(4), rn(4)])
    case("matmul_1d_2d", "torch.matmul(a, b)", [rn(3), rn(3, 4)])
    case("matmul_2d_1d", "torch.matmul(a, b)", [rn(3, 4), rn(4)])
    case("matmul_2d_2d", "torch.matmul(a, b)", [rn(3, 4), rn(4, 2)])
    case("matmul_1d_3d", "torch.matmul(a, b)", [rn(3), rn(2, 3, 4)])
    case("matmul_3d_1d", "torch.matmul(a, b)", [rn(2, 3, 4), rn(4)])
    case("matmul_2d_3d", "torch.matmul(a, b)", [rn(3, 4), rn(2, 4, 5)])
    case("matmul_BTC_CD", "torch.matmul(a, b)", [rn(2, 3, 4), rn(4, 5)])
    case("matmul_BHTD_BHDT", "torch.matmul(a, b)", [rn(2, 2, 3, 4), rn(2, 2, 4, 3)])
    case("matmul_bcast_batch", "torch.matmul(a, b)", [rn(2, 1, 3, 4), rn(5, 4, 2)])
    case("matmul_t_t", "torch.matmul(a.t(), b.t())", [rn(4, 3), rn(2, 4)])
    case("matmul_batched_transposed", "torch.matmul(a.transpose(-2, -1), b.transpose(1, 2))",
         [rn(2, 4, 3), rn(2, 5, 4)])
    case("matmul_q_kT", "a @ b.transpose(-2, -1)", [rn(2, 2, 3, 4), rn(2, 2, 3, 4)])
    case("linear_3d_bias", "F.linear(a, b, c)", [rn(2, 3, 4), rn(5, 4), rn(5)])
    case("linear_3d_nobias", "F.linear(a, b)", [rn(2, 3, 4), rn(5, 4)])
    case("linear_1d_bias", "F.linear(a, b, c)", [rn(4), rn(5, 4), rn(5)])
    case("nll_loss", "F.nll_loss(a, b)", [rn(4, 5), idx([4, 0, 2, 2])])
    case("cross_entropy_composition", "F.nll_loss(torch.log_softmax(a, 1), b)", [rn(4, 5), idx([1, 3, 0, 4])])
    case("layer_norm_composition",
         "(a - a.mean(-1, keepdim=True)) / torch.sqrt(a.var(-1, keepdim=True, correction=0) + 1e-5) * b + c",
         [rn(2, 3, 6), rn(6), rn(6)])
    case("to_float32_and_back", "a.float().double()", [rn(3, 4)])
    case("clone", "torch.clone(a)", [rn(3, 4)])


class CausalSelfAttention(nn.Module):
    """nanoGPT's model.py CausalSelfAttention (karpathy/nanoGPT 3adf61e), its manual attention path,
    with dropout 0 and bias=True."""

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=True)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=True)
        self.n_head = n_head
        self.n_embd = n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


def attention_case():
    B, T, C, n_head = 2, 5, 8, 2
    m = CausalSelfAttention(C, n_head, block_size=T).double()
    x = rn(B, T, C).requires_grad_(True)
    y = m(x)
    # The manual path agrees with PyTorch's fused attention.
    q, k, v = m.c_attn(x).split(C, dim=2)
    heads = [t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v)]
    fused = F.scaled_dot_product_attention(*heads, is_causal=True).transpose(1, 2).reshape(B, T, C)
    assert torch.allclose(y, m.c_proj(fused), rtol=1e-12, atol=1e-12)
    w = rn(B, T, C)
    params = dict(m.named_parameters())
    grads = torch.autograd.grad((y * w).sum(), [x] + list(params.values()))
    store("attention", "x", x)
    for name, p in params.items():
        store("attention", name, p)
    store("attention", "w", w)
    store("attention", "out", y)
    for name, g in zip(["x"] + list(params), grads):
        store("attention", "grad." + name, g)
    metadata["attention"] = (f"nanoGPT CausalSelfAttention(n_embd={C}, n_head={n_head}, bias=True, dropout=0)"
                             f" on x [{B}, {T}, {C}]")


def save(path, tensors, metadata):
    """The safetensors format, written by hand so the same inputs give the same bytes (keys sorted;
    the safetensors package writes __metadata__ in hash order)."""
    codes = {D: "F64", torch.int64: "I64"}
    header, blobs, offset = {"__metadata__": dict(sorted(metadata.items()))}, [], 0
    for key in sorted(tensors):
        t = tensors[key]
        blob = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[key] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data section starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.normpath(os.path.join(here, "..", "tests", "fixtures", "op_fixtures.safetensors")))
    args = parser.parse_args()
    torch.manual_seed(0)
    elementwise_cases()
    view_cases()
    indexing_cases()
    reduction_cases()
    linalg_cases()
    attention_case()
    metadata["__generator__"] = f"tools/make_op_fixtures.py, torch {torch.__version__}"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save(args.out, tensors, metadata)
    cases = sum(1 for k in metadata if "/" not in k and not k.startswith("__"))
    print(f"{args.out}: {cases} cases, {len(tensors)} tensors, {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    sys.exit(main())
