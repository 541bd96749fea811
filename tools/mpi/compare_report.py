#!/usr/bin/env python3
"""compare_report.py DIR: the table of tools/mpi/compare.sh, from DIR/lockstep_*.csv and DIR/mpi_*.csv
(allreduce_bench --csv rows). Per size and column (in-place, out-of-place): the median and the best
of the repetitions' times (each already the median over iterations of the slowest rank), and lockstep
against raw MPI as a difference in microseconds and a ratio of the medians; with DIR/rawbin_*.csv
(allreduce_bench --raw-mpi) also lockstep against MPI_Allreduce on the same tensors in the same binary."""
import csv
import glob
import statistics
import sys


def load(pattern):
    runs = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            runs.append({int(r["size_bytes"]): r for r in csv.DictReader(f)})
    return runs


def main():
    d = sys.argv[1]
    ours, raw, rawbin = load(d + "/lockstep_*.csv"), load(d + "/mpi_*.csv"), load(d + "/rawbin_*.csv")
    if not ours or not raw:
        sys.exit(f"compare_report: no lockstep_*.csv or mpi_*.csv in {d}")
    print(f"# {len(ours)} lockstep-mpi and {len(raw)} raw MPI runs; times in us (median of reps / best of reps)")
    for col, name in (("ip_time_us", "in-place"), ("oop_time_us", "out-of-place")):
        print(f"\n## {name}")
        extra = " raw-mpi in allreduce_bench med | best | ratio med |" if rawbin else ""
        print(f"| size (B) | lockstep-mpi med | best | MPI_Allreduce med | best | diff med (us) | ratio med |{extra}")
        print("|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if rawbin else ""))
        for size in sorted(ours[0]):
            a = [float(r[size][col]) for r in ours if size in r]
            b = [float(r[size][col]) for r in raw if size in r]
            if not a or not b:
                continue
            ma, mb = statistics.median(a), statistics.median(b)
            row = f"| {size} | {ma:.2f} | {min(a):.2f} | {mb:.2f} | {min(b):.2f} | {ma - mb:+.2f} | {ma / mb:.3f} |"
            c = [float(r[size][col]) for r in rawbin if size in r]
            if c:  # lockstep against MPI_Allreduce on the same tensors in the same binary
                mc = statistics.median(c)
                row += f" {mc:.2f} | {min(c):.2f} | {ma / mc:.3f} |"
            print(row)


if __name__ == "__main__":
    main()
