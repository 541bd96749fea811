#!/usr/bin/env bash
# The README's main command (tools/bazel run //examples:demo): the documented linear DDP program on 2
# ranks through lockstep's launcher, as `python -m torch.distributed.launch --nproc_per_node=2`.
# Extra arguments go to linear_demo (e.g. --backend gloo). NPROC overrides the number of ranks.
set -euo pipefail
launch="$1" demo="$2"
shift 2
exec "$launch" --nproc_per_node="${NPROC:-2}" "$demo" "$@"
