#!/usr/bin/env bash
# Rehearses scripts/gpu-check.sh on this CPU machine as the GPU machine will run it: in a private
# mount namespace where /usr is an overlay from which the files of every Debian package the GPU
# machine lacks are deleted (whiteouts: they do not exist there, for the compiler, CMake and the
# loader alike), so that only the bundle (.gpu-bundle, scripts/gpu-bundle.sh) can provide them.
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
# First it proves that the hiding works: the headers cannot be compiled against, and configuring
# byteps without the bundle fails; then it runs `gpu-check.sh --rehearsal` (the GPU steps skip with
# their reason). Needs root (unshare -m, mount). Its exit status is gpu-check's.
#   bash scripts/gpu-rehearsal.sh     # OUT, BUILD_DIR (default build-gpu), GPU_CHECK_* pass through
#   bash scripts/gpu-rehearsal.sh --exec CMD...   # CMD in that namespace instead (after the proof)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
HIDE_BUNDLED=(libfmt-dev nlohmann-json3-dev libcli11-dev libssl-dev libgtest-dev libgmock-dev googletest
              pybind11-dev ninja-build)
HIDE_ABSENT=(pkgconf pkg-config libpkgconf3 libhwloc-dev libnuma-dev libucx-dev libbenchmark-dev libspdlog-dev)
export PYTHON=${PYTHON:-/usr/bin/python3}

if [ -z "${GPU_REHEARSAL_NS:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "gpu-rehearsal: needs root (a mount namespace and an overlay on /usr)" >&2; exit 1; }
  [ -f .gpu-bundle/manifest.txt ] || bash scripts/gpu-bundle.sh
  exec env GPU_REHEARSAL_NS=1 unshare --mount --propagation private bash "$0" "$@"
fi

# --- inside the namespace: nothing here is seen outside it, and it all goes when it ends --------
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
  dpkg -L "$pkg" | grep '^/usr/' | sort -r | while read -r d; do [ -d "$d" ] && rmdir "$d" 2>/dev/null || true; done
done
# NCCL as pip's nvidia-nccl-cu13 wheel has it (the GPU machine's torch brings it).
cuda=$(readlink -f /usr/local/cuda 2>/dev/null || true)
if [ -n "$cuda" ] && [ -f "$cuda/include/nccl.h" ]; then
  ln -s "$T/orig-usr/${cuda#/usr/}/include/nccl.h" "$T/pip/nvidia/nccl/include/nccl.h"
  for f in "$cuda"/lib*/libnccl.so.2*; do
    [ -e "$f" ] && ln -sf "$T/orig-usr/${f#/usr/}" "$T/pip/nvidia/nccl/lib/${f##*/}"
  done
  rm -f "$cuda"/include/nccl*.h "$cuda"/lib*/libnccl* "$cuda"/lib*/stubs/libnccl* 2>/dev/null || true
  export PYTHONPATH=$T/pip${PYTHONPATH:+:$PYTHONPATH}
fi
echo "gpu-rehearsal: hid $hidden files of ${#HIDE_BUNDLED[@]} + ${#HIDE_ABSENT[@]} packages; NCCL only as pip's ($T/pip/nvidia/nccl)"

# --- the proof that the hiding works -----------------------------------------------------------
fail() { echo "gpu-rehearsal: FAILED: $*" >&2; exit 1; }
for h in fmt/format.h nlohmann/json.hpp CLI/CLI.hpp openssl/hmac.h gtest/gtest.h gmock/gmock.h pybind11/pybind11.h \
         nccl.h hwloc.h numa.h ucp/api/ucp.h benchmark/benchmark.h; do
  if echo "#include <$h>" | c++ -std=c++20 -fsyntax-only -x c++ -I"$cuda/include" - 2>/dev/null; then
    fail "<$h> still compiles: the namespace does not hide it"
  fi
done
for b in ninja pkg-config; do command -v "$b" >/dev/null && fail "$b is still on PATH ($(command -v "$b"))"; done
for f in libfmt.so libcrypto.so libcrypto.a libgtest.a libgmock.a; do
  [ -e "/usr/lib/x86_64-linux-gnu/$f" ] && fail "/usr/lib/x86_64-linux-gnu/$f is still there"
done
probe=$T/no-bundle
if cmake -S "$REPO" -B "$probe" -G "Unix Makefiles" -DPython3_EXECUTABLE="$PYTHON" -DBYTEPS_BUILD_BENCH=OFF \
     >"$T/no-bundle.log" 2>&1; then
  fail "byteps configured without the bundle: something the bundle provides is still visible (log: $(tail -3 "$T/no-bundle.log"))"
fi
grep -q "fmt" "$T/no-bundle.log" || fail "configuring without the bundle failed, but not on fmt: $(grep -m3 -i error "$T/no-bundle.log")"
echo "gpu-rehearsal: proven hidden: their headers do not compile, ninja and pkg-config are gone, and without the bundle configure fails:"
grep -m1 -A2 "CMake Error" "$T/no-bundle.log" | sed 's/^/    /'
rm -rf "$probe"

# --- the check, with only the bundle ------------------------------------------------------------
if [ "${1:-}" = --exec ]; then shift; "$@"; exit; fi  # any command in the same namespace (debugging)
bash "$REPO/scripts/gpu-check.sh" --rehearsal "$@"
