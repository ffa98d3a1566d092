#!/usr/bin/env bash
# scripts/rental-check.sh on fake nvidia-smi outputs (issue 38, the renter's one command): a driver
# older than R580 fails naming R580, a newer one passes; too little disk for the preset fails
# naming the checkpoints; no GPU at all fails. No GPU or Docker needed.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/lm_rental_check.XXXXXX); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"
fake() { printf '#!/bin/sh\necho "%s"\n' "$1" > "$work/bin/nvidia-smi"; chmod +x "$work/bin/nvidia-smi"; }
# PATH without docker and lmtrain, with the fake nvidia-smi first.
path="$work/bin:/usr/bin:/bin"
fail=0
expect() {  # NAME WANT_RC GREP ARGS...
  local name=$1 want=$2 pat=$3; shift 3
  out=$(PATH=$path bash "$here/scripts/rental-check.sh" "$@" 2>&1); rc=$?
  if [ "$rc" = "$want" ] && grep -qE "$pat" <<<"$out"; then echo "ok: $name"
  else echo "FAIL: $name (rc $rc, want $want; /$pat/):"; echo "$out"; fail=1; fi
}
fake "NVIDIA H100 80GB HBM3, 575.57.08, 81559 MiB"
expect "a driver before R580 fails, naming R580" 1 "FAIL  GPU NVIDIA H100 80GB HBM3, driver 575.57.08: CUDA 13 needs R580" --preset tiny --runs "$work/runs"
fake "NVIDIA H100 80GB HBM3, 580.65.06, 81559 MiB"
expect "R580 passes" 0 "ok    GPU NVIDIA H100 80GB HBM3, driver 580.65.06" --preset tiny --runs "$work/runs"
expect "the disk need is added up: 4 checkpoints + shards" 0 "tiny: 4 checkpoints of 0.1 GB .* = 0.4 GB" --preset tiny --runs "$work/runs"
expect "too little disk fails" 1 "FAIL  disk: .* less than 400m: 4 checkpoints of 4.7 GB" --preset 400m --runs "$work/runs" --shards-gb 1000000
rm "$work/bin/nvidia-smi"
expect "no driver fails" 1 "FAIL  no nvidia-smi" --preset tiny --runs "$work/runs"
exit $fail
