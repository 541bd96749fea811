#!/usr/bin/env python3
"""bench_report: the tables and the busbw plot from a bench/run_benchmarks.sh results folder (stdlib only).

usage: bench/bench_report.py RESULTS_DIR [--svg docs/busbw.svg]

Reads, for every repetition k:
  allreduce_lockstep_wN_rk.csv, allreduce_raw_wN_rk.csv   allreduce_bench --csv (lockstep's gloo process group,
                                                           and gloo called directly)
  allreduce_torch_wN_rk.txt                               ../shared/anchors/torch_allreduce.py N
  ddp_lockstep_WORKLOAD_wN_rk.txt                         ddp_bench (last line `step_ms`)
  ddp_torch_VARIANT_wN_rk.txt                             ../shared/anchors/torch_mlp.py N (`step_ms=`)
and prints Markdown tables of the medians over repetitions, with ratios.

Statistics. allreduce_bench times each iteration and takes, per iteration, the slowest rank; its headline
figure is the median over iterations (`median`), and its CSV also has the mean (`mean`). PyTorch's script
reports rank 0's loop time / iterations, a mean, so lockstep is compared with PyTorch on means (ours is the
mean of per-iteration maxima, which can only be larger), and with raw gloo (same harness) on medians. All
figures are in-place all-reduces of float32 with SUM. Each figure is the median over the runs; the "best runs"
ratios compare the fastest run of each (on a shared machine, the run least disturbed by other work). The plot
shows the median over runs of the mean time, for every series.
"""
import argparse
import csv
import glob
import math
import os
import re
import statistics
import sys


def busbw(nbytes, us, world):
    return nbytes / (us * 1e-6) / 1e9 * 2 * (world - 1) / world


def human(nbytes):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


def rep_files(folder, pattern):
    return sorted(glob.glob(os.path.join(folder, pattern)))


# --- All-reduce ---

def read_lockstep(path):
    """{size: (median_us, mean_us)} of the in-place columns."""
    out = {}
    with open(path) as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            if row.get("impl") == "impl" or not row.get("size_bytes"):
                continue  # a second header where two sweeps were concatenated
            out[int(row["size_bytes"])] = (float(row["ip_time_us"]), float(row["ip_mean_us"]))
    return out


TORCH_LINE = re.compile(r"^\s*(\d+) B\s+([\d.]+) us")


def read_torch_allreduce(path):
    out = {}
    with open(path) as f:
        for line in f:
            m = TORCH_LINE.match(line)
            if m:
                us = float(m.group(2))
                out[int(m.group(1))] = (us, us)
    return out


def aggregate(folder, impl, world):
    """{size: (median time, mean time, best median time, best mean time)}, runs: the first two are medians over
    the runs, the last two the smallest over the runs."""
    if impl == "torch":
        runs = [read_torch_allreduce(p) for p in rep_files(folder, f"allreduce_torch_w{world}_r*.txt")]
    else:
        runs = [read_lockstep(p) for p in rep_files(folder, f"allreduce_{impl}_w{world}_r*.csv")]
    runs = [r for r in runs if r]
    sizes = sorted({s for r in runs for s in r})
    agg = {}
    for s in sizes:
        vals = [r[s] for r in runs if s in r]
        agg[s] = (statistics.median(v[0] for v in vals), statistics.median(v[1] for v in vals),
                  min(v[0] for v in vals), min(v[1] for v in vals))
    return agg, len(runs)


def allreduce_tables(folder):
    series = {}
    for world in (2, 4):
        ours, n_ours = aggregate(folder, "lockstep", world)
        torch, n_torch = aggregate(folder, "torch", world)
        raw, n_raw = aggregate(folder, "raw", world)
        if not ours:
            continue
        series[world] = (ours, torch, raw)
        print(f"\n### {world} ranks (medians over {n_ours} / {n_torch} / {n_raw} runs of lockstep / PyTorch / raw gloo)\n")
        print("| size | lockstep µs (median) | lockstep busbw GB/s (median) | lockstep µs (mean) | PyTorch µs (mean) "
              "| lockstep / PyTorch busbw (means) | raw gloo µs (median) | lockstep / raw gloo busbw (medians) "
              "| best runs: lockstep / PyTorch | best runs: lockstep / raw gloo |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        misses = {"torch": [], "raw": [], "best torch": [], "best raw": []}
        for s in sorted(ours):
            med, mean, best_med, best_mean = ours[s]
            cells = [human(s), f"{med:.1f}", f"{busbw(s, med, world):.4f}", f"{mean:.1f}"]
            ratios = {}
            if s in torch:
                ratios["torch"], ratios["best torch"] = torch[s][1] / mean, torch[s][3] / best_mean
                cells += [f"{torch[s][1]:.1f}", f"{ratios['torch']:.2f}"]
            else:
                cells += ["", ""]
            if s in raw:
                ratios["raw"], ratios["best raw"] = raw[s][0] / med, raw[s][2] / best_med
                cells += [f"{raw[s][0]:.1f}", f"{ratios['raw']:.2f}"]
            else:
                cells += ["", ""]
            cells += [f"{ratios['best torch']:.2f}" if "best torch" in ratios else "",
                      f"{ratios['best raw']:.2f}" if "best raw" in ratios else ""]
            for key, r in ratios.items():
                if (key.endswith("torch") and r < 1) or (key.endswith("raw") and s >= 1 << 20 and r < 0.95):
                    misses[key].append(human(s))
            print("| " + " | ".join(cells) + " |")

        def verdict(key):
            return "yes" if not misses[key] else "no, at " + ", ".join(misses[key])
        print(f"\nbusbw >= PyTorch at every size: medians {verdict('torch')}; best runs {verdict('best torch')}.  ")
        print(f"Within 5% of raw gloo for >= 1 MiB: medians {verdict('raw')}; best runs {verdict('best raw')}.")
    return series


# --- DDP ---

def last_float(path, pattern):
    val = None
    with open(path) as f:
        for line in f:
            m = re.search(pattern, line)
            if m:
                val = float(m.group(1))
    return val


def ddp_tables(folder):
    def med(pattern, regex):
        vals = [v for v in (last_float(p, regex) for p in rep_files(folder, pattern)) if v is not None]
        return (statistics.median(vals), len(vals)) if vals else (None, 0)

    def breakdown(pattern):
        rows = []
        for p in rep_files(folder, pattern):
            with open(p) as f:
                for line in f:
                    m = re.search(r"forward ([\d.]+) ms, backward ([\d.]+) ms.*comm wait ([\d.]+) ms.*optimizer ([\d.]+) ms, "
                                  r"other (-?[\d.]+) ms", line)
                    if m:
                        rows.append([float(x) for x in m.groups()])
        if not rows:
            return None
        return [statistics.median(col) for col in zip(*rows)]

    variants = sorted({re.match(r"ddp_torch_(.+)_w\d+_r\d+\.txt", os.path.basename(p)).group(1)
                       for p in rep_files(folder, "ddp_torch_*_w*_r*.txt")})
    print("\n### MLP 256-512-512-10, global batch 128: step ms, median over runs (ratio > 1: lockstep is faster)\n")
    print("PyTorch's step_ms is the mean over 300 steps; lockstep's step_ms is the median of 5 rounds of 100 steps "
          "and its mean step the mean over all 500; the ratio uses the means.\n")
    header = (["world", "lockstep step_ms (runs)", "lockstep mean step"] + [f"PyTorch, {v} (runs)" for v in variants] +
              [f"PyTorch {v} / lockstep (means)" for v in variants])
    print("| " + " | ".join(header) + " |")
    print("|" + "---:|" * len(header))
    for world in (1, 2, 4):
        ours, n = med(f"ddp_lockstep_mlp_w{world}_r*.txt", r"^step_ms ([\d.]+)")
        if ours is None:
            continue
        mean, _ = med(f"ddp_lockstep_mlp_w{world}_r*.txt", r"^mean step ([\d.]+) ms")
        cells = [str(world), f"{ours:.3f} ({n})", f"{mean:.3f}"]
        theirs = [med(f"ddp_torch_{v}_w{world}_r*.txt", r"step_ms=([\d.]+)") for v in variants]
        cells += [f"{t:.3f} ({k})" if t else "" for t, k in theirs]
        cells += [f"{t / mean:.2f}" if t else "" for t, _ in theirs]
        print("| " + " | ".join(cells) + " |")

    print("\n### lockstep ddp_bench: throughput, scaling and where a step goes (medians over runs)\n")
    print("| workload | world | step ms | samples/s | world-1 step ms | efficiency | forward | backward (hooks incl.) "
          "| comm wait (not hidden) | optimizer | other |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for workload in ("mlp", "fmnist"):
        for world in (1, 2, 4):
            pattern = f"ddp_lockstep_{workload}_w{world}_r*.txt"
            step, n = med(pattern, r"^step_ms ([\d.]+)")
            if step is None:
                continue
            base, _ = med(pattern, r"world-1 step ([\d.]+) ms")
            b = breakdown(pattern)
            eff = f"{100 * base / (world * step):.0f}%" if base else ""
            cells = [workload, str(world), f"{step:.3f}", f"{128 / step * 1e3:.0f}", f"{base:.3f}" if base else "", eff]
            cells += [f"{x:.3f}" for x in b] if b else [""] * 5
            print("| " + " | ".join(cells) + " |")


# --- SVG ---

def write_svg(series, path):
    W, H, left, right, top, bottom = 760, 470, 70, 190, 40, 55
    pw, ph = W - left - right, H - top - bottom
    pts = [(s, busbw(s, v[1], w)) for w, (ours, torch, raw) in series.items() for d in (ours, torch, raw)
           for s, v in d.items()]
    xmin, xmax = math.log2(min(p[0] for p in pts)), math.log2(max(p[0] for p in pts))
    ymin = math.floor(math.log10(min(p[1] for p in pts)))
    ymax = math.ceil(math.log10(max(p[1] for p in pts)))

    def X(s):
        return left + (math.log2(s) - xmin) / (xmax - xmin) * pw

    def Y(bw):
        return top + (ymax - math.log10(bw)) / (ymax - ymin) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="Helvetica, Arial, sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{left + pw / 2}" y="22" text-anchor="middle" font-size="15">All-reduce bus bandwidth, '
           'float32 SUM, CPU over loopback (gloo)</text>']
    for e in range(ymin, ymax + 1):
        y = Y(10 ** e)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">1e{e}</text>')
    s = 2 ** int(xmin)
    while math.log2(s) <= xmax:
        x = X(s)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#eee"/>')
        label = human(s).replace(" ", "").replace("iB", "")
        out.append(f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{label}</text>')
        s *= 4
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    out.append(f'<text x="{left + pw / 2}" y="{H - 12}" text-anchor="middle">message size (bytes)</text>')
    out.append(f'<text transform="translate(18 {top + ph / 2}) rotate(-90)" text-anchor="middle">busbw (GB/s), '
               'log scale</text>')
    styles = {"lockstep": ("#1f77b4", "lockstep gloo"), "torch": ("#ff7f0e", "PyTorch gloo"),
              "raw": ("#2ca02c", "raw gloo")}
    dashes = {2: "", 4: ' stroke-dasharray="6 4"'}
    legend_y = top + 10
    for world, (ours, torch, raw) in sorted(series.items()):
        for key, data in (("lockstep", ours), ("torch", torch), ("raw", raw)):
            if not data:
                continue
            color, name = styles[key]
            line = " ".join(f"{X(s):.1f},{Y(busbw(s, v[1], world)):.1f}" for s, v in sorted(data.items()))
            out.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="2"{dashes[world]}/>')
            for s, v in sorted(data.items()):
                out.append(f'<circle cx="{X(s):.1f}" cy="{Y(busbw(s, v[1], world)):.1f}" r="2.5" fill="{color}"/>')
            lx = left + pw + 15
            out.append(f'<line x1="{lx}" y1="{legend_y}" x2="{lx + 28}" y2="{legend_y}" stroke="{color}" '
                       f'stroke-width="2"{dashes[world]}/>')
            out.append(f'<text x="{lx + 34}" y="{legend_y + 4}">{name}, {world} ranks</text>')
            legend_y += 20
    out.append(f'<text x="{left + pw + 15}" y="{legend_y + 10}" font-size="10" fill="#555">mean time per '
               'iteration</text>')
    out.append("</svg>")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results")
    p.add_argument("--svg", help="write the busbw plot here")
    a = p.parse_args()
    print("## All-reduce")
    series = allreduce_tables(a.results)
    print("\n## DDP training")
    ddp_tables(a.results)
    if a.svg and series:
        write_svg(series, a.svg)
        print(f"\n(plot written to {a.svg})", file=sys.stderr)


if __name__ == "__main__":
    main()
