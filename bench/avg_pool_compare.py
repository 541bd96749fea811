"""Runs //bench:avg_pool_bench and bench/torch_avg_pool.py alternately (--runs times, one thread each)
and prints a Markdown table: per pool, pass and 16-bit dtype, the median over runs of each side's
median ms, lockstep's 16-bit kernel against its float32 route, and lockstep against PyTorch.

    python3 bench/avg_pool_compare.py --runs 5 [--lockstep bazel-bin/bench/avg_pool_bench]
        [--python ~/.cache/torch-venv/bin/python]
"""
import argparse
import os
import statistics
import subprocess


def parse(out):
    return {l.split()[1]: float(l.split()[2]) for l in out.splitlines() if l.startswith("BENCH ")}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds per process")
    p.add_argument("--steps", type=int, default=5, help="calls per round")
    p.add_argument("--lockstep", default=os.path.join(here, "..", "bazel-bin", "bench", "avg_pool_bench"))
    p.add_argument("--python", default=os.path.expanduser("~/.cache/torch-venv/bin/python"))
    a = p.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    flags = ["--rounds", str(a.rounds), "--steps", str(a.steps)]
    ours, theirs = {}, {}
    for _ in range(a.runs):
        for cmd, sink in (([a.lockstep] + flags, ours),
                          ([a.python, os.path.join(here, "torch_avg_pool.py")] + flags, theirs)):
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
            for name, ms in parse(out).items():
                sink.setdefault(name, []).append(ms)
    med = lambda d, k: statistics.median(d[k])
    print("| pool, pass | dtype | lockstep 16-bit ms | lockstep via float32 ms | speedup | lockstep float32 ms "
          "| PyTorch 16-bit ms | PyTorch float32 ms | lockstep / PyTorch (16-bit) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for pool in ("3x3s2p1", "2x2s2"):
        for pas in ("fwd", "fwd_bwd"):
            case = f"{pool}_{pas}"
            for dt in ("bfloat16", "float16"):
                n, c = med(ours, f"{case}_{dt}"), med(ours, f"{case}_{dt}_via_float32")
                f, tn, tf = med(ours, f"{case}_float32"), med(theirs, f"{case}_{dt}"), med(theirs, f"{case}_float32")
                print(f"| {pool} {pas.replace('_', ' + ')} | {dt} | {n:.2f} | {c:.2f} | {c / n:.2f}x | {f:.2f} "
                      f"| {tn:.2f} | {tf:.2f} | {n / tn:.2f} |")


if __name__ == "__main__":
    main()
