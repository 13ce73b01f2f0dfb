//! A pair: the culprits (polluters or state-setters) of an order-dependent victim, how they were
//! found, and how sure the audit is of them.

use crate::audit::bisect::{PairKind, Search};

/// Where a pair's culprits came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Found {
    /// Bisection or delta debugging over the prefix.
    Searched,
    /// The culprits of another victim of this audit, confirmed in one run.
    ReusedThisAudit,
    /// A set found for this victim in an earlier audit of the same base, confirmed in one run.
    ReusedEarlierAudit,
}

impl Found {
    /// As the report's `found_by` says it. (The derived form, `searched`, is what cached pair
    /// answers hold: both stay as they are.)
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Found::Searched => "search",
            Found::ReusedThisAudit => "reused-from-this-audit",
            Found::ReusedEarlierAudit => "reused-from-an-earlier-audit",
        }
    }
}

/// A found (or unexplained) pair.
#[derive(Clone, Debug)]
pub(crate) struct Pair {
    pub(crate) kind: PairKind,
    pub(crate) victim: String,
    pub(crate) culprits: Vec<String>,
    pub(crate) search: Search,
    pub(crate) found: Found,
    /// Runs that checked the pair holds on every rerun.
    pub(crate) verify_runs: u32,
}

impl Pair {
    /// Whether `nodeid` is the victim or one of the culprits.
    pub(crate) fn involves(&self, nodeid: &str) -> bool {
        self.victim == nodeid || self.culprits.iter().any(|c| c == nodeid)
    }
}
