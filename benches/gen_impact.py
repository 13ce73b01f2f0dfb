#!/usr/bin/env python3
"""Generates the impact benchmark suite (benches/impact.sh): a git repository with M source
modules and T tests each (tests of module k import only module k), and a shared registry: one
test of the first file sets a value in it that two tests in other files read (they pass either
way). Two branches on top of the base:

  rewrite    module 7 rewritten equivalently (the same sums, another spelling)
  registry   module 7 reads the registry value: its tests fail after the unchanged setter

Usage: gen_impact.py DIR [--modules 40] [--tests 50]
Deterministic: the same arguments write the same bytes.
"""
import argparse
import os
import subprocess

ENV = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@example.com",
           GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@example.com")


def git(root, *args):
    subprocess.run(["git", "-C", root, *args], check=True, env=ENV, capture_output=True)


def module(k, body):
    return "OFFSET = %d\n\n\ndef add(x):\n%s\n" % (k, body)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--modules", type=int, default=40)
    ap.add_argument("--tests", type=int, default=50)
    a = ap.parse_args()
    root = os.path.abspath(a.dir)
    pkg = os.path.join(root, "src", "benchpkg")
    os.makedirs(pkg, exist_ok=True)
    os.makedirs(os.path.join(root, "tests"), exist_ok=True)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    with open(os.path.join(pkg, "registry.py"), "w") as f:
        f.write("VALUES = {}\n")
    with open(os.path.join(root, "pyproject.toml"), "w") as f:
        f.write('[tool.pytest.ini_options]\npythonpath = ["src"]\n')
    for k in range(a.modules):
        with open(os.path.join(pkg, "m%03d.py" % k), "w") as f:
            f.write(module(k, "    return x + OFFSET"))
        lines = ["from benchpkg import m%03d" % k, ""]
        if k == 0:
            lines[0:0] = ["from benchpkg import registry"]
            lines += ["", "def test_setter():", "    registry.VALUES['offset'] = 1", ""]
        if k in (a.modules // 2, a.modules - 1):
            lines[0:0] = ["from benchpkg import registry"]
            lines += ["", "def test_reader():",
                      "    assert registry.VALUES.get('offset', 1) == 1", ""]
        for t in range(a.tests):
            lines += ["", "def test_%d():" % t, "    assert m%03d.add(%d) == %d" % (k, t, t + k), ""]
        with open(os.path.join(root, "tests", "test_m%03d.py" % k), "w") as f:
            f.write("\n".join(lines))
    if os.path.isdir(os.path.join(root, ".git")):
        return
    subprocess.run(["git", "init", "-q", "-b", "main", root], check=True)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    target = os.path.join(pkg, "m007.py")
    for branch, body in [
        ("rewrite", "    # the same sum, spelled the other way round\n    return OFFSET + x"),
        ("registry", "    from benchpkg import registry\n\n"
                     "    return x + OFFSET + registry.VALUES.get('offset', 0)"),
    ]:
        git(root, "checkout", "-q", "-b", branch, "main")
        with open(target, "w") as f:
            f.write(module(7, body))
        git(root, "commit", "-qam", branch)
    git(root, "checkout", "-q", "main")


if __name__ == "__main__":
    main()
