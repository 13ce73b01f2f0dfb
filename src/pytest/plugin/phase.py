"""fixgate plugin: one test's record while its protocol runs, and the phases it raised and
reported: what an exception means, the greener of two phases, the item's own setup and runtest
watched for what they raise."""

import sys
import time

import pytest

import fixgate_plugin_outcome as _outcome
from fixgate_plugin_events import _first_line, _report_message, _skip_reason


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

