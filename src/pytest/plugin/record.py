"""fixgate plugin: the recording a run asks for with --fixgate-record (the file-order and
reversed runs of an audit): per test, the repository's code objects it ran (`code`) and the
shared state it left changed (`state`); per session, the code that ran outside any test. The
hooks call this module at a handful of points and add what it returns to their events."""

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
        if self.states:
            changed = self.state.after_test()
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
