#!/usr/bin/env bash
# Installs every Debian package that lmforge's build, tests and demo need.
# Idempotent: when everything is already installed it does nothing (no apt-get update).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates
  libtorch-dev            # LibTorch 1.13 (CPU) headers and libraries
  libopenblas0-openmp     # fast fp32 BLAS for LibTorch (reference BLAS runs at ~5 GFLOP/s)
  libsentencepiece-dev sentencepiece
  libabsl-dev libcli11-dev nlohmann-json3-dev libicu-dev
  zlib1g-dev libbz2-dev   # gzip corpora, bz2 HellaSwag export
  libgloo-dev             # headers for c10d ProcessGroupGloo (CPU data parallel)
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch python3-numpy python3-sentencepiece   # independent oracle and peer in tests/benchmarks only
  clang-14 libclang-rt-14-dev   # libFuzzer + ASan/UBSan for the fuzz targets (scripts/fuzz.sh, ctest fuzz_quick)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
echo "setup: done"
