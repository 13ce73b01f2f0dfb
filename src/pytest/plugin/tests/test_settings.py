"""The process settings (settings.py): each one a test can change in place is named when it
changed and only then; a logger a test merely asks for (or gives a NullHandler, as a library's
first import does) is no change, one it gives a level is; putting a setting back is a change from
the test before. A logger's name is written as its repr, so a name with terminal escapes reaches
the report printable. Hostile values run none of their code in the comparison, a logger whose
attributes raise is named once, and a reader that raises (a manager whose loggers cannot be
listed) keeps the look before: no change, nothing escapes.

Each step changes what it says and asks what changed since the step before. What the steps
change in this process is put back when the test ends."""

import decimal
import logging
import signal
import socket
import sys

import pytest

import fixgate_plugin_settings as settings


@pytest.fixture
def step():
    """`step(change, want)`: makes the change, and checks the settings named are `want`."""
    before = [settings.take()]

    def step(change, want):
        change()
        now = settings.take(before[0])
        got = sorted(settings.changed(before[0], now))
        before[0] = now
        assert got == sorted(want)

    return step


@pytest.fixture
def restored():
    """The settings the steps change, put back afterwards (and the loggers they made gone)."""
    loggers = set(logging.Logger.manager.loggerDict)
    root = logging.getLogger().level
    timeout = socket.getdefaulttimeout()
    context = decimal.getcontext().copy()
    limit = sys.getrecursionlimit()
    usr1 = signal.getsignal(signal.SIGUSR1)
    manager = logging.root.manager
    yield
    logging.root.manager = manager
    for name in set(logging.Logger.manager.loggerDict) - loggers:
        del logging.Logger.manager.loggerDict[name]
    logging.getLogger().setLevel(root)
    logging.disable(logging.NOTSET)
    socket.setdefaulttimeout(timeout)
    decimal.setcontext(context)
    sys.setrecursionlimit(limit)
    signal.signal(signal.SIGUSR1, usr1)
    signal.setitimer(signal.ITIMER_REAL, 0)


def named(name):
    return "logging.getLogger(%r)" % name


def test_loggers_are_named_when_given_a_level_a_handler_or_propagation_not_when_asked_for(
    restored, step
):
    step(lambda: None, [])
    step(lambda: logging.getLogger("fx.plain"), [])
    step(lambda: logging.getLogger("fx.lib").addHandler(logging.NullHandler()), [])
    step(lambda: logging.getLogger("fx.quiet").setLevel(logging.ERROR), [named("fx.quiet")])
    step(
        lambda: logging.getLogger("fx.plain").addHandler(logging.NullHandler()),
        [named("fx.plain")],
    )
    step(lambda: setattr(logging.getLogger("fx.plain"), "propagate", False), [named("fx.plain")])
    step(lambda: logging.getLogger().setLevel(logging.CRITICAL), ["logging.root"])
    step(lambda: logging.disable(logging.INFO), ["logging.disable"])
    # Put back: a change from the step before.
    step(lambda: logging.disable(logging.NOTSET), ["logging.disable"])


def test_the_interpreters_settings_a_test_changes_in_place_are_named(restored, step):
    step(lambda: socket.setdefaulttimeout(2.5), ["socket.getdefaulttimeout()"])
    step(lambda: setattr(decimal.getcontext(), "prec", 5), ["decimal.getcontext()"])
    step(
        lambda: decimal.getcontext().traps.__setitem__(decimal.Inexact, True),
        ["decimal.getcontext()"],
    )
    step(
        lambda: sys.setrecursionlimit(sys.getrecursionlimit() + 7),
        ["sys.getrecursionlimit()"],
    )
    step(
        lambda: signal.signal(signal.SIGUSR1, lambda *a: None),
        ["signal.getsignal(SIGUSR1)"],
    )
    step(lambda: signal.signal(signal.SIGUSR1, signal.SIG_DFL), ["signal.getsignal(SIGUSR1)"])
    step(lambda: signal.setitimer(signal.ITIMER_REAL, 3600), ["a pending signal.setitimer alarm"])
    step(lambda: signal.setitimer(signal.ITIMER_REAL, 0), ["a pending signal.setitimer alarm"])
    step(lambda: None, [])


def test_a_loggers_name_is_written_printable(restored, step):
    esc = chr(27) + "]0;title" + chr(7)
    step(lambda: logging.getLogger(esc).setLevel(logging.ERROR), [named(esc)])
    assert named(esc).isprintable()


class Evil(object):
    """A value whose comparisons and truth raise, or exit."""

    def __eq__(self, o):
        raise RuntimeError("eq")

    def __ne__(self, o):
        raise RuntimeError("ne")

    def __bool__(self):
        raise SystemExit(3)

    __hash__ = object.__hash__


def test_hostile_values_and_readers_run_none_of_their_code_and_nothing_escapes(restored, step):
    class Bad(logging.Logger):
        propagate = property(lambda self: sys.exit(1), lambda self, v: None)

    class Manager(object):
        loggerDict = property(lambda self: sys.exit(2))

    manager = logging.root.manager
    try:
        step(lambda: setattr(logging.getLogger("fx.evil"), "level", Evil()), [named("fx.evil")])
        step(lambda: None, [])
        step(
            lambda: logging.Logger.manager.loggerDict.__setitem__("fx.bad", Bad("fx.bad")),
            [named("fx.bad")],
        )
        step(lambda: logging.getLogger("fx.quiet").setLevel(logging.INFO), [named("fx.quiet")])
        step(lambda: setattr(logging.root, "manager", Manager()), [])
        step(lambda: setattr(logging.root, "manager", manager), [])
    finally:
        # Gone before pytest's logging looks at every logger again, in this test's teardown.
        logging.root.manager = manager
        logging.Logger.manager.loggerDict.pop("fx.bad", None)
        logging.getLogger("fx.evil").level = logging.NOTSET
