#!/usr/bin/env bash
# Issue 13's targets, on the 2,000-test bench suite (benches/gen_suite.py), medians over
# interleaved rounds, with a real nginx (Bazel HTTP cache) and a real BuildGrid 0.4.4 (REAPI) on
# loopback:
#
#   bash benches/remote.sh                 # RUNS=3
#
#   fresh    a cold 8-seed audit that uploads (machine A), against the same audit on a fresh
#            machine (an empty local cache) reading what A uploaded: target at most 5% of the
#            cold audit's time, and zero pytest processes. Over nginx, then BuildGrid.
#   warm     a warm local audit without a remote, against the same with the remote reachable
#            (target: at most 10% more) and with the remote down (a closed port; target: at
#            most 2 s more).
#
# Environment: BENCH_DATA [/work/bench-data/suite], RUNS [3], FIXGATE [target/release/fixgate,
# built when missing], BGD [target/buildgrid-venv/bin/bgd, installed when missing].

set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${BENCH_DATA:-/work/bench-data/suite}
RUNS=${RUNS:-3}
SUITE=$DATA/repo
OUT=$DATA/remote
mkdir -p "$OUT"
if [ -z "${FIXGATE:-}" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    FIXGATE=$REPO/target/release/fixgate
fi
PYTHON=${PYTHON:-$DATA/venv/bin/python}
[ -x "$PYTHON" ] || { python3 -m venv "$DATA/venv"; "$DATA/venv/bin/pip" install -q pytest; }
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || apt-get install -y -qq nginx
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
BGD=${BGD:-$REPO/target/buildgrid-venv/bin/bgd}
if [ ! -x "$BGD" ]; then
    python3 -m venv "$REPO/target/buildgrid-venv"
    "$REPO/target/buildgrid-venv/bin/pip" install -q 'buildgrid==0.4.4'
fi
if [ ! -d "$SUITE/.git" ]; then
    python3 "$REPO/benches/gen_suite.py" "$SUITE" --tests 2000 --groups 5 --files 50
    (cd "$SUITE" && echo "# patched" >> src/benchpkg/__init__.py && git -c user.name=b -c user.email=b@example.com commit -qam patch)
fi
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "no server on $1" >&2; return 1; }

start_nginx() { # DIR -> URL; PID in $SERVER
    local d=$1 p; p=$(port); mkdir -p "$d/data"
    cat > "$d/nginx.conf" <<CONF
daemon off; master_process off; pid $d/nginx.pid; error_log $d/error.log;
events { worker_connections 64; }
http { access_log off; client_body_temp_path $d/body; proxy_temp_path $d/proxy;
  fastcgi_temp_path $d/fastcgi; uwsgi_temp_path $d/uwsgi; scgi_temp_path $d/scgi;
  client_max_body_size 0;
  server { listen 127.0.0.1:$p; location / { root $d/data; dav_methods PUT DELETE;
    create_full_put_path on; dav_access user:rw group:r all:r; } } }
CONF
    "$NGINX" -p "$d" -e "$d/error.log" -c "$d/nginx.conf" & SERVER=$!
    wait_port "$p"; URL="http://127.0.0.1:$p/cache"
}
start_bgd() { # DIR -> URL; PID in $SERVER
    local d=$1 p; p=$(port); mkdir -p "$d"
    cat > "$d/bgd.yml" <<CONF
server:
  - !channel
    address: "127.0.0.1:$p"
    insecure-mode: true
authorization:
  method: none
storages:
  - !lru-storage &cas
    size: 2GB
caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 1000000
    allow-updates: true
    cache-failed-actions: true
instances:
  - name: ""
    services:
      - !action-cache
        cache: *ac
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
CONF
    "$BGD" server start "$d/bgd.yml" > "$d/bgd.log" 2>&1 & SERVER=$!
    wait_port "$p"; URL="grpc://127.0.0.1:$p"
}
audit() { # CACHE_DIR EXTRA... (a reject or pass is a judgment; only errors stop the bench)
    local cache=$1; shift
    set +e; "$FIXGATE" --repo "$SUITE" --python "$PYTHON" --cache-dir "$cache" audit --base HEAD~1 \
        --head HEAD --seeds 8 --jobs 2 --quiet --format json --output "$OUT/last.json" "$@"; local c=$?; set -e
    [ $c -le 1 ] || { echo "audit failed with exit $c" >&2; exit 1; }
}
# bash's own clock: a `python3 -c` here would put an interpreter's start-up (20-30 ms, more
# under load) inside every measured interval.
now() { echo "$EPOCHREALTIME"; }
# The 1-minute load average, printed with each result: on a shared machine a loaded round's
# cold audit takes several times its quiet time, which makes the ratios look better than they are.
load() { cut -d' ' -f1 /proc/loadavg; }
median() { python3 -c 'import statistics,sys; print("%.3f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }

for server in nginx buildgrid; do
    cold=(); fresh=(); procs=()
    for r in $(seq 1 "$RUNS"); do
        d=$(mktemp -d); "start_$( [ $server = nginx ] && echo nginx || echo bgd )" "$d"
        rm -rf "$OUT/a" "$OUT/b"
        t0=$(now); audit "$OUT/a" --remote-cache "$URL" --remote-upload; t1=$(now)
        audit "$OUT/b" --remote-cache "$URL"; t2=$(now)
        procs+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pytest_processes"])' "$OUT/last.json")")
        kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; rm -rf "$d"
        cold+=("$(python3 -c "print($t1-$t0)")"); fresh+=("$(python3 -c "print($t2-$t1)")")
    done
    c=$(median "${cold[@]}"); f=$(median "${fresh[@]}")
    echo "fresh machine over $server: cold $c s, fresh $f s = $(python3 -c "print('%.1f%%' % (100*$f/$c))") of cold (target <= 5%), pytest processes on the fresh machine: ${procs[*]} (target 0), load $(load)" | tee -a "$OUT/summary.txt"
done

# Warm: the local cache full, the remote reachable (nginx holding everything) or down.
d=$(mktemp -d); start_nginx "$d"
rm -rf "$OUT/w"; audit "$OUT/w" --remote-cache "$URL" --remote-upload
dead="http://127.0.0.1:$(port)/cache"
plain=(); up=(); down=()
for r in $(seq 1 $((RUNS * 3))); do
    t0=$(now); audit "$OUT/w"; t1=$(now)
    audit "$OUT/w" --remote-cache "$URL"; t2=$(now)
    audit "$OUT/w" --remote-cache "$dead"; t3=$(now)
    plain+=("$(python3 -c "print($t1-$t0)")"); up+=("$(python3 -c "print($t2-$t1)")"); down+=("$(python3 -c "print($t3-$t2)")")
done
kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; rm -rf "$d"
p=$(median "${plain[@]}"); u=$(median "${up[@]}"); w=$(median "${down[@]}")
echo "warm audit: local only $p s, remote reachable $u s ($(python3 -c "print('%+.1f%%' % (100*($u-$p)/$p))"), target <= +10%), remote down $w s ($(python3 -c "print('%+.2f s' % ($w-$p))"), target <= +2 s), load $(load)" | tee -a "$OUT/summary.txt"
