#!/usr/bin/env bash
# Assembles a CUDA toolkit root at $LM_VENV/cuda from NVIDIA's PyPI wheels, for machines (and
# the Docker images) with no system CUDA toolkit. LibTorch's CMake config runs FindCUDA,
# enable_language(CUDA) and FindCUDAToolkit, which need a working nvcc and the usual toolkit
# layout (bin/nvcc, include/, lib64/libcudart.so, libcublas.so, ...); lmforge
# also compiles its own kernels with it (model/kernels/). scripts/setup.sh calls this when no nvcc is found; scripts/build.sh
# then passes -DCUDAToolkit_ROOT=$LM_VENV/cuda.
#
#   bash scripts/cuda_from_wheels.sh [VENV]      # VENV defaults to $LM_VENV (scripts/env.sh)
#   bash scripts/cuda_from_wheels.sh --list      # the pinned wheels, one a line (scripts/image.sh)
#
# Versions: the CUDA 13.0 of the pinned torch wheel (torch 2.11.0+cu130 brings
# nvidia-cuda-runtime 13.0.96, cuBLAS, cuDNN, NCCL, ... in nvidia/cu13/). nvcc 13.0.88 with the
# crt headers and NVVM of the same release: an unpinned nvidia-cuda-nvcc pulls the newest
# nvidia-cuda-crt/nvidia-nvvm (13.5), whose headers do not match nvcc 13.0. About 120 MB download.
# The toolkit directory holds symlinks into the wheels' nvidia/cu13/ tree, a hard link of nvcc and
# a libcuda.so link-time stub (as in a real toolkit's lib64/stubs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

CUDA_WHEELS=(
  nvidia-cuda-nvcc==13.0.88     # bin/nvcc, ptxas, fatbinary, nvlink, cudafe++
  nvidia-cuda-crt==13.0.88      # include/crt (host_config.h, ...): nvcc's own headers
  nvidia-nvvm==13.0.88          # nvvm/bin/cicc, libnvvm
  nvidia-cuda-runtime==13.0.96  # cudart, headers (what torch 2.11.0 depends on already)
  nvidia-cuda-cccl==13.0.85     # CCCL headers (cuda/std, cub, thrust) a CUDA 13.0 toolkit carries
)
if [ "${1:-}" = --list ]; then printf '%s\n' "${CUDA_WHEELS[@]}"; exit 0; fi
if [ $# -ge 1 ]; then export LM_VENV=$1 LM_PYTHON=$1/bin/python; fi
source "$here/env.sh"

root=$LM_VENV/cuda
if [ ! -x "$LM_PYTHON" ]; then
  echo "cuda_from_wheels: no Python environment at $LM_VENV (run scripts/setup.sh)" >&2
  exit 1
fi
echo "cuda_from_wheels: installing ${CUDA_WHEELS[*]} into $LM_VENV"
"$LM_VENV/bin/pip" install --disable-pip-version-check --progress-bar off -q "${CUDA_WHEELS[@]}"

site=$("$LM_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cu=$site/nvidia/cu13
for need in bin/nvcc include/cuda_runtime.h include/crt/host_config.h nvvm/bin/cicc lib/libcudart.so.13; do
  if [ ! -e "$cu/$need" ]; then
    echo "cuda_from_wheels: $cu/$need missing after the install (wheel layout changed?)" >&2
    exit 1
  fi
done

# A fresh root each time (only symlinks and the stub live there).
rm -rf "$root.tmp"
mkdir -p "$root.tmp/lib/stubs"
for d in include nvvm; do ln -s "$cu/$d" "$root.tmp/$d"; done
# bin/: nvcc finds its profile, the toolkit root (TOP = bin/..) and lib64/ from the path it was run
# as, so nvcc itself is a hard link (a copy across file systems) and nvcc.profile a copy; symlinks
# for the other tools.
mkdir -p "$root.tmp/bin"
for f in "$cu"/bin/*; do
  case "$(basename "$f")" in
    nvcc) ln "$f" "$root.tmp/bin/nvcc" 2>/dev/null || cp "$f" "$root.tmp/bin/nvcc" ;;
    nvcc.profile) cp "$f" "$root.tmp/bin/nvcc.profile" ;;
    *) ln -s "$f" "$root.tmp/bin/$(basename "$f")" ;;
  esac
done
# lib/: every library of the wheels under its own name, plus the unversioned development links
# (libcudart.so -> libcudart.so.13, ...) that a toolkit has and the runtime wheels leave out.
for f in "$cu"/lib/*; do
  ln -s "$f" "$root.tmp/lib/$(basename "$f")"
done
for f in "$cu"/lib/lib*.so.*; do
  base=$(basename "$f")
  dev=${base%%.so.*}.so
  [ -e "$root.tmp/lib/$dev" ] || ln -s "$base" "$root.tmp/lib/$dev"
done
# Libraries in other nvidia/ packages of the wheel (cuDNN, NCCL, cuSPARSELt, NVSHMEM): same treatment,
# so that FindCUDAToolkit and LibTorch's FindCUDNN/FindCUSPARSELT see them in one place.
for pkg in "$site"/nvidia/*/; do
  [ "$pkg" = "$cu/" ] && continue
  for f in "$pkg"lib/lib*.so*; do
    [ -e "$f" ] || continue
    base=$(basename "$f")
    [ -e "$root.tmp/lib/$base" ] || ln -s "$f" "$root.tmp/lib/$base"
    dev=${base%%.so*}.so
    [ -e "$root.tmp/lib/$dev" ] || ln -s "$base" "$root.tmp/lib/$dev"
  done
done
ln -s lib "$root.tmp/lib64"

# libcuda.so comes with the NVIDIA driver, not with any wheel. A toolkit ships a link-time stub in
# lib64/stubs (FindCUDAToolkit looks there for CUDA::cuda_driver); make an equivalent one: an empty
# library named libcuda.so.1, never loaded at run time (the real driver library is, on a GPU host).
if command -v cc >/dev/null; then
  echo 'void lmforge_cuda_stub(void) {}' > "$root.tmp/lib/stubs/stub.c"
  cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$root.tmp/lib/stubs/libcuda.so" "$root.tmp/lib/stubs/stub.c"
  rm "$root.tmp/lib/stubs/stub.c"
fi

rm -rf "$root"
mv "$root.tmp" "$root"
ver=$("$root/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
echo "cuda_from_wheels: CUDA $ver toolkit at $root (nvcc $root/bin/nvcc)"
