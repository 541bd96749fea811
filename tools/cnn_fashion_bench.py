"""Step time of examples/cnn_fashion (mnist/main.py's CNN, batch 64 per rank, Adam) and of its PyTorch
twin (tools/cnn_fashion_twin.py) at 1 and 2 ranks, one thread per rank: lockstep under its launcher,
PyTorch under torch.distributed.run. Runs alternate (lockstep, PyTorch, per world size, round after
round); each run prints the median step time (wall) and the mean process CPU time per step, and the
table gives, per side, the median and best over the rounds and lockstep / PyTorch (below 1: lockstep
faster). On a loaded machine the CPU time per step is the steadier figure.

    tools/bazel build //examples:cnn_fashion //distributed/launch && python3 tools/cnn_fashion_bench.py --rounds 3
"""
import argparse
import os
import re
import subprocess

from twin_table import print_table


def step_ms(cmd, env):
    """(wall ms, CPU ms) of one run: the median step and the mean CPU time per step."""
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    wall = float([l for l in out.splitlines() if l.startswith("step_ms ")][-1].split()[1])
    cpu = float(re.findall(r"cpu_ms ([0-9.]+)", out)[-1])
    return wall, cpu


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--worlds", default="1,2")
    p.add_argument("--python", default=os.path.expanduser("~/.cache/torch-venv/bin/python"))
    a = p.parse_args()
    launch = os.path.join(root, "bazel-bin", "distributed", "launch", "launch")
    cnn = os.path.join(root, "bazel-bin", "examples", "cnn_fashion")
    twin = os.path.join(root, "tools", "cnn_fashion_twin.py")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    times = {}
    for _ in range(a.rounds):
        for w in map(int, a.worlds.split(",")):
            times.setdefault(("lockstep", w), []).append(step_ms(
                [launch, f"--nproc_per_node={w}", cnn, "--bench-steps", str(a.steps)], env))
            times.setdefault(("pytorch", w), []).append(step_ms(
                [a.python, "-m", "torch.distributed.run", f"--nproc_per_node={w}", twin, "--bench-steps",
                 str(a.steps)], env))
            print(f"# world {w}: lockstep {times[('lockstep', w)][-1]} ms, "
                  f"PyTorch {times[('pytorch', w)][-1]} ms (wall, CPU)", flush=True)
    print_table(times, list(map(int, a.worlds.split(","))))


if __name__ == "__main__":
    main()
