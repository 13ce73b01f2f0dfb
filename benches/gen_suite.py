#!/usr/bin/env python3
"""Generates the benchmark suite: a git repository with N pytest tests in modules of 20, and
G fixture groups of F files each under tests/fixtures/, some of which the tests read.

Usage: gen_suite.py DIR [--tests 2000] [--groups 5] [--files 50]
Deterministic: the same arguments write the same bytes.
"""
import argparse
import os
import subprocess


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--tests", type=int, default=2000)
    ap.add_argument("--groups", type=int, default=5)
    ap.add_argument("--files", type=int, default=50)
    a = ap.parse_args()
    root = os.path.abspath(a.dir)
    os.makedirs(os.path.join(root, "src", "benchpkg"), exist_ok=True)
    os.makedirs(os.path.join(root, "tests"), exist_ok=True)
    with open(os.path.join(root, "src", "benchpkg", "__init__.py"), "w") as f:
        f.write("def double(x):\n    return 2 * x\n")
    with open(os.path.join(root, "pyproject.toml"), "w") as f:
        f.write('[tool.pytest.ini_options]\npythonpath = ["src"]\n')
    with open(os.path.join(root, "README.md"), "w") as f:
        f.write("benchmark suite\n")
    for g in range(a.groups):
        d = os.path.join(root, "tests", "fixtures", "g%d" % g)
        os.makedirs(d, exist_ok=True)
        for i in range(a.files):
            with open(os.path.join(d, "f%03d.json" % i), "w") as f:
                f.write('{"group": %d, "file": %d, "pad": "%s"}\n' % (g, i, "x" * 1000))
    per_module = 20
    for m in range((a.tests + per_module - 1) // per_module):
        lines = ["import json", "from benchpkg import double", ""]
        for t in range(per_module):
            n = m * per_module + t
            if n >= a.tests:
                break
            if n % 10 == 0:
                g, i = n % a.groups, n % a.files
                lines += [
                    "def test_%d():" % n,
                    "    with open('tests/fixtures/g%d/f%03d.json') as f:" % (g, i),
                    "        assert json.load(f)['group'] == %d" % g,
                    "",
                ]
            else:
                lines += ["def test_%d():" % n, "    assert double(%d) == %d" % (n, 2 * n), ""]
        with open(os.path.join(root, "tests", "test_mod_%03d.py" % m), "w") as f:
            f.write("\n".join(lines))
    if not os.path.isdir(os.path.join(root, ".git")):
        env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@example.com",
                   GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@example.com")
        subprocess.run(["git", "init", "-q", "-b", "main", root], check=True)
        subprocess.run(["git", "-C", root, "add", "-A"], check=True)
        subprocess.run(["git", "-C", root, "commit", "-qm", "bench suite"], check=True, env=env)


if __name__ == "__main__":
    main()
