"""The GPT step of examples/gpt in float32 and under autocast (bfloat16), lockstep beside its PyTorch twin
and, optionally, beside an earlier lockstep binary (--before, e.g. a build of the previous commit copied
aside), all interleaved round after round (one thread per process, 1 rank). Prints one row per side and
dtype: medians over the rounds of each run's median CPU and wall ms per step (steps 3..) and of its peak
resident set (wait4's max RSS), with each lockstep row's ratio to lockstep's own float32 step.

    tools/bazel build //examples:gpt //distributed/launch
    python3 bench/gpt_step_table.py --rounds 5 --steps 6 --before /tmp/gpt_before \\
        --model-args '--n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 8'
"""
import argparse
import os
import statistics
import subprocess
import tempfile

from gpt_bench import step_ms

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--binary", default=os.path.join(root, "bazel-bin", "examples", "gpt"),
                   help="the lockstep gpt binary (a copy keeps a rebuild from changing it under the rounds)")
    p.add_argument("--before", help="an earlier lockstep gpt binary, run in the same rounds")
    p.add_argument("--python", default=os.path.expanduser("~/.cache/torch-venv/bin/python"))
    p.add_argument("--model-args", default="")
    a = p.parse_args()
    model_args = a.model_args.split()
    launch = os.path.join(root, "bazel-bin", "distributed", "launch", "launch")
    binary = a.binary
    twin = os.path.join(root, "tools", "twins", "gpt_twin.py")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    init = tempfile.NamedTemporaryFile(suffix=".safetensors", delete=False).name
    subprocess.run([launch, "--nproc_per_node=1", binary, "--export-init", init] + model_args, env=env, check=True,
                   capture_output=True)
    run = [launch, "--nproc_per_node=1"]
    ours = ["--init", init, "--steps", str(a.steps), "--eval-iters", "1", "--eval-interval", "1000000",
            "--sample-tokens", "0"]
    sides = [("lockstep", lambda dt: run + [binary] + ours + ["--dtype", dt] + model_args)]
    if a.before:
        sides.append(("lockstep before", lambda dt: run + [a.before] + ours + ["--dtype", dt] + model_args))
    sides.append(("PyTorch", lambda dt: run + [a.python, twin, "--init", init, "--steps", str(a.steps), "--quiet",
                                            "--dtype", dt] + model_args))
    times = {}
    try:
        for r in range(a.rounds):
            for dt in ("bfloat16", "float32"):
                for name, cmd in sides:
                    times.setdefault((name, dt), []).append(step_ms(cmd(dt), env))
                    print(f"# round {r}: {name} {dt} {times[(name, dt)][-1]} (wall ms, CPU ms, peak MiB)", flush=True)
    finally:
        os.unlink(init)
    med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in times.items()}
    print("| side | dtype | CPU ms per step | wall ms per step | peak RSS MiB | CPU / own float32 | peak / own float32 |")
    print("|---|---|---|---|---|---|---|")
    for name, _ in sides:
        for dt in ("bfloat16", "float32"):
            w, c, m = med[(name, dt)]
            fw, fc, fm = med[(name, "float32")]
            print(f"| {name} | {dt} | {c:.0f} | {w:.0f} | {m:.0f} | {c / fc:.2f} | {m / fm:.2f} |")


if __name__ == "__main__":
    main()
