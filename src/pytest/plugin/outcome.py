"""fixgate plugin: a test's outcome, a pure function of its phases, and the rule that tells a phase
whose report a hook made greener than what its call raised.

A phase is what one of setup, call and teardown says, either as pytest's report put it after
every `pytest_runtest_makereport` implementation ran (`reported`), or as the plugin saw the
call's own exception before any of them could change it (`raised`). Nothing here imports pytest:
the hooks turn reports and exceptions into phases, these functions judge them.
"""

from collections import namedtuple

# outcome: "passed", "failed" or "skipped", as pytest spells a report's outcome; xfail: the
# report's `wasxfail` text (None when it has none); skip_reason: the reason of a skipped phase;
# message: the first line of a failure or skip.
Phase = namedtuple("Phase", "outcome xfail skip_reason message")

# What a call raised, by the exception's kind (see `raised`).
PASSED = Phase("passed", None, None, None)

# How green a phase is: an alteration makes a phase greener than what its call raised.
_FAILED, _NOT_RUN, _PASSED = 0, 1, 2


def raised(kind, message):
    """The phase a call's own exception says: `kind` is None (nothing raised), "skip"
    (pytest.skip, unittest.SkipTest), "xfail" (pytest.xfail, unittest's expected failure) or
    "fail" (anything else)."""
    if kind is None:
        return PASSED
    if kind == "skip":
        return Phase("skipped", None, message, message)
    if kind == "xfail":
        return Phase("skipped", message or "", None, message)
    return Phase("failed", None, None, message)


def _greenness(phase):
    if phase.outcome == "failed":
        return _FAILED
    if phase.outcome == "skipped":
        return _NOT_RUN
    return _PASSED


def altered(raised_phase, reported, xfail_marked):
    """Whether `reported` is greener than `raised_phase` by a hook's doing. pytest's own xfail
    (a failure reported as an expected one, on a test that carries an `xfail` marker) is not an
    alteration; a report redder than its call (a strict xfail that passed) is none either."""
    if _greenness(reported) <= _greenness(raised_phase):
        return False
    expected_failure = (
        raised_phase.outcome == "failed" and reported.xfail is not None and xfail_marked
    )
    return not expected_failure


def _not_run(phase):
    """A skipped phase's (outcome, skip reason, xfail reason): an expected failure (`wasxfail`)
    is `xfailed`, anything else `skipped`."""
    if phase.xfail is not None:
        return "xfailed", None, phase.xfail
    return "skipped", phase.skip_reason, None


def test_outcome(setup, call, teardown, subtest_failed=False):
    """The test's outcome from its phases (each a Phase, or None for a phase without a report):
    (outcome, the failing phase's name or None, skip reason, xfail reason).

    A failed setup is `error`; a skipped setup is `skipped` (or `xfailed` with `wasxfail`); then
    the call decides (`failed`, `skipped`, `xfailed`, `xpassed`, `passed`); a test with a setup
    and no call (a plugin ran only setup and teardown) passed; a failed subtest fails a test that
    would otherwise pass or skip; a failed teardown makes any of these `error`. No report at all
    is `error`."""
    outcome = "error"
    failing = None
    skip_reason = None
    xfail_reason = None
    if setup is not None and setup.outcome == "failed":
        failing = "setup"
    elif setup is not None and setup.outcome == "skipped":
        outcome, skip_reason, xfail_reason = _not_run(setup)
    elif call is not None:
        if call.outcome == "failed":
            outcome = "failed"
            failing = "call"
        elif call.outcome == "skipped":
            outcome, skip_reason, xfail_reason = _not_run(call)
        elif call.xfail is not None:
            outcome = "xpassed"
            xfail_reason = call.xfail
        else:
            outcome = "passed"
    elif setup is not None and setup.outcome == "passed":
        outcome = "passed"
    if subtest_failed and outcome in ("passed", "skipped", "xpassed"):
        outcome = "failed"
        failing = "subtest"
        skip_reason = None
    if teardown is not None and teardown.outcome == "failed":
        outcome = "error"
        if failing is None:
            failing = "teardown"
    return outcome, failing, skip_reason, xfail_reason
