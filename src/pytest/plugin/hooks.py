"""fixgate plugin: the hooks of a session: configuration, the fork server's hand-over to a
forked run, each test's protocol and record, and the session's end. Collection's hooks are
fixgate_plugin_collection's, one ordered run fixgate_plugin_run's, one test's record
fixgate_plugin_phase's, the options fixgate_plugin_flags'."""

import os
import sys
import time

import pytest

import fixgate_plugin_forkserver as _forkserver
import fixgate_plugin_outcome as _outcome
import fixgate_plugin_trace as _trace
from fixgate_plugin_collection import _CollectionHooks, _read_carried
from fixgate_plugin_events import (
    _ENCODE,
    _is_subtest_report,
    _jsonable,
    _path_text,
    _phase_json,
    _report_message,
    _test_line,
)
from fixgate_plugin_phase import (
    _Test,
    _last_entry,
    _raised_phase,
    _redder,
    _reported_phase,
    _watching,
)
from fixgate_plugin_record import Recording
from fixgate_plugin_run import _Run


def _has_new_style_wrappers():
    try:
        pytest.hookimpl(wrapper=True)
        return True
    except TypeError:  # pluggy before 1.2
        return False


_NEW_STYLE_WRAPPERS = _has_new_style_wrappers()


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


class _FixgatePlugin(_CollectionHooks):
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
