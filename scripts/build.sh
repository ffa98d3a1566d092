#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds lmforge in build/
# against the pinned torch wheel's LibTorch (CUDA and NCCL compiled in; runs on CPUs too).
# Extra arguments go to cmake. LM_REQUIRE_CUDA=0 allows a LibTorch without CUDA
# (e.g. Debian 13's libtorch-dev 2.6: LM_PYTHON=/usr/bin/python3 with python3-torch, or -DCMAKE_PREFIX_PATH=...).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
# Relative paths in ccache keys: a fresh clone (CI) reuses the cache of earlier builds.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
# Precompiled headers are cacheable only with these (ccache manual, "Precompiled headers").
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
args=(-DLM_PYTHON="$LM_PYTHON")
[ "${LM_REQUIRE_CUDA:-1}" = 1 ] && args+=(-DLM_REQUIRE_CUDA=ON)
# LibTorch's CMake config runs FindCUDA/FindCUDAToolkit: the system toolkit, else the one
# scripts/setup.sh assembled from NVIDIA's wheels.
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ] && [ -x "$LM_VENV/cuda/bin/nvcc" ]; then
  args+=(-DCUDAToolkit_ROOT="$LM_VENV/cuda" -DCUDA_TOOLKIT_ROOT_DIR="$LM_VENV/cuda")
fi
mkdir -p "$(dirname "$BUILD_DIR.cmake.log")"
cmake -S . -B "$BUILD_DIR" -G Ninja "${args[@]}" "$@" > "$BUILD_DIR.cmake.log" 2>&1 || { cat "$BUILD_DIR.cmake.log"; exit 1; }
ninja -C "$BUILD_DIR" -j "$JOBS" ${TARGETS:-}
