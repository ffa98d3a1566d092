#!/usr/bin/env bash
# Checks that bench/peer_pytorch.py's preset table, its FLOPs formula and the module it builds
# agree with model/config.cpp (through train_step_bench --mode config) for every preset.
#   bench/check_peer_presets.sh [build-dir]     exit 0 when they agree, 1 naming the field otherwise
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$(dirname "$here")/build-perf}"
source "$here/../scripts/env.sh"
status=0
for p in tiny small 124m 400m 1b; do
  a="$("$build/bench/train_step_bench" --mode config --preset "$p" --seq 256)"
  b="$("$LM_PYTHON" "$here/peer_pytorch.py" --mode config --preset "$p" --seq 256)"
  "$LM_PYTHON" - "$p" "$a" "$b" <<'PY' || status=1
import json, sys
p, a, b = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
bad = [k for k in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_seq_len",
                   "tie_embeddings", "params", "flops_per_token") if a[k] != b[k]]
if "params_built" in b and b["params_built"] != a["params"]:
    bad.append("params_built")
print(f"{p}: " + ("ok" if not bad else "MISMATCH " + ", ".join(f"{k}: lmforge {a.get(k)} peer {b.get(k)}" for k in bad)))
sys.exit(1 if bad else 0)
PY
done
exit $status
