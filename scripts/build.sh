#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds lmforge in build/.
# Extra arguments go to cmake, e.g. -DCMAKE_PREFIX_PATH=... for LibTorch 2.x with CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
# Relative paths in ccache keys: a fresh clone (CI) reuses the cache of earlier builds.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
# Precompiled headers are cacheable only with these (ccache manual, "Precompiled headers").
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
cmake -S . -B "$BUILD_DIR" -G Ninja "$@" > "$BUILD_DIR.cmake.log" 2>&1 || { cat "$BUILD_DIR.cmake.log"; exit 1; }
ninja -C "$BUILD_DIR" -j "$JOBS" ${TARGETS:-}
