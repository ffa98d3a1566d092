#!/usr/bin/env bash
# The CUDA runtime a program loads is the torch wheel's own (issue 29 item 8; CMakeLists.txt points
# CUDA::cudart and friends at site-packages/nvidia/...): ldd must resolve libcudart there, not in a
# system toolkit that torch was not built with. Skipped (77) for a program without libcudart (a
# LibTorch without CUDA).
#   check_cuda_runtime.sh PROGRAM PYTHON
prog=$1; py=$2
line=$(ldd "$prog" | grep -E 'libcudart\.so') || { echo "skip: $prog loads no libcudart (a build without CUDA)"; exit 77; }
site=$("$py" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))') || exit 1
path=$(realpath -sm "$(echo "$line" | awk '{print $3}')")  # '..' folded, symbolic links kept
case "$path" in
  "$site"/nvidia/*) echo "ok: $(basename "$prog") loads $path"; exit 0 ;;
esac
echo "FAIL: $(basename "$prog") loads $path, not the torch wheel's ($site/nvidia/...):"
ldd "$prog" | grep -E 'cudart|cublas|nccl|nvrtc'
exit 1
