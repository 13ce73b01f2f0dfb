#!/usr/bin/env bash
# What the base-suite replay (issue 20) costs, on the generated suite of 2,000 tests in 100
# modules (benches/gen_suite.py), for three patches on one base:
#
#   bash benches/base_suite.sh
#
#   code      a source line changed, no test touched: the replay runs nothing.
#   testfile  one assertion of tests/test_mod_007.py rewritten (the same demand): its 20 base
#             tests replay, the control does not run (nothing is red).
#   conftest  a conftest.py added (one fixture nobody uses): the whole base suite replays.
#
# Each round audits the three heads cold (an empty cache each, --seeds 2 --jobs 2), in turn, so
# that the load of a round falls on all three; then each again, warm. Reported per head: the
# median audit seconds, the tests the replay ran, the seconds its nodes took (collection, run,
# control, confirmation: graph node start to end, summed), and the pytest processes. The replay's
# cost is its nodes' seconds, and the cold audit's seconds beside the `code` head's.
#
# Environment: BENCH_DATA [/work/bench-data/base-suite], RUNS [3], PYTHON [python3, which must
# have pytest], FIXGATE [target/release/fixgate, built when missing].

set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${BENCH_DATA:-/work/bench-data/base-suite}
RUNS=${RUNS:-3}
PYTHON=${PYTHON:-python3}
SUITE=$DATA/repo
mkdir -p "$DATA"

if [ -z "${FIXGATE:-}" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    FIXGATE=$REPO/target/release/fixgate
fi
G="git -c user.name=b -c user.email=b@example.com"
if [ ! -d "$SUITE/.git" ]; then
    python3 "$REPO/benches/gen_suite.py" "$SUITE" --tests 2000 --groups 5 --files 50
    cd "$SUITE"
    $G tag base
    echo "# patched" >> src/benchpkg/__init__.py
    $G commit -qam code && $G tag code && $G checkout -q base
    sed -i 's/assert double(141) == 282/assert 282 == double(141)/' tests/test_mod_007.py
    $G commit -qam testfile && $G tag testfile && $G checkout -q base
    printf 'import pytest\n\n\n@pytest.fixture\ndef unused():\n    return 1\n' > tests/conftest.py
    $G add tests/conftest.py && $G commit -qm conftest && $G tag conftest && $G checkout -q base
fi
cd "$SUITE"
echo "load before: $(uptime)"

python3 - "$FIXGATE" "$PYTHON" "$DATA" "$RUNS" <<'PY'
import json, os, shutil, statistics, subprocess, sys, time
fixgate, python, data, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
heads = ["code", "testfile", "conftest"]
REPLAY_KINDS = {"base-suite-run", "base-suite-control"}
rows = {h: {"cold": [], "warm": [], "replay": [], "ran": None, "processes": []} for h in heads}

def audit(head, cache):
    out = os.path.join(data, "report-%s.json" % head)
    start = time.perf_counter()
    done = subprocess.run([fixgate, "--python", python, "--cache-dir", cache, "audit", "--base", "base",
                           "--head", head, "--seeds", "2", "--jobs", "2", "--quiet", "--format", "json",
                           "--output", out], capture_output=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit("audit of %s failed (exit %d): %s" % (head, done.returncode, done.stderr.decode()[-2000:]))
    return elapsed, json.load(open(out))

def replay_seconds(report):
    nodes = report["graph"]["executed_nodes"]
    mine = [n for n in nodes if n["kind"] in REPLAY_KINDS or n["label"] == "collect(base-suite)"]
    return sum(n["end"] - n["start"] for n in mine)

for round_ in range(runs):
    for h in heads:
        cache = os.path.join(data, "cache-" + h)
        shutil.rmtree(cache, ignore_errors=True)
        t, r = audit(h, cache)
        rows[h]["cold"].append(t)
        rows[h]["replay"].append(replay_seconds(r))
        rows[h]["processes"].append(r["pytest_processes"])
        rows[h]["ran"] = (r.get("base_suite") or {}).get("ran", 0)
        rows[h]["verdict"] = r["verdict"]
    for h in heads:
        t, r = audit(h, os.path.join(data, "cache-" + h))
        rows[h]["warm"].append(t)
    print("round %d done, load %s" % (round_ + 1, os.getloadavg()), flush=True)

med = statistics.median
base = med(rows["code"]["cold"])
print("| patch | verdict | replayed tests | replay nodes (cold) | cold audit | vs code-only | warm audit | pytest processes (cold) |")
print("|---|---|---|---|---|---|---|---|")
for h in heads:
    r = rows[h]
    print("| %s | %s | %d | %.2f s | %.2f s | %+.2f s | %.2f s | %d |" % (
        h, r["verdict"], r["ran"], med(r["replay"]), med(r["cold"]), med(r["cold"]) - base,
        med(r["warm"]), med(r["processes"])))
json.dump(rows, open(os.path.join(data, "results.json"), "w"), indent=1)
PY
echo "load after: $(uptime)"
