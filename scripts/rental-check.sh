#!/usr/bin/env bash
# Is this rented machine fit to train a preset? One command, in its first minute, before the run:
#   the GPU and its driver: CUDA 13 (the image's torch 2.11+cu130) needs driver R580 or newer;
#   the disk under the runs folder: checkpoints (keep_last 3, plus the one being written) and shards;
#   Docker with the NVIDIA runtime, or the bare-machine path (docker/README.md);
#   the image (or an lmtrain on PATH) runs and sees the GPU (lmtrain --version).
# Prints one line per check and exits 1 when any fails (the line says what to do).
#   bash scripts/rental-check.sh [--preset 400m] [--runs DIR] [--image lmforge:cuda] [--shards-gb N]
# Without the repository: `docker run --rm --gpus all lmforge:cuda bash /src/lmforge/scripts/rental-check.sh`
# checks the driver and the GPU from inside the image (not the host's disk or Docker).
set -u
PRESET=400m; RUNS=.; IMAGE=lmforge:cuda; SHARDS_GB=""
while [ $# -gt 0 ]; do
  case $1 in
    --preset) PRESET=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --image) IMAGE=$2; shift 2 ;;
    --shards-gb) SHARDS_GB=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | grep '^#' | cut -c3-; exit 0 ;;
    *) echo "rental-check: unknown argument '$1' (--help)"; exit 2 ;;
  esac
done
fail=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fail=1; }
note() { echo "note  $*"; }

# One checkpoint (fp32 weights + AdamW's two moments: 12 bytes a parameter) and the preset's token
# budget (its shards at 2 bytes a token when every token is new data), from docs/gpu.md's preset table.
case $PRESET in
  124m) CKPT_GB=1.5; TOKENS_B=10 ;;
  400m) CKPT_GB=4.7; TOKENS_B=8 ;;
  1b) CKPT_GB=12.7; TOKENS_B=22 ;;
  tiny|small) CKPT_GB=0.1; TOKENS_B=0 ;;
  *) echo "rental-check: --preset 124m, 400m, 1b (or tiny, small), got '$PRESET'"; exit 2 ;;
esac
[ -n "$SHARDS_GB" ] || SHARDS_GB=$(awk -v t="$TOKENS_B" 'BEGIN { printf "%.0f", t * 2 }')

# 1. The GPU and the driver.
if ! command -v nvidia-smi >/dev/null; then
  bad "no nvidia-smi: no NVIDIA driver on this machine (or the container was started without --gpus all)"
else
  while IFS=, read -r name driver mem; do
    name=${name# }; driver=${driver# }; mem=${mem# }
    major=${driver%%.*}
    if [[ "$major" =~ ^[0-9]+$ ]] && [ "$major" -ge 580 ]; then
      ok "GPU $name, driver $driver (R580+ runs CUDA 13), $mem"
    else
      bad "GPU $name, driver $driver: CUDA 13 needs R580 or newer; choose a host with a newer driver (the image has no CUDA 12 build, docker/README.md)"
    fi
  done < <(timeout -k 5 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)
fi

# 2. The disk under the runs folder.
mkdir -p "$RUNS" 2>/dev/null
free_gb=$(df -Pk "$RUNS" 2>/dev/null | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }')
need_gb=$(awk -v c="$CKPT_GB" -v s="$SHARDS_GB" 'BEGIN { printf "%.1f", 4 * c + s }')
what="$PRESET: 4 checkpoints of $CKPT_GB GB (keep_last 3 + the one being written) + ${SHARDS_GB} GB of shards = $need_gb GB"
if [ -z "$free_gb" ]; then bad "disk: cannot read the free space of $RUNS"
elif awk -v f="$free_gb" -v n="$need_gb" 'BEGIN { exit !(f >= n) }'; then ok "disk: $free_gb GB free under $RUNS; $what"
else bad "disk: $free_gb GB free under $RUNS, less than $what (another volume: --runs DIR; or --shards-gb for your corpus)"; fi

# 3. Docker and the image, or the bare machine.
if command -v docker >/dev/null && timeout -k 5 30 docker info >/dev/null 2>&1; then
  if timeout -k 5 30 docker info 2>/dev/null | grep -qi nvidia; then ok "docker with the NVIDIA runtime"
  else note "docker without an NVIDIA runtime listed (--gpus all needs the NVIDIA Container Toolkit; CDI hosts: Podman)"; fi
  docker_gb=$(df -Pk "$(docker info -f '{{.DockerRootDir}}' 2>/dev/null || echo /var/lib/docker)" 2>/dev/null | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }')
  [ -n "$docker_gb" ] && { awk -v f="$docker_gb" 'BEGIN { exit !(f >= 10) }' && ok "docker's storage: $docker_gb GB free (the image takes 6.1 GB, its archive 3.4 GB more while loading)" \
    || bad "docker's storage: $docker_gb GB free, the image needs 6.1 GB (+3.4 GB for the archive while loading)"; }
  if timeout -k 5 30 docker image inspect "$IMAGE" >/dev/null 2>&1; then
    line=$(timeout -k 5 120 docker run --rm --gpus all "$IMAGE" lmtrain --version 2>&1 | head -1)
    if grep -q "device cuda" <<<"$line"; then ok "$IMAGE: $line"; else bad "$IMAGE does not see the GPU: $line"; fi
  else
    note "no image $IMAGE here yet: docker load -i lmforge-cuda.tar.gz (or docker build, docker/README.md)"
  fi
elif command -v lmtrain >/dev/null; then
  line=$(timeout -k 5 120 lmtrain --version 2>&1 | head -1)
  if grep -q "device cuda" <<<"$line"; then ok "no Docker; lmtrain on PATH: $line"; else bad "lmtrain does not see the GPU: $line"; fi
else
  note "no Docker and no lmtrain: the bare-machine path (docker/README.md, \"Without Docker\")"
fi
exit $fail
