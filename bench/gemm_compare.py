# gemm_bench against torch_gemm.py on one set of shapes, interleaved (the order alternates each run),
# one thread each; prints a Markdown table of the medians over the runs (GFLOP/s) and their ratio.
#   tools/bazel build //bench:gemm_bench
#   python3 bench/gemm_compare.py --shapes gpt384 --dtype bfloat16 --runs 5 [--cpu-time]
import argparse, os, re, statistics, subprocess

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", default="gpt384")
ap.add_argument("--dtype", default="bfloat16")
ap.add_argument("--runs", type=int, default=5)
ap.add_argument("--cpu-time", action="store_true", help="each side times its thread's CPU clock")
ap.add_argument("--python", default=os.path.expanduser("~/.cache/torch-venv/bin/python"))
args = ap.parse_args()
here = os.path.dirname(os.path.abspath(__file__))
env = dict(os.environ, OMP_NUM_THREADS="1")
cmds = {
    "lockstep": [os.path.join(here, "..", "bazel-bin", "bench", "gemm_bench"), "--threads", "1", "--shapes",
                 args.shapes, "--dtype", args.dtype],
    "PyTorch": [args.python, os.path.join(here, "torch_gemm.py"), "--shapes", args.shapes, "--dtype", args.dtype],
}
line = re.compile(r"^([NT]{2}) m=\s*(\d+) n=\s*(\d+) k=\s*(\d+) .*GFLOP/s\s+([\d.]+)")
if args.cpu_time:
    for c in cmds.values():
        c.append("--cpu-time")
results = {name: {} for name in cmds}
for run in range(args.runs):
    for name in (list(cmds) if run % 2 == 0 else list(cmds)[::-1]):
        out = subprocess.run(cmds[name], env=env, check=True, capture_output=True, text=True).stdout
        for l in out.splitlines():
            if mm := line.match(l):
                results[name].setdefault(mm.group(1, 2, 3, 4), []).append(float(mm.group(5)))
print("| product | lockstep GFLOP/s | PyTorch GFLOP/s | ratio |")
print("|---|---|---|---|")
ratios = []
for key, ours in results["lockstep"].items():
    a, b = statistics.median(ours), statistics.median(results["PyTorch"][key])
    ratios.append(a / b)
    print("| %s %s x %s x %s | %.1f | %.1f | %.2f |" % (*key, a, b, a / b))
print("| geometric mean | | | %.2f |" % statistics.geometric_mean(ratios))
