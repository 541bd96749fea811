"""Step time of examples/word_lm's default configuration (pytorch/examples word_language_model's defaults:
a 2-layer LSTM, emsize and nhid 200, dropout 0.2, batch 20, bptt 35, on the fortunes' 65k-word vocabulary)
in lockstep and in its PyTorch twin (tools/twins/word_lm_twin.py), from the same initial weights on the
same batches, one process and one thread each, without validation. Runs alternate (lockstep, PyTorch,
round after round); each run prints the median of its step times (steps 3..), wall and process CPU, and
the table gives, per side, the median and best of those over the rounds, and lockstep / PyTorch (below 1:
lockstep faster). On a loaded machine the CPU time per step is the steadier figure.

    tools/bazel build //examples:word_lm //distributed/launch && python3 bench/word_lm_bench.py --rounds 5
"""
import os
import subprocess
import tempfile

from twin_bench import parse_args, print_table


def step_ms(cmd, env):
    """(wall ms, CPU ms): the run's medians per step."""
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    f = [l for l in out.splitlines() if l.startswith("step_ms ")][-1].split()
    return float(f[1]), float(f[3])


def main():
    a = parse_args("word_lm", "word_lm_twin.py", default_steps=13)
    a.worlds = [1]  # the twin is one process
    init = tempfile.NamedTemporaryFile(suffix=".safetensors", delete=False).name
    subprocess.run([a.launch, "--nproc_per_node=1", a.binary, "--export-init", init], env=a.env, check=True,
                   capture_output=True)
    times = {}
    try:
        for _ in range(a.rounds):
            common = ["--init", init, "--steps", str(a.steps), "--no-eval"]
            times.setdefault(("lockstep", 1), []).append(step_ms(
                [a.launch, "--nproc_per_node=1", a.binary, *common], a.env))
            times.setdefault(("pytorch", 1), []).append(step_ms([a.python, a.twin, *common, "--quiet"], a.env))
            print(f"# lockstep {times[('lockstep', 1)][-1]} ms, PyTorch {times[('pytorch', 1)][-1]} ms (wall, CPU)",
                  flush=True)
    finally:
        os.unlink(init)
    print_table(times, a.worlds)


if __name__ == "__main__":
    main()
