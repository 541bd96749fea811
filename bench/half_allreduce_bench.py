#!/usr/bin/env python3
"""bfloat16 against float32 all-reduce through lockstep, 2 ranks: shared memory and TCP (LOCKSTEP_SHM=0).

For each gradient size in elements, allreduce_bench runs float32 SUM at 4 bytes per element and bfloat16
SUM at 2 (its sizes and bandwidths are in bytes of the dtype), interleaved, --rounds times in rotating
order; prints a markdown table of the median in-place times and the bf16 / float32 ratio.

    tools/bazel build //bench:allreduce_bench //distributed/launch
    python3 bench/half_allreduce_bench.py --rounds 5 [--bin DIR]
"""
import argparse
import csv
import io
import os
import statistics
import subprocess

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = {"launch": os.path.join(ROOT, "bazel-bin/distributed/launch/launch"),
       "bench": os.path.join(ROOT, "bazel-bin/bench/allreduce_bench")}
ELEMENTS = [16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20]  # gradient elements per all-reduce (x4 steps)


def run(transport, dtype, iters):
    """{elements: in-place time in us} for one allreduce_bench sweep."""
    esize = 4 if dtype == "float" else 2
    env = dict(os.environ, OMP_NUM_THREADS="1", LOCKSTEP_SHM="1" if transport == "shm" else "0")
    cmd = [BIN["launch"], "--nproc_per_node=2", BIN["bench"], "--csv", "-d", dtype, "-b", str(ELEMENTS[0] * esize),
           "-e", str(ELEMENTS[-1] * esize), "-f", "4", "-n", str(iters), "-w", "3"]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    rows = [r for r in csv.DictReader(io.StringIO(out[out.index("impl,"):])) if r["impl"]]
    got = {}
    for r in rows:
        assert r["ip_wrong"] in ("0", ""), f"{transport} {dtype}: wrong results: {r}"
        got[int(r["count"])] = float(r["ip_time_us"])
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--bin", help="a folder holding copies of launch and allreduce_bench (else bazel-bin's)")
    args = ap.parse_args()
    if args.bin:
        BIN.update(launch=os.path.join(args.bin, "launch"), bench=os.path.join(args.bin, "allreduce_bench"))
    runs = [(t, d) for t in ("shm", "tcp") for d in ("float", "bfloat16")]
    times = {k: {n: [] for n in ELEMENTS} for k in runs}
    for i in range(args.rounds):
        order = runs[i % len(runs):] + runs[:i % len(runs)]
        for t, d in order:
            for n, us in run(t, d, args.iters).items():
                times[(t, d)][n].append(us)
    print("| transport | elements | float32 (MiB) | float32 us | bfloat16 us | bf16 / f32 |")
    print("|---|---|---|---|---|---|")
    for t in ("shm", "tcp"):
        for n in ELEMENTS:
            f = statistics.median(times[(t, "float")][n])
            b = statistics.median(times[(t, "bfloat16")][n])
            print(f"| {t} | {n} | {n * 4 / 2**20:g} | {f:.1f} | {b:.1f} | {b / f:.2f}x |")


if __name__ == "__main__":
    main()
