"""What a phase raised, as the plugin sees it before any hook (phase.py)."""

import unittest

import pytest

import fixgate_plugin_outcome as o
import fixgate_plugin_phase as phase


def raised_by(f):
    try:
        f()
    except BaseException as e:  # pytest's skip and xfail are BaseExceptions
        return e
    raise AssertionError("nothing raised")


def test_each_exception_says_its_kind():
    assert phase._exception_kind(raised_by(lambda: pytest.skip("later"))) == "skip"
    assert phase._exception_kind(raised_by(lambda: pytest.xfail("known"))) == "xfail"
    skip = unittest.SkipTest("not here")
    assert phase._exception_kind(skip) == "skip"
    assert phase._exception_kind(ValueError("x")) == "fail"


def test_the_phase_an_exception_says_carries_its_first_line():
    assert phase._raised_phase(None) is o.PASSED
    failed = phase._raised_phase(ValueError("bad value\nmore"))
    assert failed == o.Phase("failed", None, None, "ValueError: bad value")
    skipped = phase._raised_phase(raised_by(lambda: pytest.skip("later")))
    assert skipped == o.Phase("skipped", None, "later", "later")


def test_of_two_phases_the_redder_wins():
    fail, skip = o.raised("fail", "x"), o.raised("skip", "y")
    assert phase._redder(None, fail) is fail
    assert phase._redder(skip, None) is skip
    assert phase._redder(o.PASSED, fail) == fail
    assert phase._redder(fail, o.PASSED) == fail
    assert phase._redder(skip, fail) == fail
    assert phase._redder(o.PASSED, skip) == skip


def test_a_watched_call_notes_what_it_raised_and_raises_it_still():
    raised = {}

    class Item(object):
        _excinfo = None

    def boom():
        raise KeyError("k")

    with pytest.raises(KeyError):
        phase._watching(boom, Item(), raised, "runruntest")()
    assert raised["runruntest"].outcome == "failed"
    # unittest's failure waits on the item: noted too.
    item = Item()
    item._excinfo = [type("Info", (), {"value": RuntimeError("kept")})()]
    phase._watching(lambda: None, item, raised, "runsetup")()
    assert raised["runsetup"] == o.Phase("failed", None, None, "RuntimeError: kept")


def test_a_tests_record_starts_empty_with_its_place():
    t = phase._Test("t.py::a", 3)
    assert (t.nodeid, t.index, t.reports, t.raised, t.reruns) == ("t.py::a", 3, {}, {}, 0)
