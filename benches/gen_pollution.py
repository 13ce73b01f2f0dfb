#!/usr/bin/env python3
"""Generates a suite with order dependence for the stream benchmarks (benches/stream.sh): a git
repository with N tests in modules of 20, K source modules (each test module imports one), and
a polluter set that breaks V victims in other files through a shared module-level dict.

Usage: gen_pollution.py DIR [--tests 500] [--modules 10] [--polluters 2] [--victims 12]

--polluters 1: one test sets STATE["a"]; each victim asserts STATE is empty.
--polluters 2: two tests set STATE["a"] and STATE["b"]; each victim fails only when both are
set (the pair breaks it together, neither alone does).
The polluters live in tests/test_000_polluters.py (first in file order, so file order fails
and reversed order passes); victims are spread over later files. Deterministic.
--heads H adds H branches head-0 .. head-H-1 on top of the base, each changing one line of a
different source module (for the stream case).
"""
import argparse
import os
import subprocess

ENV = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@example.com",
           GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@example.com")


def git(root, *args):
    return subprocess.run(["git", "-C", root, *args], check=True, env=ENV,
                          capture_output=True, text=True).stdout.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--tests", type=int, default=500)
    ap.add_argument("--modules", type=int, default=10)
    ap.add_argument("--polluters", type=int, choices=[1, 2], default=2)
    ap.add_argument("--victims", type=int, default=12)
    ap.add_argument("--heads", type=int, default=0)
    a = ap.parse_args()
    root = os.path.abspath(a.dir)
    pkg = os.path.join(root, "src", "benchpkg")
    os.makedirs(pkg, exist_ok=True)
    os.makedirs(os.path.join(root, "tests"), exist_ok=True)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    with open(os.path.join(pkg, "shared.py"), "w") as f:
        f.write("STATE = {}\n")
    for k in range(a.modules):
        with open(os.path.join(pkg, "m%d.py" % k), "w") as f:
            f.write("OFFSET = %d\n\n\ndef add(x):\n    return x + OFFSET\n" % k)
    with open(os.path.join(root, "pyproject.toml"), "w") as f:
        f.write('[tool.pytest.ini_options]\npythonpath = ["src"]\n')
    with open(os.path.join(root, "README.md"), "w") as f:
        f.write("pollution benchmark suite\n")
    names = "ab"[: a.polluters]
    with open(os.path.join(root, "tests", "test_000_polluters.py"), "w") as f:
        f.write("from benchpkg import shared\n")
        for n in names:
            f.write("\n\ndef test_sets_%s():\n    shared.STATE[%r] = True\n" % (n, n))
    per_module = 20
    modules = (a.tests + per_module - 1) // per_module
    # Victims spread evenly over the suite.
    victims = {i * a.tests // max(1, a.victims) + 1 for i in range(a.victims)}
    for m in range(modules):
        k = m % a.modules
        lines = ["from benchpkg import shared, m%d" % k, ""]
        for t in range(per_module):
            n = m * per_module + t
            if n >= a.tests:
                break
            if n in victims:
                cond = " and ".join("shared.STATE.get(%r)" % c for c in names)
                lines += ["def test_%d():" % n, "    assert not (%s)" % cond, ""]
            else:
                lines += ["def test_%d():" % n, "    assert m%d.add(%d) == %d" % (k, n, n + k), ""]
        with open(os.path.join(root, "tests", "test_mod_%03d.py" % m), "w") as f:
            f.write("\n".join(lines))
    if not os.path.isdir(os.path.join(root, ".git")):
        subprocess.run(["git", "init", "-q", "-b", "main", root], check=True)
        git(root, "add", "-A")
        git(root, "commit", "-qm", "base")
        for h in range(a.heads):
            git(root, "checkout", "-q", "-b", "head-%d" % h, "main")
            with open(os.path.join(pkg, "m%d.py" % (h % a.modules)), "a") as f:
                f.write("# head %d\n" % h)
            git(root, "commit", "-qam", "head %d: one line in m%d" % (h, h % a.modules))
        git(root, "checkout", "-q", "main")


if __name__ == "__main__":
    main()
