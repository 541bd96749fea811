#!/usr/bin/env bash
# run_benchmarks.sh: lockstep's all-reduce and DDP benchmarks side by side with PyTorch's reference
# scripts (../shared/anchors), interleaved and repeated; prints the tables (medians over repetitions,
# with ratios) and writes the busbw plot. The numbers in BENCHMARKS.md come from this script.
#
#   bench/run_benchmarks.sh [--reps N] [--ddp-reps N] [--out DIR] [--svg PATH] [--no-allreduce] [--no-ddp]
#                           [--world4-ddp] [--probe]
#
# --probe adds a measurement that the machine's load hardly moves: CPU time and context switches per
# operation (perf stat of a long run minus a short one), for a 4-byte all-reduce on 2 ranks and for a
# DDP step on 2 ranks, lockstep against PyTorch (and raw gloo).
#
# Needs Debian's python3-torch (run as /usr/bin/python3, one thread, as the anchors' README says). The
# binaries are copied into DIR first, so a rebuild in the tree during the run changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=3
DDP_REPS=
OUT=""
SVG=docs/busbw.svg
ALLREDUCE=1
DDP=1
DDP_W4=0
PROBE=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --ddp-reps) DDP_REPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --svg) SVG="$2"; shift 2 ;;
    --no-allreduce) ALLREDUCE=0; shift ;;
    --no-ddp) DDP=0; shift ;;
    --world4-ddp) DDP_W4=1; shift ;;
    --probe) PROBE=1; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "run_benchmarks.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $DDP_REPS ]] || DDP_REPS=$REPS
ANCHORS=../shared/anchors
[[ -f $ANCHORS/torch_allreduce.py ]] || { echo "run_benchmarks.sh: $ANCHORS/torch_allreduce.py not found" >&2; exit 1; }
[[ -n $OUT ]] || OUT=$(mktemp -d /tmp/lockstep_bench.XXXXXX)
mkdir -p "$OUT/bin"

tools/bazel build //bench:allreduce_bench //bench:ddp_bench //distributed/launch >&2
cp -f bazel-bin/bench/allreduce_bench bazel-bin/bench/ddp_bench bazel-bin/distributed/launch/launch "$OUT/bin/"
LAUNCH=$OUT/bin/launch
AR=$OUT/bin/allreduce_bench
DDPB=$OUT/bin/ddp_bench

# PyTorch as the anchors' README prescribes.
torch_py() { OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$@"; }
# OpenBLAS 0.3.21 does not know every recent CPU and then falls back to its generic "Prescott" kernels
# (no AVX): for the MLP, PyTorch also runs with the best kernel set the CPU supports.
BEST_CORE=""
if grep -qw avx512f /proc/cpuinfo; then BEST_CORE=SKYLAKEX; elif grep -qw avx2 /proc/cpuinfo; then BEST_CORE=HASWELL; fi
DETECTED_CORE=$(torch_py -c 'import torch, ctypes, glob
libs = [l.split()[-1] for l in open("/proc/self/maps") if "libopenblas" in l]
lib = ctypes.CDLL(libs[0]) if libs else None
if lib: lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode() if lib else "none")' 2>/dev/null || echo unknown)
torch_best() { OPENBLAS_CORETYPE=$BEST_CORE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 env -u OPENBLAS_L2_SIZE /usr/bin/python3 "$@"; }
# The same two, as commands (for perf stat).
TORCH_CMD=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3)
TORCH_BEST_CMD=(env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=$BEST_CORE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3)

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
  echo "commit: $(git rev-parse --short HEAD) (uncommitted changes: $(git status --short | wc -l) paths)"
  echo "torch: $(torch_py -c 'import torch; print(torch.__version__)' 2>/dev/null), OpenBLAS core detected: $DETECTED_CORE, best: ${BEST_CORE:-n/a}"
  echo "reps: $REPS all-reduce, $DDP_REPS DDP"
} | tee "$OUT/machine.txt"

# One all-reduce sweep of lockstep or raw gloo, 4 B to 64 MiB: many iterations for the small sizes,
# fewer for the large ones (one 64 MiB all-reduce takes ~0.1 s here).
sweep() {  # sweep WORLD OUTFILE [--raw-gloo]
  local world=$1 out=$2; shift 2
  "$LAUNCH" --nproc_per_node="$world" "$AR" -b 4 -e 256K -f 4 -n 200 -w 20 --csv "$@" > "$out"
  "$LAUNCH" --nproc_per_node="$world" "$AR" -b 1M -e 64M -f 4 -n 20 -w 3 --csv "$@" | tail -n +2 >> "$out"
}

for ((r = 1; r <= (REPS > DDP_REPS ? REPS : DDP_REPS); r++)); do
  if [[ $ALLREDUCE == 1 && $r -le $REPS ]]; then
    for w in 2 4; do
      echo "[rep $r] all-reduce, $w ranks: lockstep, PyTorch, raw gloo" >&2
      # Rotate the order between repetitions, so that no one always runs first.
      runs=(lockstep torch raw)
      for ((i = 0; i < 3; i++)); do
        case ${runs[$(((i + r) % 3))]} in
          lockstep) sweep "$w" "$OUT/allreduce_lockstep_w${w}_r$r.csv" ;;
          raw) sweep "$w" "$OUT/allreduce_raw_w${w}_r$r.csv" --raw-gloo ;;
          torch) torch_py "$ANCHORS/torch_allreduce.py" "$w" > "$OUT/allreduce_torch_w${w}_r$r.txt" ;;
        esac
      done
    done
  fi
  if [[ $DDP == 1 && $r -le $DDP_REPS ]]; then
    worlds=(1 2)
    [[ $DDP_W4 == 1 ]] && worlds+=(4)
    for w in "${worlds[@]}"; do
      echo "[rep $r] DDP MLP, world $w: lockstep, PyTorch" >&2
      if [[ $w == 1 ]]; then
        "$DDPB" --workload mlp > "$OUT/ddp_lockstep_mlp_w1_r$r.txt"
      else
        "$LAUNCH" --nproc_per_node="$w" "$DDPB" --workload mlp > "$OUT/ddp_lockstep_mlp_w${w}_r$r.txt"
      fi
      torch_py "$ANCHORS/torch_mlp.py" "$w" > "$OUT/ddp_torch_default-openblas_w${w}_r$r.txt"
      [[ -n $BEST_CORE ]] && torch_best "$ANCHORS/torch_mlp.py" "$w" > "$OUT/ddp_torch_OPENBLAS_CORETYPE=${BEST_CORE}_w${w}_r$r.txt"
      if [[ $w == 1 ]]; then
        "$DDPB" --workload fmnist > "$OUT/ddp_lockstep_fmnist_w1_r$r.txt"
      else
        "$LAUNCH" --nproc_per_node="$w" "$DDPB" --workload fmnist > "$OUT/ddp_lockstep_fmnist_w${w}_r$r.txt"
      fi
    done
  fi
done

# CPU ms and context switches per operation: perf stat of N_LONG operations minus N_SHORT ones, divided
# by the difference (start-up and rendezvous cancel out).
probe() {  # probe LABEL RANK_OPS_PER_N N_LONG N_SHORT COMMAND... ({N}: the count; RANK_OPS_PER_N: ranks x ops per count)
  local label=$1 per=$2 long=$3 short=$4; shift 4
  local t=() c=()
  for n in "$long" "$short"; do
    if ! perf stat -e task-clock,context-switches -x, -o "$OUT/probe.tmp" -- "${@//\{N\}/$n}" > "$OUT/probe.log" 2>&1; then
      echo "| $label | failed (see $OUT/probe.log) | |"
      return
    fi
    t+=("$(awk -F, '/task-clock/ {print $1}' "$OUT/probe.tmp")")
    c+=("$(awk -F, '/context-switches/ {print $1}' "$OUT/probe.tmp")")
  done
  awk -v l="$label" -v t1="${t[0]}" -v t0="${t[1]}" -v c1="${c[0]}" -v c0="${c[1]}" -v n=$(((long - short) * per)) \
    'BEGIN { printf "| %s | %.1f | %.2f |\n", l, (t1 - t0) * 1000 / n, (c1 - c0) / n }'
}
if [[ $PROBE == 1 ]] && command -v perf > /dev/null; then
  echo "[probe] per-operation CPU time and context switches" >&2
cat > "$OUT/torch_small_allreduce.py" <<'EOF'
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
def worker(rank, port, iters):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=2, rank=rank)
    t = torch.ones(1)
    for _ in range(iters): dist.all_reduce(t)
    dist.destroy_process_group()
if __name__ == "__main__":
    mp.spawn(worker, args=(29500 + os.getpid() % 400, int(sys.argv[1])), nprocs=2)
EOF
  {
    echo "| 2 ranks, per rank and operation (all-reduce or training step) | CPU µs | context switches |"
    echo "|---|---:|---:|"
    # allreduce_bench runs -n iterations out of place and -n in place: 2 operations per count, 2 ranks.
    probe "lockstep all_reduce, 4 B" 4 10000 1000 "$LAUNCH" --nproc_per_node=2 "$AR" -b 4 -e 4 -n {N} -w 10 -c 0
    probe "raw gloo allreduce, 4 B" 4 10000 1000 "$LAUNCH" --nproc_per_node=2 "$AR" -b 4 -e 4 -n {N} -w 10 -c 0 --raw-gloo
    probe "PyTorch all_reduce, 4 B" 2 20000 2000 "${TORCH_CMD[@]}" "$OUT/torch_small_allreduce.py" {N}
    probe "lockstep DDP step, MLP" 2 1000 100 "$LAUNCH" --nproc_per_node=2 "$DDPB" --no-baseline --rounds 1 --steps {N}
    if [[ -n $BEST_CORE ]]; then
      probe "PyTorch DDP step, MLP, OPENBLAS_CORETYPE=$BEST_CORE" 2 1000 100 "${TORCH_BEST_CMD[@]}" \
        "$ANCHORS/torch_mlp.py" 2 {N}
    fi
    probe "PyTorch DDP step, MLP, default OpenBLAS" 2 1000 100 "${TORCH_CMD[@]}" "$ANCHORS/torch_mlp.py" 2 {N}
  } > "$OUT/probe.md"
  rm -f "$OUT/probe.tmp"
fi

echo "results: $OUT" >&2
cat "$OUT/machine.txt"
python3 bench/bench_report.py "$OUT" --svg "$SVG"
if [[ -f $OUT/probe.md ]]; then
  echo -e "\n### Cost per operation (perf stat; long run minus short run)\n"
  cat "$OUT/probe.md"
fi
