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

# need_deps DEPS: true when the carried .debs are to be unpacked: whenever DEPS holds any (an image
# with absl and SentencePiece but without CLI11, ICU or gtest failed to configure when they were
# unpacked only for missing absl/SentencePiece headers), or when this machine lacks those two.
need_deps() {
  ls "$1"/*.deb >/dev/null 2>&1 && return 0
  ! { [ -d /usr/include/absl ] && [ -f /usr/include/sentencepiece_processor.h ]; }
}

# The machine has no Debian dev packages: unpack the carried .debs into a prefix (never into /).
# The variables that point at them (Debian 12 files) reach cmake and ninja only, through
# DEPS_ENV: exported, they reached the Python peer, Triton's launcher build and the HF export too.
# Our binaries find the unpacked libraries through the build tree's RUNPATH.
DEPS_ENV=()
# use_deps DEPS ROOT: the .debs of DEPS unpacked into ROOT, DEPS_ENV set (nothing exported).
use_deps() {
  local DEPS=$1 root=$2
  ls "$DEPS"/*.deb >/dev/null 2>&1 || { log "no .debs in $DEPS (bash scripts/gpu-check.sh --prepare here, carry it)"; return 1; }
  rm -rf "$root"; mkdir -p "$root"
  for f in "$DEPS"/*.deb; do dpkg-deb -x "$f" "$root" 2>/dev/null || dpkg -x "$f" "$root"; done
  local lib=$root/usr/lib/x86_64-linux-gnu
  # libz.so/libbz2.so of the -dev packages point at Debian's exact runtime file (absolute paths,
  # /lib/x86_64-linux-gnu/libz.so.1.2.13): relink a dangling one to the machine's own library.
  for l in "$lib"/*.so; do
    [ -L "$l" ] && [ ! -e "$l" ] || continue
    local sys; sys=$(ls /lib/x86_64-linux-gnu/"$(basename "$l")".[0-9]* /usr/lib/x86_64-linux-gnu/"$(basename "$l")".[0-9]* 2>/dev/null | head -1)
    [ -n "$sys" ] && ln -sf "$sys" "$l"
  done
  command -v pkg-config >/dev/null || ln -sf "$root/usr/bin/pkgconf" "$root/usr/bin/pkg-config"
  DEPS_ENV=(env "CMAKE_PREFIX_PATH=$root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}" "ICU_ROOT=$root/usr"
    "PKG_CONFIG_SYSROOT_DIR=$root" "PKG_CONFIG_LIBDIR=$lib/pkgconfig:$root/usr/share/pkgconfig"
    "CPATH=$root/usr/include${CPATH:+:$CPATH}" "LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
    "LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "PATH=$root/usr/bin:$PATH")
  log "dependencies from $DEPS unpacked into $root (for cmake and ninja only)"
}

# result STAGE STATUS [JSON object of figures]: one line, and $OUT/results.json rewritten from all
# lines so far, so a run cut off by the device call's limit still leaves every finished stage.
result() {
  echo "{\"stage\": \"$1\", \"status\": \"$2\", \"data\": ${3:-null}}" >> "$RES"; log "$1: $2"
  write_results > /dev/null
}
# results.json: every stage, and the headline the issue asks for (our step against the compiled
# peer of the same run: tokens/s, both MFUs, the ratio). The headline is built whenever our first
# sample measured a rate (tokens/s > 0) without a fast-path fallback, whatever its exit code: a
# crash after the JSON line keeps the number, with the exit code and the status beside it. The
# samples alternate (lmforge, peer, lmforge: step-lmforge, step-peer-compile, step-lmforge-2) so a
# clock that drifts shows as two different lmforge figures rather than inside the ratio.
write_results() {
  "$PY" - "$RES" "$OUT/results.json" "$DEVICE" "$(date -u +%FT%TZ)" "$(( $(date +%s) - T0 ))" "$BUDGET" "${GPU_NAME:-}" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
out = {"date": sys.argv[4], "device": sys.argv[3], "gpu": sys.argv[7] or None, "seconds": int(sys.argv[5]),
       "budget_s": int(sys.argv[6]), "stages": {r["stage"]: {"status": r["status"], **(r["data"] or {})} for r in rows}}
st = out["stages"]
def rate(s): return (s or {}).get("tokens_per_s") or 0
def usable(s): return rate(s) > 0 and not (s or {}).get("fast_path_fallback")
ours = [st[n] for n in ("step-lmforge", "step-lmforge-2") if usable(st.get(n))]
peer, peak = st.get("step-peer-compile", {}), st.get("peak", {})
if usable(st.get("step-lmforge")):
    first = st["step-lmforge"]
    h = {k: first.get(k) for k in ("tokens_per_s", "mfu", "mfu_measured_peak", "peak_memory_mib", "nan_skipped",
                                   "first_loss", "final_loss", "graph_captured", "exit_code", "status")}
    h["gpu"] = out["gpu"]
    h["peak_judgement"] = peak.get("bf16_judgement")
    h["lmforge_samples"] = [{k: s.get(k) for k in ("tokens_per_s", "mfu", "exit_code", "status")} for s in ours]
    mean = sum(rate(s) for s in ours) / len(ours)
    h["tokens_per_s_mean"] = round(mean, 1)
    if rate(peer) > 0:
        h["peer_compile"] = {k: peer.get(k) for k in ("tokens_per_s", "mfu", "mfu_measured_peak", "first_loss",
                                                      "final_loss", "exit_code", "status")}
        h["ratio_to_peer_compile"] = round(mean / rate(peer), 3)
        h["ratio_to_peer_compile_per_sample"] = [round(rate(s) / rate(peer), 3) for s in ours]
    out["headline"] = h
# Issue 39: recompute's step time against the lmforge samples on both sides of it (the headline's two
# and step-lmforge-3), and each bf16 step's peak allocation against what `lmtrain plan` counts.
rec, around = st.get("step-lmforge-recompute"), [s for s in ours + [st.get("step-lmforge-3")] if usable(s)]
scale = {}
if usable(rec) and around:
    scale["recompute_step_time_x"] = round(sum(rate(s) for s in around) / len(around) / rate(rec), 3)
mem = {n: s.get("peak_vs_plan") for n, s in st.items() if isinstance(s, dict) and s.get("peak_vs_plan")}
if mem: scale["peak_vs_plan"] = mem
if scale: out["scale"] = scale
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
# tmo SECONDS COMMAND...: the command under `timeout -k 5` at its cap (cap SECONDS): a hung driver
# call gets SIGTERM at the cap and SIGKILL 5 s later, so no step can eat the whole device call.
tmo() { local c; c=$(cap "$1"); shift; timeout -k 5 "$c" "$@"; }
# start STAGE: said before each stage begins, so a call killed in the middle names the stage in flight.
start() { log "start $1"; }
# planted NAME: the failure planted in stage NAME by the tests (LM_GPU_CHECK_PLANT="stage=kind,...";
# kinds: throw, crash (passed to the bench as LM_BENCH_PLANT), hang (the stage's command replaced by
# one that ignores SIGTERM)); empty in a real run.
planted() {
  local e p=${LM_GPU_CHECK_PLANT:-}
  for e in ${p//,/ }; do [ "${e%%=*}" = "$1" ] && { echo "${e#*=}"; return; }; done
}
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
# left ("start NAME" logged first); SIGTERM after CAP (or at the budget's end), SIGKILL 5 s later:
# "timed-out", and the next stage starts. The command's JSON line is kept
# whatever its exit code (with "exit_code"), with both MFUs against the peak stage's figures
# (mfu: the data-sheet peak on a GPU, the measured ceiling on a CPU; mfu_measured_peak: the
# measured ceiling) and the peak memory added. A stage whose fast path fell back to its reference
# at start-up is "fell-back": it did not time what it was asked to. A clean exit is still not "ok"
# when tokens/s is 0 ("failed"), a graphs stage captured no graph ("no-graph") or steps were
# skipped as non-finite ("nan-skipped"); "why" says which.
step_stage() {
  local name=$1 need=$2 limit=$3; shift 3
  fits "$name" "$need" || return 0
  start "$name"
  local plant; plant=$(planted "$name")
  [ "$plant" = hang ] && set -- bash -c 'trap "" TERM; echo "planted hang (ignores SIGTERM)" >&2; sleep 100000'
  mem_watch "$name"; limit=$(cap "$limit")
  local t; t=$(date +%s)
  LM_BENCH_PLANT=$plant timeout -k 5 "$limit" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"; local rc=$?
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
# What makes a figure untrustworthy even with exit code 0, each named in "why".
why = []
if had_line and not (d.get("tokens_per_s") or 0) > 0: why.append("tokens_per_s is 0")
# A graph is captured on CUDA only (graphs on a CPU run eagerly, as the log says): no-graph there only.
no_graph = d.get("cuda_graphs") and d.get("graph_captured") is False and str(d.get("device", "cuda")).startswith("cuda")
if no_graph: why.append("CUDA graphs asked for, no graph captured")
if (d.get("nan_skipped") or 0) > 0: why.append("%d non-finite steps skipped" % d["nan_skipped"])
if d.get("error"): why.append("error: " + str(d["error"])[:300])
asked, used = d.get("sdpa_backend") or "auto", d.get("sdpa_backend_used")
other_sdpa = asked != "auto" and used not in (None, asked)
if other_sdpa: why.append("SDPA backend %s asked, %s used (the asked one failed its start-up check)" % (asked, used))
if why: d["why"] = "; ".join(why)
if rc in (124, 137): status = "timed-out"; d["after_s"] = int(sys.argv[6])
elif rc != 0 or not had_line or not (d.get("tokens_per_s") or 0) > 0: status = "failed"
elif d.get("fast_path_fallback") or other_sdpa: status = "fell-back"
elif no_graph: status = "no-graph"
elif (d.get("nan_skipped") or 0) > 0: status = "nan-skipped"
else: status = "ok"
print(status); print(json.dumps(d))
PY
)
  local status=${out%%$'\n'*}
  [ "$status" = ok ] || tail_log "$WORK/$name.err" 15
  result "$name" "$status" "${out#*$'\n'}"
}
