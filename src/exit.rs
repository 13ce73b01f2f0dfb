//! The exit codes of fixgate: one table, shared by the binary, the docs and the tests.

/// Every gate held.
pub const PASS: i32 = 0;
/// The patch has a code defect: order-dependent, polluter, redefined test, or another.
pub const REJECT: i32 = 1;
/// Bad usage or an infrastructure failure: nothing was judged.
pub const ERROR: i32 = 2;
/// Fixtures differ from `fixtures.lock`: inputs changed, checked before any test runs.
pub const DRIFT: i32 = 3;
/// The budget was breached (a new skip, too slow, too many tests or frozen), or `--timeout`
/// stopped the audit before it judged.
pub const UNVERIFIED: i32 = 4;
/// A freeze entry is past its date.
pub const EXPIRED_FREEZE: i32 = 5;
/// Interrupted by Ctrl-C or SIGTERM (the shell's convention, 128 + SIGINT); nothing was judged.
pub const INTERRUPTED: i32 = 130;

/// Every verdict's exit code and what it says, in the order of the codes: what the help text
/// prints (and README.md's table says in more words).
pub const VERDICTS: [(i32, &str); 6] = [
    (PASS, "pass"),
    (REJECT, "reject"),
    (ERROR, "error (nothing judged)"),
    (DRIFT, "fixture drift against fixtures.lock"),
    (UNVERIFIED, "unverified (budget breached or --timeout)"),
    (EXPIRED_FREEZE, "expired freeze entry"),
];

/// `0 pass, 1 reject, 2 error (nothing judged), ...`: the exit codes in one line.
pub fn summary() -> String {
    VERDICTS
        .iter()
        .map(|(code, what)| format!("{code} {what}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_lists_every_verdict_code_once_in_order() {
        assert_eq!(
            summary(),
            "0 pass, 1 reject, 2 error (nothing judged), 3 fixture drift against fixtures.lock, \
             4 unverified (budget breached or --timeout), 5 expired freeze entry"
        );
    }
}
