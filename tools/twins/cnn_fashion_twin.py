#!/usr/bin/env python3
"""The PyTorch twin of examples/cnn_fashion.cpp: pytorch/examples mnist/main.py's Net on Fashion-MNIST,
with the same flags, data, order, schedule and (with --init) the same initial weights, so the two can
be compared step by step and timed side by side. Run with one thread per process:

  # initial weights from lockstep, then 20 steps without dropout, losses as JSON
  launch --nproc_per_node=1 bazel-bin/examples/cnn_fashion --steps 0 --save /tmp/init.safetensors ...
  OMP_NUM_THREADS=1 ~/.cache/torch-venv/bin/python tools/twins/cnn_fashion_twin.py --init /tmp/init.safetensors \
      --no-dropout --no-shuffle --steps 20 --losses /tmp/losses.json ...
  # the step time (median of --bench-steps), on 1 rank or under torchrun on 2
  OMP_NUM_THREADS=1 ~/.cache/torch-venv/bin/python tools/twins/cnn_fashion_twin.py --bench-steps 50
  OMP_NUM_THREADS=1 ~/.cache/torch-venv/bin/python -m torch.distributed.run --nproc_per_node=2 \
      tools/twins/cnn_fashion_twin.py --bench-steps 50
  # tests/fixtures/cnn_fashion_parity.json and cnn_fashion_sync_bn_parity.json, which
  # tests/examples/twin_parity_test.sh reads
  ~/.cache/torch-venv/bin/python tools/twins/cnn_fashion_twin.py --write-fixture --lockstep bazel-bin/examples/cnn_fashion \
      --launch bazel-bin/distributed/launch/launch

Data order: DistributedSampler's (rank r takes r, r + W, ...; no shuffle for comparisons), so world
size 1 at batch 2B sees each step's samples that 2 ranks at batch B see together. Reported losses are
the global mean over all ranks' samples.
"""
import argparse
import gzip
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # data/idx_dataset.h's kFashionMnistMean / kFashionMnistStd
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures")
# The fixtures' runs: small widths and a small slice keep the tests fast; two epochs cross an epoch end.
FIXTURE_BATCH = 16  # per rank at 2 ranks; 32 at 1 rank
FIXTURE_STEPS = 20
_DATA_ARGS = ["--width", "8,16,32", "--train-limit", "320", "--test-limit", "100", "--epochs", "2"]
_ORDER_ARGS = ["--no-dropout", "--no-shuffle", "--seed", "0"]
# name: (the flags of both runs, those added to lockstep's 2-rank run, those added to the twin's run).
# The sync_bn fixture is PyTorch's BatchNorm2d at batch 32 on one process (nn.SyncBatchNorm refuses CPU
# tensors): SyncBatchNorm over 2 ranks x 16 computes the same statistics, so lockstep's --sync-bn at 2
# ranks must match it, as must its --batch-norm at 1 rank; the final running_mean/running_var go into
# the fixture too. Two choices keep that comparison about BatchNorm and not about rounding:
# - Both run in float64. PyTorch's float32 CPU run with BatchNorm drifts from its own float64 run by up to
#   5e-4 in the first 20 losses and 17% in a running_mean element; lockstep's float32 (oneDNN's
#   convolutions, fused BatchNorm) by up to 1.8e-3: the run is chaotic in float32 (ReLUs flip).
# - SGD, not Adam: a convolution's bias before a BatchNorm has a gradient of zero up to rounding, which
#   Adam's g / sqrt(v) turns into steps of about lr in a direction rounding picks, so running_mean
#   drifts apart between any two implementations while the losses do not see it.
FIXTURES = {
    "cnn_fashion_parity": (_DATA_ARGS + ["--optimizer", "adam", "--lr", "0.002"] + _ORDER_ARGS, [], []),
    # mnist/main.py's own optimizer and schedule: Adadelta lr 1.0, StepLR x0.7 per epoch.
    "cnn_fashion_adadelta_parity": (_DATA_ARGS + ["--optimizer", "adadelta", "--lr", "1.0", "--schedule", "step"]
                                    + _ORDER_ARGS, [], []),
    "cnn_fashion_sync_bn_parity": (_DATA_ARGS + ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
                                                 "--schedule", "step"] + _ORDER_ARGS + ["--batch-norm", "--float64"],
                                   ["--sync-bn"], []),
}


class Net(nn.Module):
    def __init__(self, c1=32, c2=64, hidden=128, dropout=True, norm=None):
        super().__init__()
        self.conv1 = nn.Conv2d(1, c1, 3, 1)
        self.conv2 = nn.Conv2d(c1, c2, 3, 1)
        if norm:
            bn = nn.SyncBatchNorm if norm == "sync" else nn.BatchNorm2d
            self.bn1, self.bn2 = bn(c1), bn(c2)
        self.norm = norm
        self.fc1 = nn.Linear(c2 * 12 * 12, hidden)
        self.fc2 = nn.Linear(hidden, 10)
        self.dropout = dropout

    def forward(self, x):
        x = self.conv1(x)
        if self.norm:
            x = self.bn1(x)
        x = self.conv2(F.relu(x))
        if self.norm:
            x = self.bn2(x)
        x = F.max_pool2d(F.relu(x), 2)
        if self.dropout:
            x = F.dropout(x, 0.25, self.training)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        if self.dropout:
            x = F.dropout(x, 0.5, self.training)
        return self.fc2(x)


def load(split, limit, data_dir=DATA):
    def idx(name):
        with gzip.open(os.path.join(data_dir, name)) as f:
            raw = f.read()
        ndim = raw[3]
        dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
        return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)

    images = idx(f"{split}-images-idx3-ubyte.gz")
    labels = idx(f"{split}-labels-idx1-ubyte.gz")
    n = len(images) if limit < 0 else limit
    table = ((np.arange(256) / 255.0 - MEAN) / STD).astype(np.float32)  # as lockstep's 256-entry table
    x = torch.from_numpy(table[images[:n]]).unsqueeze(1)  # [N, 1, 28, 28]
    return x, torch.from_numpy(labels[:n].astype(np.int64))


def shard(n, rank, world, shuffle, seed, epoch):
    """DistributedSampler's indices for `rank` (PyTorch's own permutation when shuffling)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist() if shuffle \
        else list(range(n))
    total = math.ceil(n / world) * world
    order += (order * math.ceil(total / n))[:total - n]
    return order[rank:total:world]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--steps", type=int, default=-1)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, help="default 1e-3, with adadelta 1.0 (as cnn_fashion)")
    p.add_argument("--optimizer", default="adam", choices=["sgd", "adam", "adamw", "adadelta"])
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--schedule", choices=["cosine", "step", "none"], help="default cosine, with adadelta step")
    p.add_argument("--gamma", type=float, default=0.7)
    p.add_argument("--width", default="32,64,128")
    p.add_argument("--no-dropout", action="store_true")
    p.add_argument("--no-shuffle", action="store_true")
    p.add_argument("--batch-norm", action="store_true")
    p.add_argument("--sync-bn", action="store_true")
    p.add_argument("--train-limit", type=int, default=-1)
    p.add_argument("--test-limit", type=int, default=-1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", help="initial weights (safetensors, e.g. cnn_fashion --steps 0 --save)")
    p.add_argument("--losses", help="write every step's global loss here (JSON)")
    p.add_argument("--save", help="write the final model state_dict here (safetensors, as cnn_fashion --save)")
    p.add_argument("--float64", action="store_true", help="model and data in float64 (a reference without float32 "
                   "rounding; the --init weights are widened)")
    p.add_argument("--bench-steps", type=int, default=0, help="time this many steps and exit")
    add_dtype_flag(p)
    p.add_argument("--device", default="cpu", help="cpu or cuda (a batch is copied there each step, as cnn_fashion)")
    p.add_argument("--data-dir", default=DATA, help="directory with the Fashion-MNIST IDX files")
    p.add_argument("--write-fixture", action="store_true", help="write tests/fixtures/{" + ",".join(FIXTURES) + "}.json")
    p.add_argument("--lockstep", help="with --write-fixture: the cnn_fashion binary (writes the initial weights)")
    p.add_argument("--launch", help="with --write-fixture: lockstep's launcher")
    a = p.parse_args()
    adadelta = a.optimizer == "adadelta"  # mnist/main.py's defaults: Adadelta(lr=1.0), StepLR(gamma=0.7)
    a.lr = a.lr if a.lr is not None else (1.0 if adadelta else 1e-3)
    a.schedule = a.schedule or ("step" if adadelta else "cosine")
    if a.write_fixture:
        return write_fixture(a)
    train(a)


def add_dtype_flag(p):
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="bfloat16: forward and loss (and evaluation) under torch.autocast, as cnn_fashion --dtype")


def autocast(a, dev):
    """The autocast region of forward and loss: off for --dtype float32."""
    return torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bfloat16")


def train(a):
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    c1, c2, hidden = (int(v) for v in a.width.split(","))
    torch.manual_seed(a.seed)
    norm = "sync" if a.sync_bn else ("batch" if a.batch_norm else None)
    dtype = torch.float64 if a.float64 else torch.float32
    model = Net(c1, c2, hidden, dropout=not a.no_dropout, norm=norm).to(dtype)
    if a.init:
        model.load_state_dict({k: v for k, v in load_file(a.init).items()
                               if not k.startswith(("optimizer.", "scheduler."))})
    dev = torch.device(a.device)
    model.to(dev)
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
    elif a.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), a.lr, weight_decay=a.weight_decay)
    elif a.optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), a.lr, weight_decay=a.weight_decay)
    else:
        opt = torch.optim.Adadelta(model.parameters(), a.lr, weight_decay=a.weight_decay)
    x_train, y_train = load("train", a.train_limit, a.data_dir)
    x_test, y_test = load("t10k", a.test_limit, a.data_dir)
    x_train, x_test = x_train.to(dtype), x_test.to(dtype)
    spe = math.ceil(math.ceil(len(x_train) / world) / a.batch_size)  # steps per epoch
    sched = None
    if a.schedule == "cosine":
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, a.epochs * spe)
    elif a.schedule == "step":
        sched = torch.optim.lr_scheduler.StepLR(opt, spe, a.gamma)
    total = a.steps if a.steps >= 0 else a.epochs * spe

    def batches(epoch):
        idx = shard(len(x_train), rank, world, not a.no_shuffle, a.seed, epoch)
        for i in range(0, len(idx), a.batch_size):
            j = torch.tensor(idx[i:i + a.batch_size])
            yield x_train[j].to(dev), y_train[j].to(dev)

    if a.bench_steps:
        return bench(a, ddp, opt, batches, world, rank, dev)
    train_loop(a, model, ddp, opt, sched, batches, total, spe, x_test, y_test, world, rank, dev)


def train_loop(a, model, ddp, opt, sched, batches, total, spe, x_test, y_test, world, rank, dev):
    """The training loop resnet_twin.py shares: `total` steps of cross-entropy through `ddp` (the
    scheduler, when given, stepped per step), the global loss of each step kept for --losses, the
    global test accuracy at epoch ends, then --save."""
    losses, step = [], 0
    while step < total:
        epoch = step // spe
        t0, seen, loss_sum = time.perf_counter(), 0, 0.0
        for x, y in batches(epoch):
            opt.zero_grad()
            with autocast(a, dev):
                loss = F.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            if sched:
                sched.step()
            sums = torch.tensor([loss.item() * len(x), len(x)], dtype=torch.float64)
            if world > 1:
                dist.all_reduce(sums)
            losses.append(sums[0].item() / sums[1].item())
            loss_sum, seen = loss_sum + sums[0].item(), seen + sums[1].item()
            step += 1
            if step == total:
                break
        secs = time.perf_counter() - t0
        if step % spe == 0:
            with autocast(a, dev):
                acc = evaluate(model, x_test, y_test, rank, world, dev)
            if rank == 0:
                print(f"epoch {epoch} loss {loss_sum / seen:.4f} test_acc {acc:.4f} samples_per_s {seen / secs:.0f}",
                      flush=True)
    if rank == 0 and a.losses:
        with open(a.losses, "w") as f:
            json.dump({"losses": losses}, f)
    if rank == 0 and a.save:
        save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, a.save)
    if world > 1:
        dist.destroy_process_group()


def evaluate(model, x, y, rank, world, dev):
    model.eval()
    idx = shard(len(x), rank, world, False, 0, 0)[:(len(x) - rank + world - 1) // world]  # padding left out
    with torch.no_grad():
        correct = sum((model(x[idx[i:i + 1000]].to(dev)).argmax(1).cpu() == y[idx[i:i + 1000]]).sum().item()
                      for i in range(0, len(idx), 1000))
    model.train()
    t = torch.tensor([correct, len(idx)], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(t)
    return (t[0] / t[1]).item()


def bench(a, ddp, opt, batches, world, rank, dev):
    """As cnn_fashion --bench-steps: 5 untimed steps, then the median step and phases in ms."""
    it, rows = batches(0), []
    for i in range(a.bench_steps + 5):
        if i == 5:
            cpu0 = time.process_time()  # CPU time of every thread: steadier than wall time under load
        try:
            x, y = next(it)
        except StopIteration:
            it = batches(0)
            x, y = next(it)
        t0 = time.perf_counter()
        opt.zero_grad()
        with autocast(a, dev):
            loss = F.cross_entropy(ddp(x), y)
        loss.item()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)  # as cnn_fashion: the step ends when the device is done
        t3 = time.perf_counter()
        if i >= 5:
            rows.append(((t3 - t0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3))
    cpu_ms = (time.process_time() - cpu0) * 1e3 / a.bench_steps
    med = [statistics.median(r[k] for r in rows) for k in range(4)]
    if rank == 0:
        print(f"bench: {world} rank(s), batch {a.batch_size} per rank, {a.bench_steps} steps: forward {med[1]:.2f} "
              f"backward {med[2]:.2f} (all-reduce included) optimizer {med[3]:.2f} (medians, ms); cpu_ms {cpu_ms:.2f} per "
              f"step (mean)\nstep_ms {med[0]:.3f}")
    if world > 1:
        dist.destroy_process_group()


def write_fixture(a):
    """Each of FIXTURES: initial weights from lockstep's --seed 0 (not stored), then PyTorch's losses at
    1 rank, batch 2B, and the final BatchNorm running statistics where the model has them."""
    assert a.lockstep and a.launch, "--write-fixture needs --lockstep and --launch"
    for name, (args, two_rank_extra, twin_extra) in FIXTURES.items():
        with tempfile.TemporaryDirectory() as tmp:
            init = os.path.join(tmp, "init.safetensors")
            subprocess.run([a.launch, "--nproc_per_node=1", a.lockstep, *args, "--steps", "0", "--save", init],
                           check=True)
            losses, final = os.path.join(tmp, "losses.json"), os.path.join(tmp, "final.safetensors")
            env = dict(os.environ, OMP_NUM_THREADS="1")
            env.pop("WORLD_SIZE", None)
            subprocess.run([sys.executable, __file__, *args, *twin_extra, "--batch-size", str(2 * FIXTURE_BATCH),
                            "--steps", str(FIXTURE_STEPS), "--init", init, "--losses", losses, "--save", final],
                           check=True, env=env)
            with open(losses) as f:
                got = json.load(f)["losses"]
            running = {k: v.tolist() for k, v in load_file(final).items() if k.endswith((".running_mean", ".running_var"))}
        fixture = {"about": "PyTorch's global loss after each of the first steps of cnn_fashion at 1 rank, batch "
                            "2 * batch_per_rank, from lockstep's initial weights (--seed 0); tools/twins/cnn_fashion_twin.py "
                            "--write-fixture wrote it, with torch " + torch.__version__,
                   "args": args}
        if twin_extra:
            fixture["about"] += " (twin flags " + " ".join(twin_extra) + ")"
        if two_rank_extra:
            fixture["two_rank_args"] = two_rank_extra
        fixture.update({"batch_per_rank": FIXTURE_BATCH, "steps": FIXTURE_STEPS, "losses": got})
        if running:
            fixture["about"] += "; running holds the BatchNorm statistics after the last step"
            fixture["running"] = running
        path = os.path.join(DATA_DIR, name + ".json")
        with open(path, "w") as f:
            json.dump(fixture, f, indent=1)
            f.write("\n")
        print(f"wrote {os.path.normpath(path)}: {len(got)} losses, {got[0]:.6f} .. {got[-1]:.6f}"
              + (f", {len(running)} running statistics" if running else ""))


if __name__ == "__main__":
    main()
