#!/usr/bin/env bash
# fixgate in a real container with the engine's default seccomp profile (issue 49): `fixgate
# demo`, then the attack repository (a test whose shell subprocess writes the host's /root and
# /tmp, the checkout found through /proc/*/cwd, and forges and deletes the cache). Run by hand,
# as root, where Podman (or Docker) runs; it prints which tier contained the runs and whether
# each attack left a trace. Not part of .ci/run: it needs a container engine and a root file
# system for the container (made here with debootstrap from Debian's archive when missing).
#
#   bash benches/containers.sh                 # the engine's default profile
#   PROFILE=docker bash benches/containers.sh  # a profile that refuses what Docker's refuses
#
# Environment: FIXGATE (the binary, default target/release/fixgate, built when missing),
# ROOTFS (default /var/tmp/fixgate-rootfs).
set -euo pipefail
cd "$(dirname "$0")/.."

ENGINE=podman
ROOTFS=${ROOTFS:-/var/tmp/fixgate-rootfs}
FIXGATE=${FIXGATE:-target/release/fixgate}
PROFILE=${PROFILE:-default}

command -v "$ENGINE" >/dev/null || {
    echo "containers.sh: podman is not installed (apt-get install podman runc)" >&2
    exit 2
}
[ -x "$FIXGATE" ] || cargo build --release
FIXGATE=$(realpath "$FIXGATE")

# A Debian root file system with Python, git and pytest in /opt/py.
if [ ! -x "$ROOTFS/opt/py/bin/python" ]; then
    command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap
    [ -d "$ROOTFS/usr" ] || debootstrap --variant=minbase --include=python3,python3-venv,git,ca-certificates \
        bookworm "$ROOTFS" http://deb.debian.org/debian
    # The host's name resolution and certificates (a proxy's CA included) for pip.
    cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
    cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
    chroot "$ROOTFS" /bin/sh -c 'python3 -m venv /opt/py && /opt/py/bin/pip install -q \
        --cert /etc/ssl/certs/ca-certificates.crt "pytest>=7.4"'
fi

security=()
if [ "$PROFILE" = docker ]; then
    # The engine's own profile, with what Docker's refuses to a container without
    # CAP_SYS_ADMIN refused too: unshare, setns, mount, and clone with namespace flags.
    profile=$(mktemp --suffix=.json)
    trap 'rm -f "$profile"' EXIT
    python3 - "$profile" <<'EOF'
import json, sys
p = json.load(open("/usr/share/containers/seccomp.json"))
refused = {"unshare", "setns", "mount", "umount2", "pivot_root", "clone3"}
for rule in p["syscalls"]:
    names = [n for n in rule["names"] if n not in refused | {"clone"}]
    rule["names"] = names
p["syscalls"] = [r for r in p["syscalls"] if r["names"]]
ns = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
p["syscalls"].append({"names": ["clone"], "action": "SCMP_ACT_ALLOW",
                      "args": [{"index": 0, "value": ns, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]})
p["syscalls"].append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38})
json.dump(p, open(sys.argv[1], "w"))
EOF
    security=(--security-opt "seccomp=$profile")
fi

# crun refuses a hybrid cgroup v1/v2 host; runc runs there. Limits the engine would raise
# need CAP_SYS_RESOURCE, which a root inside a VM may lack: lower ones are asked for instead.
engine_opts=(--ulimit nofile=1024:1024 --ulimit nproc=4096:4096)
if command -v runc >/dev/null; then
    engine_opts+=(--runtime "$(command -v runc)")
fi

run() {
    # Podman's --rootfs is a switch: the first argument after the options is the root file
    # system, the rest the command.
    "$ENGINE" run --rm "${engine_opts[@]}" "${security[@]}" \
        -v "$FIXGATE:/usr/local/bin/fixgate:ro" -e PATH=/opt/py/bin:/usr/local/bin:/usr/bin:/bin \
        -e HOME=/root -w /root --rootfs "$ROOTFS" "$@"
}

echo "== $ENGINE, profile: $PROFILE"
echo "-- fixgate demo"
run /bin/sh -c 'fixgate demo > /tmp/demo.txt 2>&1; echo "exit $?"; grep -E "^(PASS|REJECT|UNVERIFIED|ERROR)|contained by|warning|error" /tmp/demo.txt' || true

echo "-- the attack repository"
run /bin/sh -c '
set -e
# --rootfs runs in the folder itself: what an earlier run left goes first.
rm -rf /root/repo /root/.cache/fixgate /root/planted /tmp/planted
git config --global user.email t@example.com; git config --global user.name t
git config --global safe.directory "*"
mkdir -p /root/repo/tests && cd /root/repo && git init -q -b main
printf "def test_total():\n    assert sum([1, 2]) == 3\n" > tests/test_price.py
git add -A && git commit -qm base
cat > tests/test_host.py <<EOF
import glob, subprocess

def sh(command):
    subprocess.run(["sh", "-c", command], capture_output=True)

def test_attack():
    sh("echo x > /root/planted")
    sh("echo x > /tmp/planted")
    for cwd in glob.glob("/proc/*/cwd"):
        sh("echo x > " + cwd + "/INJECTED")
    sh("ls -R /root/.cache/fixgate > listing.txt; rm -rf /root/.cache/fixgate/store; echo forged > /root/.cache/fixgate/FORGED")
EOF
git add -A && git commit -qm attack
fixgate audit --base HEAD~1 --head HEAD --seeds 1 --format json > report.json 2> stderr.txt || true
python3 -c "import json; v = json.load(open(\"report.json\")); print(\"verdict\", v[\"verdict\"], \"containment\", v[\"containment\"], json.dumps(v[\"containment_detail\"]))"
grep warning stderr.txt || true
for f in /root/planted /tmp/planted /root/repo/INJECTED /root/.cache/fixgate/FORGED; do
    if [ -e "$f" ]; then echo "ATTACK LEFT $f"; else echo "blocked: $f"; fi
done
if [ -d /root/.cache/fixgate/store ]; then echo "blocked: the store is intact"; else echo "ATTACK DELETED the store"; fi
'
