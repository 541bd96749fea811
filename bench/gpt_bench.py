"""Step time of examples/gpt's default configuration (nanoGPT's CPU shakespeare_char settings: 4 layers,
4 heads, 128 channels, block 64, batch 12 per rank) in lockstep and in its PyTorch twin
(tools/twins/gpt_twin.py), from the same initial weights and batches, at 1 and 2 ranks under lockstep's
launcher, one thread per rank. Runs alternate (lockstep, PyTorch, per world size, round after round);
each run prints the median of its step times (steps 3..), wall and process CPU, and the table gives, per
side, the median and best of those over the rounds, and lockstep / PyTorch (below 1: lockstep faster).
On a loaded machine the CPU time per step is the steadier figure. Each run's peak memory is the largest
resident set (getrusage's max RSS) of the launcher and its ranks. --model-args gives both sides other sizes:
the long-context step is `--model-args '--block-size 1024 --batch-size 4' --worlds 1`.

    tools/bazel build //examples:gpt //distributed/launch && python3 bench/gpt_bench.py --rounds 3
    python3 bench/gpt_bench.py --worlds 1 --dtype bfloat16 \
        --model-args '--n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 8'   # autocast both sides
"""
import os
import subprocess
import tempfile

from twin_bench import parse_args, print_table


def step_ms(cmd, env):
    """(wall ms, CPU ms, peak RSS MiB): the run's medians per step, and the largest resident set of the
    process and its descendants (wait4's max RSS)."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.DEVNULL, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, cmd)
        out.seek(0)
        f = [l for l in out.read().splitlines() if l.startswith("step_ms ")][-1].split()
    return float(f[1]), float(f[3]), usage.ru_maxrss / 1024


def main():
    def extra(p):
        p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                       help="bfloat16: both sides under autocast (lockstep's autocast, torch.autocast)")

    a = parse_args("gpt", "gpt_twin.py", default_steps=30, extra=extra)
    shared = ["--dtype", a.dtype] + a.model_args
    init = tempfile.NamedTemporaryFile(suffix=".safetensors", delete=False).name
    subprocess.run([a.launch, "--nproc_per_node=1", a.binary, "--export-init", init] + a.model_args, env=a.env,
                   check=True, capture_output=True)
    times = {}
    try:
        for _ in range(a.rounds):
            for w in a.worlds:
                run = [a.launch, f"--nproc_per_node={w}"]
                times.setdefault(("lockstep", w), []).append(step_ms(
                    run + [a.binary, "--init", init, "--steps", str(a.steps), "--eval-iters", "1", "--eval-interval",
                           "1000000", "--sample-tokens", "0"] + shared, a.env))
                times.setdefault(("pytorch", w), []).append(step_ms(
                    run + [a.python, a.twin, "--init", init, "--steps", str(a.steps), "--quiet"] + shared, a.env))
                print(f"# world {w}: lockstep {times[('lockstep', w)][-1]} ms, "
                      f"PyTorch {times[('pytorch', w)][-1]} ms (wall, CPU)", flush=True)
    finally:
        os.unlink(init)
    print_table(times, a.worlds)


if __name__ == "__main__":
    main()
