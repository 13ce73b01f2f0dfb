#!/usr/bin/env bash
# Benchmarks the stream engine (issue 10) side by side, interleaved, medians:
#
#   bash benches/stream.sh                 # CASES="polluter peer stream memory"
#
#   polluter  a generated suite of 500 tests where one two-test polluter set breaks 12 victims
#             in other files: a cold 8-seed audit by this fixgate against the engine at commit
#             ca76c44 (built from a git worktree), both on the same suite. Also prints the search
#             runs per victim from the report. Targets: the first victim's search within
#             2*ceil(log2 n)+2 runs, at most 2 for every other victim, the whole audit at least
#             4x faster than ca76c44.
#   peer      a generated suite of 100 tests where one test breaks 8 others through a shared
#             module-level value: the whole cold audit (all 8 victims and their polluter) against
#             `detect-test-pollution --failing-test <one victim>` (pip), which finds the polluter
#             of one victim. Target: no slower. Also the same audit with --scoped (issue 21; target:
#             no slower than detect-test-pollution), interleaved in the same rounds.
#   stream    10 heads, each a one-line change to a different source module, against one base of
#             the 500-test suite, audited with one --head list, against one cold audit of one head.
#             Target: at most 5x.
#   memory    the peak RSS (VmHWM) of the fixgate process itself, not its children, during a cold
#             8-seed audit of a generated 8,000-test suite, sampled every 50 ms. Target: 150 MB.
#
# Baselines run with bytecode caching on (PYTHONDONTWRITEBYTECODE unset, one warm-up run first),
# as on a developer's machine.
# Environment: BENCH_DATA [/work/bench-data/stream], RUNS [3], FIXGATE [target/release/fixgate,
# built when missing], CASES.

set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${BENCH_DATA:-/work/bench-data/stream}
RUNS=${RUNS:-3}
CASES=" ${CASES:-polluter peer stream memory} "
RESULTS=$DATA/results
mkdir -p "$DATA" "$RESULTS"

if [ -z "${FIXGATE:-}" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    FIXGATE=$REPO/target/release/fixgate
fi
VENV=$DATA/venv
if ! "$VENV/bin/python" -c "import pytest, detect_test_pollution" 2>/dev/null; then
    python3 -m venv --clear "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check pytest detect-test-pollution
fi
PYTHON=$VENV/bin/python
BYTECODE="env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$DATA/pycache"
# An audit that rejects exits 1; the benchmark only needs it to have judged.
judged() { echo "bash -c '$1; c=\$?; [ \$c -le 1 ] || [ \$c -eq 4 ]'"; }

suite() { # DIR ARGS...: generate once
    local dir=$1; shift
    [ -d "$dir/.git" ] || python3 "$REPO/benches/gen_pollution.py" "$dir" "$@"
}

if [[ $CASES == *" polluter "* ]]; then
    echo "== polluter: 500 tests, a two-test set breaking 12 victims; this fixgate vs ca76c44"
    S=$DATA/polluter
    suite "$S" --tests 500 --polluters 2 --victims 12 --heads 1
    OLD=$DATA/ca76c44
    if [ ! -x "$OLD/target/release/fixgate" ]; then
        git -C "$REPO" worktree add -f "$OLD" ca76c44 >/dev/null 2>&1 || true
        (cd "$OLD" && cargo build --release --quiet)
    fi
    NEW_AUDIT="$FIXGATE --repo $S --python $PYTHON --cache-dir $DATA/c-new audit --base main --head head-0 --seeds 8 --jobs 2 --quiet --format json --output $RESULTS/polluter-new.json"
    OLD_AUDIT="$OLD/target/release/fixgate --repo $S --python $PYTHON --cache-dir $DATA/c-old audit --base main --head head-0 --seeds 8 --jobs 2 --quiet --format json --output $RESULTS/polluter-old.json"
    python3 "$REPO/benches/interleave.py" --runs "$RUNS" --json "$RESULTS/polluter.json" \
        "new=rm -rf $DATA/c-new; $(judged "$NEW_AUDIT")" \
        "ca76c44=rm -rf $DATA/c-old; $(judged "$OLD_AUDIT")"
    python3 - "$RESULTS" <<'PY'
import json, math, sys
d = sys.argv[1]
for side in ("new", "old"):
    r = json.load(open("%s/polluter-%s.json" % (d, side)))
    runs = [(p["victim"], p.get("found_by", "search"), p["search_runs"]) for p in r["pairs"]]
    print("%s: verdict %s, %d pytest processes, %d pairs, search runs %s" % (
        side, r["verdict"], r["pytest_processes"], len(runs), [x[2] for x in runs]))
PY
fi

if [[ $CASES == *" peer "* ]]; then
    echo "== peer: 100 tests, one polluter breaking 8; cold audit vs detect-test-pollution"
    S=$DATA/peer
    suite "$S" --tests 100 --polluters 1 --victims 8 --heads 1
    # (pytest exits 1 here: the victims fail in file order, which is the point)
    VICTIM=$(cd "$S" && { $PYTHON -m pytest -q -p no:cacheprovider -p no:randomly 2>/dev/null || true; } | sed -n 's/^FAILED \([^ ]*\).*/\1/p' | tail -1)
    (cd "$S" && $BYTECODE $PYTHON -m pytest -q -p no:cacheprovider >/dev/null 2>&1 || true)
    python3 "$REPO/benches/interleave.py" --runs "$RUNS" --json "$RESULTS/peer.json" \
        "fixgate-audit=rm -rf $DATA/c-peer; $(judged "$FIXGATE --repo $S --python $PYTHON --cache-dir $DATA/c-peer audit --base main --head head-0 --seeds 8 --jobs 2 --quiet --format json --output $RESULTS/peer-report.json")" \
        "detect-test-pollution=cd $S && $BYTECODE $DATA/venv/bin/detect-test-pollution --failing-test $VICTIM --tests tests/" \
        "fixgate-audit-scoped=rm -rf $DATA/c-peer-scoped; $(judged "$FIXGATE --repo $S --python $PYTHON --cache-dir $DATA/c-peer-scoped audit --base main --head head-0 --seeds 8 --jobs 2 --scoped --quiet --format json --output $RESULTS/peer-scoped-report.json")"
    python3 -c "
import json; r = json.load(open('$RESULTS/peer-report.json'))
print('fixgate: verdict %s, %d pairs, %d pytest processes' % (r['verdict'], len(r['pairs']), r['pytest_processes']))
r = json.load(open('$RESULTS/peer-scoped-report.json')); s = r.get('scope') or {}
print('fixgate --scoped: verdict %s, %d pairs, %d pytest processes, scope mode %s, reason %s, runs %s' % (r['verdict'], len(r['pairs']), r['pytest_processes'], s.get('mode'), s.get('reason'), s.get('runs')))"
fi

if [[ $CASES == *" stream "* ]]; then
    echo "== stream: 10 heads against one base vs one cold audit of one head"
    S=$DATA/stream
    suite "$S" --tests 500 --polluters 2 --victims 12 --heads 10
    HEADS=""
    for h in $(seq 0 9); do HEADS="$HEADS --head head-$h"; done
    python3 "$REPO/benches/interleave.py" --runs "$RUNS" --json "$RESULTS/stream.json" \
        "ten-heads=rm -rf $DATA/c-stream; $(judged "$FIXGATE --repo $S --python $PYTHON --cache-dir $DATA/c-stream audit --base main $HEADS --seeds 8 --jobs 2 --quiet --format json --output $RESULTS/stream-reports")" \
        "one-head=rm -rf $DATA/c-one; $(judged "$FIXGATE --repo $S --python $PYTHON --cache-dir $DATA/c-one audit --base main --head head-0 --seeds 8 --jobs 2 --quiet --format json --output /dev/null")"
fi

if [[ $CASES == *" memory "* ]]; then
    echo "== memory: peak RSS of fixgate itself on a cold 8-seed audit of 8,000 tests"
    S=$DATA/memory
    suite "$S" --tests 8000 --polluters 1 --victims 0 --heads 1
    rm -rf "$DATA/c-mem"
    $FIXGATE --repo "$S" --python "$PYTHON" --cache-dir "$DATA/c-mem" audit --base main --head head-0 \
        --seeds 8 --jobs 2 --quiet --format json --output /dev/null &
    PID=$!
    PEAK=0
    while kill -0 "$PID" 2>/dev/null; do
        KB=$(awk '/^VmHWM/ {print $2}' "/proc/$PID/status" 2>/dev/null || echo 0)
        [ -n "$KB" ] && [ "$KB" -gt "$PEAK" ] && PEAK=$KB
        sleep 0.05
    done
    wait "$PID" || true
    echo "peak RSS of fixgate: $((PEAK / 1024)) MB (target 150 MB)" | tee "$RESULTS/memory.txt"
fi
