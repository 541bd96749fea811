#!/usr/bin/env python3
"""gpu_check.sh's closing table: reads the logs it wrote (results.tsv, <step>.<side>.<round>.log, gpt.config)
and prints, for each goal of the GPU check, lockstep's figure, the reference's, their ratio and whether the
goal is met. Figures are medians over the rounds that produced one; a figure no log holds is printed as
missing, never guessed. Exits 1 where a run the table needs failed.

  python3 tools/gpu/gpu_check_summary.py <bundle>/logs --gpu "NVIDIA H100 80GB HBM3" [--dry-run]
"""
import argparse
import glob
import os
import re
import statistics

# Dense bfloat16 tensor-core peaks (NVIDIA's datasheets), for model FLOPs utilisation.
PEAK_BF16 = [("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989.4e12), ("H200", 989.4e12),
             ("A100", 312e12)]
LOSS_TOLERANCE = 0.01  # relative: "equal within bf16 noise" (bf16 keeps 8 bits: 2^-8 = 0.4% per rounding)


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def rounds(logs, step, side):
    return sorted(glob.glob(os.path.join(logs, f"{step}.{side}.*.log")))


def bench_rows(text):
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^BENCH (\S+)\s+([-\d.eE+]+)", text, re.M)}


def median_of(logs, step, side, pick):
    """The median over rounds of pick(log text), rounds where it is None left out; (value, n)."""
    vals = [v for v in (pick(read(p)) for p in rounds(logs, step, side)) if v is not None]
    return (statistics.median(vals), len(vals)) if vals else (None, 0)


def step_ms(text):
    m = re.search(r"^step_ms ([\d.]+)", text, re.M)
    return float(m.group(1)) if m else None


def losses(text):
    return [float(m.group(2)) for m in re.finditer(r"^step (\d+) loss ([\d.]+)", text, re.M)]


def fmt(v, unit=""):
    if v is None:
        return "missing"
    return f"{v:.3g} {unit}".strip() if abs(v) < 100 else f"{v:.0f} {unit}".strip()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("logs")
    p.add_argument("--gpu", default="")
    p.add_argument("--build", default="")
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args()
    logs = a.logs
    bad = False

    results = [line.rstrip("\n").split("\t") for line in open(os.path.join(logs, "results.tsv")) if line.strip()]
    tests = [r for r in results if r[0] == "test"]
    print(f"== summary: {a.gpu}; {a.build}")
    counts = {}
    for r in tests:
        counts[r[2]] = counts.get(r[2], 0) + 1
    print("tests: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) +
          "".join(f"\n   {r[1]}: {r[2]}" for r in tests if r[2] != "PASS"))
    for r in (r for r in results if r[0] == "sanitize"):
        print(f"sanitizer {r[1]}: {r[2]}" + (f" ({r[4]})" if len(r) > 4 and r[4] else ""))
    for r in (r for r in results if r[0] == "note"):
        print(f"note, {r[1]}: {r[2]}")
    failed_runs = [r[1] for r in results if r[0] == "run" and r[2] not in ("PASS", "SKIPPED")]
    if failed_runs:
        bad = True
        print("failed runs (their figures are left out): " + ", ".join(failed_runs))

    rows = []  # (item, lockstep, reference, ratio, goal, verdict)

    def compare(item, ours, ref, ref_name, unit, goal, higher_is_better, threshold, pct=False):
        (o, n_o), (r, n_r) = ours, ref
        if o is None or r is None:
            rows.append((item, fmt(o, unit), f"{ref_name} {fmt(r, unit)}", "-", goal, "no figure"))
            return
        ratio = o / r
        if threshold is None:  # no goal: the ratio is reported
            verdict = "-"
        else:
            met = ratio >= threshold if higher_is_better else ratio <= threshold
            verdict = "met" if met else "NOT met"
        shown = f"{100 * ratio:.1f}%" if pct else f"{ratio:.2f}x"
        rows.append((item, f"{fmt(o, unit)} (n={n_o})", f"{ref_name} {fmt(r, unit)} (n={n_r})", shown, goal, verdict))

    # bf16 GEMM and attention (cuda_bench against torch_cuda_bench.py).
    def row(name):
        return lambda text: bench_rows(text).get(name)
    ours_torch_names = sorted(set().union(*[bench_rows(read(p)).keys() for p in rounds(logs, "kernels", "torch")] or [set()]))
    gemm = next((n for n in ours_torch_names if re.fullmatch(r"gemm_\d+_bfloat16", n)), "gemm_4096_bfloat16")
    size = gemm.split("_")[1]
    compare(f"bf16 GEMM {size}^3", median_of(logs, "kernels", "lockstep", row(gemm)),
            median_of(logs, "kernels", "torch", row(gemm + "_cublas")), "raw cuBLAS", "TFLOP/s", ">= 95%", True, 0.95,
            pct=True)
    compare(f"bf16 GEMM {size}^3", median_of(logs, "kernels", "lockstep", row(gemm)),
            median_of(logs, "kernels", "torch", row(gemm)), "torch.matmul", "TFLOP/s", ">= 95%", True, 0.95, pct=True)
    for name in ours_torch_names:
        m = re.fullmatch(r"sdpa_causal_fwd_bwd_T(\d+)_bf16", name)
        if m:
            compare(f"attention fwd+bwd T={m.group(1)} (time)", median_of(logs, "kernels", "lockstep", row(name)),
                    median_of(logs, "kernels", "torch", row(name)), "SDPA flash", "ms", "(none set)", False, None)

    # CNN step.
    compare("CNN step, batch 64 (time)", median_of(logs, "cnn", "lockstep", step_ms),
            median_of(logs, "cnn", "torch", step_ms), "twin", "ms", "<= 1.0x", False, 1.0)

    # GPT: tokens/s, MFU, losses.
    cfg_path = os.path.join(logs, "gpt.config")
    if os.path.exists(cfg_path):
        cfg = read(cfg_path).split()
        get = lambda k: int(cfg[cfg.index(k) + 1]) if k in cfg else None
        B, L, H, C, T = get("batch"), get("--n-layer"), get("--n-head"), get("--n-embd"), get("--block-size")
        vocab = None
        for path in rounds(logs, "gpt", "lockstep") + [os.path.join(logs, "gpt.export.log")]:
            m = re.search(r"vocab (\d+)", read(path)) if os.path.exists(path) else None
            if m:
                vocab = int(m.group(1))
                break
        tok = lambda ms: None if ms is None else B * T / (ms / 1e3)
        ours = median_of(logs, "gpt", "lockstep", lambda t: tok(step_ms(t)))
        ref = median_of(logs, "gpt", "torch", lambda t: tok(step_ms(t)))
        name = f"GPT {L}x{H}x{C}, T {T}, batch {B}, bf16"
        compare(f"{name}: tokens/s", ours, ref, "nanoGPT", "tok/s", ">= 1.0x", True, 1.0)
        peak = next((v for k, v in PEAK_BF16 if k in a.gpu), None)
        if vocab and peak:
            # nanoGPT's estimate_mfu: 6 N + 12 L H Q T per token, N without the position embeddings.
            n_params = L * (12 * C * C + 13 * C) + vocab * C + 2 * C
            per_token = 6 * n_params + 12 * L * H * (C // H) * T
            mfu = lambda v: None if v[0] is None else (100 * v[0] * per_token / peak, v[1])
            compare(f"{name}: MFU % (N {n_params / 1e6:.1f}M, vocab {vocab})", mfu(ours), mfu(ref), "nanoGPT", "%",
                    ">= 1.0x", True, 1.0)
        else:
            rows.append((f"{name}: MFU", "-", "-", "-", "", f"no peak known for '{a.gpu}'" if vocab else "no vocab"))
        ours_l = [losses(read(p)) for p in rounds(logs, "gpt", "lockstep")]
        ref_l = [losses(read(p)) for p in rounds(logs, "gpt", "torch")]
        ours_l, ref_l = [l for l in ours_l if l], [l for l in ref_l if l]
        if ours_l and ref_l:
            x, y = ours_l[0][:20], ref_l[0][:20]
            n = min(len(x), len(y))
            diff = max(abs(u - v) for u, v in zip(x[:n], y[:n]))
            rel = max(abs(u - v) / abs(v) for u, v in zip(x[:n], y[:n]))
            rows.append((f"{name}: loss, first {n} steps", f"{x[0]:.4f} .. {x[n - 1]:.4f}",
                         f"nanoGPT {y[0]:.4f} .. {y[n - 1]:.4f}", f"max |d| {diff:.4f} ({100 * rel:.2f}%)",
                         f"<= {100 * LOSS_TOLERANCE:.0f}%", "met" if rel <= LOSS_TOLERANCE and n == 20 else "NOT met"))
        else:
            rows.append((f"{name}: loss, first 20 steps", "missing" if not ours_l else "ok",
                         "missing" if not ref_l else "ok", "-", "", "no figure"))
    else:
        rows.append(("GPT", "missing", "missing", "-", "", "not run"))

    widths = [max(len(str(r[i])) for r in rows + [("item", "lockstep", "reference", "ratio", "goal", "verdict")])
              for i in range(6)]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
    print()
    print(line(("item", "lockstep", "reference", "ratio", "goal", "verdict")))
    for r in rows:
        print(line(r))
    print("(ratio: lockstep / reference; for times lower is better, for throughput higher."
          + (" Dry run: CPU toy sizes, the figures check the plumbing, not speed." if a.dry_run else "") + ")")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
