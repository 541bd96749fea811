#!/usr/bin/env python3
"""shm_bench_report: the tables of BENCHMARKS.md's "Shared memory" section from a bench/shm_benchmarks.sh
results folder (stdlib only).

usage: bench/shm_bench_report.py RESULTS_DIR

All-reduce figures are in-place float32 SUM. lockstep and MPI (same harness): per run, the median over
iterations of the slowest rank; PyTorch's script reports rank 0's mean, so the PyTorch column compares
with lockstep's mean (per run). Each table cell is the median over runs; "best" is the fastest run of
each side. Ratios are lockstep's busbw over the other's (> 1: lockstep moves more) or, for latency, the
other's time over lockstep's.
"""
import csv
import glob
import os
import re
import statistics
import sys


def busbw(nbytes, us, world):
    return nbytes / (us * 1e-6) / 1e9 * 2 * (world - 1) / world


def human(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n // size} {unit}"
    return f"{n} B"


def read_csv(path):
    """{size: (median_us, mean_us)}, in-place columns."""
    out = {}
    with open(path) as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            if row.get("impl") in (None, "impl") or not row.get("size_bytes"):
                continue
            out[int(row["size_bytes"])] = (float(row["ip_time_us"]), float(row["ip_mean_us"]))
    return out


def read_torch(path):
    out = {}
    for line in open(path):
        m = re.match(r"^\s*(\d+) B\s+([\d.]+) us", line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def runs(folder, pattern, reader):
    return [reader(p) for p in sorted(glob.glob(os.path.join(folder, pattern)))]


def step_ms(path):
    for line in reversed(open(path).read().splitlines()):
        if line.startswith("step_ms"):
            return float(line.split()[1])
    return None


def main():
    folder = sys.argv[1]
    print(open(os.path.join(folder, "machine.txt")).read())
    for w in (2, 4):
        shm = runs(folder, f"ar_shm_w{w}_r*.csv", read_csv)
        mpi = runs(folder, f"ar_mpi_w{w}_r*.csv", read_csv)
        tcp = runs(folder, f"ar_tcp_w{w}_r*.csv", read_csv)
        torch = runs(folder, f"ar_torch_w{w}_r*.txt", read_torch)
        if not shm:
            continue
        print(f"### All-reduce, {w} ranks ({len(shm)} runs)\n")
        print("| size | shm µs | shm busbw GB/s | MPI µs | MPI busbw | shm/MPI busbw (median) | (best) "
              "| TCP µs | shm/TCP | PyTorch gloo µs (mean) | PyTorch/shm (means) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for size in sorted(shm[0]):
            def col(rs, i=0):
                vals = [r[size][i] for r in rs if size in r]
                return (statistics.median(vals), min(vals)) if vals else (None, None)
            s, s_best = col(shm)
            m, m_best = col(mpi)
            t, _ = col(tcp)
            s_mean, _ = col(shm, 1)
            tv = [r[size] for r in torch if size in r]
            pt = statistics.median(tv) if tv else None
            f = lambda x, d=1: "–" if x is None else f"{x:.{d}f}"
            print(f"| {human(size)} | {f(s)} | {f(busbw(size, s, w), 3)} | {f(m)} | "
                  f"{f(busbw(size, m, w) if m else None, 3)} | {f(m / s if m else None, 2)}x | "
                  f"{f(m_best / s_best if m_best else None, 2)}x | {f(t)} | {f(t / s if t else None, 2)}x | "
                  f"{f(pt)} | {f(pt / s_mean if pt else None, 1)}x |")
        print()
    mlp = [step_ms(p) for p in sorted(glob.glob(os.path.join(folder, "mlp_1p_r*.txt")))]
    rows = [("MLP 256-512-512-10, batch 128", "mlp_bench, 1 process", mlp,
             [("DDP 2 ranks, shm", "ddp_shm_mlp_r*.txt"), ("DDP 2 ranks, TCP", "ddp_tcp_mlp_r*.txt")]),
            ("Fashion-MNIST MLP 784-256-128-10, batch 128", "ddp_bench, 1 process",
             [step_ms(p) for p in sorted(glob.glob(os.path.join(folder, "ddp_1p_fmnist_r*.txt")))],
             [("DDP 2 ranks, shm", "ddp_shm_fmnist_r*.txt")])]
    print("### Training step, one thread per process\n")
    print("| workload | run | step ms (median) | best | vs 1 process (median) | (best) |")
    print("|---|---|---|---|---|---|")
    for name, base_name, base, others in rows:
        base = [b for b in base if b]
        if not base:
            continue
        bm, bb = statistics.median(base), min(base)
        print(f"| {name} | {base_name} | {bm:.3f} | {bb:.3f} | 1 | 1 |")
        for label, pattern in others:
            vals = [v for v in (step_ms(p) for p in sorted(glob.glob(os.path.join(folder, pattern)))) if v]
            if vals:
                m, b = statistics.median(vals), min(vals)
                print(f"| {name} | {label} | {m:.3f} | {b:.3f} | {m / bm:.2f}x | {b / bb:.2f}x |")
    print()


if __name__ == "__main__":
    main()
