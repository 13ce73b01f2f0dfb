#!/usr/bin/env python3
"""Runs commands in turn, round after round, and reports each one's median wall time.

    python3 benches/interleave.py --runs 15 --json out.json NAME=COMMAND NAME=COMMAND ...

On a shared machine the load drifts over minutes; hyperfine measures one command's runs, then
the next command's, so a drift lands on one side of a ratio. Interleaving puts both sides of
every round under the same load. The first round is a warmup and is not counted. The JSON has
hyperfine's shape (results[].command and .times) so the summary reads either.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--runs", type=int, default=10)
parser.add_argument("--json", required=True)
parser.add_argument("commands", nargs="+", metavar="NAME=COMMAND")
args = parser.parse_args()
named = [c.split("=", 1) for c in args.commands]
times = {name: [] for name, _ in named}
for round_ in range(args.runs + 1):
    for name, command in named:
        start = time.perf_counter()
        done = subprocess.run(command, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit("%s failed (exit %d): %s" % (name, done.returncode, done.stderr.decode()[-2000:]))
        if round_ > 0:
            times[name].append(elapsed)
for name, _ in named:
    t = times[name]
    print("%-20s median %.3f s  min %.3f s  max %.3f s  (%d runs)" % (name, statistics.median(t), min(t), max(t), len(t)))
# The first command against each other one, round by round: a round's two runs share its load,
# so the median of the per-round ratios moves less with the load than the ratio of medians.
first = named[0][0]
for name, _ in named[1:]:
    ratios = [a / b for a, b in zip(times[first], times[name])]
    print("%s / %s: median of per-round ratios %.3fx (min %.3fx, max %.3fx)" % (first, name, statistics.median(ratios), min(ratios), max(ratios)))
with open(args.json, "w") as f:
    json.dump({"results": [{"command": n, "times": times[n]} for n, _ in named]}, f, indent=1)
