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
import fixgate_plugin_options as _options
import fixgate_plugin_trace as _trace
from fixgate_plugin_record import Recording
from fixgate_plugin_classify import _Classifier
from fixgate_plugin_events import (
    _ENCODE,
    _JSON_STRING,
    PROTOCOL_VERSION,
    _error_line,
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


class _FixgatePlugin(object):
    def __init__(self, config):
        self.config = config
        self.pid = os.getpid()
        self.fd = None
        self.lock = threading.Lock()
        self.order = None
        self.executed = []
        self.index = 0
        self.current = None  # per-test state while a test's protocol runs
        self.session_trace = set()
        self.lease = None
        self.classifier = None
        self.collect_event = bool(config.getoption("fixgate_collect", False))
        self.internal_errors = 0
        self.finished = False
        self.order_state = None  # None: not applied yet, "ok", "failed"
        # The order the reader knows (the order file, or the collected event), and the last
        # test reported: test_start is written only when the reader cannot tell which test
        # runs next (the first test, or one out of the announced order).
        self.announced = None
        self.announced_pos = None
        self.last_reported = None
        self.interrupted_in = None  # the test a clean session end interrupted, if any
        self.recording = None  # what --fixgate-record asks for (fixgate_plugin_record)

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
        self._open_run(
            config.getoption("fixgate_events", None),
            config.getoption("fixgate_order", None),
            config.getoption("fixgate_watch", None),
        )
        if self.fd is None:
            return  # ordering only: no trace, no lease

        # What was loaded before the hook could see it (conftest.py files, plugins, the
        # configuration file) belongs to the session too.
        self.preloaded = list(sys.modules)
        for name in self.preloaded:
            self.session_trace.add(("modname", name))
        inipath = getattr(config, "inipath", None)
        if inipath is not None:
            self.session_trace.add(("read", os.path.abspath(str(inipath))))
        _trace._TRACE = self.session_trace
        what = config.getoption("fixgate_record", None)
        if what is not None:
            self.recording = Recording(self.classifier, what)
        if not _trace._HOOK_INSTALLED:
            sys.addaudithook(_trace._audit_hook)
            _trace._HOOK_INSTALLED = True

    def _open_run(self, events, order, watch):
        """The part of the set-up that belongs to one ordered run: the events file, the order,
        the lease and the classifier. A fresh process does it at configure time; a child of the
        fork server (fixgate_plugin_forkserver) does it again after the fork."""
        absolute = self._absolute
        self.events_path = absolute(events) if events is not None else None
        self.order_path = absolute(order) if order is not None else None
        self.watch_path = absolute(watch) if watch is not None else None

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
                self._announce(self.order)
            if self.watch_path is not None:
                watch_roots = self._read_watch(self.watch_path)
        except pytest.UsageError:
            # pytest stops before the session starts: end the stream here
            self.emit({"event": "finish", "exitstatus": int(pytest.ExitCode.USAGE_ERROR)})
            self._close()
            raise

        if self.fd is None:
            return

        ignored = [self.events_path, self.order_path, self.watch_path]
        self.classifier = _Classifier(self.root, [p for p in ignored if p])

        if watch_roots is not None:
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
                self._close()
                raise pytest.UsageError("fixgate: --fixgate-watch %s: %s" % (self.watch_path, e))
            # roots that hold temporary files of the run are excluded unless named directly
            self.lease.exclude_dirs = set(
                d for d in excl_dirs if not any(d == a for a, _ in self.lease.roots)
            )

    def _emit_collection_trace(self):
        """The zygote's session trace so far (its collection), for fixgate to tell whether a run
        may continue after a crash in a forked child: only when nothing collection read has
        changed since. Rendered with tracing off; the recorded set stays as it is. Not sent
        when modules of the tree were imported before the hook could see them (conftest.py
        files pytest loads before configuring plugins): what they read is unknown."""
        roots = tuple(r + os.sep for r in (self.root, os.path.realpath(self.root)))
        for name in self.preloaded:
            path = getattr(sys.modules.get(name), "__file__", None)
            if isinstance(path, str) and os.path.abspath(path).startswith(roots):
                return
        saved = _trace._TRACE
        _trace._TRACE = None
        try:
            trace = self.classifier.render(set(self.session_trace))
        except Exception:
            trace = None
            self.internal("collection trace")
        finally:
            _trace._TRACE = saved
        if trace is not None:
            self.emit({"event": "session_trace", "trace": trace})

    def _begin_forked_run(self, session, command):
        """In a child of the fork server: become the process a fresh `pytest --fixgate-order`
        would be right after collection. The collection trace (inherited) stays the session's,
        as a fresh process records its own collection there; everything of one run is new."""
        self._close()
        self.pid = os.getpid()
        self.forkserver_fd = None
        self.order = None
        self.executed = []
        self.index = 0
        self.current = None
        self.lease = None
        self.collect_event = False
        self.internal_errors = 0
        self.finished = False
        self.announced = None
        self.announced_pos = None
        self.last_reported = None
        self.interrupted_in = None
        self._open_run(command.get("events"), command.get("order"), command.get("watch"))
        if self.recording is not None:
            self.recording.forked(command.get("record"))
        self.order_state = "failed"
        self._apply_order(self.config, session.items)
        self.order_state = "ok"
        _trace._TRACE = self.session_trace

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

    def _drain_hook_errors(self):
        while _trace._HOOK_ERRORS:
            msg = _trace._HOOK_ERRORS.pop(0)
            self.emit({"event": "error", "kind": "internal", "message": "fixgate plugin: " + msg})

    # ---- collection -----------------------------------------------------------------------------

    def _apply_order(self, config, items):
        by_id = {}
        for it in items:
            by_id.setdefault(it.nodeid, it)
        missing = [n for n in self.order if n not in by_id]
        if missing:
            msg = "fixgate: --fixgate-order lists %d node id(s) that were not collected: %s" % (
                len(missing),
                ", ".join(missing[:20]) + (" ..." if len(missing) > 20 else ""),
            )
            self.emit(
                {"event": "error", "kind": "unknown-nodeid", "message": msg, "nodeids": missing}
            )
            raise pytest.UsageError(msg)
        new = [by_id[n] for n in self.order]
        keep = set(id(it) for it in new)
        deselected = [it for it in items if id(it) not in keep]
        items[:] = new
        if deselected:
            config.hook.pytest_deselected(items=deselected)
        if len(keep) < len(new) and not config.pluginmanager.has_plugin("fixgate-twice"):
            # Only the nio order lists a test twice; the hooks a second run needs stay off the
            # path of every other run.
            config.pluginmanager.register(_TwiceInARow(), "fixgate-twice")

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, session, config, items):
        outcome = yield
        if self.order is None or outcome.excinfo is not None:
            self.order_state = "failed"
            return
        self.order_state = "failed"
        self._apply_order(config, items)
        self.order_state = "ok"

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session):
        # A wrapper registered after ours sits outside it and could still have reordered the
        # items: check, and apply the order once more.
        if self.order is not None and self.order_state == "ok":
            if [it.nodeid for it in session.items] != self.order:
                self.order_state = "failed"
                self._apply_order(self.config, session.items)
                self.order_state = "ok"
        if self.order is not None and self.order_state != "ok":
            return
        if self.collect_event and self.fd is not None:
            try:
                nodeids = [it.nodeid for it in session.items]
                if self.config.getoption("collectonly", False):
                    items = [self._item_info(it) for it in session.items]
                    self.emit({"event": "collected", "items": items})
                else:
                    # A run that collects for itself needs only the order: files, lines and
                    # markers cost a tenth of a millisecond per test.
                    self.write_line(
                        '{"event":"collected","items":[%s]}'
                        % ",".join('{"nodeid":%s}' % _JSON_STRING(_path_text(n)) for n in nodeids)
                    )
                if self.announced is None and self.fd is not None:
                    self._announce(nodeids)
            except Exception:
                self.internal("collected event")

    def _announce(self, nodeids):
        self.announced = nodeids
        self.announced_pos = dict((n, i) for i, n in enumerate(nodeids))

    def _announced_next(self, nodeid):
        """Whether the reader, having seen the result of the last reported test, expects
        `nodeid` to run now."""
        if self.last_reported is None or self.announced is None:
            return False
        i = self.announced_pos.get(self.last_reported)
        return i is not None and i + 1 < len(self.announced) and self.announced[i + 1] == nodeid

    def _item_info(self, item):
        path = getattr(item, "path", None)
        if path is None:
            path = getattr(item, "fspath", None)
        file = None
        if path is not None:
            kind, text, _ = self.classifier.classify(os.path.abspath(str(path)))
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
        if report.skipped:
            # a module skipped at collection (pytest.skip(allow_module_level=True) or a
            # skip marker on a collector): its tests never appear as items
            try:
                self.emit(
                    {
                        "event": "collect_skip",
                        "nodeid": _path_text(report.nodeid),
                        "reason": _skip_reason(report),
                    }
                )
            except Exception:
                self.internal("collect_skip event")
            return
        if not report.failed:
            return
        try:
            text = _longrepr_text(report.longrepr)
            self.emit(
                {
                    "event": "collect_error",
                    "nodeid": _path_text(report.nodeid),
                    "message": _error_line(text) or "collection failed",
                    "longrepr": text[:16000],
                }
            )
        except Exception:
            self.internal("collect_error event")

    # ---- running ----------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        if self.recording is not None:
            self.recording.collection_done()
        if self.forkserver_fd is not None:
            if not session.config.option.collectonly and not session.testsfailed:
                self._emit_collection_trace()
                # Returns only in a forked child, set up for its run; the zygote exits there.
                command = _forkserver.serve(self.forkserver_fd, self.config)
                self._begin_forked_run(session, command)
            else:
                _forkserver.refuse(self.forkserver_fd, "collection failed")
        if self.lease is None or self.lease.started:
            return None
        if session.config.option.collectonly:
            return None
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            return None  # pytest stops on collection errors: nothing will run
        try:
            self.lease.start()
            self.emit(
                {
                    "event": "lease",
                    "mode": self.lease.mode,
                    "files": len(self.lease.state),
                    "hashed": len(self.lease.hashes),
                    "roots": [r for _a, r in self.lease.roots],
                    "seconds": round(self.lease.initial_seconds, 6),
                }
            )
        except Exception:
            self.lease = None
            self.internal("lease start")
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

    else:

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_runtest_protocol(self, item, nextitem):
            cur = self._test_start(item)
            outcome = yield
            self._test_end(item, cur, outcome.excinfo is not None)

    def _test_start(self, item):
        """Before the test's protocol: its record, started (None only when even that failed)."""
        cur = None
        try:
            self.executed.append(item.nodeid)
            cur = {
                "nodeid": item.nodeid,
                "index": self.index,
                "reports": {},
                "reruns": 0,
                "rerun_messages": [],
                "start": time.time(),
                "trace": set(),
            }
            self.index += 1
            self.current = cur
            if not self._announced_next(item.nodeid):
                self.emit(
                    {"event": "test_start", "nodeid": _path_text(item.nodeid), "index": cur["index"]}
                )
            if self.lease is not None and not self.lease.started:
                self.lease.start()
            if self.fd is not None:
                _trace._TRACE = cur["trace"]
            if self.recording is not None:
                self.recording.test_start()
            return cur
        except Exception:
            self.internal("test start")
            return cur  # the reports still come, and the test still gets its event

    def _test_end(self, item, cur, interrupted):
        _trace._TRACE = self.session_trace if self.fd is not None else None
        self.current = None
        if cur is None:
            return
        try:
            cur["end"] = time.time()
            if interrupted:
                # interrupted (KeyboardInterrupt, pytest.exit): no result for this test, which
                # the finish event names; the lease pass still runs so the next process starts
                # from the right state
                self.interrupted_in = cur["nodeid"]
                if self.lease is not None:
                    self.lease.after_test()
                return
            self._finish_test(item, cur)
        except Exception:
            self.internal("test result")

    def pytest_runtest_logreport(self, report):
        cur = self.current
        if cur is None or report.nodeid != cur["nodeid"]:
            return
        try:
            if report.outcome == "rerun":
                cur["reruns"] += 1
                cur["rerun_messages"].append(
                    "%s: %s" % (report.when, _report_message(report) or "failed")
                )
                cur["reports"] = {}
                return
            if _is_subtest_report(report):
                # Subtest reports (unittest's subTest under pytest 9, pytest-subtests) come
                # with when="call" before the test's own report: a failed subtest must not be
                # overwritten by the test's passing call report.
                if report.failed and cur.get("subtest_failure") is None:
                    cur["subtest_failure"] = report
                return
            cur["reports"][report.when] = report
        except Exception:
            self.internal("logreport")

    def _finish_test(self, item, cur):
        changed = []
        if self.lease is not None:
            try:
                changed = self.lease.after_test()
            except Exception:
                self.lease.force_full = True  # resynchronise on the next test
                self.internal("lease check")
        if self.fd is None:
            return
        reports = cur["reports"]
        phases = []
        for when in ("setup", "call", "teardown"):
            rep = reports.get(when)
            if rep is not None:
                duration = getattr(rep, "duration", 0.0) or 0.0
                phases.append(_phase_json(when, rep.outcome, duration, _report_message(rep)))
        setup = reports.get("setup")
        call = reports.get("call")
        teardown = reports.get("teardown")
        outcome = "error"
        skip_reason = None
        xfail_reason = None
        failing = None
        if setup is not None and setup.failed:
            outcome = "error"
            failing = setup
        elif setup is not None and setup.skipped:
            if hasattr(setup, "wasxfail"):
                outcome = "xfailed"
                xfail_reason = setup.wasxfail
            else:
                outcome = "skipped"
                skip_reason = _skip_reason(setup)
        elif call is not None:
            if call.failed:
                outcome = "failed"
                failing = call
            elif call.skipped:
                if hasattr(call, "wasxfail"):
                    outcome = "xfailed"
                    xfail_reason = call.wasxfail
                else:
                    outcome = "skipped"
                    skip_reason = _skip_reason(call)
            elif hasattr(call, "wasxfail"):
                outcome = "xpassed"
                xfail_reason = call.wasxfail
            else:
                outcome = "passed"
        elif setup is not None and setup.passed:
            outcome = "passed"  # no call report: a plugin ran only setup/teardown
        subfailed = cur.get("subtest_failure")
        if subfailed is not None and outcome in ("passed", "skipped", "xpassed"):
            outcome = "failed"
            failing = subfailed
            skip_reason = None
        if teardown is not None and teardown.failed:
            outcome = "error"
            if failing is None:
                failing = teardown
        message = None
        if outcome in ("failed", "error"):
            message = _report_message(failing) if failing is not None else None
            if message is None and not reports:
                message = "no test reports were produced"
        writes = []
        try:
            for m in item.iter_markers("writes"):
                for a in m.args:
                    a = a if isinstance(a, str) else str(a)
                    if a not in writes:
                        writes.append(a)
        except Exception:
            self.internal("writes marker")
        try:
            trace = self.classifier.render(cur["trace"])
        except Exception:
            trace = {}
            self.internal("trace rendering")
        self._drain_hook_errors()
        # Optional fields are written only when they say something: most tests pass, read
        # nothing, change nothing, and the event is on the path of every test.
        event = {}
        if skip_reason is not None:
            event["skip_reason"] = skip_reason
        if xfail_reason is not None:
            event["xfail_reason"] = str(xfail_reason)
        if message is not None:
            event["message"] = message
        if cur["reruns"]:
            event["reruns"] = cur["reruns"]
            event["rerun_messages"] = cur["rerun_messages"]
        if writes:
            event["writes_marker"] = writes
        if trace:
            event["trace"] = trace
        if changed:
            event["changed"] = changed
        if self.recording is not None:
            try:
                event.update(self.recording.test_end())
            except Exception:
                event["code_unknown"] = True
                self.internal("recording")
        try:
            line = _test_line(
                cur["nodeid"], cur["index"], outcome, phases, cur["start"], cur["end"], event
            )
        except (TypeError, ValueError):  # an optional field the encoder refuses
            line = _test_line(
                cur["nodeid"], cur["index"], outcome, phases, cur["start"], cur["end"], {}
            )
            line = line[:-1] + "," + _ENCODE(_jsonable(event))[1:]
        self.write_line(line)
        if self.fd is not None:
            self.last_reported = cur["nodeid"]

    # ---- the end ----------------------------------------------------------------------------------

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session, exitstatus):
        try:
            if self.order is not None:
                requested = self.order[: len(self.executed)]
                if self.executed != requested:
                    diverge = 0
                    while diverge < len(requested) and self.executed[diverge] == requested[diverge]:
                        diverge += 1
                    msg = (
                        "fixgate: the executed order differs from the requested order at position "
                        "%d: ran %r, expected %r"
                        % (
                            diverge,
                            self.executed[diverge] if diverge < len(self.executed) else None,
                            requested[diverge] if diverge < len(requested) else None,
                        )
                    )
                    self.emit(
                        {
                            "event": "error",
                            "kind": "order-mismatch",
                            "message": msg,
                            "executed": self.executed,
                        }
                    )
                    if self.fd is None:
                        sys.stderr.write(msg + "\n")
                    if int(session.exitstatus) in (0, 1, 5):
                        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        except Exception:
            self.internal("order check")
        if self.lease is not None:
            self.lease.close(wait=False)  # no test runs after this
        yield
        try:
            if self.fd is not None and not self.finished:
                self.finished = True
                _trace._TRACE = None
                try:
                    trace = self.classifier.render(self.session_trace)
                except Exception:
                    trace = {}
                    self.internal("session trace")
                self._drain_hook_errors()
                self.emit({"event": "session_trace", "trace": trace})
                if self.recording is not None:
                    code = self.recording.session_event()
                    if code is not None:
                        self.emit(code)
                self.emit(
                    {
                        "event": "finish",
                        "exitstatus": int(session.exitstatus),
                        "running": None
                        if self.interrupted_in is None
                        else _path_text(self.interrupted_in),
                    }
                )
        except Exception:
            self.internal("finish")

    def pytest_unconfigure(self, config):
        _trace._TRACE = None
        if self.lease is not None:
            self.lease.close()
        self._close()

    def _close(self):
        with self.lock:
            if self.fd is not None:
                try:
                    os.close(self.fd)
                except OSError:
                    pass
                self.fd = None
