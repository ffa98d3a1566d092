#!/usr/bin/env bash
# Issue 30 item 5: `lmtrain demo` finds the bundled sample with the working directory elsewhere,
# from a binary outside the source tree (the path recorded at configure time) and from an install
# (`cmake --install` into a temporary prefix: <prefix>/share/lmforge/sample, the RUNPATH, the
# tokenizer module in <prefix>/lib); LM_SAMPLE_DIR wins over both. Each demo is stopped (SIGTERM)
# once it has printed the corpus it found. Usage: sample_lookup.sh BUILD_DIR LMTRAIN SOURCE_DIR
set -uo pipefail
build=$1 lmtrain=$2 src=$3
tmp=$(mktemp -d /tmp/lm_sample_lookup.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$tmp/elsewhere" "$tmp/copy"

# The corpus line of `demo` run by $1 from $tmp/elsewhere (extra env in $2), then the demo stopped.
demo_corpus() {
  local exe=$1 envs=$2 log="$tmp/demo.$RANDOM.log" pid line=""
  (cd "$tmp/elsewhere" && exec env -u LM_SAMPLE_DIR $envs "$exe" demo --out "$tmp/out" --threads 1) > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    line=$(grep -m1 "lmforge demo: corpus" "$log") && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  [ -n "$line" ] || { cat "$log" >&2; fail "$exe: no corpus line"; }
  echo "$line"
}
expect_corpus() {  # $1 = the line, $2 = the corpus.json it must name
  local want
  want=$(realpath "$2")
  [[ "$1" == "lmforge demo: corpus $want -> "* ]] || fail "expected corpus $want, got: $1"
  echo "ok: $1"
}

# 1. The build's binary copied outside the source and build trees: the configure-time path.
cp "$lmtrain" "$tmp/copy/lmtrain"
expect_corpus "$(demo_corpus "$tmp/copy/lmtrain" "")" "$src/data/sample/corpus.json"

# 2. An install into a temporary prefix: its own share/lmforge/sample, and it runs from there.
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "cmake --install"; }
for f in bin/lmtrain bin/lmeval lib/liblm_spm.so share/lmforge/sample/corpus.json; do
  [ -e "$tmp/prefix/$f" ] || fail "cmake --install did not install $f"
done
if ldd "$tmp/prefix/bin/lmtrain" "$tmp/prefix/bin/lmeval" | grep "not found"; then fail "installed binaries miss libraries"; fi
expect_corpus "$(demo_corpus "$tmp/prefix/bin/lmtrain" "")" "$tmp/prefix/share/lmforge/sample/corpus.json"

# 3. LM_SAMPLE_DIR first; one without corpus.json is an error naming it.
expect_corpus "$(demo_corpus "$tmp/copy/lmtrain" "LM_SAMPLE_DIR=$tmp/prefix/share/lmforge/sample")" \
  "$tmp/prefix/share/lmforge/sample/corpus.json"
out=$(cd "$tmp/elsewhere" && LM_SAMPLE_DIR="$tmp/nowhere" "$tmp/copy/lmtrain" demo --out "$tmp/out2" 2>&1)
grep -q "$tmp/nowhere/corpus.json: not found (LM_SAMPLE_DIR" <<<"$out" || fail "LM_SAMPLE_DIR without corpus.json: $out"
echo "ok: all lookups"
