#!/usr/bin/env python3
"""collectives_report.py DIR: the table of bench/collectives_bench.sh's runs (BENCHMARKS.md).

Reads DIR/{shm,mpi}_{op}_w{ranks}_r{rep}.csv (allreduce_bench --csv) and prints, per collective and
size, the median over repetitions of lockstep's and Open MPI's time and busbw, out of place and in place,
and their ratio (lockstep's busbw / Open MPI's: above 1 is lockstep faster), with the worst repetition's
ratio beside it (repetitions paired in the order they ran)."""
import csv
import glob
import re
import statistics
import sys
from collections import defaultdict


def read(path):
    with open(path) as f:
        return {int(r["size_bytes"]): r for r in csv.DictReader(line for line in f if not line.startswith("#"))}


def main(folder):
    runs = defaultdict(dict)  # (op, ranks) -> impl -> [rep rows]
    for path in sorted(glob.glob(f"{folder}/*_w*_r*.csv")):
        m = re.search(r"/(shm|mpi)_(\w+)_w(\d+)_r(\d+)\.csv$", path)
        if not m:
            continue
        impl, op, ranks, rep = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
        runs[(op, ranks)].setdefault(impl, {})[rep] = read(path)
    for (op, ranks), by_impl in sorted(runs.items()):
        shm, mpi = by_impl.get("shm", {}), by_impl.get("mpi", {})
        reps = sorted(set(shm) & set(mpi))
        if not reps:
            continue
        print(f"\n#### {op}, {ranks} ranks ({len(reps)} repetitions; busbw = algbw (n-1)/n)\n")
        print("| size | kind | lockstep µs | lockstep busbw GB/s | Open MPI µs | Open MPI busbw GB/s "
              "| lockstep / MPI busbw (median) | (worst rep) |")
        print("|---|---|---|---|---|---|---|---|")
        sizes = sorted(set.intersection(*[set(shm[r]) & set(mpi[r]) for r in reps]))
        for size in sizes:
            for kind, prefix in (("out of place", "oop"), ("in place", "ip")):
                def med(runs_, col):
                    return statistics.median(float(runs_[r][size][f"{prefix}_{col}"]) for r in reps)
                ratios = [float(shm[r][size][f"{prefix}_busbw_gbs"]) / float(mpi[r][size][f"{prefix}_busbw_gbs"])
                          for r in reps]
                wrong = sum(int(x[r][size][f"{prefix}_wrong"]) for x in (shm, mpi) for r in reps
                            if x[r][size][f"{prefix}_wrong"] not in ("N/A", ""))
                label = f"{size // 1024} KiB" if size < 1 << 20 else f"{size // (1 << 20)} MiB"
                print(f"| {label} | {kind} | {med(shm, 'time_us'):.1f} | {med(shm, 'busbw_gbs'):.3f} | "
                      f"{med(mpi, 'time_us'):.1f} | {med(mpi, 'busbw_gbs'):.3f} | "
                      f"{med(shm, 'busbw_gbs') / med(mpi, 'busbw_gbs'):.2f}x | {min(ratios):.2f}x |"
                      + ("" if wrong == 0 else f" {wrong} WRONG |"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
