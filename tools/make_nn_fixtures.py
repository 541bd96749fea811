#!/usr/bin/env python3
"""Writes tests/fixtures/nn_fixtures.safetensors: inputs, parameters, outputs and gradients of nn layers and
losses computed by PyTorch in float64, read by tests/nn/nn_layers_test.cpp (which does not need PyTorch).

Each case `c` stores its inputs as c.x (and c.weight, c.bias, c.target, ...), its output as c.out, a
random upstream gradient c.gout, and the gradient of sum(out * gout) with respect to each input as
c.grad.<input>. Run: ~/.cache/torch-venv/bin/python tools/make_nn_fixtures.py
"""
import json
import os
import struct

import torch
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "nn_fixtures.safetensors")
tensors = {}


def put(name, t):
    tensors[name] = t.detach().contiguous().clone()


def case(name, fn, inputs, consts=None):
    """fn(**inputs) -> output; inputs get gradients; consts (targets) are only stored."""
    consts = consts or {}
    leaves = {k: v.clone().requires_grad_(True) for k, v in inputs.items()}
    out = fn(**leaves)
    gout = torch.randn_like(out)
    (out * gout).sum().backward()
    for k, v in list(inputs.items()) + list(consts.items()):
        put(f"{name}.{k}", v)
    put(f"{name}.out", out)
    put(f"{name}.gout", gout)
    for k, v in leaves.items():
        put(f"{name}.grad.{k}", v.grad)


r = torch.randn
# --- Conv2d ---
case("conv_basic", lambda x, weight, bias: F.conv2d(x, weight, bias, padding=1),
     dict(x=r(2, 3, 5, 6), weight=r(4, 3, 3, 3), bias=r(4)))
case("conv_strided", lambda x, weight, bias: F.conv2d(x, weight, bias, stride=(2, 1), padding=(1, 2), dilation=(2, 1),
                                                       groups=2),
     dict(x=r(2, 4, 7, 6), weight=r(6, 2, 3, 2), bias=r(6)))
case("conv_nobias", lambda x, weight: F.conv2d(x, weight, stride=2), dict(x=r(1, 2, 6, 5), weight=r(3, 2, 2, 3)))
# --- pooling ---
case("maxpool", lambda x: F.max_pool2d(x, 3, stride=2, padding=1), dict(x=r(2, 3, 7, 6)))
case("maxpool_ceil", lambda x: F.max_pool2d(x, 2, stride=2, dilation=(1, 2), ceil_mode=True), dict(x=r(1, 2, 7, 9)))
case("avgpool", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), dict(x=r(2, 3, 7, 6)))
case("avgpool_nopad", lambda x: F.avg_pool2d(x, (3, 2), stride=(2, 1), padding=1, count_include_pad=False),
     dict(x=r(1, 2, 6, 5)))
case("avgpool_ceil", lambda x: F.avg_pool2d(x, 2, stride=2, padding=1, ceil_mode=True), dict(x=r(1, 2, 6, 5)))
case("adaptive", lambda x: F.adaptive_avg_pool2d(x, (3, 4)), dict(x=r(2, 3, 5, 7)))
# --- normalization ---
case("layernorm", lambda x, weight, bias: F.layer_norm(x, (3, 4), weight, bias), dict(x=r(2, 3, 4), weight=r(3, 4),
                                                                                       bias=r(3, 4)))
bn_mean, bn_var = r(3), r(3).abs() + 0.5
put("batchnorm.running_mean_before", bn_mean)
put("batchnorm.running_var_before", bn_var)
rm, rv = bn_mean.clone(), bn_var.clone()
case("batchnorm", lambda x, weight, bias: F.batch_norm(x, rm, rv, weight, bias, training=True, momentum=0.2),
     dict(x=r(4, 3, 3, 2) * 2 + 1, weight=r(3), bias=r(3)))
put("batchnorm.running_mean_after", rm)
put("batchnorm.running_var_after", rv)
case("batchnorm_eval", lambda x, weight, bias: F.batch_norm(x, bn_mean, bn_var, weight, bias, training=False),
     dict(x=r(2, 3, 2, 2), weight=r(3), bias=r(3)))
# --- embedding ---
emb_idx = torch.tensor([[1, 0, 4], [4, 2, 0]])
case("embedding", lambda weight: F.embedding(emb_idx, weight, padding_idx=0), dict(weight=r(5, 3)))
put("embedding.idx", emb_idx)
# --- activations ---
act_x = r(3, 4) * 2
case("gelu", lambda x: F.gelu(x), dict(x=act_x))
case("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), dict(x=act_x))
case("silu", lambda x: F.silu(x), dict(x=act_x))
case("tanh", lambda x: torch.tanh(x), dict(x=act_x))
case("sigmoid", lambda x: torch.sigmoid(x), dict(x=act_x))
case("leaky_relu", lambda x: F.leaky_relu(x, 0.2), dict(x=act_x))
# --- losses ---
t5 = torch.tensor([0, 2, 1, 2, 3])
case("ce_mean", lambda x: F.cross_entropy(x, t5), dict(x=r(5, 4)))
w4 = r(4).abs() + 0.1
t5_ign = torch.tensor([0, 2, 1, 3, 3])
case("ce_options", lambda x: F.cross_entropy(x, t5_ign, weight=w4, ignore_index=2, label_smoothing=0.1),
     dict(x=r(5, 4)), dict(target=t5_ign, weight=w4))
t_nd = torch.randint(0, 3, (2, 4, 2))
t_nd[0, 1, 1] = -100
case("ce_nd_none", lambda x: F.cross_entropy(x, t_nd, reduction="none", label_smoothing=0.2), dict(x=r(2, 3, 4, 2)),
     dict(target=t_nd))
t_nd_mean = t_nd.clone()
case("ce_nd_mean", lambda x: F.cross_entropy(x, t_nd_mean), dict(x=r(2, 3, 4, 2)), dict(target=t_nd_mean))
w3, probs = r(3).abs(), torch.softmax(r(4, 3), 1)
case("ce_prob", lambda x: F.cross_entropy(x, probs, weight=w3, reduction="sum", label_smoothing=0.05),
     dict(x=r(4, 3)), dict(target=probs, weight=w3))
case("ce_prob_mean", lambda x: F.cross_entropy(x, probs2), dict(x=r(2, 3, 2)),
     dict(target=(probs2 := torch.softmax(r(2, 3, 2), 1))))
case("nll", lambda x: F.nll_loss(x, t5, weight=w4, ignore_index=1), dict(x=torch.log_softmax(r(5, 4), 1)),
     dict(weight=w4))
bt, bw, bpw = torch.rand(3, 4), r(3, 4).abs(), r(4).abs()
case("bce", lambda x: F.binary_cross_entropy_with_logits(x, bt, weight=bw, pos_weight=bpw), dict(x=r(3, 4) * 3),
     dict(target=bt, weight=bw, pos_weight=bpw))
case("bce_sum", lambda x: F.binary_cross_entropy_with_logits(x, bt2, reduction="sum"), dict(x=r(6) * 10),
     dict(target=(bt2 := (torch.rand(6) > 0.5).double())))
case("mse_sum", lambda x: F.mse_loss(x, mt, reduction="sum"), dict(x=r(3, 2)), dict(target=(mt := r(3, 2))))
case("mse_none", lambda x: F.mse_loss(x, mt, reduction="none"), dict(x=r(3, 2)), dict(target=mt))
put("ce_mean.target", t5)
put("nll.target", t5)

# --- write safetensors by hand (no dependency on the safetensors package) ---
DT = {torch.float64: ("F64", "<d"), torch.int64: ("I64", "<q")}
header, blobs, offset = {}, [], 0
for name in sorted(tensors):
    t = tensors[name]
    code, fmt = DT[t.dtype]
    data = b"".join(struct.pack(fmt, v) for v in t.flatten().tolist())
    header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
with open(OUT, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
print(f"wrote {len(tensors)} tensors, {8 + len(h) + offset} bytes to {os.path.normpath(OUT)}")
