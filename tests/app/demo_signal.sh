#!/usr/bin/env bash
# `kill -TERM` of `lmtrain demo` reaches the stage it runs: the demo exits 143 and leaves no stage
# process behind (before, the child went on alone). Usage: demo_signal.sh LMTRAIN
set -uo pipefail
lmtrain=$1
dir=$(mktemp -d /tmp/lm_demo_signal.XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$lmtrain" demo --out "$dir/out" --threads 1 > "$dir/log" 2>&1 &
demo=$!
child=""
for _ in $(seq 1 300); do  # up to 30 s for the first stage (tokenizer) to start
  child=$(pgrep -P "$demo" | head -1)
  [ -n "$child" ] && break
  sleep 0.1
done
[ -n "$child" ] || { echo "FAIL: no stage process appeared"; cat "$dir/log"; kill -9 "$demo"; exit 1; }
kill -TERM "$demo"
wait "$demo"; rc=$?
sleep 0.5
if kill -0 "$child" 2>/dev/null; then
  echo "FAIL: stage process $child still running after the demo exited ($rc)"; kill -9 "$child"; exit 1
fi
[ "$rc" = 143 ] || { echo "FAIL: demo exited $rc, expected 143"; cat "$dir/log"; exit 1; }
grep -q "stopped by signal 15" "$dir/log" || { echo "FAIL: no 'stopped by signal' message"; cat "$dir/log"; exit 1; }
echo "ok: demo exited 143, stage $child ended with it"
