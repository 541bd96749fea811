"""Runs //bench:op_bench and its PyTorch twin (bench/op_bench.py) alternately, one thread each,
and prints a Markdown table: per op, the median over runs of each side's median, the best over runs,
and lockstep / PyTorch ratios (below 1: lockstep faster). Rows PyTorch has no twin of (conv2d's
_im2col and _onednn rows: one implementation each) show lockstep's times alone.

    python3 bench/op_bench_compare.py --runs 5 [--lockstep bazel-bin/bench/op_bench] [--only op1,op2,prefix*]
        [--python ~/.cache/torch-venv/bin/python]
"""
import argparse
import os
import statistics
import subprocess


def parse(out):
    return {l.split()[1]: (float(l.split()[2]), float(l.split()[3])) for l in out.splitlines() if l.startswith("op ")}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--lockstep", default=os.path.join(here, "..", "bazel-bin", "bench", "op_bench"))
    p.add_argument("--python", default=os.path.expanduser("~/.cache/torch-venv/bin/python"))
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--rounds", type=int, default=7, help="timed rounds per process")
    p.add_argument("--only", default="", help="comma-separated op names (NAME*: every op whose name starts with "
                   "NAME): run just these, one process each")
    a = p.parse_args()
    names = [n for n in a.only.split(",") if n] or [None]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    ours, theirs = {}, {}
    for _ in range(a.runs):
        for only in names:
            pick = ["--only", only] if only else []
            rounds = ["--iters", str(a.iters), "--rounds", str(a.rounds)]
            for cmd, sink in (([a.lockstep, "--threads", "1"] + rounds + pick, ours),
                              ([a.python, os.path.join(here, "op_bench.py")] + rounds + pick, theirs)):
                out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
                for name, t in parse(out).items():
                    sink.setdefault(name, []).append(t)
    print("| op | lockstep median µs | PyTorch median µs | ratio (median) | lockstep best µs | PyTorch best µs | ratio (best) |")
    print("|---|---|---|---|---|---|---|")
    for name in ours:
        if name not in theirs:
            om, ob = statistics.median(t[0] for t in ours[name]), min(t[1] for t in ours[name])
            print(f"| {name} | {om:.1f} | - | - | {ob:.1f} | - | - |")
            continue
        om = statistics.median(t[0] for t in ours[name])
        tm = statistics.median(t[0] for t in theirs[name])
        ob = min(t[1] for t in ours[name])
        tb = min(t[1] for t in theirs[name])
        print(f"| {name} | {om:.1f} | {tm:.1f} | {om / tm:.2f} | {ob:.1f} | {tb:.1f} | {ob / tb:.2f} |")


if __name__ == "__main__":
    main()
