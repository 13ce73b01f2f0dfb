"""fixgate plugin: which code objects of the repository ran in each test (its setup, call and
teardown) and outside any test (collection, session fixtures), as repo-relative paths and the
first line of each code object (the line of its first decorator, as CPython numbers it; 0 for a
module's body).

Python 3.12+ uses sys.monitoring. One tool sees the first start of every code object anywhere
(PY_START as a global event) and disables itself there at once, so code outside the repository
costs one callback in the process's life. A code object of the repository also gets a local
PY_START event of a second tool whose callback is a dict's own __setitem__: each start of the
repository's code costs one C call and no Python frame.

Python 3.9-3.11 has no per-code-object events: sys.settrace (and threading.settrace for threads
the test starts) while the suite is collected and while each test runs, returning None so that no
line is traced. Every Python call then costs one callback, pytest's own included: a run that
records takes about 3x plain pytest on 3.11 (docs/performance.md), which is why scoped audits,
the only runs that record, are opt-in.

Nothing is traced unless code is asked for (or, by a fork server, for the runs it forks that
ask): see fixgate_plugin_record.
"""

import os
import sys
import threading

_M = getattr(sys, "monitoring", None)
# Code object -> anything: the repository's code objects that started since the last take.
_HITS = {}
# co_filename -> repo-relative path, or "" outside the repository.
_FILES = {}
# Tool ids no one else claims by name (2 is cProfile's in 3.12+, 1 coverage's).
_TOOL_CHOICES = (3, 4, 5)


class Deps(object):
    """The recorder: started once per process, read at every test's end."""

    def __init__(self, classifier):
        self.classifier = classifier
        self.session = {}  # path -> set of first lines, outside any test
        self.tools = None
        self.tracing = False
        self.per_test = False  # whether this run records per test (the zygote does not know yet)
        self.error = None  # why nothing could be recorded
        self.trace = None  # the trace function (3.9-3.11)

    # ---- setting up ------------------------------------------------------------------------

    def start(self):
        """From configure on: collection and session fixtures are the session's."""
        if _M is not None:
            self._start_monitoring()
        else:
            self._trace_on()

    def _start_monitoring(self):
        free = [t for t in _TOOL_CHOICES if _M.get_tool(t) is None]
        if len(free) < 2:
            self.error = "sys.monitoring: no two free tool ids (another tool holds %s)" % (
                ", ".join(str(t) for t in _TOOL_CHOICES if t not in free)
            )
            return
        seen, count = free[0], free[1]
        events = _M.events
        disable = _M.DISABLE
        set_local = _M.set_local_events
        repo = self._repo_path

        def first_start(code, offset):
            if repo(code.co_filename):
                _HITS[code] = offset
                set_local(count, code, events.PY_START)
            return disable

        _M.use_tool_id(seen, "fixgate-seen")
        _M.use_tool_id(count, "fixgate-deps")
        _M.register_callback(seen, events.PY_START, first_start)
        _M.register_callback(count, events.PY_START, _HITS.__setitem__)
        _M.set_events(seen, events.PY_START)
        self.tools = (seen, count)

    def _repo_path(self, filename):
        """The repo-relative path of a code object's file, "" when it is not the repository's."""
        hit = _FILES.get(filename)
        if hit is not None:
            return hit
        rel = ""
        if filename and not filename.startswith("<"):
            try:
                kind, text, interp = self.classifier.classify(os.path.abspath(filename))
                if kind == "rel" and not interp and text:
                    rel = text
            except Exception:
                rel = ""
        _FILES[filename] = rel
        return rel

    # ---- the trace function (3.9-3.11) ------------------------------------------------------

    def _tracer(self):
        hits = _HITS
        files = _FILES
        repo = self._repo_path

        def trace(frame, event, arg):
            code = frame.f_code
            if code in hits:
                return None
            rel = files.get(code.co_filename)
            if rel is None:
                rel = repo(code.co_filename)
            if rel:
                hits[code] = 0
            return None

        return trace

    def _trace_on(self):
        if _M is not None or self.tracing or self.error is not None:
            return
        if sys.gettrace() is not None:
            # Another tracer (coverage, a debugger) is on: replacing it would change the run,
            # chaining it would not be this module's to do. Nothing is recorded.
            self.error = "another trace function is active (%r)" % (sys.gettrace(),)
            return
        if self.trace is None:
            self.trace = self._tracer()
        sys.settrace(self.trace)
        threading.settrace(self.trace)
        self.tracing = True

    def _trace_off(self):
        """Stops tracing; False when something replaced the trace function meanwhile (a test
        that debugs or measures coverage itself): what ran since is not known."""
        if not self.tracing:
            return True
        ours = sys.gettrace() is self.trace
        sys.settrace(None)
        threading.settrace(None)
        self.tracing = False
        return ours

    # ---- per test ---------------------------------------------------------------------------

    def collection_done(self):
        """After collection: outside tests, 3.9-3.11 traces nothing (pytest's own code between
        tests is most of a run and never the repository's)."""
        self._trace_off()

    def test_start(self):
        self._take(self.session)
        if self.per_test:
            self._trace_on()

    def test_end(self):
        """The test's code objects, {path: [first lines]}; None when this run does not record
        them or they are not known (see _trace_off)."""
        complete = self._trace_off()
        if not self.per_test:
            self._take(self.session)
            return None
        mine = {}
        self._take(mine)
        if not complete or self.error is not None:
            return None
        return dict((p, sorted(lines)) for p, lines in mine.items())

    def session_code(self):
        """What ran outside any test, as test_end gives it; None when it is not known."""
        self._trace_off()
        self._take(self.session)
        if self.error is not None:
            return None
        return dict((p, sorted(lines)) for p, lines in self.session.items())

    def _take(self, into):
        if not _HITS:
            return
        codes = list(_HITS)
        _HITS.clear()
        files = _FILES
        for code in codes:
            rel = files.get(code.co_filename) or self._repo_path(code.co_filename)
            if rel:
                # A module's body is line 0: a function may start on line 1 too.
                line = 0 if code.co_name == "<module>" else code.co_firstlineno
                into.setdefault(rel, set()).add(line)
