#!/usr/bin/env bash
# False-block rate on real history: fixgate audits maintainers' own commits of public pure-Python
# projects, each against its first parent, and counts how many it does not pass:
#
#   FIXGATE=target/release/fixgate bash benches/history.sh
#   PROJECTS="inflection parse" COMMITS=8 SEEDS=2 FIXGATE=... bash benches/history.sh
#
#   projects  benches/history_projects.txt: `owner/name pinned_commit pip_requirements...` per
#             line. Each is cloned from $MIRRORS/OWNER+NAME/repo when that exists, else from
#             GitHub, into $BENCH_DATA/<name>/repo, detached at the pin, with a venv
#             $BENCH_DATA/<name>/venv holding PYTEST_REQ and the line's requirements (reused
#             while the requirement list is the same).
#   commits   the last COMMITS non-merge commits reachable from the pin that touch a test file
#             (test_*.py, *_test.py, or anything under a tests/ or test/ folder) and have a
#             parent, oldest first.
#   audit     each one against its first parent, from inside the checkout (fixgate reads both
#             revisions from git; the work tree stays at the pin):
#             `audit --base C^ --head C --seeds $SEEDS --jobs $JOBS --timeout $TIMEOUT`, in a
#             cache $BENCH_DATA/<name>/cache emptied when the project starts (KEEP_CACHE=1 keeps
#             it), the JSON report in $BENCH_DATA/<name>/reports/<sha>.json and fixgate's stderr
#             beside it (<sha>.stderr).
#   skipped   an exit 2 whose message is a collection error on the base: the base itself is
#             broken, which is not a judgment of the commit. Not counted as judged.
#   results   one TSV line per commit appended to $BENCH_DATA/results.tsv: project, short sha,
#             subject, exit code, verdict, seconds, the blocking findings' kinds (comma
#             separated), the first reason (at most 300 characters). At the end: commits judged,
#             passes, non-passes by verdict and the non-pass rate, over this invocation's lines.
#             Every non-pass is a candidate false block: read its report and the commit's diff.
#
# Environment: FIXGATE [target/release/fixgate, built when missing], BENCH_DATA
# [/work/bench-data/history], MIRRORS [/work/.mirror], PROJECT_LIST
# [benches/history_projects.txt], PROJECTS [all; names like "tinydb parse" or owner/name],
# COMMITS [25], SEEDS [2], JOBS [1], TIMEOUT [10m], PYTHON [python3, makes the venvs],
# PYTEST_REQ [pytest==8.4.2], KEEP_CACHE [unset].

set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${BENCH_DATA:-/work/bench-data/history}
MIRRORS=${MIRRORS:-/work/.mirror}
LIST=$(realpath "${PROJECT_LIST:-$REPO/benches/history_projects.txt}")
COMMITS=${COMMITS:-25}
SEEDS=${SEEDS:-2}
JOBS=${JOBS:-1}
TIMEOUT=${TIMEOUT:-10m}
PYTHON=${PYTHON:-python3}
PYTEST_REQ=${PYTEST_REQ:-pytest==8.4.2}
WANT=" ${PROJECTS:-} "
RESULTS=$DATA/results.tsv
mkdir -p "$DATA"
if [ -z "${FIXGATE:-}" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    FIXGATE=$REPO/target/release/fixgate
fi
FIXGATE=$(realpath "$FIXGATE")
[ -s "$RESULTS" ] || printf 'project\tsha\tsubject\texit\tverdict\tseconds\tblocking\treason\n' > "$RESULTS"
FIRST_LINE=$(( $(wc -l < "$RESULTS") + 1 ))

load() { cut -d' ' -f1-3 /proc/loadavg; }

# setup OWNER/NAME PIN REQS...: the checkout at the pin and its venv
setup() {
    local slug=$1 pin=$2
    shift 2
    local name=${slug#*/} dir=$DATA/${slug#*/}
    local mirror=$MIRRORS/${slug%%/*}+$name/repo
    if [ ! -d "$dir/repo/.git" ]; then
        rm -rf "$dir/repo"
        mkdir -p "$dir"
        if [ -d "$mirror" ]; then
            git clone -q --no-checkout "$mirror" "$dir/repo"
        else
            git clone -q --no-checkout "https://github.com/$slug" "$dir/repo"
        fi
    fi
    if ! git -C "$dir/repo" cat-file -e "$pin^{commit}" 2>/dev/null; then
        git -C "$dir/repo" fetch -q origin || true
    fi
    git -C "$dir/repo" checkout -q --detach "$pin"
    local reqs="$PYTEST_REQ $*"
    if [ ! -x "$dir/venv/bin/python" ] || [ "$(cat "$dir/venv/.bench-reqs" 2>/dev/null)" != "$reqs" ]; then
        rm -rf "$dir/venv"
        "$PYTHON" -m venv "$dir/venv"
        # shellcheck disable=SC2086
        "$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check $reqs < /dev/null
        echo "$reqs" > "$dir/venv/.bench-reqs"
    fi
}

# summary REPORT: verdict, blocking kinds and the first reason, tab separated
summary() {
    python3 - "$1" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception:
    print("error\x1f\x1f")
    sys.exit(0)
kinds = []
for f in r.get("findings") or []:
    if f.get("blocking") and f.get("kind") not in kinds:
        kinds.append(f.get("kind"))
reasons = r.get("reasons") or []
first = " ".join(str(reasons[0]).split())[:300] if reasons else ""
print("%s\x1f%s\x1f%s" % (r.get("verdict", "error"), ",".join(kinds), first))
PY
}

# run_project OWNER/NAME PIN REQS...
run_project() {
    local slug=$1 pin=$2
    local name=${slug#*/}
    local dir=$DATA/$name
    echo "== $slug at ${pin:0:12} (load: $(load))"
    setup "$@"
    [ -n "${KEEP_CACHE:-}" ] || rm -rf "$dir/cache"
    mkdir -p "$dir/reports" "$dir/cache"
    cd "$dir/repo"
    local commits
    commits=$(git log --no-merges --format='%H %P' "$pin" -- \
            ':(glob)**/test_*.py' ':(glob)**/*_test.py' ':(glob)**/tests/**' ':(glob)**/test/**' \
        | awk -v n="$COMMITS" 'NF >= 2 && k < n {print $1; k++}' | tac)
    local c short subject rc start end secs out verdict kinds reason line
    for c in $commits; do
        short=${c:0:12}
        subject=$(git log -1 --format=%s "$c" | tr '\t' ' ')
        out=$dir/reports/$c.json
        rm -f "$out"
        rc=0
        start=$EPOCHREALTIME
        "$FIXGATE" audit --base "$c^" --head "$c" --format json --output "$out" --quiet \
            --python "$dir/venv/bin/python" --cache-dir "$dir/cache" --seeds "$SEEDS" \
            --jobs "$JOBS" --timeout "$TIMEOUT" < /dev/null 2> "$dir/reports/$c.stderr" || rc=$?
        end=$EPOCHREALTIME
        secs=$(python3 -c "print('%.1f' % ($end - $start))")
        IFS=$'\x1f' read -r verdict kinds reason < <(summary "$out")
        if [ "$rc" = 2 ]; then
            [ -n "$reason" ] || reason=$(grep -v '^\s*$' "$dir/reports/$c.stderr" | head -3 | tr '\t\n' '  ' | cut -c1-300)
            if grep -qF 'collect(base) failed' "$dir/reports/$c.stderr" 2>/dev/null; then
                verdict=skipped
            fi
        fi
        line=$(printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s' "$name" "$short" "$subject" "$rc" \
            "$verdict" "$secs" "$kinds" "$reason")
        echo "$line" >> "$RESULTS"
        printf '   %s %-10s %6ss  %s  %s\n' "$short" "$verdict" "$secs" "${kinds:--}" "${subject:0:60}"
    done
    cd "$DATA"
}

while read -r slug pin reqs; do
    case $slug in ''|'#'*) continue ;; esac
    if [ "$WANT" != "  " ] && [[ $WANT != *" ${slug#*/} "* ]] && [[ $WANT != *" $slug "* ]]; then
        continue
    fi
    # shellcheck disable=SC2086
    run_project "$slug" "$pin" $reqs
done < <(grep -v '^\s*#' "$LIST")

echo "== totals (this invocation; all lines in $RESULTS)"
tail -n "+$FIRST_LINE" "$RESULTS" | awk -F'\t' '
    { n++ }
    $5 == "skipped" { skipped++; next }
    { judged++; if ($5 == "pass") pass++; else { bad++; by[$5]++ } }
    END {
        printf "commits %d, skipped %d, judged %d, passes %d, non-passes %d", n, skipped, judged, pass, bad
        for (v in by) printf " (%s %d)", v, by[v]
        printf "\n"
        if (judged) printf "non-pass rate: %.1f%% (%d/%d)\n", 100 * bad / judged, bad, judged
    }'
