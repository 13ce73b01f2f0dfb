#!/usr/bin/env bash
# Compares two fixgate binaries on the audit cases the rewrite cache serves, interleaved round
# by round (benches/interleave.py), on the generated 2,000-test suite of benches/audit.sh:
#
#   cold    an 8-seed audit with an empty cache (the rewrites are made first)
#   warm    the same audit again, nothing changed (no pytest process at all)
#   head    a warm base and a new head that changes one source line: every head run is new,
#           every test module's rewrite is already there
#
#   BEFORE=/path/to/old/fixgate bash benches/rewrites.sh
#
# Environment: BEFORE (required), AFTER [target/release/fixgate, built when missing],
# BENCH_DATA [/work/bench-data/suite], RUNS [5], PYTHON [the venv benches/audit.sh makes].
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${BENCH_DATA:-/work/bench-data/suite}
RUNS=${RUNS:-5}
: "${BEFORE:?set BEFORE to the fixgate binary to compare against}"
if [ -z "${AFTER:-}" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    AFTER=$REPO/target/release/fixgate
fi
PYTHON=${PYTHON:-$DATA/venv/bin/python}
SUITE=$DATA/repo
if [ ! -d "$SUITE/.git" ] || [ ! -x "$PYTHON" ]; then
    CASES=" " RUNS=1 bash "$REPO/benches/audit.sh" >/dev/null
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$SUITE"
git checkout -q -- .
# The head case's patch: one more source line, on top of the suite's own patch commit, made
# without touching the work tree.
blob=$( (git show HEAD:src/benchpkg/__init__.py; echo "# another line") | git hash-object -w --stdin)
GIT_INDEX_FILE=$WORK/index git read-tree HEAD
GIT_INDEX_FILE=$WORK/index git update-index --cacheinfo "100644,$blob,src/benchpkg/__init__.py"
tree=$(GIT_INDEX_FILE=$WORK/index git write-tree)
HEAD2=$(git -c user.name=b -c user.email=b@example.com commit-tree -p HEAD -m "another line" "$tree")
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
audit() { # BIN CACHE HEAD
    echo "$1 --python $PYTHON --cache-dir $2 audit --base HEAD~1 --head $3 --seeds 8 --jobs 2 --quiet --format json --output /dev/null"
}
for side in before after; do
    bin=$BEFORE
    [ $side = after ] && bin=$AFTER
    eval "$(audit "$bin" "$WORK/warm-$side" HEAD)"
done
args=()
for side in before after; do
    bin=$BEFORE
    [ $side = after ] && bin=$AFTER
    args+=("cold-$side=rm -rf $WORK/cold-$side && $(audit "$bin" "$WORK/cold-$side" HEAD)")
done
for side in before after; do
    bin=$BEFORE
    [ $side = after ] && bin=$AFTER
    args+=("warm-$side=$(audit "$bin" "$WORK/warm-$side" HEAD)")
done
for side in before after; do
    bin=$BEFORE
    [ $side = after ] && bin=$AFTER
    # A copy of the warm cache, then the new head: its runs execute, its rewrites are there.
    args+=("head-$side=rm -rf $WORK/head-$side && cp -a $WORK/warm-$side $WORK/head-$side && $(audit "$bin" "$WORK/head-$side" "$HEAD2")")
done
python3 "$REPO/benches/interleave.py" --runs "$RUNS" --json "$WORK/rewrites.json" "${args[@]}"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
