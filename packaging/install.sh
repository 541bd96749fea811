#!/usr/bin/env bash
# Installs lockstep as a library from Bazel's built artifacts (packaging/BUILD):
#
#   tools/bazel run //:install -- --prefix DIR      (default /usr/local)
#
#   DIR/lib/liblockstep.so.VERSION, .so.MAJOR (the soname) and .so   the whole API, one shared library
#   DIR/include/lockstep.h, DIR/include/lockstep/...                 the public headers
#   DIR/lib/cmake/lockstep/lockstepConfig{,Version}.cmake            find_package(lockstep), lockstep::lockstep
#   DIR/lib/pkgconfig/lockstep.pc                                    pkg-config --cflags --libs lockstep
#   DIR/bin/lockstep-run                                             the launcher (torchrun's role)
#
# Headers: in the source tree they include each other from the repository root ("tensor/tensor.h").
# Installed, they live under include/lockstep/ and those includes are rewritten to "lockstep/tensor/tensor.h",
# so one include directory (DIR/include) serves both <lockstep.h> and <lockstep/...>, and a program's own
# folders named data/, common/ or nn/ cannot shadow ours. Which headers: those reachable from the entry
# headers listed in build_info.txt (lockstep.h and a few more); none of them includes a third-party header.
set -euo pipefail

usage() {
  echo "usage: install [--prefix DIR]   (default /usr/local; a relative DIR is taken from where bazel ran)" >&2
  exit 2
}

prefix=/usr/local
while (($#)); do
  case "$1" in
    --prefix) (($# >= 2)) || usage; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    -h | --help) usage ;;
    *) echo "install: unknown argument '$1'" >&2; usage ;;
  esac
done
# `bazel run` starts us in the runfiles tree; a relative prefix means the caller's directory.
if [[ "$prefix" != /* ]]; then
  prefix="${BUILD_WORKING_DIRECTORY:-$PWD}/$prefix"
fi

# Our files: the runfiles tree of this script (bazel run), or of a test that has it as data.
runfiles=""
for d in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}" "$0.runfiles"; do
  if [ -n "$d" ] && [ -f "$d/lockstep/packaging/build_info.txt" ]; then
    runfiles="$d/lockstep"
    break
  fi
done
if [ -z "$runfiles" ]; then
  echo "install: cannot find the built files; run it as: tools/bazel run //:install -- --prefix DIR" >&2
  exit 1
fi
pkg="$runfiles/packaging"

# build_info.txt: `version V`, `header H`, `define D`, `link FLAG` lines (packaging/defs.bzl).
version="" headers=() defines=() links=()
while read -r kind value; do
  case "$kind" in
    version) version=$value ;;
    header) headers+=("$value") ;;
    define) defines+=("$value") ;;
    link) links+=("$value") ;;
  esac
done <"$pkg/build_info.txt"
soversion=${version%%.*}

echo "install: lockstep $version into $prefix"
mkdir -p "$prefix/lib/cmake/lockstep" "$prefix/lib/pkgconfig" "$prefix/include/lockstep" "$prefix/bin"

# The library and its symlink chain: .so (for -llockstep) -> .so.MAJOR (the soname) -> .so.VERSION.
install -m 0755 "$pkg/liblockstep.so" "$prefix/lib/liblockstep.so.$version"
ln -sfn "liblockstep.so.$version" "$prefix/lib/liblockstep.so.$soversion"
ln -sfn "liblockstep.so.$soversion" "$prefix/lib/liblockstep.so"

install -m 0755 "$runfiles/distributed/launch/launch" "$prefix/bin/lockstep-run"

# Headers: the entry headers and every header of ours they include, found by following `#include "..."`
# lines (all of them, #ifdef'd or not: a backend's header that was not built is not among our files and
# is skipped, as its #ifdef skips it).
declare -A seen=()
queue=("${headers[@]}")
while ((${#queue[@]})); do
  h=${queue[0]}
  queue=("${queue[@]:1}")
  [ -z "${seen[$h]:-}" ] || continue
  [ -f "$runfiles/$h" ] || continue
  seen[$h]=1
  while read -r inc; do
    queue+=("$inc")
  done < <(sed -nE 's@^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*@\1@p' "$runfiles/$h")
done
# Rewrite includes of our headers, i.e. of paths under one of our top-level folders.
dirs=$(printf '%s\n' "${!seen[@]}" | sed -n 's@/.*@@p' | sort -u | paste -sd '|')
installed=()
# Where header h goes under include/: lockstep.h at the top, LibTorch's names as lockstep/torch.h, the
# rest under lockstep/ by their paths.
installed_path() {
  case "$1" in
    lockstep.h) echo lockstep.h ;;
    compat/torch.h) echo lockstep/torch.h ;;
    *) echo "lockstep/$1" ;;
  esac
}
declare -A kept=()
for h in "${!seen[@]}"; do
  dest="$prefix/include/$(installed_path "$h")"
  kept[$dest]=1
  mkdir -p "$(dirname "$dest")"
  sed -E "s@^([[:space:]]*#[[:space:]]*include[[:space:]]*\")(($dirs)/)@\1lockstep/\2@" "$runfiles/$h" >"$dest"
  chmod 0644 "$dest"
  installed+=("$h")
done
# Headers an earlier install left that this one does not have (a backend no longer built) would not compile.
while read -r old; do
  [ -n "${kept[$old]:-}" ] || rm -f "$old"
done < <(find "$prefix/include/lockstep" -name '*.h' -type f)

# Usage requirements from what was linked in: each system library becomes a find_dependency (CMake) and
# a flag (pkg-config). -L/-rpath flags only say where; libdl and librt are part of libc.
cmake_deps="" cmake_libs="" pc_libs_private="" cuda_root="" cuda=0 nccl=0 unknown=()
for f in "${links[@]}"; do
  case "$f" in
    -L*) if [ -e "${f#-L}/libcudart.so" ]; then cuda_root=$(dirname "${f#-L}"); fi ;;
    -Wl,-rpath,* | -ldl | -lrt) ;;
    -pthread) cmake_deps+=$'find_dependency(Threads)\n'; cmake_libs+=" Threads::Threads" ;;
    -lz) cmake_deps+=$'find_dependency(ZLIB)\n'; cmake_libs+=" ZLIB::ZLIB" ;;
    -lcrypto) cmake_deps+=$'find_dependency(OpenSSL COMPONENTS Crypto)\n'; cmake_libs+=" OpenSSL::Crypto" ;;
    -lgloo) cmake_deps+=$'find_dependency(Gloo)\n'; cmake_libs+=" gloo" ;;
    # oneDNN and the OpenMP runtime it runs on, by name: both are in the default library path.
    -ldnnl) cmake_libs+=" dnnl" ;;
    -lgomp) cmake_libs+=" gomp" ;;
    # Open MPI's C API from C++ (lockstep uses no C++ bindings): a C++-only project has no C language,
    # which FindMPI's C component would need.
    -lmpi) cmake_deps+=$'set(MPI_CXX_SKIP_MPICXX ON)\nfind_dependency(MPI COMPONENTS CXX)\n'
           cmake_libs+=" MPI::MPI_CXX" ;;
    # cuBLAS is not linked: tensor/cuda/cublas_api.cpp loads it on the first GPU matmul.
    -lcudart) cuda=1; cmake_libs+=" CUDA::cudart" ;;
    -lnccl) nccl=1; cmake_libs+=" NCCL::NCCL" ;;
    *) unknown+=("$f") ;;
  esac
  case "$f" in -Wl,-rpath,*) ;; *) pc_libs_private+=" $f" ;; esac
done
if ((${#unknown[@]})); then
  echo "install: lockstep links ${unknown[*]}, which packaging/install.sh does not know how to declare" \
    "to CMake; add it to the list there" >&2
  exit 1
fi
if ((cuda)); then
  if [ -n "$cuda_root" ]; then
    cmake_deps+="# The toolkit lockstep was built against, unless one is named.
if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND NOT DEFINED ENV{CUDA_PATH})
  set(CUDAToolkit_ROOT \"$cuda_root\")
endif()
"
  fi
  cmake_deps+=$'find_dependency(CUDAToolkit)\n'
fi
# NCCL has no CMake package of its own: FindNCCL.cmake, installed beside the config, looks for it after
# the CUDA toolkit (NCCL_ROOT, else the toolkit's folders).
if ((nccl)); then
  cmake_deps+=$'find_dependency(NCCL)\n'
  install -m 0644 "$pkg/FindNCCL.cmake" "$prefix/lib/cmake/lockstep/FindNCCL.cmake"
else
  rm -f "$prefix/lib/cmake/lockstep/FindNCCL.cmake"
fi
cmake_defs="" cflags_defs=""
for d in "${defines[@]}"; do
  cmake_defs+=";$d" cflags_defs+=" -D$d"
done

cmake_deps_file=$(mktemp)
trap 'rm -f "$cmake_deps_file"' EXIT
printf '%s' "$cmake_deps" >"$cmake_deps_file"
# @DEPENDENCIES@ is a whole line of the template: sed's `r` puts the file there, then the line goes.
sed -e "/@DEPENDENCIES@/{r $cmake_deps_file" -e 'd}' \
  -e "s|@VERSION@|$version|g" \
  -e "s|@SOVERSION@|$soversion|g" \
  -e "s|@DEFINES@|${cmake_defs#;}|g" \
  -e "s|@LINK_LIBRARIES@|$(echo $cmake_libs | tr ' ' ';')|g" \
  "$pkg/lockstepConfig.cmake.in" >"$prefix/lib/cmake/lockstep/lockstepConfig.cmake"

# find_package(lockstep 0.1) accepts any 0.x at or above 0.1 (one soname, one ABI line).
cat >"$prefix/lib/cmake/lockstep/lockstepConfigVersion.cmake" <<EOF
# lockstep $version: compatible with requests for the same major version, at or below $version.
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION OR
   NOT PACKAGE_FIND_VERSION_MAJOR STREQUAL "$soversion")
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
if(NOT CMAKE_SIZEOF_VOID_P STREQUAL "8")
  set(PACKAGE_VERSION "\${PACKAGE_VERSION} (64-bit)")
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
endif()
EOF

sed -e "s|@PREFIX@|$prefix|g" \
  -e "s|@VERSION@|$version|g" \
  -e "s|@DEFINES@|${cflags_defs# }|g" \
  -e "s|@LIBS_PRIVATE@|${pc_libs_private# }|g" \
  "$pkg/lockstep.pc.in" >"$prefix/lib/pkgconfig/lockstep.pc"

# A prefix the dynamic linker searches (/usr/local/lib on Debian): refresh its cache, so that programs built
# without an rpath (pkg-config) find liblockstep.so.MAJOR.
# (ldconfig -v's listing is captured whole: piped into `grep -q` under pipefail it would die of SIGPIPE.)
if [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then
  searched=$(ldconfig -v 2>/dev/null || true)
  if grep -q "^$prefix/lib:" <<<"$searched"; then ldconfig; fi
fi

echo "install: ${#installed[@]} headers, lib/liblockstep.so.$version, bin/lockstep-run," \
  "lib/cmake/lockstep, lib/pkgconfig/lockstep.pc"
