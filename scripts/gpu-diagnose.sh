#!/usr/bin/env bash
# Follow-up of a failed scripts/gpu-check.sh on the device machine: full output of the GPU tests
# and a backtrace (cuda-gdb, batch mode) of the train step, into $OUT. Same carried .debs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
root=/tmp/lmforge-deps; rm -rf $root; mkdir -p $root
for f in .gpu-deps/*.deb; do dpkg-deb -x "$f" $root; done
lib=$root/usr/lib/x86_64-linux-gnu
for l in "$lib"/*.so; do [ -L "$l" ] && [ ! -e "$l" ] || continue
  sys=$(ls /lib/x86_64-linux-gnu/"$(basename "$l")".[0-9]* /usr/lib/x86_64-linux-gnu/"$(basename "$l")".[0-9]* 2>/dev/null | head -1)
  [ -n "$sys" ] && ln -sf "$sys" "$l"; done
export CMAKE_PREFIX_PATH=$root/usr ICU_ROOT=$root/usr PKG_CONFIG_SYSROOT_DIR=$root
export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$root/usr/share/pkgconfig CPATH=$root/usr/include LIBRARY_PATH=$lib
export LD_LIBRARY_PATH=$lib PATH=$root/usr/bin:$PATH
command -v pkg-config >/dev/null || ln -sf $root/usr/bin/pkgconf $root/usr/bin/pkg-config
PY=$(command -v python3)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLM_PYTHON="$PY" -DLM_REQUIRE_CUDA=ON \
  -DLM_BUILD_BENCH=ON > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
timeout 200 ninja -C build-gpu train_step_bench gpu_test > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "built"
B=build-gpu/bench/train_step_bench
timeout 60 $B --preset tiny --batch 4 --seq 64 --steps 3 --dtype fp32 --device cpu > "$OUT/bench-tiny-cpu.log" 2>&1
echo "bench tiny cpu rc=$?"; tail -3 "$OUT/bench-tiny-cpu.log"
timeout 120 cuda-gdb -batch -ex run -ex 'x/24a $sp' -ex 'bt' --args $B --preset tiny --batch 4 --seq 64 --steps 3 \
  --dtype fp32 --device cuda > "$OUT/bt-bench.txt" 2>&1; echo "gdb bench rc=$?"
grep -v "Cuda Driver error\|New Thread\|exited\]" "$OUT/bt-bench.txt" | tail -40
