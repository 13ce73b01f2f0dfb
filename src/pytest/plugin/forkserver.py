"""fixgate plugin: the fork server, a warm interpreter that has imported pytest and collected the
suite once and forks a child for each ordered run.

fixgate starts the zygote as `pytest ... --fixgate-forkserver=FD` in a sandbox. After collection
(in pytest_runtestloop, before any test runs) the zygote checks that it can fork safely and says
so on FD, one line each:

    ready                       waiting for commands
    fallback <reason>           not forking (threads alive, collection failed); it exits

A thread alive after collection would be missing from every forked run, so the zygote refuses
to fork, naming each thread (the function it runs, where it is now), unless the thread is one
that a plugin starts at load and that no run of fixgate's uses (_IDLE_THREADS): pytest-
rerunfailures' rerun counter for pytest-xdist workers, blocked in accept(), when fixgate runs no
workers.

then reads commands from descriptor FD + 1 (not standard input: pytest's capture has put
/dev/null there), one JSON object a line
({"events": PATH, "order": PATH, "watch": PATH or null}), and for each forks a child, says
`forked <pid>`, waits for it and says `exit <pid> <raw wait status>`. fixgate restores the
sandbox before each command (the zygote never touches it) and may kill the child's process group
(its timeout). The child returns into pytest's session, set up for its run by the plugin, and
runs the rest of the session as a fresh process would after collection. End of the commands: the
zygote exits.

Before the first test every run, forked or fresh, freezes the heap collection made
(freeze_collected): without it each forked run's garbage collections (pytest runs five full ones
at its end) walk every object the zygote holds, the collected items included, copying their
pages from the zygote as they go, which cost 0.5 s a run at 20,000 tests.

A child ends without the interpreter's teardown (exit_fast): everything a fresh process runs at
its exit still runs first, and nothing of the teardown reaches what the run reports.
"""

import atexit
import gc
import json
import os
import re
import stat
import sys
import threading
import time
import types
import warnings

from fixgate_plugin_trace import _Quiet

# A forked child whose session has ended: (its pid, pytest's exit status, the last exception
# recorded then); see exit_fast.
_EXIT_AS = None


def _last_exception():
    """The exception the interpreter last printed as uncaught, or pytest stored for a failed
    test (both set `sys.last_value`, 3.12+ `sys.last_exc` too)."""
    return (getattr(sys, "last_value", None), getattr(sys, "last_exc", None))


def exit_fast(status):
    """Called in a forked child when pytest unconfigures: the interpreter's own teardown is
    skipped at its exit. What a fresh process runs at exit still runs as there, before
    `_exit_now`: pytest's cleanups, the non-daemon threads joined, every atexit callback the
    suite registered (after this module's, so before it), and logging's shutdown. What is
    skipped after them (a last collection, every module's globals cleared: writes to nearly
    every page the child shares with the zygote, each copied for it, 15-20 ms a run of 50
    tests) reaches nothing the run reports, which it wrote when its session ended."""
    global _EXIT_AS
    _EXIT_AS = (os.getpid(), status, _last_exception())


def _exit_now():
    fast = _EXIT_AS
    # Not in the zygote, a fresh process, or a process a test forked; not after an exception
    # left pytest uncaught (the interpreter printed it, and decides the exit status).
    if fast is None or fast[0] != os.getpid():
        return
    if any(a is not b for a, b in zip(_last_exception(), fast[2])):
        return
    logging = sys.modules.get("logging")
    if logging is not None:
        try:
            logging.shutdown()  # registered with atexit before this module: it would run after
        except Exception:
            pass
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(fast[1])


# At the plugin's import, before any conftest or test module: it runs after their callbacks.
atexit.register(_exit_now)

_PR_SET_PDEATHSIG = 1
_SIGKILL = 9
_PR_SET_CHILD_SUBREAPER = 36


# A repository file naming the `gc` module (`import gc`, `gc.collect()`): its code may watch the
# collector, which cannot collect what freeze_collected froze.
_NAMES_GC = re.compile(rb"\bgc\b")


def freeze_collected(classifier):
    """Collects what collection left as garbage, then moves every object alive to the
    collector's permanent generation (gc.freeze), which its collections never walk; returns
    whether it did. Every run does this at the same point, after collection and before the
    first test, so forked runs equal fresh ones.

    What it changes against plain pytest: an object alive now that a test later drops inside
    a reference cycle is never collected in the run (its finalizer does not run, a weak
    reference to it stays alive), and gc.get_objects() and gc.get_referrers() do not list it.
    Only code that watches the collector can tell, so nothing is frozen when a Python file of
    the repository that the process has loaded names the gc module."""
    freeze = getattr(gc, "freeze", None)
    if freeze is None or classifier is None:  # not CPython; no events, nothing to compare
        return False
    with _Quiet():
        try:
            modules = list(sys.modules.values())
        except Exception:
            return False
        for module in modules:
            try:
                # Read from the module's own dict: an attribute of a lazy module (or of another
                # object in sys.modules) would run its code here, untraced.
                if not isinstance(module, types.ModuleType):
                    continue
                path = object.__getattribute__(module, "__dict__").get("__file__")
                if not isinstance(path, str) or not path.endswith(".py"):
                    continue
                kind, _text, interp = classifier.classify(os.path.abspath(path))
                if kind != "rel" or interp:
                    continue
                # A regular file only (opened without blocking): a FIFO would never end.
                flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
                fd = os.open(path, flags)
                try:
                    regular = stat.S_ISREG(os.fstat(fd).st_mode)
                except Exception:
                    os.close(fd)
                    raise
                if not regular:
                    os.close(fd)
                    return False
                with os.fdopen(fd, "rb") as f:
                    if _NAMES_GC.search(f.read()):
                        return False
            except Exception:
                return False
    gc.collect()
    freeze()
    return True


def _say(fd, line):
    data = (line + "\n").encode("utf-8", "replace")
    while data:
        data = data[os.write(fd, data) :]


def refuse(fd, reason):
    """Tells fixgate that this interpreter will not fork, and why; the session goes on."""
    try:
        _say(fd, "fallback " + reason.replace("\n", " "))
        os.close(fd)
        os.close(fd + 1)
    except OSError:
        pass


# Threads that plugins start at load and that a forked run may leave behind, because nothing in
# a run of fixgate's uses them: (module, function the thread runs, the call it must be blocked
# in, why it is idle).
_IDLE_THREADS = (
    (
        "pytest_rerunfailures",
        "ServerStatusDB.run_server",
        "accept",
        "pytest-rerunfailures' rerun counter for pytest-xdist workers, and fixgate runs none",
    ),
)


def _target(thread):
    """The function a thread runs, as "module.qualname" parts (None when unknown)."""
    target = getattr(thread, "_target", None)
    target = getattr(target, "__func__", target)
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None)
    if module is None or name is None:
        return None
    return module, name


def _where(frame):
    if frame is None:
        return "not running Python code"
    code = frame.f_code
    return "at %s:%d in %s" % (os.path.basename(code.co_filename), frame.f_lineno, code.co_name)


def _is_idle(thread, frame):
    """Why `thread` may be left behind by a fork (one of _IDLE_THREADS, blocked where it waits
    for work that never comes), else None."""
    target = _target(thread)
    if target is None or frame is None or not thread.daemon:
        return None
    for module, name, blocked_in, why in _IDLE_THREADS:
        if target == (module, name) and frame.f_code.co_name == blocked_in:
            return why
    return None


def _blocking_threads():
    """The threads of this process that a fork would lose while a fresh process keeps them,
    each described (its name, the function it runs, where it is now); [] when forking is safe.
    Threads known to be idle (_IDLE_THREADS) are left out."""
    frames = sys._current_frames()
    described = []
    python_threads = 1
    for t in threading.enumerate():
        if t is threading.main_thread():
            continue
        python_threads += 1
        frame = frames.get(t.ident)
        if _is_idle(t, frame) is not None:
            continue
        target = _target(t)
        described.append(
            "%r%s, %s"
            % (t.name, " running %s.%s" % target if target else "", _where(frame))
        )
    try:
        # Threads a C extension started, which Python does not know about.
        outside = len(os.listdir("/proc/self/task")) - python_threads
    except OSError:
        outside = 0
    if outside > 0:
        described.append("%d started outside Python (by a C extension)" % outside)
    return described


def _prctl():
    """prctl through ctypes (loaded now, with tracing muted, so that a child need not)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except Exception:
        return None


def _children(me):
    """The processes whose parent is `me`."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for p in entries:
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the
        # last one.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == me:
            out.append(int(p))
    return out


def _reap_leftovers(me):
    """Kills and reaps every process a forked run left behind. The zygote is a child subreaper,
    so a daemon that called setsid, or a grandchild whose parent exited, is its child now: each
    run starts with nothing of the one before it, as a fresh process would. Returns False when
    something survived two seconds of it (the zygote then stops serving)."""
    deadline = time.monotonic() + 2.0
    while True:
        left = _children(me)
        for pid in left:
            try:
                os.kill(pid, _SIGKILL)
            except OSError:
                pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid == 0:
                break
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)


def _read_line(commands, buf):
    while b"\n" not in buf:
        chunk = os.read(commands, 65536)
        if not chunk:
            return None, buf
        buf += chunk
    line, _, rest = buf.partition(b"\n")
    return line, rest


def serve(fd, config):
    """Serves forked runs. Returns only in a child, with its command; the zygote exits when its
    commands end (or at once when it must not fork)."""
    with _Quiet():
        blocking = _blocking_threads()
        if blocking:
            refuse(
                fd,
                "threads alive after collection, which a forked run would not have: %s"
                % "; ".join(blocking),
            )
            os._exit(0)
        prctl = _prctl()
        zygote = os.getpid()
        # Processes collection started would be killed after the first run, where a fresh
        # process would still have them.
        if _children(zygote):
            refuse(fd, "collection left %d child process(es) running" % len(_children(zygote)))
            os._exit(0)
        if prctl is not None:
            prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        _say(fd, "ready")
        buf = b""
        while True:
            line, buf = _read_line(fd + 1, buf)
            if line is None:
                os._exit(0)
            if not line.strip():
                continue
            command = json.loads(line.decode("utf-8"))
            with warnings.catch_warnings():
                # Python 3.12+ warns of a fork with threads alive; the only ones are idle.
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:
                _become_child(fd, prctl, zygote, config)
                return command
            try:
                os.setpgid(pid, pid)  # also done by the child: whichever runs first
            except OSError:
                pass
            _say(fd, "forked %d" % pid)
            _, status = os.waitpid(pid, 0)
            clean = _reap_leftovers(zygote)
            _say(fd, "exit %d %d" % (pid, status))
            if not clean:
                # A leftover would see the next run: no more runs from this zygote.
                os._exit(0)


def _become_child(fd, prctl, zygote, config):
    try:
        os.setpgid(0, 0)  # its own group, as a fresh pytest: a timeout kills its children too
    except OSError:
        pass
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    if os.getppid() != zygote:
        os._exit(1)  # the zygote died before the child could ask to die with it
    os.close(fd)
    os.close(fd + 1)
    # Output a killed child left in pytest's capture file must not be the next child's.
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        try:
            capman.read_global_capture()
        except Exception:
            pass
