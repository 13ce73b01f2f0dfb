#!/usr/bin/env bash
# Runs a suite of hostile tests (a fork bomb, a memory grab, three disk fills) under
# `fixgate run` with the limits below, samples the host every 20 ms while it runs, and prints
# each test's outcome with the host's peaks: processes (all of the machine's, over the count
# before the run), memory in use (MemTotal - MemAvailable, over the count before; tmpfs pages
# included) and the largest sandbox. Exits 1 if a hog did not end as resource-limit or a
# process of the run outlived it.
#
#   bash benches/limits.sh [PYTHON]      (default: python3 with pytest)
#   MEMORY=1G PROCESSES=1000 DISK=512M bash benches/limits.sh
set -euo pipefail

PYTHON=${1:-python3}
MEMORY=${MEMORY:-1G}
PROCESSES=${PROCESSES:-1000}
DISK=${DISK:-512M}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# The hogs' own bounds, in bytes (numfmt reads 1G as 2^30).
MEMORY_BYTES=$(numfmt --from=iec "$MEMORY")
DISK_BYTES=$(numfmt --from=iec "$DISK")
if [ -z "${FIXGATE:-}" ]; then
    cargo build --quiet --release --manifest-path "$ROOT/Cargo.toml"
    FIXGATE="$ROOT/target/release/fixgate"
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
MARK="fixgate-limitbench-$$"
REPO="$WORK/repo"
mkdir -p "$REPO/tests"
cd "$REPO"
git init -q -b main
printf '[tool.fixgate.limits]\nmemory = "%s"\nprocesses = %s\ndisk = "%s"\n' \
    "$MEMORY" "$PROCESSES" "$DISK" > pyproject.toml
cat > tests/test_hogs.py <<EOF
# Each hog bounds itself (twice the limit it attacks, a 60 s deadline), so that a fixgate without the
# defence leaves the machine standing: the limits stop each well below its own bound.
import os, time

BOUND = 2


def test_fork_bomb():
    deadline = time.monotonic() + 60
    for n in range(BOUND * $PROCESSES):
        if time.monotonic() > deadline:
            break
        if os.fork() == 0:
            os.execv("/bin/sh", ["/bin/sh", "-c", "sleep 60", "$MARK"])
    assert False, "forked %d processes unbounded" % (n + 1)


def test_memory_grab():
    hoard = []
    while sum(map(len, hoard)) < BOUND * $MEMORY_BYTES:
        hoard.append(bytearray(64 << 20))
    assert False, "grabbed twice the limit unbounded"


def _fill(folder, one_file):
    chunk = b"x" * (1 << 20)
    deadline = time.monotonic() + 60
    written = n = 0
    while written < BOUND * $DISK_BYTES and time.monotonic() < deadline:
        with open(os.path.join(folder, "fill-%d" % n), "wb") as f:
            for _ in range(BOUND * $DISK_BYTES >> 20 if one_file else 16):
                f.write(chunk)
                written += len(chunk)
        n += 1
    assert False, "wrote twice the limit unbounded"


def test_disk_fill_one_file(tmp_path):
    _fill(str(tmp_path), True)


def test_disk_fill_many_files():
    _fill(".", False)


def test_shm_fill():
    _fill("/dev/shm", False)


def test_after_them_all():
    pass
EOF
git add -A
git -c user.name=l -c user.email=l@example.com commit -q -m hogs

SAMPLES="$WORK/samples"
MARK="$MARK" SAMPLES="$SAMPLES" "$PYTHON" - <<'EOF' &
import os, time
uid = os.getuid()
roots = ["/dev/shm/fixgate-sandboxes-%d" % uid, "/tmp/fixgate-sandboxes-%d" % uid]

def meminfo():
    m = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":")
        m[k] = int(v.split()[0]) * 1024
    return m["MemTotal"] - m["MemAvailable"]

def procs():
    return sum(1 for p in os.listdir("/proc") if p.isdigit())

def sandbox_peak():
    best = 0
    for r in roots:
        try:
            names = os.listdir(r)
        except OSError:
            continue
        for n in names:
            total = 0
            for d, _, files in os.walk(os.path.join(r, n)):
                for f in files:
                    try:
                        total += os.lstat(os.path.join(d, f)).st_blocks * 512
                    except OSError:
                        pass
            best = max(best, total)
    return best

p0, m0 = procs(), meminfo()
peak_p = peak_m = peak_s = 0
stop = os.environ["SAMPLES"] + ".stop"
while not os.path.exists(stop):
    peak_p = max(peak_p, procs() - p0)
    peak_m = max(peak_m, meminfo() - m0)
    peak_s = max(peak_s, sandbox_peak())
    time.sleep(0.02)
with open(os.environ["SAMPLES"], "w") as f:
    f.write("%d %d %d\n" % (peak_p, peak_m, peak_s))
EOF
SAMPLER=$!
START=$(date +%s.%N)
"$FIXGATE" run --format json --cache-dir "$WORK/cache" --python "$PYTHON" > "$WORK/run.json" || true
END=$(date +%s.%N)
touch "$SAMPLES.stop"
wait "$SAMPLER"
sleep 1
LEFT=$(MARK="$MARK" "$PYTHON" -c '
import os
mark = os.environ["MARK"].encode()
n = 0
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            n += mark in open("/proc/%s/cmdline" % p, "rb").read()
        except OSError:
            pass
print(n)')
read -r PEAK_P PEAK_M PEAK_S < "$SAMPLES"
echo "limits: memory $MEMORY, processes $PROCESSES, disk $DISK; load: $(cut -d' ' -f1-3 /proc/loadavg)"
RUN_JSON="$WORK/run.json" "$PYTHON" - <<'EOF'
import json, os
v = json.load(open(os.environ["RUN_JSON"]))
print("containment:", v["containment"])
for t in v["result"]["tests"]:
    print("  %-45s %-15s %s" % (t["nodeid"].split("::")[1], t["outcome"], (t.get("message") or "")[:70]))
EOF
awk -v p="$PEAK_P" -v m="$PEAK_M" -v s="$PEAK_S" -v a="$START" -v b="$END" -v l="$LEFT" 'BEGIN {
    printf "host peaks over the run: +%d processes, +%.2f GiB memory in use, largest sandbox %.2f GiB\n", p, m / 2^30, s / 2^30
    printf "run time %.1f s; processes of the run alive 1 s after it: %d\n", b - a, l
}'
RUN_JSON="$WORK/run.json" LEFT="$LEFT" "$PYTHON" - <<'EOF'
import json, os, sys
v = json.load(open(os.environ["RUN_JSON"]))
bad = [t["nodeid"] for t in v["result"]["tests"]
       if t["nodeid"].split("::")[1] != "test_after_them_all" and t["outcome"] != "resource-limit"]
sys.exit(1 if bad or os.environ["LEFT"] != "0" else 0)
EOF
