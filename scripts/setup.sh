#!/usr/bin/env bash
# Installs what lmforge's build, tests and demo need. Idempotent: with everything in place it
# changes nothing and runs no apt-get update or pip.
#  1. Debian packages (compilers, CMake, SentencePiece, abseil, ICU, GoogleTest, ...);
#  2. the pinned torch wheel (scripts/requirements.txt) in a virtual environment outside the clone,
#     ~/.cache/lmforge/venv-torch-<version> (LM_VENV overrides), reused by every clone: LibTorch
#     for the C++ build and the Python oracle/peer of the tests. First time: ~2.9 GB download,
#     ~4.7 GB on disk, 3-5 minutes on a fast link. In the same environment, the real clients of the
#     export (scripts/requirements-clients.txt: transformers, lm-eval; ~0.5 GB) for ctest -L clients.
#  3. the GGUF test oracles (scripts/requirements-gguf.txt: gguf, llama-cpp-python) into the same
#     environment, with a stamp of their own: changing them never reinstalls torch. llama-cpp-python
#     compiles llama.cpp (~50 minutes on 2 busy cores, docs/export.md "GGUF"); LM_SKIP_GGUF=1 skips
#     this step (the gguf ctests then report Skipped).
#     Steps 2's clients and 3 are the tests' oracles: LM_SETUP_SCOPE=product (what scripts/demo.sh
#     sets) installs only what the product needs (packages, torch, nvcc) and skips them, so the demo
#     never waits for transformers or for llama.cpp's compile.
#  4. a CUDA compiler for LibTorch's CMake config (it needs nvcc, even though lmforge compiles
#     no kernels): the system toolkit when there is one (/usr/local/cuda), else NVIDIA's
#     nvcc/cudart wheels into the same environment.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/env.sh"

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates
  python3 python3-venv    # the interpreter of the pinned environment
  libsentencepiece-dev sentencepiece
  libabsl-dev libcli11-dev nlohmann-json3-dev libicu-dev
  zlib1g-dev libbz2-dev libzstd-dev liblzma-dev   # gzip, bzip2, zstd and xz corpora (by magic bytes)
  libgloo-dev             # headers for c10d ProcessGroupGloo (the wheel ships none; docs/dependencies.md)
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev   # libFuzzer + ASan/UBSan for the fuzz targets (scripts/fuzz.sh, ctest fuzz_quick)
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} Debian packages present"
else
  echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

# The pinned Python environment. The stamp holds the requirements it was made from; a changed
# pin (or a broken environment) reinstalls. `pip install -r` skips what is already satisfied, so a
# line added to one file downloads only the new packages, never torch again.
#   requirements.txt          torch, numpy, sentencepiece: LibTorch for the build, the tests' oracle;
#                             pyarrow: Arrow C++ for Parquet corpora (CMake LM_WITH_PARQUET finds it here)
#   requirements-clients.txt  transformers, lm-eval: the real clients of the export (ctest -L clients)
# The Dockerfiles copy only requirements.txt: the product images carry no test-only clients.
# Each requirements file has a stamp of its own: the product's (torch) never reinstalls when the
# tests' clients change, and LM_SETUP_SCOPE=product leaves the clients out altogether.
SCOPE=${LM_SETUP_SCOPE:-all}
case "$SCOPE" in all|product) ;; *) echo "setup: LM_SETUP_SCOPE must be all or product, not '$SCOPE'" >&2; exit 2 ;; esac
install_requirements() {  # file, import check, what it is
  local file=$1 check=$2 what=$3
  local want stamp
  want=$(sha256sum "$here/$file" | cut -c1-16)
  stamp="$LM_VENV/.lmforge-${file%.txt}"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$LM_PYTHON" -c "$check" 2>/dev/null; then
    echo "setup: $what present ($LM_VENV)"
    return
  fi
  echo "setup: installing $what into $LM_VENV"
  mkdir -p "$(dirname "$LM_VENV")"
  [ -x "$LM_PYTHON" ] || "${LM_BASE_PYTHON:-python3}" -m venv "$LM_VENV"
  "$LM_VENV/bin/pip" install --disable-pip-version-check --progress-bar off -q -r "$here/$file"
  "$LM_PYTHON" -c "$check"
  echo "$want" > "$stamp"
}
install_requirements requirements.txt 'import torch, pyarrow' \
  "the torch $LM_TORCH_PIN environment (first time: ~2.9 GB download, a few minutes)"
"$LM_PYTHON" -c 'import torch; print("setup: torch", torch.__version__, "CUDA", torch.version.cuda)'
if [ "$SCOPE" = product ]; then
  echo "setup: the tests' clients skipped (LM_SETUP_SCOPE=product; bash scripts/test.sh installs them)"
elif [ -f "$here/requirements-clients.txt" ]; then
  install_requirements requirements-clients.txt 'import transformers, lm_eval' \
    "the tests' real clients (transformers, lm-eval; ~0.5 GB)"
fi

# The GGUF test oracles. llama-cpp-python has no CPU wheel on PyPI, so pip builds llama.cpp:
# portable code (no -march=native: the environment may move to another CPU), no libcurl (models
# come from files here), no multimodal library (mtmd, not used).
# The Dockerfiles copy only requirements.txt: no test oracles in the product images.
stamp_gguf="$LM_VENV/.lmforge-requirements-gguf"
want_gguf=""
[ -f "$here/requirements-gguf.txt" ] && want_gguf=$(sha256sum "$here/requirements-gguf.txt" | cut -c1-16)
if [ "${LM_SKIP_GGUF:-0}" = 1 ] || [ "$SCOPE" = product ] || [ -z "$want_gguf" ]; then
  echo "setup: GGUF test packages skipped (LM_SKIP_GGUF=1, LM_SETUP_SCOPE=product or no requirements-gguf.txt)"
elif [ -f "$stamp_gguf" ] && [ "$(cat "$stamp_gguf")" = "$want_gguf" ] && "$LM_PYTHON" -c 'import gguf, llama_cpp' 2>/dev/null; then
  echo "setup: GGUF test packages present (gguf, llama-cpp-python)"
else
  echo "setup: installing the GGUF test packages (llama-cpp-python compiles llama.cpp: tens of minutes)"
  # A failed llama.cpp build must not stop the product's build: say so loudly; the gguf ctests then
  # report Skipped, and the next setup.sh tries again (no stamp is written).
  if CMAKE_ARGS="${LM_LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAVA_BUILD=OFF}" \
       CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
       "$LM_VENV/bin/pip" install --disable-pip-version-check --progress-bar off -q -r "$here/requirements-gguf.txt"; then
    "$LM_PYTHON" -c 'from importlib.metadata import version as v; print("setup: gguf", v("gguf"), "llama-cpp-python", v("llama-cpp-python"))'
    echo "$want_gguf" > "$stamp_gguf"
  else
    echo "setup: WARNING: installing the GGUF test packages failed (pip output above); the gguf ctests will be Skipped" >&2
  fi
fi

# nvcc for LibTorch's CMake config (scripts/build.sh looks here when no system toolkit exists).
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA compiler present ($(command -v nvcc || echo /usr/local/cuda/bin/nvcc))"
elif [ -x "$LM_VENV/cuda/bin/nvcc" ]; then
  echo "setup: CUDA compiler present ($LM_VENV/cuda/bin/nvcc)"
else
  bash "$here/cuda_from_wheels.sh" "$LM_VENV"
fi
echo "setup: done"
