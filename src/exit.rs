//! The exit codes of fixgate: one table, shared by the binary, the README and the tests.

/// Every gate held.
pub const PASS: i32 = 0;
/// The patch has a code defect: order-dependent, polluter, redefined test, or another.
pub const REJECT: i32 = 1;
/// Bad usage or an infrastructure failure: nothing was judged.
pub const ERROR: i32 = 2;
/// Fixtures differ from `fixtures.lock`: inputs changed, checked before any test runs.
pub const DRIFT: i32 = 3;
/// The budget was breached: a new skip, too slow, too many tests or frozen.
pub const UNVERIFIED: i32 = 4;
/// A freeze entry is past its date.
pub const EXPIRED_FREEZE: i32 = 5;
/// Interrupted by Ctrl-C or SIGTERM (the shell's convention, 128 + SIGINT); nothing was judged.
pub const INTERRUPTED: i32 = 130;
