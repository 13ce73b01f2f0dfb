#!/usr/bin/env bash
# Benchmarks a warm `fixgate lock --check` of an unchanged tree against `git status --porcelain`
# on the same git repository.
#
#   bash benches/lockcheck.sh
#
# The repository: 4,000 fixture files of 64 KiB (256 MiB) in tests/fixtures/g00..g07, declared as
# eight groups in pyproject.toml's [tool.fixgate.groups], locked with `fixgate lock` and committed.
# Both commands stat every tracked file: git against its index, fixgate against its stat cache.
# They run interleaved round by round (benches/interleave.py), after one untimed warm-up round, and
# the script prints each one's median and the median of the per-round ratios, then (with `perf`)
# each one's mean CPU time and page faults, which a busy machine moves far less than wall time.
#
# Self-contained and re-runnable: builds fixgate with `cargo build --release`, generates the
# repository once (kept while its layout stamp matches) and never writes inside this repository
# except target/.
#
# Environment:
#   BENCH_DATA  where the repository, cache and results go   [/work/bench-data]
#   RUNS        timed rounds                                 [30]
#   FIXGATE     use this fixgate binary, skip the build      [build target/release/fixgate]
#   REGEN=1     delete and regenerate the repository
#   IDLE_TIMEOUT  seconds to wait for idle CPUs first        [120]

set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_DATA=${BENCH_DATA:-/work/bench-data}
RUNS=${RUNS:-30}
ROOT=$BENCH_DATA/lockcheck
TREE=$ROOT/repo
CACHE=$ROOT/cache
RESULTS=$ROOT/results
GROUPS_N=8
FILES_PER_GROUP=500
FILE_SIZE=65536
LAYOUT="v1 groups=$GROUPS_N files=$FILES_PER_GROUP size=$FILE_SIZE"

log() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'lockcheck.sh: %s\n' "$*" >&2; exit 1; }

case "$BENCH_DATA" in
    "$REPO"|"$REPO"/*) die "BENCH_DATA ($BENCH_DATA) must be outside the repository" ;;
esac
command -v git >/dev/null || die "git is needed"
command -v python3 >/dev/null || die "python3 is needed (data generation and interleave.py)"

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

if [ "${REGEN:-0}" = 1 ] || [ "$(cat "$ROOT/LAYOUT" 2>/dev/null)" != "$LAYOUT" ]; then
    log "generating $TREE ($((GROUPS_N * FILES_PER_GROUP)) files of $FILE_SIZE bytes)"
    rm -rf "$ROOT"
    mkdir -p "$TREE"
    python3 - "$TREE" "$GROUPS_N" "$FILES_PER_GROUP" "$FILE_SIZE" <<'EOF'
import os, sys
root, groups, per, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
lines = ["[tool.fixgate.groups]"]
for g in range(groups):
    path = os.path.join(root, "tests", "fixtures", f"g{g:02d}")
    os.makedirs(path)
    for f in range(per):
        with open(os.path.join(path, f"f{f:03d}.bin"), "wb") as out:
            out.write(os.urandom(size))
    lines.append(f'g{g:02d} = ["tests/fixtures/g{g:02d}/*.bin"]')
with open(os.path.join(root, "pyproject.toml"), "w") as out:
    out.write('[project]\nname = "lockbench"\nversion = "0"\n\n' + "\n".join(lines) + "\n")
with open(os.path.join(root, "test_nothing.py"), "w") as out:
    out.write("def test_nothing():\n    assert True\n")
EOF
    git -C "$TREE" init -q
    git -C "$TREE" -c user.name=bench -c user.email=bench@localhost add -A
    git -C "$TREE" -c user.name=bench -c user.email=bench@localhost commit -qm fixtures
    echo "$LAYOUT" > "$ROOT/LAYOUT"
fi
count=$(git -C "$TREE" ls-files 'tests/fixtures/*' | wc -l)
[ "$count" -eq $((GROUPS_N * FILES_PER_GROUP)) ] || die "$TREE tracks $count fixture files; rerun with REGEN=1"

# The stat cache (and git's index) distrust entries within 2 s of the data's last change.
newest=$(find "$TREE/tests" -type f -printf '%C@\n%T@\n' | sort -n | tail -1)
wait_s=$(python3 -c "import time; print(max(0.0, $newest + 3 - time.time()))")
[ "$wait_s" = "0.0" ] || { log "waiting ${wait_s}s (racy window)"; sleep "$wait_s"; }

mkdir -p "$RESULTS"
FG="$FIXGATE --quiet --repo $TREE --cache-dir $CACHE lock --check"
GIT="git -C $TREE status --porcelain"

# The lock is written (and committed) with this fixgate; then one check fills the stat cache and
# git's index is refreshed, so both sides are warm.
rm -rf "$CACHE"
if [ ! -f "$TREE/fixtures.lock" ]; then
    $FIXGATE --quiet --repo "$TREE" --cache-dir "$CACHE" lock >/dev/null
    git -C "$TREE" add fixtures.lock
    git -C "$TREE" -c user.name=bench -c user.email=bench@localhost commit -qm lock
fi
$FG >/dev/null || die "lock --check failed on the unchanged tree"
git -C "$TREE" update-index --refresh >/dev/null
[ -z "$($GIT)" ] || die "git status is not clean in $TREE"
if command -v strace >/dev/null; then
    opened=$(strace -f -e trace=openat -o /dev/stdout $FG | grep -c 'tests/fixtures/g[0-9]*/f[0-9]*\.bin' || true)
    echo "warm lock --check opens $opened fixture files (expected 0)" >&2
    [ "$opened" -eq 0 ] || die "the warm stat cache is not used"
fi

# --- measurement -------------------------------------------------------------------------------

busy_pct() {  # CPU busy percentage over one second, from /proc/stat
    local a b
    a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
    local idle=$(( (b[4] + b[5]) - (a[4] + a[5]) )) total=0 i
    for i in 1 2 3 4 5 6 7 8; do total=$(( total + b[i] - a[i] )); done
    echo $(( total > 0 ? 100 * (total - idle) / total : 0 ))
}
deadline=$(( $(date +%s) + ${IDLE_TIMEOUT:-120} ))
while busy=$(busy_pct); [ "$busy" -gt 10 ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 4; done
load="CPUs ${busy}% busy before, load average $(cut -d' ' -f1-3 /proc/loadavg)"

log "warm lock --check vs git status --porcelain, $RUNS interleaved rounds after one warm-up"
{
    echo "date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "machine: $(nproc) cores, $(uname -sr), $(git --version)"
    echo "fixgate: $FIXGATE_FROM"
    echo "load:    $load"
    python3 "$REPO/benches/interleave.py" --runs "$RUNS" --json "$RESULTS/lockcheck.json" \
        "fixgate-lock-check=$FG" "git-status=$GIT"
    echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
    # CPU time and page faults move far less with the load than wall time does.
    if command -v perf >/dev/null; then
        for side in "fixgate-lock-check=$FG" "git-status=$GIT"; do
            perf stat -x, -r "$RUNS" -e task-clock,page-faults ${side#*=} 2>&1 >/dev/null \
                | awk -F, -v n="${side%%=*}" '$3 ~ /task-clock/ {c=$1} $3 ~ /page-faults/ {f=$1}
                    END {printf "%-20s CPU %.1f ms, %d page faults (perf stat, mean of runs)\n", n, c, f}'
        done
    fi
} | tee "$RESULTS/summary.txt"
echo "results: $RESULTS/lockcheck.json, $RESULTS/summary.txt" >&2
