"""Step time of examples/cnn_fashion (mnist/main.py's CNN, batch 64 per rank, Adam) and of its PyTorch
twin (tools/twins/cnn_fashion_twin.py) at 1 and 2 ranks, one thread per rank: lockstep under its launcher,
PyTorch under torch.distributed.run. Runs alternate (lockstep, PyTorch, per world size, round after
round); each run prints the median step time (wall) and the mean process CPU time per step, and the
table gives, per side, the median and best over the rounds and lockstep / PyTorch (below 1: lockstep
faster). On a loaded machine the CPU time per step is the steadier figure. --dtype bfloat16: both sides
run forward and loss under autocast (lockstep's, torch.autocast); --model-args: flags both sides get.

    tools/bazel build //examples:cnn_fashion //distributed/launch && python3 bench/cnn_fashion_bench.py --rounds 3
"""
import re
import subprocess

from twin_bench import parse_args, print_table


def step_ms(cmd, env):
    """(wall ms, CPU ms) of one run: the median step and the mean CPU time per step."""
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    wall = float([l for l in out.splitlines() if l.startswith("step_ms ")][-1].split()[1])
    cpu = float(re.findall(r"cpu_ms ([0-9.]+)", out)[-1])
    return wall, cpu


def main():
    def extra(p):
        p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                       help="bfloat16: both sides under autocast (lockstep's autocast, torch.autocast)")

    a = parse_args("cnn_fashion", "cnn_fashion_twin.py", default_steps=20, extra=extra)
    shared = ["--bench-steps", str(a.steps), "--dtype", a.dtype] + a.model_args
    times = {}
    for _ in range(a.rounds):
        for w in a.worlds:
            times.setdefault(("lockstep", w), []).append(step_ms(
                [a.launch, f"--nproc_per_node={w}", a.binary] + shared, a.env))
            times.setdefault(("pytorch", w), []).append(step_ms(
                [a.python, "-m", "torch.distributed.run", f"--nproc_per_node={w}", a.twin] + shared, a.env))
            print(f"# world {w}: lockstep {times[('lockstep', w)][-1]} ms, "
                  f"PyTorch {times[('pytorch', w)][-1]} ms (wall, CPU)", flush=True)
    print_table(times, a.worlds)


if __name__ == "__main__":
    main()
