#!/usr/bin/env bash
# Impact-scoped audits (issue 21) on the generated suite of benches/gen_impact.py: 40 modules of
# 50 tests with a shared registry (and 400 modules for the scale case).
#
#   bash benches/impact.sh
#
#   cold      a cold 8-seed --scoped audit of the base (--base main --head main, empty cache)
#   rewrite   then the head that rewrites module 7 equivalently. Target: <= 0.10x cold, pass.
#   registry  then the head that makes module 7 read the registry. Target: <= 0.35x cold,
#             reject (order-dependent, introduced).
#   whole     the same three audits not scoped (the default: whole orders, nothing recorded)
#             in a cache of their own: the verdicts must be the same.
#   scale     the rewrite on 400 modules (after that suite's cold base audit). Target: <= 2x
#             the 40-module rewrite.
# Every case prints wall seconds, the verdict, pytest processes and the scope, with the load.
# Each round also times, on the base's tree, the floors an audit that starts pytest cannot go
# under: `pytest -q` and `pytest --collect-only -q`, with bytecode caching on (after one uncounted
# warm-up of each in the first round), printed as "pytest" and "collect".
#
# Environment: BENCH_DATA [/work/bench-data/impact], PYTHON [python3], FIXGATE
# [target/release/fixgate, built when missing], RUNS [3], CASES ["small scale"].

set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${BENCH_DATA:-/work/bench-data/impact}
RUNS=${RUNS:-3}
PYTHON=${PYTHON:-python3}
CASES=" ${CASES:-small scale} "
mkdir -p "$DATA"
if [ -z "${FIXGATE:-}" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    FIXGATE=$REPO/target/release/fixgate
fi

suite() { # NAME MODULES
    local dir=$DATA/$1
    [ -d "$dir/.git" ] || python3 "$REPO/benches/gen_impact.py" "$dir" --modules "$2" --tests 50
    echo "$dir"
}

# audit DIR CACHE BASE HEAD [EXTRA...]: prints "seconds verdict processes mode run-per-seed"
audit() {
    local dir=$1 cache=$2 base=$3 head=$4
    shift 4
    local out
    out=$(mktemp)
    local start end
    start=$(date +%s.%N)
    (cd "$dir" && "$FIXGATE" --python "$PYTHON" --cache-dir "$cache" audit --base "$base" \
        --head "$head" --seeds 8 --jobs 2 --quiet --format json --output "$out" "$@") || true
    end=$(date +%s.%N)
    python3 - "$out" "$start" "$end" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r.get("scope") or {}
print("%.2f %s %d %s %s" % (float(sys.argv[3]) - float(sys.argv[2]), r["verdict"],
      r["pytest_processes"], s.get("mode"), s.get("runs", {}).get("1")))
PY
    rm -f "$out"
}

# Plain pytest on the base's tree (checked out under $DATA/<suite>-tree, outside the suite's
# repository, again when main moves), bytecode cached under $DATA/pycache: prints "seconds outcome-line".
BYTECODE="env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$DATA/pycache"
plain() { # DIR ARGS...
    local dir=$1
    shift
    local tree=$dir-tree commit
    commit=$(git -C "$dir" rev-parse main)
    if [ "$(cat "$tree.commit" 2>/dev/null)" != "$commit" ]; then
        rm -rf "$tree"
        mkdir -p "$tree"
        git -C "$dir" archive main | tar -x -C "$tree"
        echo "$commit" >"$tree.commit"
    fi
    local start end last
    start=$(date +%s.%N)
    last=$(cd "$tree" && $BYTECODE "$PYTHON" -m pytest -q -p no:cacheprovider -p no:randomly "$@" \
        2>&1 | tail -n 1) || true
    end=$(date +%s.%N)
    awk -v a="$start" -v b="$end" -v l="$last" 'BEGIN { printf "%.2f %s\n", b - a, l }'
}

WARMED=" "
floors() { # DIR: the plain runs beside one round's audits (the first round warms up first)
    if [[ $WARMED != *" $1 "* ]]; then
        plain "$1" >/dev/null
        plain "$1" --collect-only >/dev/null
        WARMED="$WARMED$1 "
    fi
    echo "pytest $(plain "$1")"
    echo "collect $(plain "$1" --collect-only)"
}

round() { # DIR TAG EXTRA...: one cold base audit, then each head, in one cache
    local dir=$1 tag=$2
    shift 2
    local cache=$DATA/cache-$tag
    rm -rf "$cache"
    echo "cold $(audit "$dir" "$cache" main main "$@")"
    echo "rewrite $(audit "$dir" "$cache" main rewrite "$@")"
    echo "registry $(audit "$dir" "$cache" main registry "$@")"
}

if [[ $CASES == *" small "* ]]; then
    SMALL=$(suite small 40)
    for r in $(seq "$RUNS"); do
        echo "== round $r, 40 modules, --scoped (load: $(cut -d' ' -f1-3 /proc/loadavg))"
        floors "$SMALL"
        round "$SMALL" small --scoped
        echo "== round $r, 40 modules, whole orders (load: $(cut -d' ' -f1-3 /proc/loadavg))"
        round "$SMALL" small-full
    done
fi
if [[ $CASES == *" scale "* ]]; then
    LARGE=$(suite large 400)
    for r in $(seq "$RUNS"); do
        echo "== round $r, 400 modules (load: $(cut -d' ' -f1-3 /proc/loadavg))"
        cache=$DATA/cache-large
        floors "$LARGE"
        rm -rf "$cache"
        echo "cold $(audit "$LARGE" "$cache" main main --scoped)"
        echo "rewrite $(audit "$LARGE" "$cache" main rewrite --scoped)"
    done
fi
