"""fixgate plugin: the recording a run asks for with --fixgate-record (the file-order and
reversed runs of an audit): per test, the repository's code objects it ran (`code`) and the
shared state it left changed (`state`); per session, the code that ran outside any test. The
hooks call this module at a handful of points and add what it returns to their events.

What the session's own fixtures do around the first and the last test is no test's: a
session-scoped fixture every test of the run needs (an autouse one of a plugin or of the root's
conftest.py, pytest-django's test environment) is set up in the first test that sets fixtures up
whatever the order, and what the process tears down after the last test's own teardown
(pytest-django's `del mail.outbox`) comes when no test is left to see it. A second look at the
state before and after each such turn (the `FirstTest` and `LastTest` hooks, registered when
state is recorded) names what the turn changed, and that is taken out of the test's record: the
test's own look cannot stop inside a phase, where pytest's machinery (capture, the current test's
variable) is on. A session-scoped fixture only some tests ask for stays its first asker's: which
test sets it up depends on the order, and so does what the tests before it see."""

import pytest

from fixgate_plugin_deps import Deps
from fixgate_plugin_state import State


class Recording(object):
    """What one process records; `what` is the option's value, a comma-separated subset of
    "code" and "state" (empty: only what runs outside tests, as a fork server records for the
    runs it will fork)."""

    def __init__(self, classifier, what, collected=False):
        self.deps = Deps(classifier)
        self.state = State(classifier)
        self.code = False
        self.states = False
        self.classifier = classifier
        self.turns = 0  # shared fixtures' turns under way (one may ask for another)
        self.probe = None  # the state as a turn began
        self.masked = set()  # what the running test's shared fixtures changed in their turns
        self.closing = False  # the session tears itself down after the last test
        self.ended = 0  # tests ended
        self.pluginmanager = None  # where the hooks below are registered, once state is recorded
        self.first = None  # the FirstTest hooks, until the first test that set fixtures up ends
        self._want(what)
        if collected:
            # Made after collection (a child of a fork server that recorded nothing): what
            # ran outside tests is not known, so no code either.
            self.deps.error = "the collection was not recorded"
        elif self.code or not what:
            # Code objects are traced only when they are asked for, or by a fork server for
            # the runs it forks (an empty list): tracing is what recording costs.
            self.deps.start()

    def _want(self, what):
        parts = set(p.strip() for p in (what or "").split(",") if p.strip())
        self.code = "code" in parts
        self.states = "state" in parts
        self.deps.per_test = self.code

    def forked(self, what):
        """In a child of the fork server: this run's own choice."""
        self._want(what)

    def collection_done(self, pluginmanager):
        self.deps.collection_done(pluginmanager)

    def hook_into(self, pluginmanager):
        """Registers the hooks that take shared fixtures out of the tests' state, when state is
        recorded (after `forked` too: a fork server's child may be the first to ask)."""
        if self.states and self.pluginmanager is None:
            self.pluginmanager = pluginmanager
            if self.ended == 0:
                self.first = FirstTest(self)
                pluginmanager.register(self.first, "fixgate-first-test")
            pluginmanager.register(LastTest(self), "fixgate-last-test")

    def turn_start(self):
        """A shared fixture's turn begins: a second look at the state (pytest's own machinery
        is on inside a test's phases, so the test's own look cannot stop here). A look that
        fails masks nothing: the turn stays the test's, as without these hooks."""
        self.turns += 1
        if self.turns == 1 and self.states and self.state.env is not None:
            try:
                probe = State(self.classifier)
                probe.baseline()
                self.probe = probe
            except Exception:
                self.probe = None

    def turn_end(self):
        """The turn ends: what it changed is taken out of what the test left changed."""
        self.turns = max(0, self.turns - 1)
        if self.turns == 0 and self.probe is not None:
            probe, self.probe = self.probe, None
            try:
                changed = probe.after_test()
            except Exception:
                return
            # A module first imported in the turn is the main look's to name; it looked at
            # every extension module there was.
            self.masked.update(n for n in changed if not n.startswith("extension:"))

    def close(self):
        """After the last test's own teardown: the rest of the process's life is a turn that
        ends with the test's record. Run as a finalizer: nothing it raises reaches pytest."""
        if not self.closing:
            self.closing = True
            try:
                self.turn_start()
            except Exception:
                pass

    def test_start(self):
        self.deps.test_start()
        if self.states and self.state.env is None:
            self.state.baseline()

    def test_end(self, item=None):
        """The fields the test's event gets."""
        out = {}
        code = self.deps.test_end(item)
        if self.code:
            if code is None:
                out["code_unknown"] = True
            else:
                out["code"] = code
        self.ended += 1
        if self.first is not None and self.first.set_up:
            # The first test that set fixtures up set up every fixture every test needs.
            first, self.first = self.first, None
            try:
                self.pluginmanager.unregister(first)
            except Exception:
                pass
        if self.closing and self.turns:
            self.turns = 1
            self.turn_end()
        if self.states:
            changed = self.state.after_test()
            if self.masked:
                changed = [n for n in changed if n not in self.masked]
                self.masked = set()
            if changed:
                out["state"] = changed
        return out

    def session_event(self):
        """The `session_code` event; None when this run records no code."""
        if not self.code:
            return None
        code = self.deps.session_code()
        if code is None:
            return {"event": "session_code", "unknown": self.deps.error or "unknown"}
        return {"event": "session_code", "code": code}


class FirstTest(object):
    """The hook that marks the turn of a session fixture every test needs, in the first test
    that sets fixtures up (a test skipped by a mark sets none up); unregistered once that test
    ends, as it is on every fixture's path."""

    def __init__(self, recording):
        self.recording = recording
        self.everyones = {}  # id(FixtureDef) -> whether every test of the run needs it
        self.set_up = False  # a fixture was set up in this run

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_fixture_setup(self, fixturedef, request):
        rec = self.recording
        shared = False
        self.set_up = True
        if getattr(fixturedef, "scope", None) == "session":
            try:
                shared = self._everyones(fixturedef, request.session)
            except Exception:
                shared = False  # pytest's insides not as expected: the first test's, as before
        if shared:
            rec.turn_start()
        try:
            yield
        finally:
            if shared:
                rec.turn_end()

    def _everyones(self, fixturedef, session):
        """Whether every test of the run needs this fixture (directly, by autouse or through
        another fixture), unparametrized: then the first test sets it up in any order."""
        key = id(fixturedef)
        known = self.everyones.get(key)
        if known is None:
            known = getattr(fixturedef, "params", None) is None and bool(session.items)
            name = fixturedef.argname
            for item in session.items if known else ():
                info = getattr(item, "_fixtureinfo", None)
                defs = None if info is None else info.name2fixturedefs.get(name)
                closure = getattr(info, "names_closure", ())
                if name not in closure or not defs or defs[-1] is not fixturedef:
                    known = False
                    break
            self.everyones[key] = known
        return known


class LastTest(object):
    """The hook that marks where the session's own teardown begins, in the last test."""

    def __init__(self, recording):
        self.recording = recording

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item, nextitem):
        # The last test: once its own finalizers ran (the function's fixtures, its teardown),
        # its parent's first finalizer marks where the session's teardown begins.
        if nextitem is None and item.parent is not None and not self.recording.closing:
            try:
                item.parent.addfinalizer(self.recording.close)
            except Exception:
                pass  # the parent not set up (a plugin's own protocol): as before
