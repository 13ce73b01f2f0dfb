#!/usr/bin/env bash
# SIGKILLs `fixgate audit` at random points (0.2 s to 5 s) on a suite whose tests fork and
# sleep, and counts, after each kill: processes of the run still alive after 1 s, whether the
# user's tree is byte-identical, and whether the next audit (on the cache the killed one left)
# gives the verdict of a clean-cache audit. Prints the counts; exits 1 if any kill failed.
#
#   bash benches/kill.sh [KILLS] [PYTHON]      (default: 20 kills, python3)
set -euo pipefail

KILLS=${1:-20}
PYTHON=${2:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cargo build --quiet --release --manifest-path "$ROOT/Cargo.toml"
BIN="$ROOT/target/release/fixgate"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
MARK="fixgate-killbench-$$"
REPO="$WORK/repo"
mkdir -p "$REPO/tests" "$REPO/tests/fixtures/db"
cd "$REPO"
git init -q -b main
echo '{"rows": 1}' > tests/fixtures/db/rows.json
for i in 1 2 3 4 5 6; do
  cat > "tests/test_fork_$i.py" <<EOF
import os, subprocess, time

def _sleeper():
    os.execv("/bin/sh", ["/bin/sh", "-c", "sleep 60; true", "$MARK"])

def test_fork_$i():
    if os.fork() == 0:
        _sleeper()
    time.sleep(0.3)

def test_daemon_$i():
    subprocess.Popen(["setsid", "sh", "-c", "sleep 60; true", "$MARK"], start_new_session=True)
    time.sleep(0.2)
EOF
done
git add -A
git -c user.name=k -c user.email=k@example.com commit -q -m base
echo "# worktree change" >> tests/test_fork_1.py

tree_digest() {
  (cd "$REPO" && find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
}
# PIDs of processes whose command line holds the marker (given through the environment, so
# that the scanner does not find itself).
survivor_pids() {
  MARK="$MARK" "$PYTHON" -c '
import os
mark = os.environ["MARK"].encode()
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            if mark in open("/proc/%s/cmdline" % p, "rb").read():
                print(p)
        except OSError:
            pass
'
}
verdict() {
  "$BIN" --repo "$REPO" --cache-dir "$1" --python "$PYTHON" --quiet audit --base HEAD \
    --seeds 2 --format json 2>/dev/null | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["verdict"])'
}

CLEAN=$(verdict "$WORK/clean-cache")
BEFORE=$(tree_digest)
alive_total=0 kills_with_survivors=0 tree_changed=0 verdict_differs=0 mid_run=0
for k in $(seq 1 "$KILLS"); do
  # A cache of its own per kill: the killed audit starts cold (so that the kill lands in
  # running tests, not after a cached audit), and the next audit continues from what it left.
  CACHE="$WORK/cache-$k"
  delay=$(awk -v r="$RANDOM" 'BEGIN { printf "%.2f", 0.2 + 4.8 * r / 32767 }')
  "$BIN" --repo "$REPO" --cache-dir "$CACHE" --python "$PYTHON" --quiet audit --base HEAD \
    --seeds 2 --format json >/dev/null 2>&1 &
  pid=$!
  sleep "$delay"
  running=$(survivor_pids | grep -c . || true)
  kill -KILL "$pid" 2>/dev/null || true
  [ "$running" -gt 0 ] && mid_run=$((mid_run + 1))
  wait "$pid" 2>/dev/null || true
  sleep 1
  pids=$(survivor_pids)
  alive=$(echo "$pids" | grep -c . || true)
  alive_total=$((alive_total + alive))
  [ "$alive" -gt 0 ] && kills_with_survivors=$((kills_with_survivors + 1))
  # Kill whatever survived, by PID, so that one failure is not counted again.
  for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
  [ "$(tree_digest)" != "$BEFORE" ] && tree_changed=$((tree_changed + 1))
  next=$(verdict "$CACHE")
  [ "$next" != "$CLEAN" ] && verdict_differs=$((verdict_differs + 1))
  printf 'kill %2d after %ss (%d test processes running): %d alive after 1 s, next verdict %s\n' \
    "$k" "$delay" "$running" "$alive" "$next"
  rm -rf "$CACHE"
done

echo "kills: $KILLS, $mid_run of them while tests were running (clean-cache verdict: $CLEAN)"
echo "processes of the run alive 1 s after a kill: $alive_total (kills with survivors: $kills_with_survivors)"
echo "kills after which the user's tree differed: $tree_changed"
echo "kills after which the next audit's verdict differed from a clean-cache audit's: $verdict_differs"
[ "$kills_with_survivors" -eq 0 ] && [ "$tree_changed" -eq 0 ] && [ "$verdict_differs" -eq 0 ]
