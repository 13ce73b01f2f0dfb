#!/usr/bin/env bash
# Issue 22's targets: remote execution on a real BuildGrid 0.4.4 (execution service, PostgreSQL
# scheduler) with `fixgate worker` bots, all on loopback. Medians over RUNS interleaved rounds,
# each result printed with the load.
#
#   bash benches/remote_exec.sh            # RUNS=3
#
#   action   a one-test suite audited with --no-cache --jobs 1, remote against local with fresh
#            interpreters (FIXGATE_FORK=0, what a remote run is) and local with the fork server:
#            (remote - local) / runs is the overhead of one remote action (target: 0.2 s).
#   warm     the 2,000-test suite: a cold remote audit uploading node results to the service's
#            ActionCache, then a warm remote audit from an empty local cache (everything in the
#            service) against a warm local audit (target: within 2x).
#   same     the 500-test polluter suite (a two-test set breaking 12 victims) audited locally
#            and remotely with cold caches: the same verdict, buckets and pairs.
#   fleet    the matrix (--seeds 2: four orders of 2,000 tests) with 1 worker and with 2, each
#            pinned to one core (taskset), and the per-action cost that a pool of 32 workers
#            would run at.
#
# Environment: BENCH_DATA [/work/bench-data/suite], RUNS [3], PARTS ["action warm same fleet"],
# FIXGATE [target/release/fixgate, built when missing], BGD_VENV [target/buildgrid-venv],
# PG_BIN [/usr/lib/postgresql/*/bin].

set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${BENCH_DATA:-/work/bench-data/suite}
RUNS=${RUNS:-3}
PARTS=${PARTS:-action warm same fleet}
part() { [[ " $PARTS " == *" $1 "* ]]; }
SUITE=$DATA/repo
OUT=$DATA/remote-exec
mkdir -p "$OUT"
chmod 755 "$OUT"
if [ -z "${FIXGATE:-}" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    FIXGATE=$REPO/target/release/fixgate
fi
PYTHON=${PYTHON:-python3}
VENV=${BGD_VENV:-$REPO/target/buildgrid-venv}
"$VENV/bin/python" -c 'import psycopg2' 2>/dev/null \
    || "$VENV/bin/python" -m pip install -q 'buildgrid[database]==0.4.4'
PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
if { part warm || part fleet; } && [ ! -d "$SUITE/.git" ]; then
    python3 "$REPO/benches/gen_suite.py" "$SUITE" --tests 2000 --groups 5 --files 50
    (cd "$SUITE" && echo "# patched" >> src/benchpkg/__init__.py \
        && git -c user.name=b -c user.email=b@example.com commit -qam patch)
fi
ONE=$OUT/one
if [ ! -d "$ONE/.git" ]; then
    mkdir -p "$ONE/tests"
    printf 'def test_one():\n    assert 1 + 1 == 2\n' > "$ONE/tests/test_one.py"
    (cd "$ONE" && git init -q -b main && git add -A \
        && git -c user.name=b -c user.email=b@example.com commit -qm base \
        && echo '# patched' >> tests/test_one.py \
        && git -c user.name=b -c user.email=b@example.com commit -qam head)
fi

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }
as_pg() { if [ "$(id -u)" = 0 ]; then setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; else "$@"; fi; }

# PostgreSQL and BuildGrid, started once.
rm -rf "$OUT/pg" && mkdir -p "$OUT/pg"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$OUT/pg"
as_pg "$PG_BIN/initdb" -D "$OUT/pg" -A trust -U fixgate --no-sync -E UTF8 >"$OUT/initdb.log"
PG_PORT=$(free_port)
as_pg "$PG_BIN/postgres" -D "$OUT/pg" -p "$PG_PORT" -c listen_addresses=127.0.0.1 \
    -c unix_socket_directories= -c fsync=off -c synchronous_commit=off -c max_connections=200 \
    >"$OUT/pg.log" 2>&1 &
PIDS+=($!)
wait_port "$PG_PORT"
SQL="postgresql+psycopg2://fixgate@127.0.0.1:$PG_PORT/postgres"
"$VENV/bin/python" "$VENV/bin/bgd" migrate apply "$SQL" >/dev/null
BG_PORT=$(free_port)
cat >"$OUT/bgd.yml" <<EOF
server:
  - !channel
    address: "127.0.0.1:$BG_PORT"
    insecure-mode: true
authorization:
  method: none
connections:
  - !sql-connection &sql
    connection-string: $SQL
    pool-size: 20
    max-overflow: 20
storages:
  - !lru-storage &cas
    size: 2GB
caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 1000000
    allow-updates: true
    cache-failed-actions: true
schedulers:
  - !sql-scheduler &sched
    sql: *sql
    storage: *cas
    action-cache: *ac
    property-set: !dynamic-property-set
      wildcard-property-keys: [fixgate-interpreter, fixgate-network]
    bot-session-keepalive-timeout: 30
    poll-interval: 0.05
    bot-poll-interval: 0.05
instances:
  - name: ""
    services:
      - !action-cache
        cache: *ac
      - !execution
        scheduler: *sched
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
EOF
"$VENV/bin/python" "$VENV/bin/bgd" server start "$OUT/bgd.yml" >"$OUT/bgd.log" 2>&1 &
PIDS+=($!)
wait_port "$BG_PORT"
URL=grpc://127.0.0.1:$BG_PORT

WORKERS=()
start_workers() { # N: N workers, worker k pinned to core k mod cores
    stop_workers
    local cores; cores=$(nproc)
    for k in $(seq 0 $(($1 - 1))); do
        taskset -c $((k % cores)) "$FIXGATE" worker --server "$URL" --bot-id "bench-$k" \
            --work-dir "$OUT/work-$k" 2>"$OUT/worker-$k.log" &
        WORKERS+=($!)
    done
    sleep 2
}
stop_workers() { for p in "${WORKERS[@]}"; do kill "$p" 2>/dev/null || true; done; WORKERS=(); sleep 1; }

now() { date +%s.%N; }
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
audit_time() { # DIR CACHE ARGS...: wall seconds of one audit (any verdict)
    local dir=$1 cache=$2; shift 2
    local t0; t0=$(now)
    (cd "$dir" && "$FIXGATE" --quiet --python "$PYTHON" --cache-dir "$cache" --format json \
        audit --base HEAD~1 --head HEAD "$@" >"$OUT/last.json" 2>"$OUT/last.err") || true
    echo "$(now) - $t0" | bc
}
# The remote actions of the last audit (a remote one): the runs both sides made.
runs_of() { python3 -c 'import json; r=json.load(open("'"$OUT"'/last.json")); print(r["graph"]["remote_executed"])'; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
# Where the last (remote) audit's actions spent their time, per executed action.
stages_of() { python3 -c '
import json
r = json.load(open("'"$OUT"'/last.json"))["remote_execution"]
s, n = r["stages"], max(1, r["actions"] - r["cached_actions"])
service = s["execute_seconds"] - s["worker_total_seconds"]
print("per action: upload %.3f s, service (queue, scheduling, hand-back) %.3f s, worker %.3f s "
      "(input fetch %.3f, execution %.3f, output upload %.3f), read-back %.3f s" % (
      s["upload_seconds"] / n, service / n, s["worker_total_seconds"] / n,
      s["worker_input_fetch_seconds"] / n, s["worker_execution_seconds"] / n,
      s["worker_output_upload_seconds"] / n, s["read_back_seconds"] / n))'; }

if part action; then
echo "== action: one-test suite, --no-cache --jobs 1 (load $(load))"
start_workers 1
: >"$OUT/action.txt"
for r in $(seq "$RUNS"); do
    rm -rf "$OUT/c-"*
    lf=$(FIXGATE_FORK=0 audit_time "$ONE" "$OUT/c-lf" --no-cache --jobs 1)
    lw=$(audit_time "$ONE" "$OUT/c-lw" --no-cache --jobs 1)
    rm_=$(audit_time "$ONE" "$OUT/c-r" --no-cache --jobs 1 --remote-executor "$URL")
    n=$(runs_of)
    echo "$lf $lw $rm_ $n" >>"$OUT/action.txt"
    echo "  round $r: local fresh ${lf}s, local forked ${lw}s, remote ${rm_}s, $n runs (load $(load))"
    echo "    $(stages_of)"
done
awk '{ print ($3 - $1) / $4 }' "$OUT/action.txt" | median | xargs printf "  median overhead per remote action vs a fresh local run: %.3f s\n"
awk '{ print ($3 - $2) / $4 }' "$OUT/action.txt" | median | xargs printf "  median overhead per remote action vs a forked local run: %.3f s\n"
fi

if part warm; then
echo "== warm: 2,000-test suite, 8 seeds (load $(load))"
start_workers 2
rm -rf "$OUT/c-cold" "$OUT/c-local"
audit_time "$SUITE" "$OUT/c-cold" --remote-executor "$URL" --remote-cache "$URL" --remote-upload >/dev/null
audit_time "$SUITE" "$OUT/c-local" >/dev/null
: >"$OUT/warm.txt"
for r in $(seq "$RUNS"); do
    rm -rf "$OUT/c-fresh"
    wl=$(audit_time "$SUITE" "$OUT/c-local")
    wr=$(audit_time "$SUITE" "$OUT/c-fresh" --remote-executor "$URL")
    echo "$wl $wr" >>"$OUT/warm.txt"
    echo "  round $r: warm local ${wl}s, warm remote (empty local cache) ${wr}s (load $(load))"
done
awk '{ print $1 }' "$OUT/warm.txt" | median | xargs printf "  median warm local %.2f s\n"
awk '{ print $2 }' "$OUT/warm.txt" | median | xargs printf "  median warm remote %.2f s\n"
awk '{ print $2 / $1 }' "$OUT/warm.txt" | median | xargs printf "  median ratio %.2fx (target 2x)\n"
fi

if part same; then
echo "== same: the 500-test polluter suite, local and remote, cold caches (load $(load))"
POL=$OUT/pollution
if [ ! -d "$POL/.git" ]; then
    python3 "$REPO/benches/gen_pollution.py" "$POL" --tests 500 --modules 10 --polluters 2 \
        --victims 12 --heads 1 >/dev/null
    (cd "$POL" && git checkout -q head-0)
fi
start_workers 2
rm -rf "$OUT/c-same-l" "$OUT/c-same-r"
tl=$(audit_time "$POL" "$OUT/c-same-l") && cp "$OUT/last.json" "$OUT/same-local.json"
tr=$(audit_time "$POL" "$OUT/c-same-r" --remote-executor "$URL") && cp "$OUT/last.json" "$OUT/same-remote.json"
python3 - "$OUT/same-local.json" "$OUT/same-remote.json" "$tl" "$tr" <<'PY'
import json, sys
def essence(path):
    r = json.load(open(path))
    return (r["verdict"], sorted((t["nodeid"], t["bucket"]) for t in r["tests"]),
            sorted("%s <- %s" % (p["victim"], p["culprits"]) for p in r["pairs"]), r)
lv, lb, lp, l = essence(sys.argv[1])
rv, rb, rp, r = essence(sys.argv[2])
print("  local %.1f s: %s, %d pairs; remote %.1f s: %s, %d pairs, %d remote runs, %d local pytest processes"
      % (float(sys.argv[3]), lv, len(lp), float(sys.argv[4]), rv, len(rp),
         r["graph"]["remote_executed"], r["pytest_processes"]))
same = (lv, lb, lp) == (rv, rb, rp)
print("  same verdict, buckets and pairs: %s" % ("yes" if same else "NO"))
sys.exit(0 if same else 1)
PY
fi

if part fleet; then
echo "== fleet: the matrix of 4 orders x 2,000 tests, --no-cache, workers pinned to one core each"
: >"$OUT/fleet.txt"
for r in $(seq "$RUNS"); do
    for w in 1 2; do
        start_workers "$w"
        t=$(audit_time "$SUITE" "$OUT/c-fleet" --no-cache --seeds 2 --remote-executor "$URL")
        n=$(runs_of)
        echo "$w $t $n" >>"$OUT/fleet.txt"
        echo "  round $r: $w worker(s) ${t}s for $n runs (load $(load))"
    done
done
for w in 1 2; do
    awk -v w="$w" '$1 == w { print $2 }' "$OUT/fleet.txt" | median | xargs printf "  median with $w worker(s): %.2f s\n"
done
# A pool of 32: every order of the matrix on its own worker at once, so the matrix costs one
# run's time: (the 1-worker time - the fixed part) / runs, the fixed part being what 2 workers
# do not halve (2 * t2 - t1).
t1=$(awk '$1 == 1 { print $2 }' "$OUT/fleet.txt" | median)
t2=$(awk '$1 == 2 { print $2 }' "$OUT/fleet.txt" | median)
n=$(awk '$1 == 1 { print $3 }' "$OUT/fleet.txt" | median)
python3 - "$t1" "$t2" "$n" <<'EOF'
import sys
t1, t2, n = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
fixed = max(0.0, 2 * t2 - t1)
per_run = (t1 - fixed) / n
print("  fixed part %.2f s, one run of 2,000 tests %.2f s on one core" % (fixed, per_run))
for orders in (4, 10):
    print("  32 workers, %d orders: about %.2f s (each order on its own worker; the matrix is "
          "one run long)" % (orders, fixed + per_run))
EOF
fi

stop_workers
