#!/usr/bin/env bash
# Faults during training, end to end: train_eval on 2 ranks under the launcher.
#   - a rank SIGKILLed mid-training: the launcher stops the job at once, exits 137 and names the rank;
#   - a NaN loss: the rank stops with the exact message naming epoch, step and rank, and the launcher
#     exits 1 naming it; with --no-stop-on-nan training goes on;
#   - a truncated checkpoint given to --resume: a clear error naming the file, exit 1.
# The SIGKILLed rank is rank 1: when the survivor, rank 0, has exited too by the time the launcher looks
# (it loses its peer), the launcher must still take the killed rank as the cause, not the first in rank
# order.
set -uo pipefail
launch="$1" train_eval="$2"
if ! ls /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte* >/dev/null 2>&1; then
  echo "SKIPPED: Fashion-MNIST (dataset-fashion-mnist) is not installed"
  exit 0
fi
dir="${TEST_TMPDIR:-$(mktemp -d)}"
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# run NAME ARGS...: runs the job, leaving its status in $status, its time in $seconds and its output
# in $dir/NAME.out and $dir/NAME.err.
run() {
  local name="$1"
  shift
  local start=$SECONDS
  "$launch" --nproc_per_node=2 "$train_eval" --epochs 1 --timeout 60 "$@" > "$dir/$name.out" 2> "$dir/$name.err"
  status=$?
  seconds=$((SECONDS - start))
  echo "--- $name: exit $status after ${seconds}s"
  cat "$dir/$name.out" "$dir/$name.err"
}

run sigkill --fault-rank 1 --sigkill-at-step 5
[ "$status" -eq 137 ] || fail "sigkill: the launcher exited with $status, expected 137 (128 + SIGKILL, rank 1's)"
grep -Eq "^launch: rank 1 \(pid [0-9]+\) killed by signal SIGKILL$" "$dir/sigkill.err" ||
  fail "sigkill: the launcher did not name rank 1 as killed by SIGKILL"
# The survivor was stopped, or had exited on its own (then named with its status, after the cause).
grep -q "^launch: stopping the other 1 running rank(s)$" "$dir/sigkill.err" ||
  grep -Eq "^launch: rank 0 \(pid [0-9]+\) exited with status [0-9]+" "$dir/sigkill.err" ||
  fail "sigkill: the survivor was neither stopped nor named"
if grep -q "^launch: 2 ranks failed" "$dir/sigkill.err"; then
  grep -Eq "^launch: 2 ranks failed: rank 1 killed by signal SIGKILL, rank 0 .*; taking rank 1 \(pid [0-9]+\) as the cause" \
    "$dir/sigkill.err" || fail "sigkill: the launcher took another rank than the killed rank 1 as the cause"
fi
# Well before the 60 s collective timeout: the launcher does not wait for the survivor to notice.
[ "$seconds" -lt 40 ] || fail "sigkill: the job took ${seconds}s to stop"

# Every rank's loss turns NaN at step 3 (as when a diverged step's NaN gradients reach every rank): the
# rank the launcher names first, the first to exit (both when it found both ended at once), has printed
# why.
run nan --inject-nan-at-step 3
[ "$status" -eq 1 ] || fail "nan: the launcher exited with $status, expected 1"
named=$(sed -nE 's/^launch: rank ([01]) \(pid [0-9]+\) exited with status 1$/\1/p' "$dir/nan.err" | sed -n 1p)
[ -n "$named" ] || fail "nan: the launcher did not name a rank"
grep -qx "train_eval: loss is nan at epoch 0 step 3 on rank $named (stopping; pass --no-stop-on-nan to continue)" \
  "$dir/nan.err" || fail "nan: the exact NaN message of rank $named is missing"

run nan_continue --batch-size 2048 --inject-nan-at-step 3 --no-stop-on-nan
[ "$status" -eq 0 ] || fail "nan_continue: exited with $status, expected 0 with --no-stop-on-nan"
grep -Eq "^epoch 0 loss -?nan " "$dir/nan_continue.out" || fail "nan_continue: the epoch's loss is not NaN"

printf 'abcde' > "$dir/bad.safetensors"
run bad_resume --resume "$dir/bad.safetensors"
[ "$status" -eq 1 ] || fail "bad_resume: exited with $status, expected 1"
grep -qx "train_eval: load_safetensors: $dir/bad.safetensors is truncated (5 bytes, no header length)" \
  "$dir/bad_resume.err" || fail "bad_resume: the exact error is missing"
grep -Eq "^launch: rank [01] \(pid [0-9]+\) exited with status 1$" "$dir/bad_resume.err" ||
  fail "bad_resume: the launcher did not name a rank"

[ "$failed" -eq 0 ] && echo "PASS: every fault stopped the job with the expected message"
exit "$failed"
