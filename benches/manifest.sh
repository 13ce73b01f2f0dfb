#!/usr/bin/env bash
# Benchmarks `fixgate manifest` against b3sum (the blake3 project's CLI) on the same files.
#
#   bash benches/manifest.sh
#
# Cases (see benches/README.md for what each one means):
#   tree  10,000 files of 107,374 bytes (~1 GiB) under tests/fixtures/g00..g09/ of a plain folder:
#         fixgate cold (fresh --cache-dir every run), fixgate warm (a stat cache populated by a run
#         made more than 2 s after the data was written) and b3sum over all 10,000 paths in one
#         invocation, in one hyperfine invocation.
#   big   one 1 GiB file (tests/data/big/big.bin of a second plain folder): fixgate cold and b3sum,
#         in one hyperfine invocation.
#
# Self-contained and re-runnable: installs hyperfine (apt) and b3sum (cargo, into
# target/bench-tools) when missing, builds fixgate with `cargo build --release`, generates the data
# once (kept and reused while its layout stamp matches) and never writes inside the repository
# except target/.
#
# Environment:
#   BENCH_DATA  where the data, caches and results go   [/work/bench-data]
#   RUNS        timed runs per command                   [5]
#   WARMUP      untimed warmup runs per command          [1]
#   FIXGATE     use this fixgate binary, skip the build  [build target/release/fixgate]
#   B3SUM       use this b3sum binary, skip the install  [target/bench-tools/bin/b3sum]
#   REGEN=1     delete and regenerate the data
#   IDLE_TIMEOUT  seconds to wait for idle CPUs before each case  [300]
#   NO_HYPERFINE=1  use the bash median loop even when hyperfine is installed

set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_DATA=${BENCH_DATA:-/work/bench-data}
RUNS=${RUNS:-5}
WARMUP=${WARMUP:-1}
TREE=$BENCH_DATA/tree      # plain folder: tests/fixtures/g00..g09/f000..f999.bin
BIG=$BENCH_DATA/big        # plain folder: tests/data/big/big.bin
CACHES=$BENCH_DATA/caches
RESULTS=$BENCH_DATA/results
TREE_DIRS=10
FILES_PER_DIR=1000
FILE_SIZE=107374           # 10,000 x 107,374 B = 1,073,740,000 B, about 1 GiB
BIG_SIZE=$((1 << 30))
LAYOUT="v1 dirs=$TREE_DIRS files=$FILES_PER_DIR size=$FILE_SIZE big=$BIG_SIZE"

log() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'manifest.sh: %s\n' "$*" >&2; exit 1; }

case "$BENCH_DATA" in
    "$REPO"|"$REPO"/*) die "BENCH_DATA ($BENCH_DATA) must be outside the repository" ;;
esac

# --- tools -------------------------------------------------------------------------------------

command -v python3 >/dev/null || die "python3 is needed (data generation and the summary)"

apt_install() {
    command -v apt-get >/dev/null || return 1
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get install -y -qq "$@" >/dev/null 2>&1 \
        || { $sudo apt-get update -qq >/dev/null 2>&1 && $sudo apt-get install -y -qq "$@" >/dev/null 2>&1; }
}

if ! command -v hyperfine >/dev/null; then
    log "installing hyperfine (apt-get)"
    apt_install hyperfine || echo "hyperfine unavailable: falling back to a median-of-$RUNS bash loop" >&2
fi
HAVE_HYPERFINE=0
command -v hyperfine >/dev/null && [ "${NO_HYPERFINE:-0}" != 1 ] && HAVE_HYPERFINE=1

B3SUM=${B3SUM:-$REPO/target/bench-tools/bin/b3sum}
if [ ! -x "$B3SUM" ]; then
    log "installing b3sum (cargo install b3sum --locked --root target/bench-tools)"
    cargo install b3sum --locked --root "$REPO/target/bench-tools"
    B3SUM=$REPO/target/bench-tools/bin/b3sum
fi

if [ -z "${FIXGATE:-}" ]; then
    log "building fixgate (cargo build --release)"
    (cd "$REPO" && cargo build --release)
    FIXGATE=${CARGO_TARGET_DIR:-$REPO/target}/release/fixgate
    FIXGATE_FROM="$(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$REPO" && git diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
else
    FIXGATE_FROM="given as FIXGATE=$FIXGATE"
fi
[ -x "$FIXGATE" ] || die "no fixgate binary at $FIXGATE"

# --- data --------------------------------------------------------------------------------------

if [ "${REGEN:-0}" = 1 ] || [ "$(cat "$BENCH_DATA/LAYOUT" 2>/dev/null)" != "$LAYOUT" ]; then
    log "generating $TREE ($((TREE_DIRS * FILES_PER_DIR)) files) and $BIG (1 GiB)"
    rm -rf "$TREE" "$BIG" "$CACHES" "$BENCH_DATA/LAYOUT"
    mkdir -p "$TREE" "$BIG/tests/data/big"
    python3 - "$TREE" "$TREE_DIRS" "$FILES_PER_DIR" "$FILE_SIZE" <<'EOF'
import os, sys
root, dirs, per, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for d in range(dirs):
    path = os.path.join(root, "tests", "fixtures", f"g{d:02d}")
    os.makedirs(path)
    for f in range(per):
        with open(os.path.join(path, f"f{f:03d}.bin"), "wb") as out:
            out.write(os.urandom(size))
EOF
    head -c "$BIG_SIZE" /dev/urandom > "$BIG/tests/data/big/big.bin"
    echo "$LAYOUT" > "$BENCH_DATA/LAYOUT"
fi
count=$(find "$TREE/tests/fixtures" -type f | wc -l)
[ "$count" -eq $((TREE_DIRS * FILES_PER_DIR)) ] || die "$TREE has $count files; rerun with REGEN=1"

# The stat cache refuses entries whose mtime or ctime is within 2 s of the cache write, so the run
# that populates the warm cache must start more than 2 s after the newest data change.
newest=$(find "$TREE" "$BIG" -type f -printf '%C@\n%T@\n' | sort -n | tail -1)
wait_s=$(python3 -c "import time; print(max(0.0, $newest + 3 - time.time()))")
if [ "$wait_s" != "0.0" ]; then
    log "waiting ${wait_s}s so the data is outside the stat cache's 2 s racy window"
    sleep "$wait_s"
fi

# b3sum gets every path of the tree in one invocation: the list is relative to $TREE, sorted, and
# xargs's buffer is raised so it does not split the command line (checked below).
LIST=$BENCH_DATA/tree.list
(cd "$TREE" && find tests/fixtures -type f -print0 | sort -z) > "$LIST"
ARGMAX=$(( $(getconf ARG_MAX) - 65536 ))
invocations=$(cd "$TREE" && xargs -0 -s "$ARGMAX" -a "$LIST" echo | wc -l)
[ "$invocations" -eq 1 ] || die "xargs would split the b3sum call into $invocations invocations"

mkdir -p "$CACHES" "$RESULTS"
COLD=$CACHES/cold
WARM=$CACHES/warm

FG_TREE_COLD="$FIXGATE --quiet --repo $TREE --cache-dir $COLD manifest --format json --output /dev/null"
FG_TREE_WARM="$FIXGATE --quiet --repo $TREE --cache-dir $WARM manifest --format json --output /dev/null"
B3_TREE="cd $TREE && xargs -0 -s $ARGMAX -a $LIST $B3SUM > /dev/null"
FG_BIG_COLD="$FIXGATE --quiet --repo $BIG --cache-dir $COLD manifest --format json --output /dev/null"
B3_BIG="$B3SUM $BIG/tests/data/big/big.bin > /dev/null"

# --- sanity: same files, same hashes, a warm cache that is really used ---------------------------

log "checking that fixgate and b3sum agree"
rm -rf "$COLD" "$WARM"
$FIXGATE --quiet --repo "$TREE" --cache-dir "$WARM" manifest --format json --output "$RESULTS/tree.manifest.json"
$FIXGATE --quiet --repo "$BIG" --cache-dir "$COLD" manifest --format json --output "$RESULTS/big.manifest.json"
rm -rf "$COLD"
(cd "$TREE" && xargs -0 -s "$ARGMAX" -a "$LIST" "$B3SUM") > "$RESULTS/tree.b3sum"
"$B3SUM" "$BIG/tests/data/big/big.bin" > "$RESULTS/big.b3sum"
python3 - "$RESULTS" "$BIG" <<'EOF'
import json, sys
res, big = sys.argv[1], sys.argv[2]
for case, prefix in (("tree", ""), ("big", big + "/")):
    m = json.load(open(f"{res}/{case}.manifest.json"))
    fg = {f["path"]: f["blake3"] for f in m["files"]}
    b3 = {}
    for line in open(f"{res}/{case}.b3sum"):
        h, p = line.rstrip("\n").split("  ", 1)
        b3[p[len(prefix):] if p.startswith(prefix) else p] = h
    if fg != b3:
        sys.exit(f"{case}: fixgate and b3sum disagree ({len(fg)} vs {len(b3)} files)")
    print(f"{case}: {len(fg)} files, {sum(f['size'] for f in m['files'])} bytes, hashes agree")
EOF
# The populating run above wrote the warm cache; a warm run must open no fixture file.
if command -v strace >/dev/null; then
    opened=$(strace -f -e trace=openat -o /dev/stdout $FG_TREE_WARM | grep -c 'tests/fixtures/g[0-9]*/f[0-9]*\.bin' || true)
    echo "warm run opens $opened fixture files (expected 0)"
    [ "$opened" -eq 0 ] || die "the warm stat cache is not used; is the data less than 2 s old?"
fi

# --- measurements ------------------------------------------------------------------------------

# bench NAME PREPARE (LABEL COMMAND)... : one hyperfine invocation, JSON in $RESULTS/NAME.json.
bench() {
    local name=$1 prepare=$2
    shift 2
    local json=$RESULTS/$name.json
    if [ "$HAVE_HYPERFINE" = 1 ]; then
        local args=()
        while [ $# -gt 0 ]; do args+=(--command-name "$1" "$2"); shift 2; done
        hyperfine --warmup "$WARMUP" --runs "$RUNS" --prepare "$prepare" --export-json "$json" "${args[@]}"
    else
        # Fallback: warmup, then RUNS timed runs per command; median of wall-clock seconds.
        local out="" sep=""
        while [ $# -gt 0 ]; do
            local label=$1 cmd=$2 times="" tsep=""
            shift 2
            for ((i = 0; i < WARMUP; i++)); do bash -c "$prepare"; bash -c "$cmd"; done
            for ((i = 0; i < RUNS; i++)); do
                bash -c "$prepare"
                local t0 t1
                t0=$(date +%s.%N); bash -c "$cmd"; t1=$(date +%s.%N)
                times+="$tsep$(python3 -c "print($t1 - $t0)")"; tsep=","
            done
            local median
            median=$(python3 -c "import statistics; print(statistics.median([$times]))")
            echo "$label: median ${median}s over $RUNS runs" >&2
            out+="$sep{\"command\": \"$label\", \"median\": $median, \"times\": [$times]}"; sep=","
        done
        echo "{\"results\": [$out]}" > "$json"
    fi
}

# Other work on this machine (a shared 2-core box) skews wall-clock times: wait, up to
# IDLE_TIMEOUT seconds, for the CPUs to be idle, and record how busy they were.
busy_pct() {  # CPU busy percentage over one second, from /proc/stat
    local a b
    a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
    local idle=$(( (b[4] + b[5]) - (a[4] + a[5]) )) total=0 i
    for i in 1 2 3 4 5 6 7 8; do total=$(( total + b[i] - a[i] )); done
    echo $(( total > 0 ? 100 * (total - idle) / total : 0 ))
}
wait_idle() {
    local deadline=$(( $(date +%s) + ${IDLE_TIMEOUT:-300} )) busy
    while busy=$(busy_pct); [ "$busy" -gt 10 ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 4; done
    echo "$1: CPUs ${busy}% busy before the case, load average $(cut -d' ' -f1-3 /proc/loadavg)" \
        | tee -a "$RESULTS/load.txt" >&2
}
: > "$RESULTS/load.txt"

wait_idle tree
log "case tree: 10,000 files, ~1 GiB (page cache warm)"
bench tree "rm -rf $COLD" \
    "fixgate cold" "$FG_TREE_COLD" \
    "fixgate warm" "$FG_TREE_WARM" \
    "b3sum" "$B3_TREE"

echo "tree: load average after the case $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$RESULTS/load.txt" >&2

wait_idle big
log "case big: one 1 GiB file (page cache warm)"
bench big "rm -rf $COLD" \
    "fixgate cold" "$FG_BIG_COLD" \
    "b3sum" "$B3_BIG"

echo "big: load average after the case $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$RESULTS/load.txt" >&2

# --- summary -----------------------------------------------------------------------------------

log "summary (medians)"
{
    echo "date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "machine: $(nproc) cores, $(free -h | awk '/^Mem:/ {print $2}') RAM, $(uname -sr)"
    echo "cpu:     $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || echo 'AVX2, no AVX-512')"
    echo "fixgate: $FIXGATE_FROM"
    echo "b3sum:   $("$B3SUM" --version)"
    echo "runs:    $RUNS timed + $WARMUP warmup per command"
    cat "$RESULTS/load.txt"
    python3 - "$RESULTS" <<'EOF'
import json, sys
res = sys.argv[1]
runs = {}
for case in ("tree", "big"):
    for r in json.load(open(f"{res}/{case}.json"))["results"]:
        runs[(case, r["command"])] = r
rows = [
    ("tree", "fixgate cold"), ("tree", "fixgate warm"), ("tree", "b3sum"),
    ("big", "fixgate cold"), ("big", "b3sum"),
]
def ms(x):
    return f"{x * 1000:7.1f} ms" if x is not None else "      -"
print()
print("| case | command      | median     | min        | CPU (user+sys) |")
print("|------|--------------|------------|------------|----------------|")
for case, cmd in rows:
    r = runs[(case, cmd)]
    cpu = r["user"] + r["system"] if r.get("user") is not None else None
    print(f"| {case:<4} | {cmd:<12} | {ms(r['median'])} | {ms(min(r['times']))} | {ms(cpu):>14} |")
med = {k: r["median"] for k, r in runs.items()}
tree_ratio = med[("tree", "fixgate cold")] / med[("tree", "b3sum")]
big_ratio = med[("big", "fixgate cold")] / med[("big", "b3sum")]
speedup = med[("tree", "fixgate cold")] / med[("tree", "fixgate warm")]
ok = lambda b: "met" if b else "MISSED"
print()
print("| ratio of medians                  | value   | target   | result |")
print("|-----------------------------------|---------|----------|--------|")
print(f"| tree: fixgate cold / b3sum        | {tree_ratio:6.2f}x | <= 1.25x | {ok(tree_ratio <= 1.25)} |")
print(f"| big:  fixgate cold / b3sum        | {big_ratio:6.2f}x | <= 1.25x | {ok(big_ratio <= 1.25)} |")
print(f"| tree: fixgate cold / fixgate warm | {speedup:6.1f}x | >= 20x   | {ok(speedup >= 20)} |")
EOF
} | tee "$RESULTS/summary.txt"
echo "results: $RESULTS/{tree,big}.json, $RESULTS/summary.txt" >&2
