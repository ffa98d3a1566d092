#!/usr/bin/env bash
# The prepared GPU check (device machine, < 8 minutes): build against the Python torch
# package's LibTorch 2.x with CUDA, run the verification core on CUDA, the GPU tests, and the
# train-step benchmark for `small` and `400m` in bf16, a world-size-1 NCCL smoke run, and the
# Hugging Face export loaded by transformers (scripts/gpu-export-check.sh). Results go to $OUT
# (or ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
log() { echo "[gpu-check $(date +%T)] $*" | tee -a "$OUT/gpu-check.log"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
PREFIX=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null)
if [ -z "$PREFIX" ]; then log "no Python torch: cannot find LibTorch 2.x"; exit 1; fi
log "torch prefix $PREFIX"
command -v apt-get >/dev/null && { apt-get update -qq; apt-get install -y -qq --no-install-recommends \
  ninja-build ccache pkg-config libsentencepiece-dev libabsl-dev libcli11-dev nlohmann-json3-dev libicu-dev \
  zlib1g-dev libbz2-dev libgtest-dev libgmock-dev >/dev/null; }
# The GPU machine's torch (2.11, cxx11 ABI like every wheel since 2.7) is the LibTorch: the same
# CMake path as scripts/build.sh, with LM_PYTHON naming its interpreter.
cmake -S . -B build-gpu -G Ninja -DLM_PYTHON="$(command -v python3)" -DLM_REQUIRE_CUDA=ON \
  -DLM_BUILD_BENCH=ON > "$OUT/cmake.log" 2>&1 || { log "cmake failed"; tail -40 "$OUT/cmake.log"; exit 1; }
JOBS=$(nproc) timeout 300 ninja -C build-gpu lmtrain train_step_bench model_test train_test ddp_worker gpu_test > "$OUT/build.log" 2>&1 || { log "build failed"; tail -60 "$OUT/build.log"; exit 1; }
./build-gpu/app/lmtrain --version | tee "$OUT/version.txt"
log "check on CUDA"
./build-gpu/app/lmtrain check --preset small --device cuda 2>&1 | tee "$OUT/check.txt"
log "GPU tests (tests/train/gpu_test.cpp, ctest label gpu)"
./build-gpu/tests/train/gpu_test 2>&1 | tail -30 | tee "$OUT/gtest.txt"
# A filter that matches nothing, or tests that all skip, must not read as a pass.
grep -q "PASSED.*[1-9][0-9]* test" "$OUT/gtest.txt" && ! grep -q "SKIPPED" "$OUT/gtest.txt" \
  || log "GPU tests: none ran or some skipped (see $OUT/gtest.txt)"
log "NCCL smoke: world size 1, tiny preset, overlapped gradient buckets on CUDA (a few seconds)"
grep -q "ProcessGroupNCCL enabled" "$OUT/cmake.log" || log "cmake did not enable ProcessGroupNCCL (nccl.h not found?)"
RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29631 LM_DDP_FORCE_COMM=1 LM_DDP_DEVICE=cuda \
  LM_DDP_BUCKET_MB=0.05 LM_DDP_STATS="$OUT/nccl-smoke.stats" timeout 120 ./build-gpu/tests/train/ddp_worker \
  "$OUT/nccl-smoke-run" 4 8 -1 0 "$OUT/nccl-smoke.losses" > "$OUT/nccl-smoke.txt" 2>&1 \
  && log "NCCL smoke ok: $(cat "$OUT/nccl-smoke.stats") (buckets synced, started in backward, wait s, step s)" \
  || { log "NCCL smoke failed"; tail -20 "$OUT/nccl-smoke.txt"; }
log "bench"
for p in "small 32 256" "400m 8 2048"; do set -- $p
  ./build-gpu/bench/train_step_bench --preset $1 --batch $2 --seq $3 --steps 20 --dtype bf16 --device cuda \
    2>&1 | tee -a "$OUT/bench.jsonl"
done
log "HF export checked by transformers (scripts/gpu-export-check.sh, ~1-2 min)"
timeout 420 bash scripts/gpu-export-check.sh || log "gpu-export-check failed or timed out (see $OUT/hf-*.txt)"
log "done"
