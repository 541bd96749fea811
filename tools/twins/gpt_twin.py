#!/usr/bin/env python3
"""PyTorch twin of examples/gpt: nanoGPT's model and train.py loop on the same text, the same batches
(the window rule of examples/gpt/char_data.h, reimplemented below) and the same initial weights (a
safetensors file from `gpt --export-init`), so its per-step losses are the ones lockstep should print.

One process:          OMP_NUM_THREADS=1 python tools/twins/gpt_twin.py --init init.safetensors --steps 20
Data-parallel (DDP):  torchrun --nproc_per_node=2 tools/twins/gpt_twin.py ...   (or lockstep's launcher: the
                      same RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT variables)
--batch-size is per rank and micro-step, as in lockstep. Prints one line per step (the loss averaged over
ranks) and `step_ms <median>`; --losses-json writes {"config": ..., "losses": [...]}.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
from torch.nn import functional as F

FORTUNES_DIR = "/usr/share/games/fortunes"
# examples/common/fortunes.cpp's fortune_files(): the plain-text English files, ascii-art left out.
FORTUNE_FILES = [
    "art", "computers", "cookie", "debian", "definitions", "disclaimer", "drugs", "education", "ethnic",
    "food", "fortunes", "goedel", "humorists", "kids", "knghtbrd", "law", "linux", "linuxcookie",
    "literature", "love", "magic", "medicine", "men-women", "miscellaneous", "news", "paradoxum", "people",
    "perl", "pets", "platitudes", "politics", "pratchett", "riddles", "science", "songs-poems", "sports",
    "startrek", "tao", "translate-me", "wisdom", "work", "zippy",
]

# ---- data: bytes as characters, 90/10 split, windows by (seed, split, step, row) ----
MASK = (1 << 64) - 1


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def window_start(seed, split, step, row, n_windows):
    h = splitmix64(seed & MASK)
    h = splitmix64(h ^ split)
    h = splitmix64(h ^ (step & MASK))
    h = splitmix64(h ^ (row & MASK))
    return h % n_windows


class CharText:
    def __init__(self, data: bytes):
        self.chars = sorted(set(data))
        index = {c: i for i, c in enumerate(self.chars)}
        tokens = torch.tensor([index[c] for c in data], dtype=torch.long)
        n = len(tokens) * 9 // 10
        self.splits = [tokens[:n], tokens[n:]]  # train (0), val (1)

    def get_batch(self, split, seed, step, first_row, rows, block):
        data = self.splits[split]
        n_windows = len(data) - block
        ix = [window_start(seed, split, step, first_row + r, n_windows) for r in range(rows)]
        x = torch.stack([data[i:i + block] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
        return x, y


def batch_rows(micro, rank, world, batch):
    return (micro * world + rank) * batch


# ---- nanoGPT's model (bias=True, GELU, pre-LayerNorm) ----
class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)
        self.resid_dropout = nn.Dropout(c.dropout)
        self.n_head, self.n_embd, self.dropout = c.n_head, c.n_embd, c.dropout
        self.manual = c.attention == "manual"
        if self.manual:  # nanoGPT's path without flash attention: the ops lockstep's port runs
            self.attn_dropout = nn.Dropout(c.dropout)
            self.register_buffer("bias", torch.tril(torch.ones(c.block_size, c.block_size))
                                 .view(1, 1, c.block_size, c.block_size), persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.manual:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            y = self.attn_dropout(F.softmax(att, dim=-1)) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.block_size = c.block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab_size, c.n_embd), wpe=nn.Embedding(c.block_size, c.n_embd),
            drop=nn.Dropout(c.dropout), h=nn.ModuleList([Block(c) for _ in range(c.n_layer)]),
            ln_f=nn.LayerNorm(c.n_embd)))
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def get_lr(it, a):
    if it < a.warmup_iters:
        return a.lr * (it + 1) / (a.warmup_iters + 1)
    decay = a.steps if a.lr_decay_iters < 0 else a.lr_decay_iters
    if it > decay:
        return a.min_lr
    ratio = (it - a.warmup_iters) / max(1, decay - a.warmup_iters)
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", default="")
    p.add_argument("--init", required=True, help="initial weights: gpt --export-init FILE")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--warmup-iters", type=int, default=100)
    p.add_argument("--lr-decay-iters", type=int, default=-1)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--attention", choices=["sdpa", "manual"], default="sdpa",
                   help="sdpa: nanoGPT on PyTorch 2 (fused); manual: its masked-softmax path, lockstep's ops")
    p.add_argument("--eval-interval", type=int, default=0, help="validation loss every this many steps (0: never)")
    p.add_argument("--eval-iters", type=int, default=20)
    p.add_argument("--quiet", action="store_true", help="no per-step lines")
    p.add_argument("--device", default="cpu", help="cpu or cuda (each batch is copied there, as gpt does)")
    p.add_argument("--losses-json", default="", help="write the config and per-step losses here (rank 0)")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="bfloat16: forward and loss under torch.autocast, as gpt --dtype bfloat16")
    p.add_argument("--fused-adamw", action="store_true",
                   help="AdamW(fused=True), as nanoGPT's configure_optimizers picks on CUDA (the GPU anchor)")
    a = p.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.distributed.init_process_group("gloo")
    if a.text:
        data = open(a.text, "rb").read()
    else:
        data = b"".join(open(os.path.join(FORTUNES_DIR, f), "rb").read() for f in FORTUNE_FILES)
    text = CharText(data)
    c = argparse.Namespace(vocab_size=len(text.chars), block_size=a.block_size, n_layer=a.n_layer,
                           n_head=a.n_head, n_embd=a.n_embd, dropout=a.dropout, attention=a.attention)
    model = GPT(c)
    from safetensors.torch import load_file
    missing, unexpected = model.load_state_dict(load_file(a.init), strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    dev = torch.device(a.device)
    model.to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    params = [q for q in model.parameters() if q.requires_grad]
    groups = [{"params": [q for q in params if q.dim() >= 2], "weight_decay": a.weight_decay},
              {"params": [q for q in params if q.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, a.beta2), **({"fused": True} if a.fused_adamw else {}))

    losses, step_ms, step_cpu_ms, val_losses = [], [], [], []
    autocast = lambda: torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bfloat16")
    B, T = a.batch_size, a.block_size

    def val_loss(step):  # gpt's estimate: eval_iters val batches per rank, averaged over ranks
        model.eval()
        with torch.no_grad():
            with autocast():
                s = sum(model(*(t.to(dev) for t in text.get_batch(1, a.seed, step, batch_rows(k, rank, world, B), B, T)))[1].item()
                        for k in range(a.eval_iters)) / a.eval_iters
        model.train()
        if world > 1:
            t = torch.tensor([s], dtype=torch.float64)
            torch.distributed.all_reduce(t)
            s = t.item() / world
        if rank == 0:
            print(f"step {step} val_loss {s:.6f}", flush=True)
        val_losses.append((step, s))

    for step in range(a.steps):
        if a.eval_interval > 0 and step % a.eval_interval == 0:
            val_loss(step)
        lr = get_lr(step, a)
        for g in opt.param_groups:
            g["lr"] = lr
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        local = 0.0
        for m in range(a.grad_accum):
            x, y = (t.to(dev) for t in text.get_batch(0, a.seed, step, batch_rows(m, rank, world, B), B, T))
            sync = m + 1 == a.grad_accum or world == 1
            ctx = ddp.no_sync() if not sync else torch.enable_grad()
            with ctx:
                with autocast():
                    _, loss = ddp(x, y)
                    loss = loss / a.grad_accum
                loss.backward()
            local += loss.item()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.grad_clip)
        opt.step()
        step_ms.append((time.perf_counter() - t0) * 1e3)
        step_cpu_ms.append((time.process_time() - c0) * 1e3)
        if world > 1:
            t = torch.tensor([local], dtype=torch.float64)
            torch.distributed.all_reduce(t)
            local = t.item() / world
        losses.append(local)
        if rank == 0 and not a.quiet:
            print(f"step {step} loss {local:.6f} lr {lr:.4g} ms {step_ms[-1]:.1f}", flush=True)
    if a.eval_interval > 0:
        val_loss(a.steps)
    if dev.type == "cuda" and rank == 0:
        print(f"max_memory_allocated_mib {torch.cuda.max_memory_allocated(dev) / 2**20:.0f}")
    if rank == 0:
        def median(v):  # the first 3 steps left out, as gpt does
            v = sorted(v[min(3, len(v) - 1):])
            return v[len(v) // 2]
        print(f"step_ms {median(step_ms):.3f} cpu_ms {median(step_cpu_ms):.3f}")
        if a.losses_json:
            cfg = {k: v for k, v in vars(a).items() if k not in ("init", "losses_json", "quiet")}
            cfg["world"] = world
            with open(a.losses_json, "w") as f:
                json.dump({"config": cfg, "losses": losses, "val_losses": val_losses}, f, indent=1)
                f.write("\n")
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
