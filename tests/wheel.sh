#!/usr/bin/env bash
# Builds fixgate's wheel with maturin (pyproject.toml), installs it into a fresh virtualenv and
# runs `fixgate --version` and `fixgate demo` from it: what `pip install fixgate` gives a user.
#
#   bash tests/wheel.sh            # prints the time of each step at the end
#
# Needs python3 with venv and the Rust toolchain; maturin comes from PyPI into a build venv.
# Slow (a release build of fixgate): run by hand, not by .ci/run. README says how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)

python3 -m venv "$work/build"
"$work/build/bin/python" -m pip install --quiet --disable-pip-version-check 'maturin>=1.5,<2'
t1=$(date +%s)

# The wheel, built from this checkout's sources (target/ is shared with cargo, so a warm
# release build is reused).
"$work/build/bin/maturin" build --release --out "$work/dist"
t2=$(date +%s)

python3 -m venv "$work/user"
"$work/user/bin/python" -m pip install --quiet --disable-pip-version-check "$work"/dist/fixgate-*.whl
t3=$(date +%s)

fixgate="$work/user/bin/fixgate"
test -x "$fixgate" || { echo "wheel.sh: the wheel did not install bin/fixgate" >&2; exit 1; }
"$fixgate" --version
# The demo audits its built-in example and exits 0 when the audit ran (its verdict is reject).
"$fixgate" demo --cache-dir "$work/cache" --quiet > "$work/demo.txt"
grep -q "^REJECT (exit 1)" "$work/demo.txt" || { cat "$work/demo.txt"; echo "wheel.sh: the demo did not reject" >&2; exit 1; }
t4=$(date +%s)

ls -l "$work"/dist/
echo "wheel.sh: ok: maturin install $((t1 - t0)) s, wheel build $((t2 - t1)) s, pip install $((t3 - t2)) s, demo $((t4 - t3)) s, total $((t4 - t0)) s"
