"""A test's outcome is a pure function of its phases (outcome.py)."""

import pytest

import fixgate_plugin_outcome as o

P = o.PASSED
F = o.raised("fail", "boom")
S = o.raised("skip", "later")
X = o.raised("xfail", "known")
XP = o.Phase("passed", "known", None, None)


@pytest.mark.parametrize(
    "phases, want",
    [
        ((P, P, P), ("passed", None, None, None)),
        ((F, None, P), ("error", "setup", None, None)),
        ((S, None, P), ("skipped", None, "later", None)),
        ((X, None, P), ("xfailed", None, None, "known")),
        ((P, F, P), ("failed", "call", None, None)),
        ((P, S, P), ("skipped", None, "later", None)),
        ((P, X, P), ("xfailed", None, None, "known")),
        ((P, XP, P), ("xpassed", None, None, "known")),
        ((P, None, P), ("passed", None, None, None)),
        ((P, P, F), ("error", "teardown", None, None)),
        ((P, F, F), ("error", "call", None, None)),
        ((None, None, None), ("error", None, None, None)),
    ],
)
def test_the_outcome_of_setup_call_and_teardown(phases, want):
    assert o.test_outcome(*phases) == want


def test_a_failed_subtest_fails_a_test_whose_phases_passed():
    assert o.test_outcome(P, P, P, subtest_failed=True)[:2] == ("failed", "subtest")


def test_a_report_greener_than_what_its_call_raised_is_an_alteration():
    assert o.altered(F, P, False) and o.altered(F, S, False) and o.altered(S, P, False)


def test_pytests_own_xfail_of_a_marked_test_is_no_alteration():
    assert not o.altered(F, X, True)
    assert o.altered(F, X, False), "an xfail without the marker is a hook's doing"


def test_a_report_as_red_or_redder_than_its_call_is_no_alteration():
    assert not o.altered(P, F, False)
    assert not o.altered(F, F, False)


def test_nothing_raised_is_a_pass_and_each_kind_of_exception_its_phase():
    assert o.raised(None, "ignored") is o.PASSED
    assert o.raised("skip", "why") == o.Phase("skipped", None, "why", "why")
    assert o.raised("xfail", None) == o.Phase("skipped", "", None, None)
    assert o.raised("fail", "E x") == o.Phase("failed", None, None, "E x")
