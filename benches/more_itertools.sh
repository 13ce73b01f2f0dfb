#!/usr/bin/env bash
# Impact-scoped audits (issue 21) on a real suite: more-itertools 11.2.1, from its sdist (which
# ships its tests), one round:
#
#   FIXGATE=target/release/fixgate bash benches/more_itertools.sh
#
#   setup   the sdist unpacked into a git repository (branch "base", commit "base"), and a head
#           branch "fix" that rewrites one function's body in more_itertools/more.py (ilen: the
#           same count by a plain loop instead of sum(compress(repeat(1), zip(...)))), the tests
#           passing on both. The tests import more_itertools from the checkout: pytest runs as
#           `python -m pytest` from the tree's root, which puts the root on sys.path; nothing is
#           added to pyproject.toml or a conftest.
#   pytest  plain `python -m pytest -q -p no:cacheprovider` with bytecode caching on
#           (PYTHONDONTWRITEBYTECODE unset, PYTHONPYCACHEPREFIX under BENCH_DATA), after one
#           warm-up run.
#   cold    an empty cache: a cold 8-seed `--scoped --jobs 2` audit of the base against itself.
#   head    then, in that cache, the head: `--base base --head fix --scoped`. Target: at most
#           0.15x the cold audit, with the verdict of the whole audit.
#   whole   the head audited with whole orders (the default, not scoped) in a fresh cache: the
#           verdict to compare.
# Every line gives wall seconds, the verdict, pytest processes, the scope mode and reason and how
# many tests seed 1 ran, with the load average; each report is kept in $BENCH_DATA/results/.
#
# Environment: BENCH_DATA [/work/bench-data/more-itertools], SDIST_DIR [/work/bench-data/mi],
# PYTHON [python3], FIXGATE [target/release/fixgate, built when missing], CASES
# ["pytest cold head whole"; head needs cold in the same invocation].

set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${BENCH_DATA:-/work/bench-data/more-itertools}
SDIST_DIR=${SDIST_DIR:-/work/bench-data/mi}
VERSION=11.2.1
PYTHON=${PYTHON:-python3}
CASES=" ${CASES:-pytest cold head whole} "
SUITE=$DATA/repo
RESULTS=$DATA/results
mkdir -p "$DATA" "$RESULTS" "$SDIST_DIR"
if [ -z "${FIXGATE:-}" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    FIXGATE=$REPO/target/release/fixgate
fi
GIT="git -c user.name=b -c user.email=b@example.com -c commit.gpgsign=false"

SDIST=$SDIST_DIR/more_itertools-$VERSION.tar.gz
[ -f "$SDIST" ] || python3 -m pip download --quiet --disable-pip-version-check --no-deps \
    --no-binary :all: "more-itertools==$VERSION" -d "$SDIST_DIR"

if [ ! -d "$SUITE/.git" ]; then
    rm -rf "$SUITE" "$DATA/unpack"
    mkdir -p "$DATA/unpack"
    tar -xzf "$SDIST" -C "$DATA/unpack"
    mv "$DATA/unpack/more_itertools-$VERSION" "$SUITE"
    rmdir "$DATA/unpack"
    (cd "$SUITE" && git init -q -b base && $GIT add -A && $GIT commit -qm base)
    (cd "$SUITE" && $GIT checkout -q -b fix)
    python3 - "$SUITE/more_itertools/more.py" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
old = ("    # This is the \"most beautiful of the fast variants\" of this function.\n"
       "    # If you think you can improve on it, please ensure that your version\n"
       "    # is both 10x faster and 10x more beautiful.\n"
       "    return sum(compress(repeat(1), zip(iterable)))\n")
new = ("    count = 0\n"
       "    for _ in iterable:\n"
       "        count += 1\n"
       "    return count\n")
assert s.count(old) == 1, "ilen's body is not the expected one"
open(p, "w").write(s.replace(old, new))
PY
    (cd "$SUITE" && $GIT commit -qam "ilen: count with a plain loop" && $GIT checkout -q base)
fi
cd "$SUITE"
[ -z "$(git status --porcelain)" ] || { echo "the suite's tree is not clean" >&2; exit 1; }
git diff --stat base fix

load() { cut -d' ' -f1-3 /proc/loadavg; }

BYTECODE="env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$DATA/pycache"
if [[ $CASES == *" pytest "* ]]; then
    echo "== plain pytest with bytecode caching (warm-up first) (load: $(load))"
    $BYTECODE "$PYTHON" -m pytest -q -p no:cacheprovider > "$RESULTS/pytest-warmup.txt" 2>&1 || true
    tail -1 "$RESULTS/pytest-warmup.txt"
    start=$EPOCHREALTIME
    rc=0
    $BYTECODE "$PYTHON" -m pytest -q -p no:cacheprovider > "$RESULTS/pytest.txt" 2>&1 || rc=$?
    end=$EPOCHREALTIME
    echo "pytest $(python3 -c "print('%.2f' % ($end - $start))") exit $rc: $(tail -1 "$RESULTS/pytest.txt") (load: $(load))"
fi

# audit NAME CACHE BASE HEAD [EXTRA...]: prints "NAME seconds verdict processes mode reason runs"
audit() {
    local name=$1 cache=$2 base=$3 head=$4
    shift 4
    local out=$RESULTS/$name.json rc=0 start end
    rm -f "$out"
    start=$EPOCHREALTIME
    "$FIXGATE" --repo "$SUITE" --python "$PYTHON" --cache-dir "$cache" audit --base "$base" \
        --head "$head" --seeds 8 --jobs 2 --quiet --format json --output "$out" "$@" \
        2> "$RESULTS/$name.stderr" || rc=$?
    end=$EPOCHREALTIME
    if [ ! -s "$out" ]; then
        echo "$name failed (exit $rc) after $(python3 -c "print('%.2f' % ($end - $start))") s:"
        tail -20 "$RESULTS/$name.stderr"
        return 0
    fi
    python3 - "$out" "$start" "$end" "$name" "$rc" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r.get("scope") or {}
print("%s %.2f s exit %s verdict %s, %d pytest processes, scope %s (%s), tests %s, affected %s, %d writers, %d carried, runs per order %s"
      % (sys.argv[4], float(sys.argv[3]) - float(sys.argv[2]), sys.argv[5], r["verdict"],
         r["pytest_processes"], s.get("mode"), s.get("reason"), s.get("tests"), s.get("affected"),
         len(s.get("writers") or []), len(s.get("carried") or []), s.get("runs")))
PY
    echo "   (load: $(load))"
    echo "$name $(python3 -c "print('%.3f' % ($end - $start))")" >> "$RESULTS/times.txt"
}

: > "$RESULTS/times.txt"
if [[ $CASES == *" cold "* ]]; then
    echo "== cold --scoped audit of the base, empty cache (load: $(load))"
    rm -rf "$DATA/cache-scoped"
    audit cold-base "$DATA/cache-scoped" base base --scoped
fi
if [[ $CASES == *" head "* ]]; then
    echo "== the head after the base's audit, same cache, --scoped (load: $(load))"
    audit head-scoped "$DATA/cache-scoped" base fix --scoped
fi
if [[ $CASES == *" whole "* ]]; then
    echo "== the head with whole orders, fresh cache (load: $(load))"
    rm -rf "$DATA/cache-whole"
    audit head-whole "$DATA/cache-whole" base fix
fi
python3 - "$RESULTS" <<'PY'
import json, os, sys
d = sys.argv[1]
def get(n):
    p = os.path.join(d, n + ".json")
    return json.load(open(p)) if os.path.exists(p) and os.path.getsize(p) else None
cold, head, whole = get("cold-base"), get("head-scoped"), get("head-whole")
t = dict(l.split() for l in open(os.path.join(d, "times.txt")) if l.strip())
if "cold-base" in t and "head-scoped" in t:
    print("head after the base's audit / cold audit: %.3fx (target <= 0.15x)"
          % (float(t["head-scoped"]) / float(t["cold-base"])))
if head and whole:
    print("verdicts: head --scoped %s, head whole %s: %s" % (head["verdict"], whole["verdict"],
          "same" if head["verdict"] == whole["verdict"] else "DIFFERENT"))
PY
