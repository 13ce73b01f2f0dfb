"""The state fingerprint (state.py): one pass over every global sees a rebinding, a new global,
and an in-place change of a dict, a list, a nested list, a set, a class attribute and an
lru_cache, each named by its global; a module first imported by the test is new, not changed; a
test that changes nothing, or rebinds a NaN to itself, changes nothing. Outside the repository,
a global rebound or removed is named by its module; one added, or set where it was None (a lazy
fill), is not. The last exception Python keeps in `sys` (pytest sets it for every failed test)
is left out of the one comparison of all values, so a failed test costs no look at each module,
and a global of `sys` rebound beside it is still named.

Each step changes what it says and asks what the fingerprint saw since the step before. What a
step changes in this process is put back by `monkeypatch` when the test ends."""

import json
import logging
import os
import sys
import types

import pytest

import fixgate_plugin_state as st

REPO_MODULE = '''import functools
REG = {}
L = []
N = 1
D = {"k": []}
S = set()
NAN = float("nan")
class K:
    x = 1
import unittest
class UT(unittest.TestCase):
    pass
@functools.lru_cache()
def f(x):
    return x
@functools.lru_cache(maxsize=None)
def g(x):
    return [x]
@functools.lru_cache()
def h(x):
    return {x: 1}
'''


class Repo(object):
    """The classifier of a repository at /repo."""

    def classify(self, p):
        if p.startswith("/repo/"):
            return ("rel", p[len("/repo/") :], False)
        return ("outside", p, False)


@pytest.fixture
def module(monkeypatch):
    """A module of the repository at /repo, imported (in sys.modules until the test ends)."""

    def make(name, source):
        m = types.ModuleType(name)
        m.__file__ = "/repo/%s.py" % name
        exec(compile(source, m.__file__, "exec"), m.__dict__)
        monkeypatch.setitem(sys.modules, name, m)
        return m

    return make


class Steps(object):
    """`step(change, want)`: makes the change, and checks that the fingerprint names `want`
    since the step before. The first step takes the baseline first, inside the test: pytest
    changes the environment between a test's setup and its call (`PYTEST_CURRENT_TEST`)."""

    def __init__(self):
        self.state = st.State(Repo())
        self.started = False

    def __call__(self, change, want):
        if not self.started:
            self.state.baseline()
            self.started = True
        change()
        assert self.state.after_test() == want


@pytest.fixture
def step():
    return Steps()


def test_each_global_of_the_repository_a_test_changed_is_named_and_nothing_else(module, step):
    step(lambda: None, [])
    a = module("fx_a", REPO_MODULE)
    # A module the test imported first is new, not changed.
    step(lambda: None, [])
    step(lambda: a.REG.__setitem__("x", 1), ["global:fx_a.py:REG"])
    step(lambda: a.L.append(1), ["global:fx_a.py:L"])
    step(lambda: setattr(a, "N", 2), ["global:fx_a.py:N"])
    step(lambda: a.D["k"].append(1), ["global:fx_a.py:D"])
    step(lambda: a.S.add(3), ["global:fx_a.py:S"])
    step(lambda: setattr(a.K, "x", 2), ["global:fx_a.py:K"])
    # unittest's own bookkeeping on a TestCase class is no state of the test's.
    step(
        lambda: (setattr(a.UT, "_classSetupFailed", False), setattr(a.UT, "_class_cleanups", [])),
        [],
    )
    step(lambda: setattr(a.UT, "tearDown_exceptions", []), [])
    step(lambda: setattr(a.UT, "shared", 1), ["global:fx_a.py:UT"])
    step(lambda: a.f(3), ["cache:fx_a.py:f:fx_a.py:f"])
    step(lambda: a.f((1, "x", None, b"2")), ["cache:fx_a.py:f:fx_a.py:f"])
    # Keys or values the cache's look cannot tell apart by value: the global is named.
    step(lambda: a.f(2.5), ["global:fx_a.py:f"])
    step(lambda: a.g(3), ["global:fx_a.py:g"])
    step(lambda: a.h(3), ["global:fx_a.py:h"])
    step(lambda: a.f([1].__class__), ["global:fx_a.py:f"])
    step(lambda: setattr(a, "NEW", 1), ["global:fx_a.py:NEW"])
    step(lambda: setattr(a, "NAN", a.NAN), [])
    b = []
    step(lambda: b.append(module("fx_b", "X = []\n")), [])
    step(
        lambda: (a.L.append(2), b[0].X.append(1)),
        ["global:fx_a.py:L", "global:fx_b.py:X"],
    )


def test_the_environment_a_test_changed_is_named(monkeypatch, step):
    step(lambda: monkeypatch.setenv("FIXGATE_STATE_T", "1"), ["env:FIXGATE_STATE_T"])
    step(lambda: None, [])


def test_outside_the_repository_a_global_rebound_or_removed_is_named_by_its_module(
    monkeypatch, step
):
    real = json.dumps
    step(
        lambda: monkeypatch.setattr(json, "dumps", lambda *a, **k: "x"),
        ["outside:json:dumps"],
    )
    step(lambda: setattr(json, "dumps", real), ["outside:json:dumps"])
    # Added, then removed: only the removal is named.
    step(lambda: setattr(json, "fixgate_added", 1), [])
    step(lambda: delattr(json, "fixgate_added"), ["outside:json:fixgate_added"])
    lib = types.ModuleType("fx_lib")
    lib.__file__ = "/lib/fx_lib.py"
    lib.CACHE = None
    step(lambda: monkeypatch.setitem(sys.modules, "fx_lib", lib), [])
    # Set where it was None: a lazy fill, not named; set again: named.
    step(lambda: setattr(lib, "CACHE", 1), [])
    step(lambda: setattr(lib, "CACHE", 2), ["outside:fx_lib:CACHE"])
    step(lambda: monkeypatch.delattr(json, "loads"), ["outside:json:loads"])


def test_hypothesis_marking_its_own_run_is_no_change_but_its_other_globals_are(monkeypatch, step):
    core = types.ModuleType("hypothesis.core")
    core.__file__ = "/lib/hypothesis/core.py"
    core.running_under_pytest = False
    core.other = False
    step(lambda: monkeypatch.setitem(sys.modules, "hypothesis.core", core), [])
    step(
        lambda: (setattr(core, "running_under_pytest", True), setattr(core, "other", True)),
        ["outside:hypothesis.core:other"],
    )


def test_a_process_setting_changed_in_place_is_named(step):
    root = logging.getLogger()
    level = root.level
    try:
        step(lambda: root.setLevel(logging.DEBUG), ["setting:logging.root"])
    finally:
        root.setLevel(level)


def test_the_last_exception_python_keeps_takes_no_look_at_each_module(monkeypatch, step):
    step(lambda: None, [])
    state = step.state
    for name in ("last_type", "last_value", "last_traceback"):
        monkeypatch.setattr(sys, name, getattr(sys, name, None), raising=False)
    step(
        lambda: (setattr(sys, "last_type", ValueError), setattr(sys, "last_value", ValueError("x"))),
        [],
    )
    assert "last_value" not in dict(zip(state.outside_order, state._outside_look()))["sys"]
    sys.last_value = ValueError("y")
    assert st._all_values(state._outside_look()) == state.outside_values, (
        "a failed test takes the slow look"
    )
    step(lambda: None, [])
    # A global of sys rebound beside it is still named.
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    hook = sys.excepthook
    step(
        lambda: (
            setattr(sys, "last_value", ValueError("z")),
            setattr(sys, "excepthook", lambda *a: None),
        ),
        ["outside:sys:excepthook"],
    )
    step(lambda: setattr(sys, "excepthook", hook), ["outside:sys:excepthook"])


def test_nothing_is_named_when_nothing_changed(step):
    step(lambda: None, [])
    step(lambda: os.getcwd(), [])
