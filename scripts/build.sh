#!/usr/bin/env bash
# Configures and builds byteps into build/ (or $BUILD_DIR). Extra arguments go to cmake.
# The native module and binary land in python/byteps/ so PYTHONPATH=python works right away.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} \
  -DPython3_EXECUTABLE=/usr/bin/python3 "$@" > "$BUILD_DIR.configure.log" 2>&1 || {
  cat "$BUILD_DIR.configure.log"; exit 1; }
# BUILD_TARGETS (space-separated): only those targets (and what they need); default: all.
cmake --build "$BUILD_DIR" -j "$(nproc)" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
