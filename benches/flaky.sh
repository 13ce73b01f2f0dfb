#!/usr/bin/env bash
# Issue 11's targets: verdicts that hold on a flaky suite.
#
#   bash benches/flaky.sh                  # AUDITS=100
#
# A repository with one pre-existing test that fails about a third of the time in any order (it
# draws from os.urandom, so seeds do not help) and a truly order-dependent pair in the same
# suite; a clean patch (a README change) audited AUDITS times, each with a cold cache and its
# own --seed-list. Counted: rejects (target 0), audits where the coin test is flaky (target:
# every one in which it failed at least once), pairs reported for the coin test (target 0), and
# audits where the real pair (target: every one) was found with its polluter.
#
# Environment: AUDITS [100], FIXGATE [target/release/fixgate, built when missing], PYTHON
# [python3], BENCH_DATA [/work/bench-data/flaky].

set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${BENCH_DATA:-/work/bench-data/flaky}
AUDITS=${AUDITS:-100}
PYTHON=${PYTHON:-python3}
if [ -z "${FIXGATE:-}" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    FIXGATE=$REPO/target/release/fixgate
fi
S=$DATA/repo
if [ ! -d "$S/.git" ]; then
    mkdir -p "$S/tests"
    cat > "$S/tests/test_coin.py" <<'PY'
import os


def test_coin():
    # fails with probability 0.35, whatever ran before it
    assert int.from_bytes(os.urandom(2), "big") >= int(0.35 * 65536)
PY
    cat > "$S/tests/test_pair.py" <<'PY'
import os

FLAG = os.path.join(os.environ["TMPDIR"], "flag")


def test_a_leaves_a_flag():
    open(FLAG, "w").write("x")


def test_b_needs_no_flag():
    assert not os.path.exists(FLAG)
PY
    for i in 1 2 3 4 5 6; do
        printf 'def test_plain_%d():\n    assert True\n' "$i" > "$S/tests/test_plain_$i.py"
    done
    git -C "$S" init -q -b main
    git -C "$S" add -A
    git -C "$S" -c user.name=b -c user.email=b@example.com commit -qm base
    echo "a clean patch" > "$S/README.md"
    git -C "$S" add -A
    git -C "$S" -c user.name=b -c user.email=b@example.com commit -qm head
fi

rejects=0; coin_flaky=0; coin_failed_somewhere=0; coin_pairs=0; pair_found=0; od_coin=0
for i in $(seq 1 "$AUDITS"); do
    cache=$(mktemp -d)
    seeds="$((8 * i + 1)),$((8 * i + 2)),$((8 * i + 3)),$((8 * i + 4)),$((8 * i + 5)),$((8 * i + 6))"
    set +e
    "$FIXGATE" --repo "$S" --python "$PYTHON" --cache-dir "$cache" audit --base HEAD~1 --head HEAD \
        --seed-list "$seeds" --format json --quiet --output "$DATA/report.json"
    code=$?
    set -e
    rm -rf "$cache"
    read -r r f fs p pf od < <(python3 - "$DATA/report.json" "$code" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
code = int(sys.argv[2])
coin = next(t for t in v["tests"] if t["nodeid"] == "tests/test_coin.py::test_coin")
failed_somewhere = any(o != "passed" for o in coin["outcomes"].values())
coin_pairs = sum(1 for p in v["pairs"] if p["victim"].endswith("test_coin"))
pair = any(p["victim"].endswith("test_b_needs_no_flag") and p["culprits"] == ["tests/test_pair.py::test_a_leaves_a_flag"] for p in v["pairs"])
print(int(code == 1), int(coin["bucket"] == "flaky"), int(failed_somewhere), coin_pairs, int(pair), int(coin["bucket"] == "order-dependent"))
PY
)
    rejects=$((rejects + r)); coin_flaky=$((coin_flaky + f)); coin_failed_somewhere=$((coin_failed_somewhere + fs))
    coin_pairs=$((coin_pairs + p)); pair_found=$((pair_found + pf)); od_coin=$((od_coin + od))
done
cat <<EOT | tee "$DATA/summary.txt"
audits: $AUDITS (cold caches, a different --seed-list each: file, reversed and 6 seeds)
rejects of the clean patch: $rejects (target 0)
coin test order-dependent: $od_coin (target 0); pairs reported for it: $coin_pairs (target 0)
coin test flaky: $coin_flaky of the $coin_failed_somewhere audits where it failed at least once
the real pair found with its polluter: $pair_found of $AUDITS (target all)
EOT
