#!/usr/bin/env bash
# What a failed test costs under fixgate, against what it costs pytest itself: a generated suite
# of TESTS tests that all pass, and the same suite where every test fails (an assert on a
# helper's result, like the registry victims of benches/gen_impact.py), each run by plain pytest
# with bytecode caching on (after a warm-up round) and by `fixgate run --seed 0`, interleaved
# round by round (benches/interleave.py).
#
#   bash benches/failing.sh
#
# Prints each command's median, then per tool the cost of one failure: (failing run - passing
# run) / TESTS, from the medians. Plain pytest runs twice on the failing suite: in its default
# traceback style (what a developer's run pays: the source of every traceback entry, and a
# summary quadratic in the failures) and with --tb=line (the least pytest itself does for a
# failure). fixgate's should be close to the second: the plugin makes each failure's report in
# the line style and writes its message (docs/performance.md, "The registry suite").
#
# Environment: BENCH_DATA [/work/bench-data/failing], RUNS [3], TESTS [1000], PYTHON [python3],
# FIXGATE [target/release/fixgate, built when missing].

set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${BENCH_DATA:-/work/bench-data/failing}
RUNS=${RUNS:-3}
TESTS=${TESTS:-1000}
PYTHON=${PYTHON:-python3}
mkdir -p "$DATA"
if [ -z "${FIXGATE:-}" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    FIXGATE=$REPO/target/release/fixgate
fi

suite() { # NAME OFFSET: TESTS tests of add(i) == i + 7, where add adds OFFSET more
    local dir=$DATA/$1-$TESTS
    if [ ! -d "$dir/.git" ]; then
        rm -rf "$dir"
        mkdir -p "$dir/tests"
        python3 - "$dir/tests/test_suite.py" "$TESTS" "$2" <<'PY'
import sys
path, n, offset = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "w") as f:
    f.write("OFFSET = %d\n\n\ndef add(x):\n    return x + 7 + OFFSET\n" % offset)
    for i in range(n):
        f.write("\n\ndef test_%d():\n    assert add(%d) == %d\n" % (i, i, i + 7))
PY
        (cd "$dir" && git init -q && git add -A &&
            git -c user.name=b -c user.email=b@example.com commit -qm suite)
    fi
    echo "$dir"
}
PASS=$(suite pass 0)
FAIL=$(suite fail 1)

# pytest's own cache of bytecode, kept out of the suites' trees; `|| [ $? -eq 1 ]` takes the
# failing suite's exit status 1 (tests failed) as a run that worked.
BYTECODE="env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$DATA/pycache"
ok='|| [ $? -eq 1 ]'
fixgate() { # DIR
    echo "cd $1 && $FIXGATE --python $PYTHON --cache-dir $DATA/cache run --seed 0 --quiet --format json --output /dev/null $ok"
}
pytest() { # DIR (options may follow the command)
    echo "cd $1 && $BYTECODE $PYTHON -m pytest -q -p no:cacheprovider -p no:randomly tests"
}
echo "== $TESTS tests passing and failing, plain pytest (bytecode caching on) and fixgate run --seed 0"
python3 "$REPO/benches/interleave.py" --runs "$RUNS" --json "$DATA/failing.json" \
    "pytest-pass=$(pytest "$PASS") $ok" \
    "pytest-fail=$(pytest "$FAIL") $ok" \
    "pytest-fail-line=$(pytest "$FAIL") --tb=line $ok" \
    "fixgate-pass=$(fixgate "$PASS")" \
    "fixgate-fail=$(fixgate "$FAIL")"
python3 - "$DATA/failing.json" "$TESTS" <<'PY'
import json, statistics, sys
results = {r["command"]: statistics.median(r["times"]) for r in json.load(open(sys.argv[1]))["results"]}
n = int(sys.argv[2])
for tool, fail, passing in (
    ("pytest", "pytest-fail", "pytest-pass"),
    ("pytest --tb=line", "pytest-fail-line", "pytest-pass"),
    ("fixgate", "fixgate-fail", "fixgate-pass"),
):
    cost = (results[fail] - results[passing]) / n * 1000
    print("%-16s a failed test costs %.2f ms more than a passing one" % (tool, cost))
PY
