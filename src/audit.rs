//! The audit's judgments, pure: from typed evidence to buckets, pairs, findings and the verdict.
//! Nothing here runs a test or reads the graph (`crate::engine` does, and imports these); what
//! an audit found is an [`outcome::AuditOutcome`], from which the report is written.

pub(crate) mod base_check;
pub(crate) mod base_suite;
pub(crate) mod bisect;
pub(crate) mod budget;
pub(crate) mod collection;
pub(crate) mod coupling;
pub(crate) mod edit_replay;
pub(crate) mod edited;
pub(crate) mod finding;
pub(crate) mod findings;
pub(crate) mod footprint;
pub(crate) mod freeze;
pub(crate) mod gates;
pub(crate) mod itemize;
pub(crate) mod lock;
pub(crate) mod nio;
pub(crate) mod order;
pub(crate) mod outcome;
pub(crate) mod outside;
pub(crate) mod pair;
pub(crate) mod proof;
pub(crate) mod pysrc;
pub(crate) mod reach;
pub(crate) mod renamed;
pub(crate) mod replay;
pub(crate) mod scope;
pub(crate) mod source_replay;
pub(crate) mod source_tamper;
pub(crate) mod spec_scope;
pub(crate) mod triage;
pub(crate) mod verdict;
