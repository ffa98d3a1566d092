#!/usr/bin/env bash
# Every C++ standard-library symbol our programs call must bind to libstdc++, never to the copy of
# std::filesystem (and friends) that the torch wheel's libtorch*.so export (pytorch/pytorch#133437):
# a std::filesystem::remove_all bound to torch's copy jumped to address 0 (docs/gpu.md). The
# dynamic loader says who binds what: LD_BIND_NOW resolves every symbol at start-up and
# LD_DEBUG=bindings logs each one. Usage: check_std_bindings.sh PROGRAM [ARGS...]
set -euo pipefail
prog=$1; shift
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
LD_BIND_NOW=1 LD_DEBUG=bindings LD_DEBUG_OUTPUT="$log/ld" "$prog" "$@" >/dev/null 2>&1 || true
name=$(basename "$prog")
# Lines: "binding file PROG [0] to LIB [0]: normal symbol `SYM' [VERSION]"
std=$(cat "$log"/ld.* | grep -F "binding file $prog " | grep -E "symbol \`_ZN?K?St" || true)
if [ -z "$std" ]; then
  echo "FAIL: no standard-library bindings of $name were logged (LD_DEBUG unsupported?)"; exit 1
fi
total=$(printf '%s\n' "$std" | wc -l)
bad=$(printf '%s\n' "$std" | grep -E " to [^ ]*lib(torch|c10)[^ ]* " || true)
if [ -n "$bad" ]; then
  echo "FAIL: $name binds standard-library symbols to LibTorch's copies (libstdc++ must come first"
  echo "in DT_NEEDED: CMakeLists.txt's -lstdc++ link option, or a call path avoiding them):"
  printf '%s\n' "$bad" | sed -E 's/.*binding file [^ ]+ \[0\] to ([^ ]+) .*symbol `([^'"'"']+).*/  \2 -> \1/' | sed -n 1,20p
  echo "  ($(printf '%s\n' "$bad" | wc -l) of $total)"
  exit 1
fi
first=$(readelf -d "$prog" | grep -m1 NEEDED | sed -E 's/.*\[(.*)\]/\1/')
echo "ok: $name: $total standard-library symbols bound, none to LibTorch; first DT_NEEDED: $first"
