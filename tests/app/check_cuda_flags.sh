#!/usr/bin/env bash
# No host-compiler warning flag reaches nvcc (issue 38 item 12): nvcc 13 accepts -Wall and
# friends, older ones stop with "Unknown option". Reads the nvcc command of the CUDA kernels'
# object from the build tree; skipped (77) where this build compiles no CUDA kernels.
#   check_cuda_flags.sh BUILD_DIR
set -u
build=$1
cmd=$(ninja -C "$build" -t commands lm_kernels 2>/dev/null | grep -m1 'fused_kernels\.cu')
[ -n "$cmd" ] || { echo "no CUDA kernels in this build (no lm_kernels target): skipped"; exit 77; }
bad=$(grep -oE -- ' -W(all|no-sign-compare|no-unused-parameter|invalid-pch)\b' <<<"$cmd" | tr '\n' ' ')
if [ -n "$bad" ]; then echo "FAIL: host warning flags reach nvcc:$bad"; echo "$cmd"; exit 1; fi
echo "ok: nvcc's command for fused_kernels.cu has no host warning flags"
