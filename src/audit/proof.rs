//! How sure the audit is before it calls anything proven: the one number every rerun of an
//! order, every check of a pair, every nio confirmation and every base check counts to.

/// How many times each way the outcome must follow the order before a test is order-dependent:
/// the failing order rerun, the passing order rerun, and a found pair (culprits then victim, and
/// the victim alone). A test that flakes with probability `p` in any order passes such a check
/// by chance with probability at most `(1-p)^3 p^3` (see docs/verdicts.md).
pub(crate) const PROOF_RERUNS: usize = 3;
