#!/usr/bin/env bash
# Issue 11's hard case, counted: a victim that fails after two polluters together and 20% of the
# time anyway (os.urandom), as in tests/stream.rs
# (`a_two_test_polluter_of_a_victim_that_is_also_flaky_...`), audited AUDITS times with cold
# caches and the test's 20 seed orders that do not run both polluters first.
#
#   bash benches/flaky_victim.sh           # AUDITS=100
#
# Counted: audits that found the pair with both culprits, that put the victim in the
# order-dependent bucket with the flaky signal, and that rejected (every one should). A miss is
# printed with the victim's row and budget, to tell which check missed, and its report kept
# as miss-N.json beside the repository.
#
# Environment: AUDITS [100], FIXGATE [target/release/fixgate, built when missing], PYTHON
# [python3], BENCH_DATA [/work/bench-data/flaky-victim].

set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${BENCH_DATA:-/work/bench-data/flaky-victim}
AUDITS=${AUDITS:-100}
PYTHON=${PYTHON:-python3}
if [ -z "${FIXGATE:-}" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    FIXGATE=$REPO/target/release/fixgate
fi
S=$DATA/repo
git_() { git -C "$S" -c user.name=b -c user.email=b@example.com "$@"; }
if [ ! -d "$S/.git" ]; then
    mkdir -p "$S/pkg" "$S/tests"
    : > "$S/pkg/__init__.py"
    printf 'A = False\nB = False\n' > "$S/pkg/state.py"
    printf 'import os, sys\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n' \
        > "$S/tests/conftest.py"
    for f in 1 3 5; do
        printf 'def test_plain_%d_x():\n    assert True\n\n\ndef test_plain_%d_y():\n    assert True\n' \
            "$f" "$f" > "$S/tests/test_${f}_plain.py"
    done
    printf 'from pkg import state\n\n\ndef test_sets_a():\n    state.A = True\n' \
        > "$S/tests/test_2_half_a.py"
    printf 'from pkg import state\n\n\ndef test_sets_b():\n    state.B = True\n' \
        > "$S/tests/test_4_half_b.py"
    git_ init -q -b main
    git_ add -A
    git_ commit -qm base
    cat > "$S/tests/test_6_victim.py" <<'PY'
import os

from pkg import state


def test_victim():
    assert not (state.A and state.B)
    assert int.from_bytes(os.urandom(2), "big") >= int(0.2 * 65536)
PY
    git_ add -A
    git_ commit -qm "adds a flaky, order-dependent test"
fi

seeds="4,7,9,13,14,15,16,17,19,20,21,22,23,24,25,26,27,28,30,32"
found=0; bucket=0; rejects=0
for i in $(seq 1 "$AUDITS"); do
    cache=$(mktemp -d)
    set +e
    "$FIXGATE" --repo "$S" --python "$PYTHON" --cache-dir "$cache" audit --base HEAD~1 --head HEAD \
        --seed-list "$seeds" --format json --quiet --output "$DATA/report.json"
    code=$?
    set -e
    rm -rf "$cache"
    read -r f b < <(python3 - "$DATA/report.json" "$DATA/miss-$i.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
victim = "tests/test_6_victim.py::test_victim"
halves = ["tests/test_2_half_a.py::test_sets_a", "tests/test_4_half_b.py::test_sets_b"]
found = any(p["victim"] == victim and p["culprits"] == halves for p in v["pairs"])
row = next(t for t in v["tests"] if t["nodeid"] == victim)
bucket = row["bucket"] == "order-dependent" and "flaky" in row["signals"]
if not (found and bucket):
    print("miss:", json.dumps(row), json.dumps(v["budget"]["used"]), file=sys.stderr)
    print(f"report kept: {sys.argv[2]}", file=sys.stderr)
print(int(found), int(bucket))
PY
)
    if [ "$f$b" != 11 ]; then cp "$DATA/report.json" "$DATA/miss-$i.json"; fi
    found=$((found + f)); bucket=$((bucket + b)); rejects=$((rejects + (code == 1)))
done
cat <<EOT | tee "$DATA/summary.txt"
audits: $AUDITS (cold caches, file and reversed orders and 20 seeds)
the pair with both culprits: $found of $AUDITS
order-dependent with the flaky signal: $bucket of $AUDITS
rejects: $rejects of $AUDITS
EOT
