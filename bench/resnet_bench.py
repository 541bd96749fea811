"""Step time of examples/resnet (ResNet-20, SGD Nesterov, OneCycleLR, batch 128 per rank) and of its
PyTorch twin (tools/twins/resnet_twin.py) at 1 and 2 ranks, one thread per rank, on CIFAR-shaped random
images (--synthetic: 3 x 32 x 32; --fashion: Fashion-MNIST's 1 x 28 x 28 instead): lockstep under its
launcher, PyTorch under torch.distributed.run, runs alternating as in bench/cnn_fashion_bench.py, whose
table (per side the median and best over the rounds, lockstep / PyTorch) this prints too.

    tools/bazel build //examples:resnet //distributed/launch && python3 bench/resnet_bench.py --rounds 5
"""
import sys

from cnn_fashion_bench import step_ms
from twin_bench import parse_args, print_table


def main():
    fashion = "--fashion" in sys.argv
    if fashion:
        sys.argv.remove("--fashion")
    a = parse_args("resnet", "resnet_twin.py", default_steps=10)
    data = [] if fashion else ["--synthetic", "2560"]  # 20 batches of 128 at 1 rank, 10 a rank at 2
    times = {}
    for _ in range(a.rounds):
        for w in a.worlds:
            args = ["--bench-steps", str(a.steps), "--batch-size", "128", *data]
            times.setdefault(("lockstep", w), []).append(step_ms(
                [a.launch, f"--nproc_per_node={w}", a.binary, *args], a.env))
            times.setdefault(("pytorch", w), []).append(step_ms(
                [a.python, "-m", "torch.distributed.run", f"--nproc_per_node={w}", a.twin, *args], a.env))
            print(f"# world {w}: lockstep {times[('lockstep', w)][-1]} ms, "
                  f"PyTorch {times[('pytorch', w)][-1]} ms (wall, CPU)", flush=True)
    print_table(times, a.worlds)


if __name__ == "__main__":
    main()
