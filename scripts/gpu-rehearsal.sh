#!/usr/bin/env bash
# Rehearses scripts/gpu-check.sh on this CPU machine as the GPU machine will run it: in a private
# mount namespace where /usr is an overlay from which the files of the Debian packages the GPU
# machine lacks are deleted (whiteouts: they do not exist there, for the compiler, CMake and the
# loader alike), so that only the bundle (.gpu-bundle, made by scripts/gpu-bundle.sh) provides them.
#   hidden, provided by the bundle: fmt, nlohmann-json, CLI11, OpenSSL's headers and libraries,
#     GTest, GMock, googletest's sources, pybind11-dev, ninja. The runtime libraries libfmt9 and
#     libssl3 stay (Debian's torch, cmake and python load them); the build must not use them:
#     gpu-check --rehearsal fails when a built binary needs anything but the C/C++ runtime and the
#     bundle (libfmt.so.9 must load from the bundle, libcrypto must be linked in statically)
#   hidden, absent there and optional here: pkg-config, hwloc, libnuma, UCX, Google Benchmark, spdlog
#   NCCL: CUDA's nccl.h and libnccl here are hidden and shown again as pip's nvidia-nccl wheel lays
#     them out (nvidia/nccl/{include,lib} on PYTHONPATH), the GPU machine's only NCCL
# Kept, as the GPU machine has them: the compiler, cmake, CUDA's toolkit, python3 with its headers,
# numpy, pytest, torch (a CPU build here) and pybind11's Python package (pip's there).
# First it proves that the hiding works: the hidden headers do not compile, and configuring byteps
# without the bundle fails; then it runs `gpu-check.sh --rehearsal` (the GPU steps skip with their
# reason). Needs root (unshare -m, mount). Its exit status is gpu-check's. The main build's module
# and byteps-core (python/byteps/) are put back afterwards.
#   bash scripts/gpu-rehearsal.sh         # before a device run; build-gpu/ (BUILD_DIR), OUT, GPU_CHECK_*
#   bash scripts/gpu-rehearsal.sh --ci    # scripts/test.sh: see below
#   bash scripts/gpu-rehearsal.sh [--ci] --exec CMD...   # CMD in that namespace instead (after the proof)
# --ci: the build is CI's main build (build/, every target, benches too), which scripts/test.sh
# then tests outside the namespace, so CI compiles byteps once, not twice. Only what the bundle
# provides is hidden: the optional packages (UCX, hwloc, libnuma, Benchmark, pkg-config) and CUDA's
# NCCL stay, so CI's build keeps testing them; the build must then need no runtime library but the
# C/C++ runtime, the bundle's and those optional packages'. The full hiding (the no-UCX, no-hwloc,
# no-NUMA, pip-NCCL build the GPU machine makes) is the default mode's, run before a device run.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
CI_MODE=0
[ "${1:-}" = --ci ] && { CI_MODE=1; shift; }
HIDE_BUNDLED=(libfmt-dev nlohmann-json3-dev libcli11-dev libssl-dev libgtest-dev libgmock-dev googletest
              pybind11-dev ninja-build)
HIDE_ABSENT=(pkgconf pkg-config libpkgconf3 libhwloc-dev libnuma-dev libucx-dev libbenchmark-dev libspdlog-dev)
[ "$CI_MODE" = 1 ] && HIDE_ABSENT=()
export PYTHON=${PYTHON:-/usr/bin/python3}

if [ -z "${GPU_REHEARSAL_NS:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "gpu-rehearsal: needs root (a mount namespace and an overlay on /usr)" >&2; exit 1; }
  bash scripts/gpu-bundle.sh  # only checks when the bundle is up to date
  args=("$@"); [ "$CI_MODE" = 1 ] && args=(--ci "$@")
  exec env GPU_REHEARSAL_NS=1 unshare --mount --propagation private bash "$0" "${args[@]}"
fi

# --- inside the namespace: nothing here is seen outside it, and it all goes when it ends --------
t0=${EPOCHREALTIME//[.,]/}
# One fixed path (the build caches where nccl.h was found), a tmpfs private to this namespace.
T=/tmp/byteps-gpu-rehearsal
mkdir -p "$T"
mount -t tmpfs -o size=64m tmpfs "$T"
mkdir -p "$T/upper" "$T/work" "$T/orig-usr" "$T/pip/nvidia/nccl/include" "$T/pip/nvidia/nccl/lib"
mount --bind /usr "$T/orig-usr"  # where the hidden NCCL stays reachable for its pip-style links
mount -t overlay overlay -o "lowerdir=/usr,upperdir=$T/upper,workdir=$T/work" /usr

hidden=0
for pkg in "${HIDE_BUNDLED[@]}" "${HIDE_ABSENT[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || continue
  while read -r f; do
    case $f in /usr/*) ;; *) continue ;; esac
    if [ -f "$f" ] || [ -L "$f" ]; then rm -f "$f" && hidden=$((hidden + 1)); fi
  done < <(dpkg -L "$pkg")
  # the packages' own folders, now empty (/usr/include/fmt, .../cmake/GTest, ...)
  dpkg -L "$pkg" | grep '^/usr/' | sort -r | while read -r d; do if [ -d "$d" ]; then rmdir "$d" 2>/dev/null || true; fi; done
done
# NCCL as pip's nvidia-nccl-cu13 wheel has it (the GPU machine's torch brings it).
cuda=$(readlink -f /usr/local/cuda 2>/dev/null || true)
nccl_note="CUDA's NCCL kept"
if [ "$CI_MODE" = 0 ] && [ -n "$cuda" ] && [ -f "$cuda/include/nccl.h" ]; then
  ln -s "$T/orig-usr/${cuda#/usr/}/include/nccl.h" "$T/pip/nvidia/nccl/include/nccl.h"
  for f in "$cuda"/lib*/libnccl.so.2*; do
    [ -e "$f" ] && ln -sf "$T/orig-usr/${f#/usr/}" "$T/pip/nvidia/nccl/lib/${f##*/}"
  done
  rm -f "$cuda"/include/nccl*.h "$cuda"/lib*/libnccl* "$cuda"/lib*/stubs/libnccl* 2>/dev/null || true
  export PYTHONPATH=$T/pip${PYTHONPATH:+:$PYTHONPATH}
  nccl_note="NCCL only as pip's ($T/pip/nvidia/nccl)"
fi
echo "gpu-rehearsal: hid $hidden files of ${#HIDE_BUNDLED[@]} + ${#HIDE_ABSENT[@]} packages; $nccl_note"

# --- the proof that the hiding works -----------------------------------------------------------
fail() { echo "gpu-rehearsal: FAILED: $*" >&2; exit 1; }
headers=(fmt/format.h nlohmann/json.hpp CLI/CLI.hpp openssl/hmac.h gtest/gtest.h gmock/gmock.h pybind11/pybind11.h)
[ "$CI_MODE" = 0 ] && headers+=(nccl.h hwloc.h numa.h ucp/api/ucp.h benchmark/benchmark.h)
for h in "${headers[@]}"; do
  if echo "#include <$h>" | c++ -std=c++20 -fsyntax-only -x c++ -I"$cuda/include" - 2>/dev/null; then
    fail "<$h> still compiles: the namespace does not hide it"
  fi
done
tools=(ninja); [ "$CI_MODE" = 0 ] && tools+=(pkg-config)
for b in "${tools[@]}"; do
  if command -v "$b" >/dev/null; then fail "$b is still on PATH ($(command -v "$b"))"; fi
done
for f in libfmt.so libcrypto.so libcrypto.a libgtest.a libgmock.a; do
  if [ -e "/usr/lib/x86_64-linux-gnu/$f" ]; then fail "/usr/lib/x86_64-linux-gnu/$f is still there"; fi
done
probe=$T/no-bundle
if cmake -S "$REPO" -B "$probe" -G "Unix Makefiles" -DPython3_EXECUTABLE="$PYTHON" -DBYTEPS_BUILD_BENCH=OFF \
     >"$T/no-bundle.log" 2>&1; then
  fail "byteps configured without the bundle: something the bundle provides is still visible (log: $(tail -3 "$T/no-bundle.log"))"
fi
grep -q '"fmt"' "$T/no-bundle.log" || fail "configuring without the bundle failed, but not on fmt: $(grep -m3 -i error "$T/no-bundle.log")"
rm -rf "$probe"
echo "gpu-rehearsal: proven hidden in $(( (${EPOCHREALTIME//[.,]/} - t0) / 1000 )) ms: the headers do not compile, ${tools[*]} gone, and without the bundle configure fails:"
grep -m1 -A2 "CMake Error" "$T/no-bundle.log" | sed 's/^/    /'

# --- the check, with only the bundle ------------------------------------------------------------
if [ "$CI_MODE" = 1 ]; then
  export BUILD_DIR=${BUILD_DIR:-build} GPU_CHECK_TARGETS=all GPU_CHECK_CMAKE_ARGS="-DBYTEPS_BUILD_BENCH=ON"
  export GPU_CHECK_ALSO_ALLOWED='libhwloc|libnuma|libuc[mpst]|libudev'
fi
if [ "${1:-}" = --exec ]; then shift; "$@"; exit; fi
# Every build tree links the module and byteps-core into python/byteps/: the default mode keeps
# the main build's aside and puts them back after the check (--ci's build is the main build).
keep=()
if [ "$CI_MODE" = 0 ]; then
  saved=$(mktemp -d "$REPO/build-gpu-rehearsal-saved.XXXXXX")
  for f in "$REPO"/python/byteps/_core*.so "$REPO/python/byteps/_bin/byteps-core"; do
    [ -e "$f" ] && mv "$f" "$saved/" && keep+=("$f")
  done
  # shellcheck disable=SC2317  # restore runs from the trap
  restore() {
    local f
    for f in "${keep[@]}"; do rm -f "$f"; mv "$saved/${f##*/}" "$f"; done
    rmdir "$saved"
  }
  trap restore EXIT
fi
rc=0
bash "$REPO/scripts/gpu-check.sh" --rehearsal "$@" || rc=$?
exit $rc
