"""fixgate plugin: the pytest hooks, options and markers, ordering, the per-test record and the
events of a session."""

import json
import os
import sys
import threading
import time
import traceback

import pytest

import fixgate_plugin_forkserver as _forkserver
import fixgate_plugin_outcome as _outcome
import fixgate_plugin_options as _options
import fixgate_plugin_trace as _trace
from fixgate_plugin_record import Recording
from fixgate_plugin_classify import _Classifier
from fixgate_plugin_events import (
    _ENCODE,
    _JSON_STRING,
    PROTOCOL_VERSION,
    _error_line,
    _first_line,
    _is_subtest_report,
    _jsonable,
    _longrepr_text,
    _path_text,
    _phase_json,
    _report_message,
    _skip_reason,
    _test_line,
    _text_path,
)
from fixgate_plugin_lease import _Lease


def _has_new_style_wrappers():
    try:
        pytest.hookimpl(wrapper=True)
        return True
    except TypeError:  # pluggy before 1.2
        return False


_NEW_STYLE_WRAPPERS = _has_new_style_wrappers()


def pytest_addoption(parser):
    group = parser.getgroup("fixgate", "fixgate audit plugin")
    group.addoption(
        "--fixgate-events",
        dest="fixgate_events",
        default=None,
        metavar="PATH",
        help="fixgate: append JSON-lines events to PATH (enables tracing and the lease check).",
    )
    group.addoption(
        "--fixgate-order",
        dest="fixgate_order",
        default=None,
        metavar="PATH",
        help="fixgate: run exactly the node ids listed in PATH (one per line), in that order; "
        "deselect everything else.",
    )
    group.addoption(
        "--fixgate-order-lenient",
        dest="fixgate_order_lenient",
        action="store_true",
        default=False,
        help="fixgate: a node id of --fixgate-order that is not collected is left out and named "
        "in one 'uncollected' event, instead of a usage error.",
    )
    group.addoption(
        "--fixgate-watch",
        dest="fixgate_watch",
        default=None,
        metavar="PATH",
        help='fixgate: JSON file {"roots": [...]} of repo-relative directories whose files are '
        "checked for changes around every test.",
    )
    group.addoption(
        "--fixgate-forkserver",
        dest="fixgate_forkserver",
        default=None,
        type=int,
        metavar="FD",
        help="fixgate: after collection, serve forked runs (replies on file descriptor FD, "
        "commands on FD + 1) instead of running the tests.",
    )
    group.addoption(
        "--fixgate-root",
        dest="fixgate_root",
        default=None,
        metavar="PATH",
        help="fixgate: the sandbox root; recorded paths are relative to it (default: rootdir).",
    )
    group.addoption(
        "--fixgate-record",
        dest="fixgate_record",
        default=None,
        metavar="WHAT",
        help="fixgate: record per test the repository's code that ran (code) and the shared "
        "state left changed (state), a comma-separated list; empty: only outside tests.",
    )
    group.addoption(
        "--fixgate-collect",
        dest="fixgate_collect",
        action="store_true",
        default=False,
        help="fixgate: emit one 'collected' event listing every collected item.",
    )
    group.addoption(
        "--fixgate-collect-items",
        dest="fixgate_collect_items",
        action="store_true",
        default=False,
        help="fixgate: with --fixgate-collect in a fork server, describe each item (file, line, "
        "markers) and what was deselected, as --collect-only does, and always send the "
        "collection's trace: the warm interpreter's collection is the audit's.",
    )
    group.addoption(
        "--fixgate-carry-modules",
        dest="fixgate_carry_modules",
        default=None,
        metavar="PATH",
        help="fixgate: a JSON list of test module node ids to import without making their "
        "items (fixgate takes them from another collection); one 'unitemized' event says "
        "where each would have been.",
    )


def _read_carried(path):
    """The module node ids of --fixgate-carry-modules (a JSON list), or None."""
    if path is None:
        return None
    with open(path) as f:
        return frozenset(json.load(f))


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "writes(*groups): the fixture groups this test may change (fixgate lease).",
    )
    config.addinivalue_line(
        "markers",
        "serial: keep this test in collection order; fixgate never shuffles it.",
    )
    events = config.getoption("fixgate_events", None)
    order = config.getoption("fixgate_order", None)
    if events is None and order is None:
        return
    plugin = _FixgatePlugin(config)
    config.pluginmanager.register(plugin, "fixgate-session")


class _TwiceInARow(object):
    """What running an item a second time in a row (the nio order) needs, so that the second run
    starts from what the first one started from, as it would in a fresh slot."""

    def __init__(self):
        # Doctest item -> its globals before its first run.
        self.doctest_globs = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item):
        # DocTestRunner.run clears a doctest's globals when it ends: keep them for the rerun.
        dtest = getattr(item, "dtest", None)
        if dtest is not None and id(item) not in self.doctest_globs:
            self.doctest_globs[id(item)] = dict(dtest.globs)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item, nextitem):
        if nextitem is not item or item.parent is None:
            return
        # The item is its own next item: pytest's teardown keeps what the next item shares,
        # which is all of it, so the second run would find the first run's function-scoped
        # fixtures and no request. Tear the item itself down, keeping its module, class and
        # session state.
        item.session._setupstate.teardown_exact(item.parent)
        saved = self.doctest_globs.get(id(item))
        if saved is not None:
            item.dtest.globs.clear()
            item.dtest.globs.update(saved)


class _Run(object):
    """One ordered run: its events file, its order and watch files, its lease and classifier, and
    what it has done so far. A fresh process makes one at configure time; a child of the fork
    server (fixgate_plugin_forkserver) closes the zygote's and makes its own after the fork, so
    nothing of one run is reset by hand into the next."""

    def __init__(self, config, root, absolute, events, order, watch, lenient=False):
        self.config = config
        # Whether ids of the order that are not collected are left out (and said) or an error.
        self.lenient = bool(lenient)
        self.root = root
        self.pid = os.getpid()
        self.fd = None
        self.lock = threading.Lock()
        self.order = None
        self.executed = []  # node ids, as each test's protocol starts
        self.index = 0
        self.current = None  # the _Test whose protocol runs now
        self.lease = None
        self.classifier = None
        self.internal_errors = 0
        self.finished = False
        # The order the reader knows (the order file, or the collected event), and the last
        # test reported: test_start is written only when the reader cannot tell which test
        # runs next (the first test, or one out of the announced order).
        self.announced = None
        self.announced_pos = None
        self.last_reported = None
        self.interrupted_in = None  # the test a clean session end interrupted, if any
        self.events_path = absolute(events) if events is not None else None
        self.order_path = absolute(order) if order is not None else None
        self.watch_path = absolute(watch) if watch is not None else None
        self._open(absolute)

    @property
    def streaming(self):
        """Whether this run writes events (with `--fixgate-order` alone it only orders)."""
        return self.fd is not None

    def _open(self, absolute):
        if self.events_path is not None:
            try:
                self.fd = os.open(
                    self.events_path,
                    os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                    0o644,
                )
            except OSError as e:
                raise pytest.UsageError(
                    "fixgate: cannot open the events file %s for writing: %s"
                    % (self.events_path, e.strerror or e)
                )
            self.emit(
                {
                    "event": "start",
                    "pid": self.pid,
                    "python": sys.version,
                    "pytest": pytest.__version__,
                    "root": _path_text(self.root),
                    "protocol": PROTOCOL_VERSION,
                    "rootdir": _path_text(str(self.config.rootpath)),
                    "executable": _path_text(sys.executable or ""),
                    "neutralised": _options.NEUTRALISED,
                }
            )

        watch_roots = None
        try:
            if self.order_path is not None:
                self.order = self._read_order(self.order_path)
                self.announce(self.order)
            if self.watch_path is not None:
                watch_roots = self._read_watch(self.watch_path)
        except pytest.UsageError:
            # pytest stops before the session starts: end the stream here
            self.emit({"event": "finish", "exitstatus": int(pytest.ExitCode.USAGE_ERROR)})
            self.close()
            raise

        if self.fd is None:
            return

        ignored = [self.events_path, self.order_path, self.watch_path]
        self.classifier = _Classifier(self.root, [p for p in ignored if p])
        if watch_roots is not None:
            self._open_lease(absolute, watch_roots, ignored)

    def _open_lease(self, absolute, watch_roots, ignored):
        root_real = os.path.realpath(self.root)

        def spellings(p):
            # the lease compares paths spelled from the root: add that spelling too
            out = set([p, os.path.realpath(p)])
            real = os.path.realpath(p)
            if real.startswith(root_real + os.sep):
                out.add(os.path.join(self.root, real[len(root_real) + 1 :]))
            return out

        excl_dirs = set()
        tmp = os.environ.get("TMPDIR")
        if tmp:
            excl_dirs.update(spellings(absolute(tmp)))
        excl_files = set()
        for p in ignored:
            if p:
                excl_files.update(spellings(p))
        mode = os.environ.get("FIXGATE_LEASE_MODE", "auto")
        if mode not in ("auto", "scan", "inotify"):
            mode = "auto"
        try:
            self.lease = _Lease(self.root, watch_roots, excl_files, excl_dirs, mode)
        except ValueError as e:
            self.emit({"event": "finish", "exitstatus": int(pytest.ExitCode.USAGE_ERROR)})
            self.close()
            raise pytest.UsageError("fixgate: --fixgate-watch %s: %s" % (self.watch_path, e))
        # roots that hold temporary files of the run are excluded unless named directly
        self.lease.exclude_dirs = set(
            d for d in excl_dirs if not any(d == a for a, _ in self.lease.roots)
        )

    # ---- configuration files ----------------------------------------------------------------

    def _read_order(self, path):
        try:
            with open(path, "r", encoding="utf-8-sig", newline=None) as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise pytest.UsageError("fixgate: cannot read the order file %s: %s" % (path, e))
        ids = []
        seen = set()
        dups = []
        for line in text.split("\n"):
            line = line.rstrip("\r")
            if not line.strip():
                continue
            line = _text_path(line)  # a node id of a file whose name is not UTF-8
            if ids and ids[-1] == line and (len(ids) < 2 or ids[-2] != line):
                # Twice in a row: the same test run again in the same process (fixgate's nio
                # order). Anywhere else a repeated id is a mistake in the order.
                ids.append(line)
                continue
            if line in seen:
                dups.append(line)
                continue
            seen.add(line)
            ids.append(line)
        if dups:
            msg = "fixgate: the order file %s lists node id(s) more than once: %s" % (
                path,
                ", ".join(dups[:20]) + (" ..." if len(dups) > 20 else ""),
            )
            self.emit(
                {"event": "error", "kind": "duplicate-nodeid", "message": msg, "nodeids": dups}
            )
            raise pytest.UsageError(msg)
        return ids

    def _read_watch(self, path):
        try:
            with open(path, "r", encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            raise pytest.UsageError("fixgate: cannot read the watch file %s: %s" % (path, e))
        roots = data.get("roots") if isinstance(data, dict) else None
        if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
            raise pytest.UsageError(
                'fixgate: the watch file %s must hold {"roots": [str, ...]}' % path
            )
        for r in roots:
            if os.path.isabs(r):
                raise pytest.UsageError(
                    "fixgate: watch root %r in %s must be relative to the root" % (r, path)
                )
        return roots

    # ---- the announced order ------------------------------------------------------------------

    def announce(self, nodeids):
        self.announced = nodeids
        self.announced_pos = dict((n, i) for i, n in enumerate(nodeids))

    def announced_next(self, nodeid):
        """Whether the reader, having seen the result of the last reported test, expects
        `nodeid` to run now."""
        if self.last_reported is None or self.announced is None:
            return False
        i = self.announced_pos.get(self.last_reported)
        return i is not None and i + 1 < len(self.announced) and self.announced[i + 1] == nodeid

    # ---- events -------------------------------------------------------------------------------

    def emit(self, obj):
        if self.fd is None or os.getpid() != self.pid:
            return
        try:
            line = _ENCODE(obj)
        except (TypeError, ValueError):
            line = json.dumps(_jsonable(obj), ensure_ascii=False, separators=(",", ":"))
        self.write_line(line)

    def write_line(self, line):
        """Writes one event, a JSON text without its newline, in one write."""
        if self.fd is None or os.getpid() != self.pid:
            return
        data = (line + "\n").encode("utf-8", "replace")
        with self.lock:
            fd = self.fd
            if fd is None:
                return
            view = memoryview(data)
            try:
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
            except OSError:
                self.fd = None  # the reader is gone; keep the run going

    def internal(self, where):
        self.internal_errors += 1
        if self.internal_errors > 50:
            return
        try:
            detail = traceback.format_exc(limit=6)
        except Exception:
            detail = ""
        self.emit(
            {
                "event": "error",
                "kind": "internal",
                "message": "fixgate plugin: %s failed: %s" % (where, detail.strip()),
            }
        )

    def drain_hook_errors(self):
        for msg in _trace.drain_errors():
            self.emit({"event": "error", "kind": "internal", "message": "fixgate plugin: " + msg})

    def close(self):
        with self.lock:
            if self.fd is not None:
                try:
                    os.close(self.fd)
                except OSError:
                    pass
                self.fd = None


class _Test(object):
    """One test's record while its protocol runs: the phase reports pytest logged, and what each
    phase's call raised as the plugin saw it first (see `pytest_runtest_makereport`)."""

    __slots__ = (
        "nodeid",
        "index",
        "reports",
        "raised",
        "reruns",
        "rerun_messages",
        "start",
        "end",
        "trace",
        "subtest_failure",
        "wrapped",
    )

    def __init__(self, nodeid, index):
        self.nodeid = nodeid
        self.index = index
        self.reports = {}
        self.raised = {}  # when -> Phase, from the call's own exception
        self.reruns = 0
        self.rerun_messages = []
        self.start = time.time()
        self.end = None
        self.trace = set()
        self.subtest_failure = None
        self.wrapped = []  # (name, the item's own attribute or None) the plugin stands in for


_SKIP_EXCEPTION = pytest.skip.Exception
_XFAIL_EXCEPTION = pytest.xfail.Exception


def _exception_kind(exc):
    """What an exception raised by a phase means, as `fixgate_plugin_outcome.raised` takes it."""
    if isinstance(exc, _XFAIL_EXCEPTION):
        return "xfail"
    if isinstance(exc, _SKIP_EXCEPTION):
        return "skip"
    unittest = sys.modules.get("unittest")
    if unittest is not None and isinstance(exc, unittest.SkipTest):
        return "skip"
    return "fail"


def _raised_phase(exc):
    """The phase an exception (None: nothing raised) says."""
    if exc is None:
        return _outcome.PASSED
    try:
        text = "%s: %s" % (type(exc).__name__, exc) if not isinstance(
            exc, (_SKIP_EXCEPTION, _XFAIL_EXCEPTION)
        ) else str(getattr(exc, "msg", exc))
    except Exception:
        text = type(exc).__name__
    return _outcome.raised(_exception_kind(exc), _first_line(text))


def _watching(inner, item, raised, key):
    """`inner` (an item's bound setup or runtest), noting in `raised[key]` what it raised."""

    def call():
        try:
            inner()
        except BaseException as e:
            raised[key] = _raised_phase(e)
            raise
        pending = getattr(item, "_excinfo", None)
        if pending:
            raised[key] = _raised_phase(pending[0].value)

    return call


def _redder(a, b):
    """Of two phases, the one that says less green (a failure over a skip over a pass)."""
    if a is None:
        return b
    if b is None:
        return a
    return b if _outcome.altered(b, a, False) else a


def _reported_phase(report):
    xfail = getattr(report, "wasxfail", None)
    return _outcome.Phase(
        report.outcome,
        None if xfail is None else str(xfail),
        _skip_reason(report) if report.skipped else None,
        _report_message(report),
    )


def _last_entry(excinfo):
    """The traceback filter while a report is made in the line style (see _line_tracebacks):
    the last entry, which is the one the style's text comes with."""
    return excinfo.traceback[-1:]


class _FixgatePlugin(object):
    """The hooks of a session: collection, ordering, each test's record and the session's end.
    What belongs to one ordered run is on `self.run`."""

    def __init__(self, config):
        self.config = config
        # Whether other plugins read test reports (see _line_tracebacks); asked once.
        self._others_read_reports = None
        self.session_trace = set()
        self.collect_event = bool(config.getoption("fixgate_collect", False))
        # Whether the collected event describes each item: a --collect-only run's, or a fork
        # server's whose collection stands for a --collect-only run (--fixgate-collect-items).
        self.collect_items = self.collect_event and bool(
            config.option.collectonly or config.getoption("fixgate_collect_items", False)
        )
        self.order_state = None  # None: not applied yet, "ok", "failed"
        # With --collect-only: the node ids of every item collection produced, before any
        # plugin deselected or dropped some (pytest_itemcollected sees each item as it is made).
        self.collected_ids = [] if self.collect_items else None
        self.recording = None  # what --fixgate-record asks for (fixgate_plugin_record)
        # --fixgate-carry-modules: the modules imported without items, each with how many items
        # were collected before it, and every item collected, in collection order.
        self.carried = _read_carried(config.getoption("fixgate_carry_modules", None))
        self.unitemized = []
        self.itemized = []

        try:
            invocation = str(config.invocation_params.dir)
        except AttributeError:
            invocation = os.getcwd()

        def absolute(p):
            return os.path.normpath(os.path.join(invocation, os.path.expanduser(p)))

        self._absolute = absolute

        root = config.getoption("fixgate_root", None)
        if root is None:
            root = str(config.rootpath)
        self.root = absolute(root)

        self.forkserver_fd = config.getoption("fixgate_forkserver", None)
        # A child of the fork server, and its session (see _begin_forked_run).
        self.forked = False
        self.session = None
        self.run = _Run(
            config,
            self.root,
            absolute,
            config.getoption("fixgate_events", None),
            config.getoption("fixgate_order", None),
            config.getoption("fixgate_watch", None),
            config.getoption("fixgate_order_lenient", False),
        )
        self.preloaded = []
        if not self.run.streaming:
            return  # ordering only: no trace, no lease

        # What was loaded before the hook could see it (conftest.py files, plugins, the
        # configuration file) belongs to the session too.
        self.preloaded = list(sys.modules)
        for name in self.preloaded:
            self.session_trace.add(("modname", name))
        inipath = getattr(config, "inipath", None)
        if inipath is not None:
            self.session_trace.add(("read", os.path.abspath(str(inipath))))
        _trace.record_into(self.session_trace)
        what = config.getoption("fixgate_record", None)
        if what is not None:
            self.recording = Recording(self.run.classifier, what)
            self.recording.hook_into(config.pluginmanager)
        _trace.install()

    def _emit_collection_trace(self):
        """The zygote's session trace so far (its collection), for fixgate to tell whether a run
        may continue after a crash in a forked child: only when nothing collection read has
        changed since. Rendered with tracing off; the recorded set stays as it is. Not sent
        when modules of the tree were imported before the hook could see them (conftest.py
        files pytest loads before configuring plugins): what they read is unknown. With
        --fixgate-collect-items it is sent all the same, marked partial: it is then also the
        audit's collection trace, which names such modules as imported, as a fresh
        --collect-only run's does."""
        roots = tuple(r + os.sep for r in (self.root, os.path.realpath(self.root)))
        partial = False
        for name in self.preloaded:
            path = getattr(sys.modules.get(name), "__file__", None)
            if isinstance(path, str) and os.path.abspath(path).startswith(roots):
                partial = True
                break
        if partial and not self.collect_items:
            return
        saved = _trace.record_into(None)
        try:
            trace = self.run.classifier.render(set(self.session_trace))
        except Exception:
            trace = None
            self.run.internal("collection trace")
        finally:
            _trace.record_into(saved)
        if trace is not None:
            event = {"event": "session_trace", "trace": trace}
            if partial:
                event["partial"] = True
            self.run.emit(event)

    def _begin_forked_run(self, session, command):
        """In a child of the fork server: become the process a fresh `pytest --fixgate-order`
        would be right after collection. The collection trace (inherited) stays the session's,
        as a fresh process records its own collection there; everything of one run is new."""
        self.run.close()
        self.forked = True
        self.session = session
        self.forkserver_fd = None
        self.collect_event = False
        self.collect_items = False
        self.collected_ids = None
        self.run = _Run(
            self.config,
            self.root,
            self._absolute,
            command.get("events"),
            command.get("order"),
            command.get("watch"),
            command.get("lenient", False),
        )
        what = command.get("record")
        if self.recording is not None:
            self.recording.forked(what)
        elif what:
            # A fork server that records nothing forks a run that records state.
            self.recording = Recording(self.run.classifier, what, collected=True)
        if self.recording is not None:
            self.recording.hook_into(self.config.pluginmanager)
        self.order_state = "failed"
        self._apply_order(self.config, session.items)
        self.order_state = "ok"
        _trace.record_into(self.session_trace)

    # ---- collection -----------------------------------------------------------------------------

    def _apply_order(self, config, items):
        order = self.run.order
        by_id = {}
        for it in items:
            by_id.setdefault(it.nodeid, it)
        missing = [n for n in order if n not in by_id]
        if missing and self.run.lenient:
            # Said before any test runs, and the order the reader follows is what is left.
            self.run.emit({"event": "uncollected", "nodeids": missing})
            gone = set(missing)
            order = [n for n in order if n not in gone]
            self.run.order = order
            self.run.announce(order)
            missing = []
        if missing:
            msg = "fixgate: --fixgate-order lists %d node id(s) that were not collected: %s" % (
                len(missing),
                ", ".join(missing[:20]) + (" ..." if len(missing) > 20 else ""),
            )
            self.run.emit(
                {"event": "error", "kind": "unknown-nodeid", "message": msg, "nodeids": missing}
            )
            raise pytest.UsageError(msg)
        new = [by_id[n] for n in order]
        keep = set(id(it) for it in new)
        deselected = [it for it in items if id(it) not in keep]
        items[:] = new
        if deselected:
            config.hook.pytest_deselected(items=deselected)
        if len(keep) < len(new) and not config.pluginmanager.has_plugin("fixgate-twice"):
            # Only the nio order lists a test twice; the hooks a second run needs stay off the
            # path of every other run.
            config.pluginmanager.register(_TwiceInARow(), "fixgate-twice")

    def pytest_itemcollected(self, item):
        if self.collected_ids is not None:
            self.collected_ids.append(item.nodeid)
        if self.carried is not None:
            self.itemized.append(item.nodeid)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_pycollect_makemodule(self, parent):
        """A module of --fixgate-carry-modules is imported when collection reaches it, as every
        module is, and makes no items: only a plain `pytest.Module` (a package, or a plugin's
        own module class, collects as it would)."""
        outcome = yield
        if self.carried is None or outcome.excinfo is not None:
            return
        module = outcome.get_result()
        nodeid = _path_text(module.nodeid)
        if type(module) is not pytest.Module or nodeid not in self.carried:
            return
        plugin = self

        def collect():
            module.obj  # the import Module.collect starts with, its errors included
            # Named once imported: a module that skips itself at import here, though its base
            # had items, goes unnamed, and fixgate collects whole.
            plugin.unitemized.append({"nodeid": nodeid, "at": len(plugin.itemized)})
            return []

        module.collect = collect

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, session, config, items):
        outcome = yield
        if self.run.order is None or outcome.excinfo is not None:
            self.order_state = "failed"
            return
        self.order_state = "failed"
        self._apply_order(config, items)
        self.order_state = "ok"

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session):
        run = self.run
        # A wrapper registered after ours sits outside it and could still have reordered the
        # items: check, and apply the order once more.
        if run.order is not None and self.order_state == "ok":
            if [it.nodeid for it in session.items] != run.order:
                self.order_state = "failed"
                self._apply_order(self.config, session.items)
                self.order_state = "ok"
        if run.order is not None and self.order_state != "ok":
            return
        if self.collect_event and run.streaming:
            try:
                nodeids = [it.nodeid for it in session.items]
                if self.carried is not None and self.collect_items:
                    # Where each carried module's items go holds only while the session's
                    # items are in the order they were collected, none taken out.
                    run.emit(
                        {
                            "event": "unitemized",
                            "modules": self.unitemized,
                            "in_order": nodeids == self.itemized,
                        }
                    )
                if self.collect_items:
                    items = [self._item_info(it) for it in session.items]
                    event = {"event": "collected", "items": items}
                    # Items collected and then taken out of the session: by -k, -m, --deselect
                    # or a pytest_collection_modifyitems hook, whether or not it said so.
                    kept = set(nodeids)
                    dropped = [n for n in self.collected_ids or () if n not in kept]
                    if dropped:
                        event["deselected"] = dropped
                    run.emit(event)
                else:
                    # A run that collects for itself needs only the order: files, lines and
                    # markers cost a tenth of a millisecond per test.
                    run.write_line(
                        '{"event":"collected","items":[%s]}'
                        % ",".join('{"nodeid":%s}' % _JSON_STRING(_path_text(n)) for n in nodeids)
                    )
                if run.announced is None and run.streaming:
                    run.announce(nodeids)
            except Exception:
                run.internal("collected event")

    def _item_info(self, item):
        path = getattr(item, "path", None)
        if path is None:
            path = getattr(item, "fspath", None)
        file = None
        if path is not None:
            kind, text, _ = self.run.classifier.classify(os.path.abspath(str(path)))
            file = text if kind is not None else _path_text(os.path.abspath(str(path)))
        line = None
        try:
            loc = item.location
            if isinstance(loc[1], int):
                line = loc[1] + 1
        except Exception:
            pass
        markers = []
        for m in item.iter_markers():
            if m.name == "parametrize":
                continue
            markers.append(
                {
                    "name": m.name,
                    "args": [_jsonable(a) for a in m.args],
                    "kwargs": {str(k): _jsonable(v) for k, v in m.kwargs.items()},
                }
            )
        # unittest's @skip / @skipIf / @skipUnless are not pytest markers, but they are skips
        # all the same: report them as one, so a new one counts against the budget.
        for target in (getattr(item, "obj", None), getattr(item, "cls", None)):
            try:
                if target is not None and getattr(target, "__unittest_skip__", False):
                    why = getattr(target, "__unittest_skip_why__", "") or ""
                    markers.append({"name": "skip", "args": [], "kwargs": {"reason": str(why)}})
                    break
            except Exception:
                pass
        return {"nodeid": _path_text(item.nodeid), "file": file, "line": line, "markers": markers}

    def pytest_collectreport(self, report):
        run = self.run
        if report.skipped:
            # a module skipped at collection (pytest.skip(allow_module_level=True) or a
            # skip marker on a collector): its tests never appear as items
            try:
                run.emit(
                    {
                        "event": "collect_skip",
                        "nodeid": _path_text(report.nodeid),
                        "reason": _skip_reason(report),
                    }
                )
            except Exception:
                run.internal("collect_skip event")
            return
        if not report.failed:
            return
        try:
            text = _longrepr_text(report.longrepr)
            run.emit(
                {
                    "event": "collect_error",
                    "nodeid": _path_text(report.nodeid),
                    "message": _error_line(text) or "collection failed",
                    "longrepr": text[:16000],
                }
            )
        except Exception:
            run.internal("collect_error event")

    # ---- running ----------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        option = session.config.option
        if not option.collectonly and (
            not session.testsfailed or option.continue_on_collection_errors
        ):
            # Before the recording stops: a finalizer of collection's garbage is collection's.
            _forkserver.freeze_collected(self.run.classifier)
        if self.recording is not None:
            self.recording.collection_done(session.config.pluginmanager)
        if self.forkserver_fd is not None:
            if not session.config.option.collectonly and not session.testsfailed:
                self._emit_collection_trace()
                # Returns only in a forked child, set up for its run; the zygote exits there.
                command = _forkserver.serve(self.forkserver_fd, self.config)
                self._begin_forked_run(session, command)
            else:
                _forkserver.refuse(self.forkserver_fd, "collection failed")
        lease = self.run.lease
        if lease is None or lease.started:
            return None
        if session.config.option.collectonly:
            return None
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            return None  # pytest stops on collection errors: nothing will run
        try:
            lease.start()
            self.run.emit(
                {
                    "event": "lease",
                    "mode": lease.mode,
                    "files": len(lease.state),
                    "hashed": len(lease.hashes),
                    "roots": [r for _a, r in lease.roots],
                    "seconds": round(lease.initial_seconds, 6),
                }
            )
        except Exception:
            self.run.lease = None
            self.run.internal("lease start")
        return None

    # pluggy 1.2+ runs new-style wrappers without the Result object and the extra frames of an
    # old-style one: on the path of every test, so the plugin takes it when pluggy has it.
    if _NEW_STYLE_WRAPPERS:

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_runtest_protocol(self, item, nextitem):
            cur = self._test_start(item)
            try:
                result = yield
            except BaseException:
                self._test_end(item, cur, True)
                raise
            self._test_end(item, cur, False)
            return result

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_runtest_makereport(self, item, call):
            self._note_raised(item, call)
            changed = self._line_tracebacks(item, call)
            try:
                return (yield)
            finally:
                self._restore_tracebacks(changed)

    else:

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_runtest_protocol(self, item, nextitem):
            cur = self._test_start(item)
            outcome = yield
            self._test_end(item, cur, outcome.excinfo is not None)

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_runtest_makereport(self, item, call):
            self._note_raised(item, call)
            changed = self._line_tracebacks(item, call)
            try:
                yield
            finally:
                self._restore_tracebacks(changed)

    def _line_tracebacks(self, item, call):
        """While a failed phase's report is made, pytest's `--tb=line` style: the report keeps
        its crash line (`reprcrash`, the only part of a test's failure fixgate reads) and skips
        the source of every traceback entry, which the default style parses anew per entry (8
        ms a failing test, most of a run where fifty tests fail). A collector's failure, whose
        text fixgate does read, is made elsewhere and keeps the suite's style. Only where no
        other code sees the report's text: a conftest or a plugin that implements
        `pytest_runtest_makereport` or `pytest_runtest_logreport` could read its traceback
        (and decide an outcome by it). The item's traceback filter goes with it (pytest 7.4+):
        pytest's walks every entry of the traceback, pytest's own frames included, and makes a
        path and a stat of each (half a millisecond a failing test), to choose entries the line
        style does not show; the last one stands in. Returns what to put back, or None when
        nothing was changed."""
        # unittest's failure waits on the item until pytest's own makereport puts it on call.
        if call.excinfo is None and not getattr(item, "_excinfo", None):
            return None
        if self._others_read_reports is None:
            self._others_read_reports = self._reports_read_elsewhere()
        if self._others_read_reports:
            return None
        option = getattr(self.config, "option", None)
        style = getattr(option, "tbstyle", None)
        if style is None or style == "line":
            return None
        option.tbstyle = "line"
        filtered = False
        try:
            if hasattr(type(item), "_traceback_filter") and "_traceback_filter" not in vars(item):
                item._traceback_filter = _last_entry
                filtered = True
        except Exception:
            pass  # an item without a __dict__: pytest's own filter stays
        return style, item, filtered

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        """pytest's summary of the failures in the line style, whatever the suite's (each
        failure's crash line, and what it printed): it goes to the run's log, of which fixgate
        shows the end only when the process did not do what it was started for, and the tests'
        outcomes and messages come from the events. In every other style pytest looks for each
        failed test's teardown report among all the run's reports, which is quadratic: about a
        second of a run where a thousand tests fail. Only where no other plugin's summary could
        read the style (a conftest's or a plugin's `pytest_terminal_summary`)."""
        option = getattr(config, "option", None)
        style = getattr(option, "tbstyle", None)
        changed = (
            style is not None
            and style not in ("no", "line")
            and not self._implemented_elsewhere(("pytest_terminal_summary",))
        )
        if changed:
            option.tbstyle = "line"
        try:
            yield
        finally:
            if changed:
                option.tbstyle = style

    def _reports_read_elsewhere(self):
        """Whether a plugin other than pytest's own and fixgate's implements a hook that gets
        a test's report while it is made or logged."""
        return self._implemented_elsewhere(
            ("pytest_runtest_makereport", "pytest_runtest_logreport")
        )

    def _implemented_elsewhere(self, names):
        """Whether a plugin other than pytest's own and fixgate's implements one of the hooks
        `names`."""
        try:
            hooks = self.config.pluginmanager.hook
            impls = []
            for name in names:
                impls += getattr(hooks, name).get_hookimpls()
        except Exception:
            return True
        for impl in impls:
            plugin = impl.plugin
            if plugin is self or plugin is self.run:
                continue
            # A module is its own plugin (`_pytest.runner`); an object, its class's module.
            module = getattr(plugin, "__name__", None) if isinstance(plugin, type(sys)) else None
            if module is None:
                module = getattr(type(plugin), "__module__", None)
            if isinstance(module, str) and module.startswith(("_pytest.", "fixgate_plugin_")):
                continue
            return True
        return False

    def _restore_tracebacks(self, changed):
        if changed is None:
            return
        style, item, filtered = changed
        self.config.option.tbstyle = style
        if filtered:
            item.__dict__.pop("_traceback_filter", None)

    def _note_raised(self, item, call):
        """Before any other implementation can change the report (this wrapper is called
        first), what the phase's call raised: the plugin's own copy of the phase's outcome."""
        cur = self.run.current
        if cur is None or cur.nodeid != item.nodeid:
            return
        try:
            excinfo = call.excinfo
            phase = _raised_phase(None if excinfo is None else excinfo.value)
            if call.when == "call":
                # unittest's failures are kept on the item until pytest's own makereport puts
                # them on the call; the wrapper around runtest saw the test's own exception.
                pending = getattr(item, "_excinfo", None)
                if pending:
                    phase = _redder(phase, _raised_phase(pending[0].value))
                phase = _redder(phase, cur.raised.get("runruntest"))
            elif call.when == "setup":
                phase = _redder(phase, cur.raised.get("runsetup"))
            cur.raised[call.when] = phase
        except Exception:
            self.run.internal("raised outcome")

    def _wrap_item(self, item, cur):
        """Stands in for the item's `setup` and `runtest`, so that what the test's fixtures and
        the test itself raised is seen before any `pytest_runtest_setup` or `pytest_runtest_call`
        hook could catch it. Undone by `_unwrap_item`."""
        for name in ("setup", "runtest"):
            inner = getattr(item, name, None)
            if inner is None:
                continue
            cur.wrapped.append((name, item.__dict__.get(name)))
            setattr(item, name, _watching(inner, item, cur.raised, "run" + name))

    def _unwrap_item(self, item, cur):
        """The item's own `setup` and `runtest` again (the nio order runs an item twice)."""
        for name, own in cur.wrapped:
            try:
                if own is not None:
                    setattr(item, name, own)
                else:
                    delattr(item, name)
            except AttributeError:
                pass
        cur.wrapped = []

    def _test_start(self, item):
        """Before the test's protocol: its record, started (None only when even that failed)."""
        run = self.run
        cur = None
        try:
            run.executed.append(item.nodeid)
            cur = _Test(item.nodeid, run.index)
            run.index += 1
            run.current = cur
            if not run.announced_next(item.nodeid):
                run.emit(
                    {"event": "test_start", "nodeid": _path_text(item.nodeid), "index": cur.index}
                )
            if run.lease is not None and not run.lease.started:
                run.lease.start()
            if run.streaming:
                self._wrap_item(item, cur)
                _trace.record_into(cur.trace)
            if self.recording is not None:
                self.recording.test_start()
            return cur
        except Exception:
            run.internal("test start")
            return cur  # the reports still come, and the test still gets its event

    def _test_end(self, item, cur, interrupted):
        run = self.run
        _trace.record_into(self.session_trace if run.streaming else None)
        run.current = None
        if cur is None:
            return
        self._unwrap_item(item, cur)
        try:
            cur.end = time.time()
            if interrupted:
                # interrupted (KeyboardInterrupt, pytest.exit): no result for this test, which
                # the finish event names; the lease pass still runs so the next process starts
                # from the right state
                run.interrupted_in = cur.nodeid
                if run.lease is not None:
                    run.lease.after_test()
                return
            self._finish_test(item, cur)
        except Exception:
            run.internal("test result")

    def pytest_runtest_logreport(self, report):
        cur = self.run.current
        if cur is None or report.nodeid != cur.nodeid:
            return
        try:
            if report.outcome == "rerun":
                cur.reruns += 1
                cur.rerun_messages.append(
                    "%s: %s" % (report.when, _report_message(report) or "failed")
                )
                cur.reports = {}
                cur.raised.clear()
                return
            if _is_subtest_report(report):
                # Subtest reports (unittest's subTest under pytest 9, pytest-subtests) come
                # with when="call" before the test's own report: a failed subtest must not be
                # overwritten by the test's passing call report.
                if report.failed and cur.subtest_failure is None:
                    cur.subtest_failure = report
                return
            cur.reports[report.when] = report
        except Exception:
            self.run.internal("logreport")

    def _phases(self, item, cur):
        """Each reported phase, and the same phase as its call raised it where a hook made the
        report greener than that."""
        reported = {}
        true = {}
        xfail_marked = None
        for when, rep in cur.reports.items():
            phase = _reported_phase(rep)
            reported[when] = phase
            raised = cur.raised.get(when)
            if raised is not None and raised != phase:
                if xfail_marked is None:
                    xfail_marked = item.get_closest_marker("xfail") is not None
                if _outcome.altered(raised, phase, xfail_marked):
                    phase = raised
            true[when] = phase
        return reported, true

    def _finish_test(self, item, cur):
        run = self.run
        changed = []
        if run.lease is not None:
            try:
                changed = run.lease.after_test()
            except Exception:
                run.lease.force_full = True  # resynchronise on the next test
                run.internal("lease check")
        if not run.streaming:
            return
        reported, true = self._phases(item, cur)
        subtest = cur.subtest_failure is not None
        outcome, failing, skip_reason, xfail_reason = _outcome.test_outcome(
            true.get("setup"), true.get("call"), true.get("teardown"), subtest
        )
        claimed = None
        if true != reported:
            claimed = _outcome.test_outcome(
                reported.get("setup"), reported.get("call"), reported.get("teardown"), subtest
            )[0]
            if claimed == outcome:
                claimed = None
        phases = []
        for when in ("setup", "call", "teardown"):
            rep = cur.reports.get(when)
            if rep is not None:
                duration = getattr(rep, "duration", 0.0) or 0.0
                p = true[when]
                phases.append(_phase_json(when, p.outcome, duration, p.message))
        message = None
        if outcome in ("failed", "error"):
            if failing == "subtest":
                message = _report_message(cur.subtest_failure)
            elif failing is not None:
                message = true[failing].message
            if message is None and not cur.reports:
                message = "no test reports were produced"
        writes = []
        try:
            for m in item.iter_markers("writes"):
                for a in m.args:
                    a = a if isinstance(a, str) else str(a)
                    if a not in writes:
                        writes.append(a)
        except Exception:
            run.internal("writes marker")
        try:
            trace = run.classifier.render(cur.trace)
        except Exception:
            trace = {}
            run.internal("trace rendering")
        run.drain_hook_errors()
        # Optional fields are written only when they say something: most tests pass, read
        # nothing, change nothing, and the event is on the path of every test.
        event = {}
        if skip_reason is not None:
            event["skip_reason"] = skip_reason
        if xfail_reason is not None:
            event["xfail_reason"] = str(xfail_reason)
        if message is not None:
            event["message"] = message
        if claimed is not None:
            event["reported"] = claimed
        if cur.reruns:
            event["reruns"] = cur.reruns
            event["rerun_messages"] = cur.rerun_messages
        if writes:
            event["writes_marker"] = writes
        if trace:
            event["trace"] = trace
        if changed:
            event["changed"] = changed
        if self.recording is not None:
            try:
                event.update(self.recording.test_end(item))
            except Exception:
                event["code_unknown"] = True
                run.internal("recording")
        try:
            line = _test_line(cur.nodeid, cur.index, outcome, phases, cur.start, cur.end, event)
        except (TypeError, ValueError):  # an optional field the encoder refuses
            line = _test_line(cur.nodeid, cur.index, outcome, phases, cur.start, cur.end, {})
            line = line[:-1] + "," + _ENCODE(_jsonable(event))[1:]
        run.write_line(line)
        run.last_reported = cur.nodeid

    # ---- the end ----------------------------------------------------------------------------------

    def _check_order(self, session):
        run = self.run
        requested = run.order[: len(run.executed)]
        if run.executed == requested:
            return
        diverge = 0
        while diverge < len(requested) and run.executed[diverge] == requested[diverge]:
            diverge += 1
        msg = (
            "fixgate: the executed order differs from the requested order at position "
            "%d: ran %r, expected %r"
            % (
                diverge,
                run.executed[diverge] if diverge < len(run.executed) else None,
                requested[diverge] if diverge < len(requested) else None,
            )
        )
        run.emit(
            {
                "event": "error",
                "kind": "order-mismatch",
                "message": msg,
                "executed": run.executed,
            }
        )
        if not run.streaming:
            sys.stderr.write(msg + "\n")
        if int(session.exitstatus) in (0, 1, 5):
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session, exitstatus):
        run = self.run
        try:
            if run.order is not None:
                self._check_order(session)
        except Exception:
            run.internal("order check")
        if run.lease is not None:
            run.lease.close(wait=False)  # no test runs after this
        yield
        try:
            if run.streaming and not run.finished:
                run.finished = True
                _trace.record_into(None)
                try:
                    trace = run.classifier.render(self.session_trace)
                except Exception:
                    trace = {}
                    run.internal("session trace")
                run.drain_hook_errors()
                run.emit({"event": "session_trace", "trace": trace})
                if self.recording is not None:
                    code = self.recording.session_event()
                    if code is not None:
                        run.emit(code)
                run.emit(
                    {
                        "event": "finish",
                        "exitstatus": int(session.exitstatus),
                        "running": None
                        if run.interrupted_in is None
                        else _path_text(run.interrupted_in),
                    }
                )
        except Exception:
            run.internal("finish")

    def pytest_unconfigure(self, config):
        _trace.record_into(None)
        if self.run.lease is not None:
            self.run.lease.close()
        self.run.close()
        if self.forked and self.session is not None:
            try:
                _forkserver.exit_fast(int(self.session.exitstatus))
            except Exception:
                pass
