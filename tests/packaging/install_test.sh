#!/usr/bin/env bash
# lockstep as a library, as a user meets it: //:install into a temporary prefix (from Bazel's built
# artifacts, packaging/install.sh), then examples/external_cmake, a project outside the Bazel build,
#   1. configured with Debian's cmake (find_package(lockstep), lockstep::lockstep), built, and trained on
#      2 ranks under the installed bin/lockstep-run (the program checks that the replicas end identical
#      and that it learned);
#   2. built again with g++ $(pkg-config --cflags --libs lockstep) and run the same way;
# and the installed tree itself:
#   3. the library's symlink chain and soname;
#   4. every installed header compiles alone, in a translation unit of its own, with only the installed
#      include directory (and no warning under -Wall -Wextra, as a user's project may build);
#   5. a missing dependency (Gloo's CMake package hidden) stops find_package(lockstep) at configure time
#      with CMake's message naming it.
# Every step runs under a generous `timeout`; nothing is timed. Sanitizer builds (.ci/run's second stage)
# run the install and step 3 only, and report SKIPPED.
set -euo pipefail
install="$1" cmakelists="$2"
src_dir=$(dirname "$cmakelists")
tmp="${TEST_TMPDIR:-$(mktemp -d)}/install_test"
rm -rf "$tmp"
mkdir -p "$tmp"
prefix="$tmp/prefix"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
step() { echo "== $*"; }

step "install into $prefix"
timeout 300 "$install" --prefix "$prefix"

step "the library: liblockstep.so -> .so.MAJOR (soname) -> .so.VERSION"
so=$(readlink "$prefix/lib/liblockstep.so")
real=$(readlink "$prefix/lib/$so")
[[ "$so" =~ ^liblockstep\.so\.[0-9]+$ ]] || fail "lib/liblockstep.so points to '$so'"
[[ "$real" =~ ^liblockstep\.so\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "lib/$so points to '$real'"
[ -f "$prefix/lib/$real" ] || fail "lib/$real is missing"
soname=$(objdump -p "$prefix/lib/$real" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = "$so" ] || fail "soname is '$soname', expected $so"
[ -x "$prefix/bin/lockstep-run" ] || fail "bin/lockstep-run is missing"

# Under --config=asan or tsan the library needs its sanitizer's runtime loaded before everything else,
# which a program built outside Bazel does not do: the rest is for ordinary builds. The dynamic section is
# read whole into a variable first: objdump piped into a grep that quits at its first match dies of SIGPIPE
# when it writes again, and under pipefail that reads as "no match" (one run in three here). A library
# whose NEEDED list cannot be read (no libc in it) fails rather than guessing either way.
dynamic=$(objdump -p "$prefix/lib/$real") || fail "objdump -p lib/$real failed"
grep -qE '^ +NEEDED +libc\.so\.' <<<"$dynamic" ||
  fail "cannot tell how lib/$real was built: objdump -p lists no NEEDED libc.so (output: $(wc -l <<<"$dynamic") lines)"
if grep -qE '^ +NEEDED +lib(a|t|ub)san' <<<"$dynamic"; then
  echo "SKIPPED: liblockstep.so is built with a sanitizer; programs built outside Bazel cannot load it as is"
  exit 0
fi

# The project as a user has it: a folder of its own, outside Bazel's trees.
cp -rL "$src_dir" "$tmp/src"

run_2_ranks() {  # $1: the program; its rank 0 prints the verdict line
  local out="$tmp/$(basename "$1").log"
  if ! timeout 300 "$prefix/bin/lockstep-run" --nproc_per_node=2 "$1" >"$out" 2>&1; then
    cat "$out"
    fail "$1 on 2 ranks failed"
  fi
  cat "$out"
  grep -q "ddp_mlp: 2 ranks, parameters identical: yes" "$out" || fail "$1: no verdict line"
}

step "CMake: find_package(lockstep), target_link_libraries(... lockstep::lockstep)"
timeout 300 cmake -S "$tmp/src" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log"; fail "cmake configure"; }
timeout 600 cmake --build "$tmp/build" || fail "cmake --build"
run_2_ranks "$tmp/build/ddp_mlp"

step "pkg-config: g++ ddp_mlp.cpp \$(pkg-config --cflags --libs lockstep)"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cflags=$(pkg-config --cflags lockstep)
# shellcheck disable=SC2046  # the flags are words
timeout 600 g++ -O1 "$tmp/src/ddp_mlp.cpp" -o "$tmp/ddp_mlp_pc" $(pkg-config --cflags --libs lockstep) \
  -Wl,-rpath,"$(pkg-config --variable=libdir lockstep)"
run_2_ranks "$tmp/ddp_mlp_pc"

step "every installed header alone"
(cd "$prefix/include" && find . -name '*.h' | sed 's@^\./@@' | sort) >"$tmp/headers"
n=$(wc -l <"$tmp/headers")
((n > 20)) || fail "only $n headers installed"
grep -qx lockstep.h "$tmp/headers" || fail "include/lockstep.h is missing"
grep -qx lockstep/torch.h "$tmp/headers" || fail "include/lockstep/torch.h (LibTorch's names) is missing"
mkdir -p "$tmp/alone"
export tmp cflags
# shellcheck disable=SC2016  # expanded by the inner shell
if ! xargs -P 2 -I{} bash -c '
    h={}; log="$tmp/alone/${h//\//_}.log"
    echo "#include <$h>" | timeout 300 g++ $cflags -fsyntax-only -Wall -Wextra \
      -Werror -x c++ - >"$log" 2>&1 || { echo "FAIL: <$h> does not compile alone:"; cat "$log"; exit 1; }
  ' <"$tmp/headers"; then
  fail "some headers do not compile alone"
fi
echo "$n headers compile alone"

step "a missing dependency stops find_package at configure time"
gloo_dir=$(sed -n 's/^Gloo_DIR:[A-Z]*=//p' "$tmp/build/CMakeCache.txt")
[ -n "$gloo_dir" ] || fail "the configure above did not look for Gloo"
if timeout 300 cmake -S "$tmp/src" -B "$tmp/build_nogloo" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_IGNORE_PATH="$gloo_dir" >"$tmp/nogloo.log" 2>&1; then
  cat "$tmp/nogloo.log"
  fail "configure succeeded with Gloo's package hidden"
fi
grep -q 'package configuration file provided by "Gloo"' "$tmp/nogloo.log" &&
  grep -q 'lockstepConfig.cmake' "$tmp/nogloo.log" ||
  { cat "$tmp/nogloo.log"; fail "configure failed without naming Gloo"; }
echo "configure without Gloo fails naming it"

echo "PASS"
