"""What bench/gpt_bench.py and bench/cnn_fashion_bench.py share: their flags, the paths of the binaries
and the twin, the one-thread environment, and the table they print (per world size, each side's
median and best wall time per step over the rounds, lockstep / PyTorch, and the median CPU time per
step; `times` maps ("lockstep" | "pytorch", world) to a list of (wall ms, CPU ms[, peak RSS MiB]), one per
run; with the third, the table adds each side's median peak memory)."""
import argparse
import os
import statistics


def parse_args(example, twin, default_steps, extra=None):
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=default_steps)
    p.add_argument("--worlds", default="1,2")
    p.add_argument("--python", default=os.path.expanduser("~/.cache/torch-venv/bin/python"))
    p.add_argument("--model-args", default="", help="flags both sides get, e.g. '--block-size 1024 --batch-size 4'")
    if extra:
        extra(p)
    a = p.parse_args()
    a.model_args = a.model_args.split()
    a.worlds = list(map(int, a.worlds.split(",")))
    a.launch = os.path.join(root, "bazel-bin", "distributed", "launch", "launch")
    a.binary = os.path.join(root, "bazel-bin", "examples", example)
    a.twin = os.path.join(root, "tools", "twins", twin)
    a.env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return a


def print_table(times, worlds):
    rss = all(len(x) > 2 for v in times.values() for x in v)
    extra = " lockstep peak MiB | PyTorch peak MiB | memory ratio |" if rss else ""
    print("| ranks | lockstep ms (median / best) | PyTorch ms (median / best) | ratio (median / best) "
          "| lockstep CPU ms | PyTorch CPU ms | CPU ratio |" + extra + " runs |")
    print("|---|---|---|---|---|---|---|" + ("---|---|---|" if rss else "") + "---|")
    for w in worlds:
        o, t = times[("lockstep", w)], times[("pytorch", w)]
        ow, tw = [x[0] for x in o], [x[0] for x in t]
        oc, tc = statistics.median(x[1] for x in o), statistics.median(x[1] for x in t)
        om, tm, ob, tb = statistics.median(ow), statistics.median(tw), min(ow), min(tw)
        mem = ""
        if rss:
            orss, trss = statistics.median(x[2] for x in o), statistics.median(x[2] for x in t)
            mem = f" {orss:.0f} | {trss:.0f} | {orss / trss:.2f} |"
        print(f"| {w} | {om:.1f} / {ob:.1f} | {tm:.1f} / {tb:.1f} | {om / tm:.2f} / {ob / tb:.2f} "
              f"| {oc:.1f} | {tc:.1f} | {oc / tc:.2f} |{mem} {len(o)} |")
