#!/usr/bin/env bash
# Builds lmforge's Docker images here without a Docker engine (buildah, chroot isolation, vfs storage),
# runs them, and writes each as an archive for `docker load`. Not part of CI.
#
#   1. the base image debian:12, made offline with debootstrap (Debian's archive) when it is missing:
#      no image registry is needed; a renter's `docker build` pulls the real debian:12;
#   2. docker/Dockerfile.cpu and docker/Dockerfile.cuda (every build layer shared: the same binaries),
#      with the host's ccache and a wheelhouse of the pinned wheels mounted into the RUN steps, so
#      rebuilds are fast;
#   3. checks: ldd inside the image, `lmtrain --version` in the CUDA image (must say CUDA compiled in),
#      the CPU image's demo (`lmtrain demo --steps N`) and its summary;
#   4. out/images/lmforge-{cpu,cuda}.tar.gz (docker-archive), sizes and timings.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
usage: bash scripts/image.sh [options] [cpu|cuda ...]

Builds the lmforge images with buildah (no Docker engine), checks them and writes docker-load archives.
Default: both images, the demo in the CPU image, --version in both, archives in out/images/.

options:
  --base-only        only make the base image docker.io/library/debian:12 (debootstrap) if missing
  --no-build         check, demo and archive the images already built (localhost/lmforge:*)
  --no-demo          skip the CPU image's demo
  --no-archive       skip writing the docker-archive files
  --demo-steps N     training steps of the demo (default 60, about 2 minutes on 2 cores;
                     0 = the demo's own default)
  --demo-dtype D     fp32 (default) or bf16, or '' for the demo's own default (bf16). On CPUs
                     without AVX512-BF16 the wheel's bf16 matmul is ~50x slower than fp32 (here:
                     0.9 vs 41 GFLOP/s, 1024^3, one thread), so a bf16 demo takes hours
  --no-gzip          write plain .tar archives (default: .tar.gz, gzip -1, streamed; docker load
                     reads both)
  -h, --help         this text

environment:
  IMAGE_OUT=out/images          where archives, logs and the demo output go (git-ignored)
  IMAGE_WORK=/var/tmp/lmforge-image   scratch folder for the debootstrap root file system
  DEBIAN_MIRROR=http://deb.debian.org/debian
  CCACHE_HOST=~/.cache/ccache   mounted at /root/.cache/ccache in the RUN steps
  WHEELS_HOST=~/.cache/lmforge/wheelhouse   the pinned wheels (~3 GB), mounted at /root/.cache/pip
  NICE=19                       niceness of builds and runs (the machine may be shared)

examples:
  bash scripts/image.sh                          # everything
  bash scripts/image.sh --no-archive cuda        # rebuild and check the CUDA image only
  bash scripts/image.sh --demo-steps 0 cpu       # the CPU image with the full demo
  bash scripts/image.sh --base-only              # only the offline debian:12 base

then, on a machine with Docker:
  docker load -i out/images/lmforge-cuda.tar.gz  # -> lmforge:cuda
  docker run --gpus all --ipc=host --rm lmforge:cuda lmtrain --version
EOF
}

VARIANTS=()
DEMO=1
ARCHIVE=1
BASE_ONLY=0
GZIP=1
DEMO_STEPS=60
DEMO_DTYPE=fp32
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --base-only) BASE_ONLY=1 ;;
    --no-demo) DEMO=0 ;;
    --no-archive) ARCHIVE=0 ;;
    --no-gzip) GZIP=0 ;;
    --demo-steps) DEMO_STEPS=$2; shift ;;
    --demo-dtype) DEMO_DTYPE=$2; shift ;;
    --no-build) BUILD=0 ;;
    cpu|cuda) VARIANTS+=("$1") ;;
    *) echo "image.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=(cpu cuda)

if [ "$(id -u)" -ne 0 ]; then
  echo "image.sh: run as root (debootstrap, and buildah's chroot isolation with vfs storage)" >&2
  exit 1
fi
# Its own tools, from Debian's archive, installed once (idempotent like scripts/setup.sh).
need=()
for tool in buildah debootstrap; do command -v "$tool" >/dev/null || need+=("$tool"); done
if [ ${#need[@]} -gt 0 ]; then
  echo "image.sh: installing ${need[*]} (Debian packages)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null ||
    { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; } ||
    { echo "image.sh: could not install ${need[*]} (apt-get install ${need[*]})" >&2; exit 1; }
fi

OUT=${IMAGE_OUT:-out/images}
WORK=${IMAGE_WORK:-/var/tmp/lmforge-image}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CCACHE_HOST=${CCACHE_HOST:-$HOME/.cache/ccache}
WHEELS_HOST=${WHEELS_HOST:-$HOME/.cache/lmforge/wheelhouse}
BASE=docker.io/library/debian:12
B=(buildah --storage-driver vfs)
N=(nice -n "${NICE:-19}")
mkdir -p "$OUT" "$CCACHE_HOST"
OUT_ABS=$(cd "$OUT" && pwd)

declare -A BUILD_S IMAGE_SIZE ARCHIVE_SIZE ARCHIVE_S
SUMMARY=()
note() { echo "image.sh: $*"; }
now() { date +%s; }
human() { numfmt --to=iec --suffix=B "$1"; }
image_exists() { "${B[@]}" inspect --type image "$1" >/dev/null 2>&1; }
# Sum of the (uncompressed) layer sizes in the image manifest, in bytes.
image_bytes() {
  "${B[@]}" inspect --type image --format '{{.Manifest}}' "$1" 2>/dev/null |
    python3 -c 'import json, sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))' 2>/dev/null || echo 0
}

# container_of IMAGE: a working container of IMAGE in $CTR, removed on exit (not in a subshell:
# the list must reach the trap).
CONTAINERS=()
cleanup() {
  for c in "${CONTAINERS[@]}"; do "${B[@]}" rm "$c" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT
container_of() {
  CTR=$("${B[@]}" from --pull=never "$1")
  CONTAINERS+=("$CTR")
}

# 1. The base image: debootstrap's minbase of Debian 12, set up like the official image (deb822 sources
#    for bookworm, -updates and -security; empty apt lists), committed as docker.io/library/debian:12 so
#    that `FROM debian:12` resolves from local storage.
make_base() {
  if image_exists "$BASE"; then
    note "base image $BASE present ($(human "$(image_bytes "$BASE")"))"
    return
  fi
  local t0 rootfs ctr mnt
  t0=$(now)
  rootfs=$WORK/rootfs
  note "making $BASE with debootstrap (bookworm, minbase) from $MIRROR in $rootfs"
  rm -rf "$rootfs"
  mkdir -p "$rootfs"
  "${N[@]}" debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" > "$OUT/debootstrap.log" 2>&1 ||
    { tail -20 "$OUT/debootstrap.log"; exit 1; }
  for m in proc sys dev/pts dev; do umount "$rootfs/$m" 2>/dev/null || true; done
  rm -f "$rootfs/etc/apt/sources.list"
  cat > "$rootfs/etc/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
         "$rootfs"/var/log/* "$rootfs"/dev/* "$rootfs"/proc/* "$rootfs"/sys/* "$rootfs"/tmp/* "$rootfs"/run/*
  : > "$rootfs/etc/hostname"
  : > "$rootfs/etc/resolv.conf"
  ctr=$("${B[@]}" from scratch)
  CONTAINERS+=("$ctr")
  mnt=$("${B[@]}" mount "$ctr")
  tar -C "$rootfs" --numeric-owner -cf - . | tar -C "$mnt" --numeric-owner -xpf -
  "${B[@]}" umount "$ctr" >/dev/null
  "${B[@]}" config --os linux --arch amd64 \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd bash \
    --label "org.opencontainers.image.description=Debian 12 minbase, debootstrap from $MIRROR by lmforge scripts/image.sh" \
    "$ctr"
  "${B[@]}" commit --quiet "$ctr" "$BASE" >/dev/null
  rm -rf "$rootfs"
  note "base image $BASE made in $(( $(now) - t0 )) s ($(human "$(image_bytes "$BASE")"))"
}

# pip in the RUN steps. A pip HTTP cache does not help on machines whose proxy marks PyPI's
# answers uncacheable (this one: ~/.cache/pip stays empty), so image.sh keeps a wheelhouse instead:
# every wheel of scripts/requirements.txt and scripts/cuda_from_wheels.sh --list, downloaded here once
# (pip download skips files it has) into $WHEELS_HOST and mounted at /root/.cache/pip, with a pip.conf
# at /etc/xdg/pip saying find-links there and no index: setup.sh's pip installs run offline. Where this
# host sets a CA bundle for pip (PIP_CERT or /etc/pip.conf's cert, e.g. behind a TLS-inspecting proxy),
# the bundle goes into that pip.conf too. Neither mount stays in the image; a renter's docker build
# uses PyPI directly.
PIP_MOUNT=()
pip_mounts() {
  local ca=${PIP_CERT:-} t0 pipvenv=$WORK/pip-venv conf=$WORK/pip-conf
  [ -n "$ca" ] || ca=$(sed -n 's/^ *cert *= *//p' /etc/pip.conf 2>/dev/null | head -1)
  mkdir -p "$conf" "$WHEELS_HOST"
  printf '[global]\ntimeout = %s\n' "${PIP_DEFAULT_TIMEOUT:-120}" > "$conf/pip.conf"
  if [ -n "$ca" ] && [ -r "$ca" ]; then
    cp "$ca" "$conf/ca.crt"
    echo "cert = /etc/xdg/pip/ca.crt" >> "$conf/pip.conf"
    note "pip in the RUN steps uses this host's CA bundle $ca"
  fi
  t0=$(now)
  [ -x "$pipvenv/bin/pip" ] || python3 -m venv "$pipvenv"
  # shellcheck disable=SC2046
  if "${N[@]}" "$pipvenv/bin/pip" download --disable-pip-version-check --progress-bar off -q \
       -d "$WHEELS_HOST" -r scripts/requirements.txt $(bash scripts/cuda_from_wheels.sh --list) \
       > "$OUT/wheelhouse.log" 2>&1; then
    printf 'find-links = /root/.cache/pip\nno-index = true\n' >> "$conf/pip.conf"
    note "wheelhouse $WHEELS_HOST: $(ls "$WHEELS_HOST" | wc -l) wheels, $(du -sh "$WHEELS_HOST" | cut -f1)" \
         "($(( $(now) - t0 )) s); pip in the RUN steps installs from it, offline"
  else
    tail -5 "$OUT/wheelhouse.log"
    note "filling the wheelhouse failed; pip in the RUN steps uses the index"
  fi
  PIP_MOUNT=(-v "$WHEELS_HOST:/root/.cache/pip" -v "$conf:/etc/xdg/pip:ro")
}

# 2. One image.
build_image() {
  local v=$1 t0 rc
  local ignore=docker/Dockerfile.$v.dockerignore
  t0=$(now)
  note "building lmforge:$v (docker/Dockerfile.$v; log $OUT/build-$v.log)"
  set +e
  "${N[@]}" "${B[@]}" bud --isolation chroot --layers --pull=never \
    -f "docker/Dockerfile.$v" --ignorefile "$ignore" \
    -v "$CCACHE_HOST:/root/.cache/ccache" "${PIP_MOUNT[@]}" \
    -t "localhost/lmforge:$v" . > "$OUT/build-$v.log" 2>&1
  rc=$?
  set -e
  if [ $rc -ne 0 ]; then
    tail -40 "$OUT/build-$v.log"
    note "building lmforge:$v failed (exit $rc); the whole log is $OUT/build-$v.log"
    exit $rc
  fi
  BUILD_S[$v]=$(( $(now) - t0 ))
  IMAGE_SIZE[$v]=$(image_bytes "localhost/lmforge:$v")
  note "lmforge:$v built in ${BUILD_S[$v]} s, $(human "${IMAGE_SIZE[$v]}")" \
       "($(grep -c '^--> Using cache' "$OUT/build-$v.log" || true) steps from the layer cache)"
}

# 3. Checks inside an image.
check_image() {
  local v=$1 ctr out
  container_of "localhost/lmforge:$v"
  ctr=$CTR
  out=$("${B[@]}" run --isolation chroot "$ctr" -- sh -c \
        'ldd /usr/local/bin/lmtrain /usr/local/bin/lmeval /usr/local/lib/liblm_spm.so' 2>&1)
  if grep -q "not found" <<< "$out"; then
    echo "$out" | grep "not found"
    note "lmforge:$v: unresolved libraries"
    exit 1
  fi
  note "lmforge:$v: ldd resolves every library; LibTorch from $(grep -o '/[^ ]*/libtorch_cpu.so' <<< "$out" | head -1)"
  local sum
  sum=$("${B[@]}" run --isolation chroot "$ctr" -- sha256sum /usr/local/bin/lmtrain | cut -c1-16)
  SUMMARY+=("lmforge:$v lmtrain sha256 $sum")
  local ver
  ver=$("${B[@]}" run --isolation chroot "$ctr" -- lmtrain --version 2>&1) || {
    echo "$ver"; note "lmforge:$v: lmtrain --version failed"; exit 1; }
  note "lmforge:$v: $ver"
  SUMMARY+=("lmforge:$v \$ lmtrain --version: $ver")
  if [ "$v" = cuda ] && ! grep -q "CUDA [0-9.]*.*compiled in" <<< "$ver"; then
    note "lmforge:cuda: lmtrain --version does not report CUDA compiled in"
    exit 1
  fi
}

run_demo() {
  local ctr t0 args dir=$OUT_ABS/demo-cpu
  rm -rf "$dir"
  mkdir -p "$dir"
  args=(lmtrain demo --out /out/demo)
  [ "$DEMO_STEPS" = 0 ] || args+=(--steps "$DEMO_STEPS")
  [ -z "$DEMO_DTYPE" ] || args+=(--dtype "$DEMO_DTYPE")
  container_of localhost/lmforge:cpu
  ctr=$CTR
  note "lmforge:cpu: ${args[*]} (log $OUT/demo-cpu.log)"
  t0=$(now)
  "${N[@]}" "${B[@]}" run --isolation chroot -v "$dir:/out" "$ctr" -- "${args[@]}" > "$OUT/demo-cpu.log" 2>&1 ||
    { tail -30 "$OUT/demo-cpu.log"; note "the demo failed"; exit 1; }
  local s=$(( $(now) - t0 ))
  echo "---- $OUT/demo-cpu/demo/summary.md"
  cat "$dir/demo/summary.md"
  echo "----"
  sed -n '/== demo finished/,$p' "$OUT/demo-cpu.log"
  SUMMARY+=("lmforge:cpu demo (${args[*]:1}): ${s} s; $(grep -o 'demo finished in .*' "$OUT/demo-cpu.log")")
}

write_archive() {
  local v=$1 t0 path=$OUT/lmforge-$v.tar
  t0=$(now)
  rm -f "$path" "$path.gz"
  if [ "$GZIP" = 1 ]; then
    # streamed: the uncompressed archive (~the image size) never lands on disk
    path=$path.gz
    "${N[@]}" "${B[@]}" push --quiet "localhost/lmforge:$v" "docker-archive:/dev/stdout:lmforge:$v" |
      "${N[@]}" gzip -1 > "$path.tmp"
    mv "$path.tmp" "$path"
  else
    "${N[@]}" "${B[@]}" push --quiet "localhost/lmforge:$v" "docker-archive:$path:lmforge:$v"
  fi
  ARCHIVE_S[$v]=$(( $(now) - t0 ))
  ARCHIVE_SIZE[$v]=$(stat -c %s "$path")
  note "lmforge:$v -> $path ($(human "${ARCHIVE_SIZE[$v]}"), ${ARCHIVE_S[$v]} s); docker load -i $path"
}

T0=$(now)
make_base
[ "$BASE_ONLY" = 1 ] && exit 0
if [ "$BUILD" = 1 ]; then
  pip_mounts
  for v in "${VARIANTS[@]}"; do build_image "$v"; done
else
  for v in "${VARIANTS[@]}"; do
    image_exists "localhost/lmforge:$v" || { note "localhost/lmforge:$v not built yet"; exit 1; }
    BUILD_S[$v]="(not rebuilt)"
    IMAGE_SIZE[$v]=$(image_bytes "localhost/lmforge:$v")
  done
fi
for v in "${VARIANTS[@]}"; do check_image "$v"; done
if [ "$DEMO" = 1 ] && [[ " ${VARIANTS[*]} " == *" cpu "* ]]; then run_demo; fi
if [ "$ARCHIVE" = 1 ]; then for v in "${VARIANTS[@]}"; do write_archive "$v"; done; fi

echo
echo "== image.sh summary ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, total $(( $(now) - T0 )) s)"
for v in "${VARIANTS[@]}"; do
  line="lmforge:$v  image $(human "${IMAGE_SIZE[$v]}")  built in ${BUILD_S[$v]}"
  if [[ ${BUILD_S[$v]} =~ ^[0-9]+$ ]]; then line+=" s"; fi
  [ -n "${ARCHIVE_SIZE[$v]:-}" ] && line+="  archive $(human "${ARCHIVE_SIZE[$v]}") in ${ARCHIVE_S[$v]} s"
  echo "  $line"
done
for l in "${SUMMARY[@]}"; do echo "  $l"; done
echo "  layers shared by the images: docker/Dockerfile.cpu and .cuda differ only after the last WORKDIR"
df -h / | awk 'NR==2 {print "  disk: " $4 " free on /"}'
