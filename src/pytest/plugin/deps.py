"""fixgate plugin: which code objects of the repository ran in each test (its setup, call and
teardown) and outside any test (collection, session fixtures), as repo-relative paths and the
first line of each code object (the line of its first decorator, as CPython numbers it; 0 for a
module's body).

Python 3.12+ uses sys.monitoring. One tool sees the first start of every code object anywhere
(PY_START as a global event) and disables itself there at once, so code outside the repository
costs one callback in the process's life. A code object of the repository also gets a local
PY_START event of a second tool whose callback is a dict's own __setitem__: each start of the
repository's code costs one C call and no Python frame.

Python 3.9-3.11 has no per-code-object events: cProfile's C profiler (_lsprof, builtins off)
records the Python functions that start, one C callback per Python call and no Python frame;
its table is read and cleared at the end of each window. It runs while the suite is collected
and, per test, only while the repository's code can run: the setup, call and teardown phases
(the fixtures, the test, the finalizers), each inside the innermost wrapper of its phase's hook
(Windows), so pytest's reporting, the plugins' wrappers and fixgate's own events between the
phases cost nothing. A thread a window starts gets a profiler of its own (threading.setprofile).
When the repository's own plugins (conftest.py files) implement a hook that runs outside those
windows (a makereport, a logreport, a wrapper around a phase) or another plugin's wrapper sits
inside ours, the whole of each test's protocol is profiled instead. A test that leaves another
profile function in place (it profiles itself) has unknown code.

Nothing is traced unless code is asked for (or, by a fork server, for the runs it forks that
ask): see fixgate_plugin_record.
"""

import os
import sys
import threading
from operator import attrgetter

import pytest

try:
    import _lsprof
except ImportError:  # not CPython: nothing is recorded on 3.9-3.11
    _lsprof = None

if _lsprof is not None:

    class _Profiler(_lsprof.Profiler):
        """cProfile's C profiler, callable. Code that pauses profiling restores what
        sys.getprofile() gave it through sys.setprofile (pytest-benchmark's
        PauseInstrumentation), which makes this object a Python profile function: its first
        call puts the C profiler back, and notes that code ran unprofiled meanwhile, so what
        the window ran is not known."""

        paused = False

        def __call__(self, frame, event, arg):
            self.paused = True
            self.enable(subcalls=False, builtins=False)

    def _profiler():
        return _Profiler(subcalls=False, builtins=False)


def _ping():
    """A call for whichever profile function is on."""


_M = getattr(sys, "monitoring", None)
_CODE = attrgetter("code")
_CODE_TYPE = type(_ping.__code__)
# Code object -> anything: the repository's code objects that started since the last take.
_HITS = {}
# co_filename -> repo-relative path, or "" outside the repository.
_FILES = {}
# Tool ids no one else claims by name (2 is cProfile's in 3.12+, 1 coverage's).
_TOOL_CHOICES = (3, 4, 5)


# The hooks that run each phase of a test, wrapped by Windows.
_PHASES = ("pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_teardown")
# Hooks that pytest calls only inside a phase's hook: an implementation runs inside a window.
_IN_PHASES = frozenset(
    _PHASES
    + (
        "pytest_fixture_setup",
        "pytest_fixture_post_finalizer",
        "pytest_pyfunc_call",
        "pytest_assertrepr_compare",
        "pytest_markeval_namespace",
    )
)
# Hooks that run before the first test or after the last: what they run is the session's (the
# collection is traced whole) or cannot change an outcome any more.
_OUTSIDE_TESTS = frozenset(
    (
        "pytest_addoption",
        "pytest_addhooks",
        "pytest_plugin_registered",
        "pytest_load_initial_conftests",
        "pytest_cmdline_parse",
        "pytest_cmdline_preparse",
        "pytest_cmdline_main",
        "pytest_configure",
        "pytest_unconfigure",
        "pytest_sessionstart",
        "pytest_sessionfinish",
        "pytest_terminal_summary",
        "pytest_report_header",
        "pytest_report_collectionfinish",
        "pytest_collection",
        "pytest_collection_modifyitems",
        "pytest_collection_finish",
        "pytest_ignore_collect",
        "pytest_collect_directory",
        "pytest_collect_file",
        "pytest_pycollect_makemodule",
        "pytest_pycollect_makeitem",
        "pytest_generate_tests",
        "pytest_make_parametrize_id",
        "pytest_collectstart",
        "pytest_make_collect_report",
        "pytest_collectreport",
        "pytest_itemcollected",
        "pytest_deselected",
    )
)


def _wraps(impl):
    """Whether a hook implementation wraps the others (old or new style)."""
    return bool(getattr(impl, "hookwrapper", False) or getattr(impl, "wrapper", False))


def _plugin_file(plugin):
    """The file a plugin's code lives in: a module's own, or its class's module's."""
    path = getattr(plugin, "__file__", None)
    if not isinstance(path, str):
        module = sys.modules.get(getattr(type(plugin), "__module__", None) or "")
        path = getattr(module, "__file__", None)
    return path if isinstance(path, str) else None


class Windows(object):
    """The innermost wrapper of each phase of a test: the profiler on inside it (3.9-3.11)."""

    def __init__(self, deps):
        self.deps = deps

    def _window(self):
        self.deps.window_on()
        try:
            yield
        finally:
            self.deps.window_off()

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_setup(self, item):
        yield from self._window()

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_call(self, item):
        yield from self._window()

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item, nextitem):
        yield from self._window()


class Deps(object):
    """The recorder: started once per process, read at every test's end."""

    def __init__(self, classifier):
        self.classifier = classifier
        self.session = {}  # path -> set of first lines, outside any test
        self.tools = None
        self.tracing = False
        self.per_test = False  # whether this run records per test (the zygote does not know yet)
        self.error = None  # why nothing could be recorded
        self.prof = None  # the main thread's profiler (3.9-3.11)
        self.threads = []  # (thread, its profiler) for threads a window started
        # Whether a test is profiled only in its phases' windows (3.9-3.11, decided when the
        # collection is done: see windows_sound), and whether every window of the current test
        # ended with the profiler still ours.
        self.windowed = False
        self.window_why = None  # why the whole protocol is profiled instead
        self.complete = True

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

    # ---- the profiler (3.9-3.11) ------------------------------------------------------------

    def _thread_start(self, frame, event, arg):
        """threading.setprofile's function, at a new thread's first call: the thread's own
        profiler from there on (the frame that called this, Thread.run, is noted here)."""
        prof = _profiler()
        _HITS[frame.f_code] = 0
        self.threads.append((threading.current_thread(), prof))
        prof.enable(subcalls=False, builtins=False)

    def _trace_on(self):
        if _M is not None or self.tracing or self.error is not None:
            return
        if _lsprof is None:
            self.error = "no _lsprof module in this interpreter"
            return
        if sys.getprofile() is not None:
            # Another profiler is on: replacing it would change the run, chaining it would not
            # be this module's to do. Nothing is recorded.
            self.error = "another profile function is active (%r)" % (sys.getprofile(),)
            return
        if self.prof is None:
            self.prof = _profiler()
        self.prof.paused = False
        threading.setprofile(self._thread_start)
        self.prof.enable(subcalls=False, builtins=False)
        self.tracing = True

    def _trace_off(self, read=True):
        """Stops the profiler and, unless `read` is False (a window: the test's windows are read
        together at its end), notes what it saw; False when something replaced it meanwhile (a
        test that profiles itself): what ran since is not known."""
        if not self.tracing:
            return self._read() if read else True
        ours = sys.getprofile() is self.prof
        if ours:
            _ping()  # a restored profiler that no call has reached yet sees this one
            self.prof.disable()
            ours = not self.prof.paused
        threading.setprofile(None)
        self.tracing = False
        if read and not self._read():
            return False
        return ours

    def _read(self):
        """Notes what the profilers saw since the last read, and clears the main thread's; False
        while a thread whose profiler cannot be read yet runs."""
        if self.prof is None:
            return True
        self._note(self.prof)
        self.prof.clear()
        # A thread's profiler is read once the thread is gone (is_alive is False only once its
        # interpreter state is): a running one may add to it at any switch, so while one runs
        # (a worker started at import or by an earlier test) what each test made it run is not
        # known, and the test's code is unknown (the scope falls back on that).
        alive = False
        for thread, prof in list(self.threads):
            if thread.is_alive():
                alive = True
            else:
                self._note(prof)
                self.threads.remove((thread, prof))
        return not alive

    @staticmethod
    def _note(prof):
        # With builtins off every entry's code is a code object (a built-in's would be a str,
        # which _take passes over); taken in C, as a window's table has an entry per function.
        _HITS.update(dict.fromkeys(map(_CODE, prof.getstats()), 0))

    # ---- per test ---------------------------------------------------------------------------

    def collection_done(self, pluginmanager):
        """After collection: outside tests, 3.9-3.11 traces nothing (pytest's own code between
        tests is most of a run and never the repository's); in a test, only its phases when
        that is sound for this session's plugins."""
        self._trace_off()
        if self.prof is not None and self.prof.paused and self.error is None:
            self.error = "the profiler was paused while the suite was collected"
        if _M is not None or self.error is not None:
            return
        windows = Windows(self)
        try:
            pluginmanager.register(windows, "fixgate-deps-windows")
            self.window_why = self.windows_sound(pluginmanager, windows)
        except Exception as e:
            self.window_why = "the plugins could not be read (%s)" % (e,)
        self.windowed = self.window_why is None

    def windows_sound(self, pm, windows):
        """None when the repository's code can run in a test only inside its phases' windows;
        else why not. Ours is the innermost wrapper of each phase's hook, so every plain
        implementation runs inside it; no plugin of the repository wraps a phase or implements a
        hook that runs between the phases."""
        for name in _PHASES:
            wrappers = [i for i in getattr(pm.hook, name).get_hookimpls() if _wraps(i)]
            if not wrappers or wrappers[0].plugin is not windows:
                return "another plugin's wrapper of %s runs inside the recording's" % name
        for plugin in pm.get_plugins():
            path = _plugin_file(plugin)
            rel = self._repo_path(path) if path else ""
            if not rel:
                continue
            for caller in pm.get_hookcallers(plugin) or ():
                name = caller.name
                if name in _OUTSIDE_TESTS:
                    continue
                mine = [i for i in caller.get_hookimpls() if i.plugin is plugin]
                if name in _IN_PHASES and not any(_wraps(i) for i in mine):
                    continue
                return "%s implements %s" % (rel, name)
        return None

    def window_on(self):
        if self.per_test and self.windowed:
            self._trace_on()

    def window_off(self):
        if self.per_test and self.windowed and not self._trace_off(read=False):
            self.complete = False

    def test_start(self):
        self._take(self.session)
        self.complete = True
        if self.per_test and not self.windowed:
            self._trace_on()

    def test_end(self, item=None):
        """The test's code objects, {path: [first lines]}; None when this run does not record
        them or they are not known (see _trace_off). The fixture functions the test requests
        count as code it ran whether their bodies ran now or their value came from pytest's
        cache of a wider-scoped fixture (set up by an earlier test): what it got from them is
        theirs."""
        complete = self._trace_off() and self.complete
        if not self.per_test:
            self._take(self.session)
            return None
        mine = {}
        self._take(mine)
        if item is not None:
            try:
                self._fixtures(item, mine)
            except Exception:
                complete = False
        if not complete or self.error is not None:
            return None
        return dict((p, sorted(lines)) for p, lines in mine.items())

    def _fixtures(self, item, into):
        info = getattr(item, "_fixtureinfo", None)
        defs = getattr(info, "name2fixturedefs", None) or {}
        for fixturedefs in defs.values():
            for fd in fixturedefs or ():
                func = getattr(fd, "func", None)
                func = getattr(func, "__func__", func)
                func = getattr(func, "__wrapped__", func)
                code = getattr(func, "__code__", None)
                if code is None:
                    continue
                rel = _FILES.get(code.co_filename) or self._repo_path(code.co_filename)
                if rel:
                    into.setdefault(rel, set()).add(code.co_firstlineno)

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
            if type(code) is not _CODE_TYPE:
                continue
            rel = files.get(code.co_filename) or self._repo_path(code.co_filename)
            if rel:
                # A module's body is line 0: a function may start on line 1 too.
                line = 0 if code.co_name == "<module>" else code.co_firstlineno
                into.setdefault(rel, set()).add(line)
