"""fixgate's launcher for a run executed remotely (one REAPI action): what fixgate's driver does
around pytest on the local machine, done on the worker, with the standard library only.

It runs pytest in `tree/` with the plugin, one process after another: a test that kills the
interpreter, or runs longer than --test-timeout (the process group is killed), ends its
process, and the rest of the order continues in a new process in the same tree, as a local run
does. Every process leaves its event stream and its output in `out/`; `out/run.json` lists them
with their exit statuses, and fixgate reads them back through the same code that follows a
local run. The environment's paths (HOME, TMPDIR, PYTHONPATH, ...) are relative to the input
root, which is only known here: they are made absolute before pytest starts.

Usage: launch.py --test-timeout SECS [--order FILE] --watch FILE -- PYTEST_ARGS...
"""

import json
import os
import signal
import subprocess
import sys
import time

# Variables whose values are paths relative to the input root.
_PATH_VARS = ("HOME", "TMPDIR", "TEMP", "TMP", "FIXGATE_PYC_CACHE")
_POLL = 0.01


def _absolute_env(root):
    env = dict(os.environ)
    for name in _PATH_VARS:
        if name in env and not os.path.isabs(env[name]):
            env[name] = os.path.join(root, env[name])
    if "PYTHONPATH" in env:
        env["PYTHONPATH"] = os.pathsep.join(
            p if os.path.isabs(p) else os.path.join(root, p) for p in env["PYTHONPATH"].split(os.pathsep)
        )
    for name in ("HOME", "TMPDIR", "FIXGATE_PYC_CACHE"):
        if name in env:
            os.makedirs(env[name], exist_ok=True)
    return env


class _Announced(object):
    """The order a process runs its tests in, to tell which test follows a finished one (as the
    driver's `Announced`: a test listed twice follows from its last place)."""

    def __init__(self, ids):
        self.ids = list(ids)
        self.position = {}
        for i, nodeid in enumerate(self.ids):
            self.position[nodeid] = i

    def after(self, nodeid):
        i = self.position.get(nodeid)
        if i is None or i + 1 >= len(self.ids):
            return None
        return self.ids[i + 1]


def _follow(proc, events, order, timeout):
    """Waits for `proc`, killing its group when a test runs longer than `timeout`. Returns the
    exit status, whether it was killed, the results' node ids, the test running at its end, the
    collected order (when it announced one) and the ids of its order it said it did not collect
    (--fixgate-order-lenient)."""
    announced = _Announced(order) if order is not None else None
    current = None  # (nodeid, started)
    reported = []
    uncollected = []
    collected = None
    timed_out = False
    partial = ""
    with open(events, "r", encoding="utf-8", errors="replace") as stream:
        while True:
            status = proc.poll()
            chunk = stream.read()
            lines = (partial + chunk).split("\n")
            partial = lines.pop()
            for line in lines:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                kind = event.get("event")
                now = time.monotonic()
                if kind == "test_start":
                    current = (event.get("nodeid"), now)
                elif kind == "test":
                    nodeid = event.get("nodeid")
                    reported.append(nodeid)
                    following = announced.after(nodeid) if announced is not None else None
                    current = (following, now) if following is not None else None
                elif kind == "finish":
                    running = event.get("running")
                    if running is None:
                        current = None
                    elif current is None or current[0] != running:
                        current = (running, now)
                elif kind == "uncollected" and order is not None and not reported:
                    gone = set(event.get("nodeids") or ())
                    uncollected = [nodeid for nodeid in order if nodeid in gone]
                    announced = _Announced([nodeid for nodeid in order if nodeid not in gone])
                elif kind == "collected":
                    ids = [item.get("nodeid") for item in event.get("items", [])]
                    if announced is None:
                        announced = _Announced(ids)
                    collected = ids
            if status is not None:
                break
            if current is not None and not timed_out and time.monotonic() - current[1] > timeout:
                _kill_group(proc.pid)
                timed_out = True
            time.sleep(_POLL)
    # Whatever the test started is killed with its process, as the local run's namespace does.
    _kill_group(proc.pid)
    running = current[0] if current else None
    return status, timed_out, reported, running, collected, uncollected


def _kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def main(argv):
    if "--" not in argv:
        sys.stderr.write("fixgate launcher: usage: launch.py OPTIONS -- PYTEST_ARGS\n")
        return 2
    split = argv.index("--")
    options, pytest_args = argv[:split], argv[split + 1 :]
    opts = dict(zip(options[0::2], options[1::2]))
    timeout = float(opts["--test-timeout"])
    root = os.getcwd()
    tree = os.path.join(root, "tree")
    out = os.path.join(root, "out")
    os.makedirs(out, exist_ok=True)
    watch = os.path.join(root, opts["--watch"])
    env = _absolute_env(root)
    remaining = None
    if "--order" in opts:
        with open(os.path.join(root, opts["--order"]), encoding="utf-8") as f:
            remaining = [line for line in f.read().split("\n") if line]
    processes = []
    k = 0
    while remaining is None or remaining:
        events = os.path.join(out, "events-%d.jsonl" % k)
        log = os.path.join(out, "pytest-%d.log" % k)
        open(events, "wb").close()
        extra = ["--fixgate-events=" + events, "--fixgate-root=" + tree, "--fixgate-watch=" + watch]
        # pytest's cache in the run's own tmp/, as a local run has it (an absolute path: pytest
        # refuses a cache directory reached through "..").
        extra += ["-o", "cache_dir=" + os.path.join(root, "tmp", "pytest-cache")]
        if remaining is None:
            extra.append("--fixgate-collect")
        else:
            order_file = os.path.join(root, "order-%d.txt" % k)
            with open(order_file, "w", encoding="utf-8") as f:
                f.write("".join(nodeid + "\n" for nodeid in remaining))
            extra.append("--fixgate-order=" + order_file)
        with open(log, "wb") as output:
            proc = subprocess.Popen(
                [sys.executable, "-m", "pytest"] + pytest_args + extra,
                cwd=tree,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            status, timed_out, reported, running, collected, uncollected = _follow(
                proc, events, remaining, timeout
            )
        processes.append(
            {
                "events": os.path.basename(events),
                "log": os.path.basename(log),
                "status": status,
                "timed_out": timed_out,
            }
        )
        k += 1
        if remaining is None:
            if collected is None:
                break  # fixgate reports the process that did not collect
            remaining = collected
        if uncollected:
            gone = set(uncollected)
            remaining = [nodeid for nodeid in remaining if nodeid not in gone]
        done = list(reported)
        if running is not None:
            done.append(running)
        if not reported and running is None:
            break  # it ran none of them (or none it collected): fixgate says so, or reads why
        counts = {}
        for nodeid in done:
            counts[nodeid] = counts.get(nodeid, 0) + 1
        left = []
        for nodeid in remaining:
            if counts.get(nodeid, 0) > 0:
                counts[nodeid] -= 1
            else:
                left.append(nodeid)
        remaining = left
    with open(os.path.join(out, "run.json"), "w", encoding="utf-8") as f:
        json.dump({"version": 1, "root": root, "processes": processes}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
