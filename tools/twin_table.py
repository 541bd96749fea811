"""The table tools/gpt_bench.py and tools/cnn_fashion_bench.py print: per world size, each side's
median and best wall time per step over the rounds, lockstep / PyTorch, and the median CPU time per
step. `times` maps ("lockstep" | "pytorch", world) to a list of (wall ms, CPU ms), one per run."""
import statistics


def print_table(times, worlds):
    print("| ranks | lockstep ms (median / best) | PyTorch ms (median / best) | ratio (median / best) "
          "| lockstep CPU ms | PyTorch CPU ms | CPU ratio | runs |")
    print("|---|---|---|---|---|---|---|---|")
    for w in worlds:
        o, t = times[("lockstep", w)], times[("pytorch", w)]
        ow, tw = [x[0] for x in o], [x[0] for x in t]
        oc, tc = statistics.median(x[1] for x in o), statistics.median(x[1] for x in t)
        om, tm, ob, tb = statistics.median(ow), statistics.median(tw), min(ow), min(tw)
        print(f"| {w} | {om:.1f} / {ob:.1f} | {tm:.1f} / {tb:.1f} | {om / tm:.2f} / {ob / tb:.2f} "
              f"| {oc:.1f} | {tc:.1f} | {oc / tc:.2f} | {len(o)} |")
