#!/usr/bin/env bash
# Fuzzes the TCPStore request parser with libFuzzer: builds tests/fuzz/tcp_store_fuzz.cpp with clang
# (-fsanitize=fuzzer,address,undefined) and runs it for SECONDS (default 60) on a copy of the seed
# corpus in tests/fuzz/corpus. Crashes are written to $OUT (default /tmp/tcp_store_fuzz) as crash-*;
# copy a fixed one into tests/fuzz/corpus so //tests/distributed:tcp_store_protocol_test replays it in CI.
# Usage: tools/fuzz/fuzz_store.sh [SECONDS] [extra libFuzzer flags...]
# Needs Debian's clang and libclang-rt-14-dev (apt-get install clang libclang-rt-14-dev).
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:-60}
shift || true
out=${OUT:-/tmp/tcp_store_fuzz}
cxx=${CXX_FUZZ:-clang++}
mkdir -p "$out/corpus"
cp tests/fuzz/corpus/* "$out/corpus/"

"$cxx" -std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined -I. \
  tests/fuzz/tcp_store_fuzz.cpp distributed/store/tcp_store_protocol.cpp -o "$out/tcp_store_fuzz"

cd "$out"
# -max_len: the seed corpus's longest input plus room; frames larger than this are covered by the
# need-more and over-the-limit paths, which only look at the length prefix.
exec ./tcp_store_fuzz -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 \
  -artifact_prefix="$out/" "$@" corpus
