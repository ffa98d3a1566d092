# The stage machinery of scripts/gpu-check.sh, sourced by it (and by tests/app/gpu_check_stages.sh,
# which runs these functions on fake stages). Expects OUT, WORK, RES, LOG, T0, BUDGET, DEVICE, PY;
# PEAK_SPEC / PEAK_MEASURED (FLOP/s) once the peak stage ran.

# The packages the device machine lacks (no Debian development packages there), carried as .debs.
DEBS="libsentencepiece-dev libsentencepiece0 libabsl-dev libabsl20220623 libcli11-dev nlohmann-json3-dev
  libicu-dev libicu72 zlib1g-dev libbz2-dev libzstd-dev liblzma-dev libgtest-dev libgmock-dev pkgconf pkgconf-bin
  libpkgconf3 libgloo-dev"

log() { echo "[gpu-check +$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }
tail_log() { tail -n "${2:-25}" "$1" | sed 's/^/    /' | tee -a "$LOG"; }

# check_deps DIR: true when DIR holds a readable .deb of every package in $DEBS; otherwise says
# which are missing and how to get them. Runs in well under a second (no unpacking).
check_deps() {
  local dir=$1 missing=() p f n
  n=$(echo $DEBS | wc -w)
  for p in $DEBS; do ls "$dir/${p}_"*.deb >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "gpu-check: $dir lacks ${#missing[@]} of the $n packages to carry: ${missing[*]}"
    echo "  here: bash scripts/gpu-check.sh --prepare (apt-get download into .gpu-deps), then carry=[\".gpu-deps\"]"
    return 1
  fi
  if command -v dpkg-deb >/dev/null; then
    for f in "$dir"/*.deb; do
      dpkg-deb -f "$f" Package >/dev/null 2>&1 || { echo "gpu-check: $f is not a readable .deb (--prepare fetches it again)"; return 1; }
    done
  fi
  echo "gpu-check: $dir holds all $n packages to carry ($(du -sh "$dir" | cut -f1))"
}

# result STAGE STATUS [JSON object of figures]: one line, and $OUT/results.json rewritten from all
# lines so far, so a run cut off by the device call's limit still leaves every finished stage.
result() {
  echo "{\"stage\": \"$1\", \"status\": \"$2\", \"data\": ${3:-null}}" >> "$RES"; log "$1: $2"
  write_results > /dev/null
}
# results.json: every stage, and the headline the issue asks for (our step against the compiled
# peer of the same run: tokens/s, both MFUs, the ratio).
write_results() {
  "$PY" - "$RES" "$OUT/results.json" "$DEVICE" "$(date -u +%FT%TZ)" "$(( $(date +%s) - T0 ))" "$BUDGET" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
out = {"date": sys.argv[4], "device": sys.argv[3], "seconds": int(sys.argv[5]), "budget_s": int(sys.argv[6]),
       "stages": {r["stage"]: {"status": r["status"], **(r["data"] or {})} for r in rows}}
ours, peer = out["stages"].get("step-lmforge", {}), out["stages"].get("step-peer-compile", {})
if ours.get("status") == "ok":
    h = {k: ours.get(k) for k in ("tokens_per_s", "mfu", "mfu_measured_peak", "peak_memory_mib")}
    if peer.get("status") == "ok" and peer.get("tokens_per_s"):
        h["peer_compile_tokens_per_s"] = peer["tokens_per_s"]
        h["ratio_to_peer_compile"] = round(ours["tokens_per_s"] / peer["tokens_per_s"], 3)
    out["headline"] = h
with open(sys.argv[2] + ".tmp", "w") as f: json.dump(out, f, indent=1)
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
bad = [r["stage"] for r in rows if r["status"] not in ("ok", "skipped")]
print("not ok:", ", ".join(bad) if bad else "none")
PY
}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# cap SECONDS: a stage's timeout, its cap (an H200's, times CAP_SCALE: 5 in the CPU dry run, where a
# shared 2-core machine runs the same stages at small shapes) inside what is left of the budget.
cap() { local c=$(( $1 * ${CAP_SCALE:-1} )) l; l=$(left); [ "$l" -lt "$c" ] && echo $(( l > 1 ? l : 1 )) || echo "$c"; }
# fits STAGE SECONDS: true when the stage's expected seconds fit in what is left of the run's budget;
# otherwise the stage is recorded as no-time, and false.
fits() {
  local l; l=$(left)
  [ "$l" -ge "$2" ] && return 0
  result "$1" no-time "{\"why\": \"time budget: needs $2 s, $l s left of $BUDGET\"}"; return 1
}

# Peak device memory of a command: nvidia-smi sampled every 100 ms (0 on the CPU).
mem_watch() { [ "$DEVICE" = cuda ] || return 0; nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$WORK/mem.$1" 2>/dev/null & echo $! > "$WORK/mem.pid"; }
mem_peak() { [ "$DEVICE" = cuda ] || { echo 0; return; }; kill "$(cat "$WORK/mem.pid")" 2>/dev/null; sort -n "$WORK/mem.$1" | tail -1; }

# keep_stage_log NAME RC SECONDS COMMAND...: the stage's command, exit code, stderr (what actually
# ran: the fast paths verified, a graph captured or not, the SDPA backend, fallbacks) and stdout
# into $OUT/stages.log, the one file that comes back with every stage's own words.
keep_stage_log() {
  local name=$1 rc=$2 secs=$3; shift 3
  { echo "==== $name: exit $rc after ${secs} s: $*"
    tail -n 300 "$WORK/$name.err" 2>/dev/null
    echo "---- stdout"; tail -n 20 "$WORK/$name.out" 2>/dev/null; echo; } >> "$OUT/stages.log"
}

# step_stage NAME NEED CAP COMMAND...: started when NEED seconds (its expected time on an H200) are
# left; killed after CAP (or at the budget's end: "timed-out"). The command's JSON line is kept
# whatever its exit code (with "exit_code"), with both MFUs against the peak stage's figures
# (mfu: the data-sheet peak on a GPU, the measured ceiling on a CPU; mfu_measured_peak: the
# measured ceiling) and the peak memory added. A stage whose fast path fell back to its reference
# at start-up is "fell-back": it did not time what it was asked to.
step_stage() {
  local name=$1 need=$2 limit=$3; shift 3
  fits "$name" "$need" || return 0
  mem_watch "$name"; limit=$(cap "$limit")
  local t; t=$(date +%s)
  timeout "$limit" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"; local rc=$?
  local mib; mib=$(mem_peak "$name")
  keep_stage_log "$name" "$rc" "$(( $(date +%s) - t ))" "$@"
  local line; line=$(grep '^{' "$WORK/$name.out" | tail -1); [ -n "$line" ] || line='{}'
  local out; out=$("$PY" - "$line" "$rc" "${mib:-0}" "${PEAK_SPEC:-0}" "${PEAK_MEASURED:-0}" "$limit" "$WORK/$name.err" <<'PY'
import json, re, sys
d = json.loads(sys.argv[1]); rc = int(sys.argv[2]); spec, meas = float(sys.argv[4]), float(sys.argv[5])
had_line = bool(d)
d["exit_code"] = rc
d["peak_memory_mib"] = float(sys.argv[3] or 0)
if d.get("tokens_per_s") and d.get("flops_per_token"):
    f = d["tokens_per_s"] * d["flops_per_token"]
    d["mfu"] = round(f / spec, 4) if spec > 0 else None
    d["mfu_measured_peak"] = round(f / meas, 4) if meas > 0 else None
err = open(sys.argv[7], errors="replace").read()
m = re.search(r"CUDA graphs: step (\d+) captured", err)
if "cuda_graphs" in d or m:
    d["graph_captured_at_step"] = int(m.group(1)) if m else None
if rc == 124: status = "timed-out"; d["after_s"] = int(sys.argv[6])
elif rc != 0 or not had_line: status = "failed"
elif d.get("fast_path_fallback"): status = "fell-back"
else: status = "ok"
print(status); print(json.dumps(d))
PY
)
  local status=${out%%$'\n'*}
  [ "$status" = ok ] || tail_log "$WORK/$name.err" 15
  result "$name" "$status" "${out#*$'\n'}"
}
