#!/usr/bin/env python3
"""The PyTorch twin of examples/resnet: ResNet-20 (He et al. 2015, section 4.2, option B shortcuts) with
torchvision's parameter names, on Fashion-MNIST as 1 x 28 x 28 images, SGD with Nesterov momentum 0.9
and weight decay 5e-4, OneCycleLR stepped per step; the same flags, data order and (with --init) the
same initial weights as lockstep's, so the two can be compared step by step and timed side by side.
Run with one thread per process:

  # initial weights from lockstep, then 20 steps in order, losses as JSON
  launch --nproc_per_node=1 bazel-bin/examples/resnet --steps 0 --save /tmp/init.safetensors ...
  OMP_NUM_THREADS=1 ~/.cache/torch-venv/bin/python tools/twins/resnet_twin.py --init /tmp/init.safetensors \\
      --no-shuffle --steps 20 --losses /tmp/losses.json ...
  # the step time at batch 128 on CIFAR-shaped random images, on 1 rank or under torchrun on 2
  OMP_NUM_THREADS=1 ~/.cache/torch-venv/bin/python tools/twins/resnet_twin.py --bench-steps 20 --synthetic 1280
  OMP_NUM_THREADS=1 ~/.cache/torch-venv/bin/python -m torch.distributed.run --nproc_per_node=2 \\
      tools/twins/resnet_twin.py --bench-steps 20 --synthetic 2560
  # tests/fixtures/resnet_*parity.json (tools/fixtures/make_resnet_fixtures.sh runs this)
  ~/.cache/torch-venv/bin/python tools/twins/resnet_twin.py --write-fixture --lockstep bazel-bin/examples/resnet \\
      --launch bazel-bin/distributed/launch/launch

Data order: DistributedSampler's (rank r takes r, r + W, ...), as tools/twins/cnn_fashion_twin.py, whose
data loading, sharding, evaluation and bench loop this twin shares. Reported losses are the global mean.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cnn_fashion_twin import DATA, add_dtype_flag, bench, evaluate, load, shard, train_loop  # noqa: E402

FIXTURE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures")
# The fixtures' runs: ResNet-20 (its depth, at half width to keep the test short) on the first 160
# images in order, batch 16 in all, two epochs of 10 steps, so the 20 steps cover OneCycleLR's warm-up,
# its peak and part of its descent; both sides in float64. Fashion-MNIST's constant background gives
# thousands of activations the same value, so a BatchNorm output crossing zero flips a ReLU at all of
# them at once: a perturbation of float32's size that moves such a crossing by one step changes the
# trajectory by a whole step's gradient, and PyTorch's own float32 run leaves its float64 run by 5e-3
# (relative) within 5 steps at the default --lr 0.1 (1.7e-4 within 8 steps even at --lr 0.005).
# float64 on both sides keeps the comparison about the implementation, not about rounding. --lr 0.02:
# at batch 16, 0.1 is past stability (the loss climbs to 3.3 by step 7) and even two float64 runs part
# by 7x a step (1e-15 at step 1, 2e-4 at step 14); at 0.02 lockstep and PyTorch stay within 1e-10.
FIXTURE_BATCH = 8  # per rank at 2 ranks; 16 at 1 rank
FIXTURE_STEPS = 20
_ARGS = ["--width", "8", "--train-limit", "160", "--test-limit", "100", "--epochs", "2", "--lr", "0.02",
         "--no-shuffle", "--seed", "0", "--float64"]
# name: (flags of both sides, lockstep's ranks and the flags added to its 2-rank run, the twin's processes).
# - resnet_parity: 1 process at batch 16; lockstep at 1 rank x 16 and, with --sync-bn, at 2 ranks x 8
#   (the same statistics: nn.SyncBatchNorm refuses CPU tensors, so PyTorch has no 2-process run of it).
# - resnet_ddp_parity: BatchNorm2d per rank under DDP (gloo) on 2 processes x 8, rank 0's buffers
#   broadcast before each forward, against lockstep's 2 ranks x 8.
FIXTURES = {
    "resnet_parity": (_ARGS, [1, 2], ["--sync-bn"], 1),
    "resnet_ddp_parity": (_ARGS, [2], [], 2),
}


def batch_norm(channels, sync):
    return nn.SyncBatchNorm(channels) if sync else nn.BatchNorm2d(channels)


class BasicBlock(nn.Module):
    def __init__(self, in_planes, planes, stride, sync_bn):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = batch_norm(planes, sync_bn)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = batch_norm(planes, sync_bn)
        self.downsample = None
        if stride != 1 or in_planes != planes:  # option B: a projection where the shape changes
            self.downsample = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False),
                                            batch_norm(planes, sync_bn))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self, in_channels=3, num_classes=10, blocks=3, width=16, sync_bn=False):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = batch_norm(width, sync_bn)
        self.in_planes = width
        self.layer1 = self._stage(width, blocks, 1, sync_bn)
        self.layer2 = self._stage(2 * width, blocks, 2, sync_bn)
        self.layer3 = self._stage(4 * width, blocks, 2, sync_bn)
        self.fc = nn.Linear(4 * width, num_classes)
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _stage(self, planes, blocks, stride, sync_bn):
        layers = []
        for i in range(blocks):
            layers.append(BasicBlock(self.in_planes, planes, stride if i == 0 else 1, sync_bn))
            self.in_planes = planes
        return nn.Sequential(*layers)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def synthetic(n, seed):
    """n random 3 x 32 x 32 images with random labels (not lockstep's values: for timing only)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--steps", type=int, default=-1)
    p.add_argument("--batch-size", type=int, default=128, help="per rank")
    p.add_argument("--lr", type=float, default=0.1, help="OneCycleLR's max_lr")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--blocks", type=int, default=3, help="BasicBlocks per stage (3: ResNet-20)")
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--no-shuffle", action="store_true")
    p.add_argument("--sync-bn", action="store_true", help="nn.SyncBatchNorm (needs CUDA tensors)")
    p.add_argument("--train-limit", type=int, default=-1)
    p.add_argument("--test-limit", type=int, default=-1)
    p.add_argument("--synthetic", type=int, default=0, help="train on N random 3 x 32 x 32 images instead")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", help="initial weights (safetensors, e.g. resnet --steps 0 --save), loaded strictly")
    p.add_argument("--losses", help="write every step's global loss here (JSON)")
    p.add_argument("--save", help="write the final model state_dict here (safetensors, as resnet --save)")
    p.add_argument("--float64", action="store_true", help="model and data in float64 (--init weights widened)")
    p.add_argument("--bench-steps", type=int, default=0, help="time this many steps and exit")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    add_dtype_flag(p)
    p.add_argument("--data-dir", default=DATA, help="directory with the Fashion-MNIST IDX files")
    p.add_argument("--write-fixture", action="store_true", help="write tests/fixtures/{" + ",".join(FIXTURES) + "}.json")
    p.add_argument("--lockstep", help="with --write-fixture: the resnet binary (writes the initial weights)")
    p.add_argument("--launch", help="with --write-fixture: lockstep's launcher")
    a = p.parse_args()
    if a.write_fixture:
        return write_fixture(a)
    train(a)


def train(a):
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    dtype = torch.float64 if a.float64 else torch.float32
    if a.synthetic:
        x_train, y_train = synthetic(a.synthetic, a.seed + 1)
        x_test, y_test = synthetic(max(a.synthetic // 5, 1), a.seed + 2)
    else:
        x_train, y_train = load("train", a.train_limit, a.data_dir)
        x_test, y_test = load("t10k", a.test_limit, a.data_dir)
    x_train, x_test = x_train.to(dtype), x_test.to(dtype)
    torch.manual_seed(a.seed)
    model = ResNet(x_train.shape[1], 10, a.blocks, a.width, a.sync_bn).to(dtype)
    if a.init:  # strict: every name and shape of lockstep's state_dict, nothing more or less
        model.load_state_dict(load_file(a.init), strict=True)
    dev = torch.device(a.device)
    model.to(dev)
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.SGD(model.parameters(), a.lr, momentum=a.momentum, nesterov=True, weight_decay=a.weight_decay)
    spe = math.ceil(math.ceil(len(x_train) / world) / a.batch_size)  # steps per epoch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, a.lr, epochs=a.epochs, steps_per_epoch=spe)
    total = a.steps if a.steps >= 0 else a.epochs * spe

    def batches(epoch):
        idx = shard(len(x_train), rank, world, not a.no_shuffle, a.seed, epoch)
        for i in range(0, len(idx), a.batch_size):
            j = torch.tensor(idx[i:i + a.batch_size])
            yield x_train[j].to(dev), y_train[j].to(dev)

    if a.bench_steps:
        return bench(a, ddp, opt, batches, world, rank, dev)
    train_loop(a, model, ddp, opt, sched, batches, total, spe, x_test, y_test, world, rank, dev)


def write_fixture(a):
    """Each of FIXTURES: initial weights from lockstep's --seed 0 in float32, kept as
    resnet_parity_init.safetensors (the parity tests start lockstep from them: another build's
    initialisation may round differently), then PyTorch's losses from them and the final BatchNorm
    running statistics."""
    assert a.lockstep and a.launch, "--write-fixture needs --lockstep and --launch"
    init = os.path.join(FIXTURE_DIR, "resnet_parity_init.safetensors")
    for name, (args, ranks, two_rank_extra, procs) in FIXTURES.items():
        with tempfile.TemporaryDirectory() as tmp:
            float32_args = [x for x in args if x != "--float64"]  # the twin widens them as lockstep does
            subprocess.run([a.launch, "--nproc_per_node=1", a.lockstep, *float32_args, "--steps", "0", "--save", init],
                           check=True)
            keys = sorted(load_file(init))  # the run below loads them with strict=True: it fails on any mismatch
            losses, final = os.path.join(tmp, "losses.json"), os.path.join(tmp, "final.safetensors")
            env = dict(os.environ, OMP_NUM_THREADS="1")
            env.pop("WORLD_SIZE", None)
            launcher = [sys.executable] if procs == 1 else [sys.executable, "-m", "torch.distributed.run",
                                                            f"--nproc_per_node={procs}"]
            subprocess.run([*launcher, __file__, *args, "--batch-size", str(2 * FIXTURE_BATCH // procs),
                            "--steps", str(FIXTURE_STEPS), "--init", init, "--losses", losses, "--save", final],
                           check=True, env=env)
            with open(losses) as f:
                got = json.load(f)["losses"]
            running = {k: v.tolist() for k, v in load_file(final).items() if k.endswith((".running_mean", ".running_var"))}
        fixture = {"about": f"PyTorch's global loss after each of the first steps of examples/resnet on {procs} "
                            f"process(es) at batch {2 * FIXTURE_BATCH // procs} each, in float64, from lockstep's initial weights "
                            f"(--seed 0; its {len(keys)} tensors load into the twin's ResNet strictly), and the "
                            "BatchNorm running statistics after the last step (rank 0's); "
                            "tools/fixtures/make_resnet_fixtures.sh wrote it, with torch " + torch.__version__,
                   "args": args, "ranks": ranks}
        if two_rank_extra:
            fixture["two_rank_args"] = two_rank_extra
        fixture.update({"batch_per_rank": FIXTURE_BATCH, "steps": FIXTURE_STEPS, "losses": got, "running": running})
        path = os.path.join(FIXTURE_DIR, name + ".json")
        with open(path, "w") as f:
            json.dump(fixture, f, indent=1)
            f.write("\n")
        print(f"wrote {os.path.normpath(path)}: {len(got)} losses, {got[0]:.6f} .. {got[-1]:.6f}, "
              f"{len(running)} running statistics; lockstep's {len(keys)} tensors load strictly")


if __name__ == "__main__":
    main()
