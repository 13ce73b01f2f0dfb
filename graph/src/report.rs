//! The record of one run of the graph: each node's status, key, output and timing, and a
//! Graphviz rendering.

use std::fmt::Write as _;
use std::time::Duration;

use fixgate_cache::{Digest, Warning};
use serde::Serialize;

use crate::{NodeError, Reason};

/// What `--check` found when it re-executed a cached node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "check", rename_all = "kebab-case")]
pub enum Check {
    /// The fresh output equals the cached one.
    Same,
    /// The fresh output differs: evidence of nondeterminism. Dependents still get the cached
    /// output, so the rest of the run is unaffected.
    Diverged {
        /// The digest of the fresh output.
        fresh: Digest,
    },
    /// The re-execution failed where the cached run did not (or failed differently).
    Errored {
        /// The failure.
        message: String,
    },
}

/// How a node fared in a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Status {
    /// Its result came from the cache.
    Cached,
    /// It ran.
    Executed {
        /// Why it was not cached.
        reason: Reason,
    },
    /// It was cached and ran again to check the result (`Mode::Check`).
    Checked {
        /// What the check found.
        check: Check,
    },
    /// It failed; its dependents were skipped.
    Failed {
        /// The failure.
        error: NodeError,
        /// The failure came from the cache (a data failure of an earlier run).
        cached: bool,
    },
    /// An input failed (or was skipped), so it did not run.
    Skipped {
        /// The label of the failed node at the root of it.
        because: String,
    },
}

/// One node of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeReport {
    /// Its label, e.g. `seed-run(3)`.
    pub label: String,
    /// Its kind, e.g. `seed-run`.
    pub kind: String,
    /// The labels of its inputs, in edge order.
    pub inputs: Vec<String>,
    /// The labels of the nodes it was added after, whose outputs it does not read (drawn
    /// dashed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// The action-cache key of its result (for a traced node, known once a trace matched or it
    /// ran); `None` when skipped.
    pub key: Option<Digest>,
    /// The digest of its output; `None` when it failed or was skipped.
    pub output: Option<Digest>,
    /// How it fared.
    pub status: Status,
    /// Its cached result came from a remote cache (fetched by this process), not this
    /// machine's.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub remote: bool,
    /// When its work started, from the start of the run (cache lookups included).
    pub started: Option<Duration>,
    /// When its work ended, from the start of the run.
    pub finished: Option<Duration>,
}

/// Nodes per status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// All nodes.
    pub nodes: usize,
    /// From the cache.
    pub cached: usize,
    /// Ran.
    pub executed: usize,
    /// From the cache, and ran again to check.
    pub checked: usize,
    /// Failed (cached failures included).
    pub failed: usize,
    /// Skipped because an input failed.
    pub skipped: usize,
}

/// The record of one run, nodes in the order they were added to the graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Every node.
    pub nodes: Vec<NodeReport>,
    /// What the cache (and the graph, reading its own records) recovered from.
    pub warnings: Vec<Warning>,
    /// How long the run took.
    pub elapsed: Duration,
}

impl Report {
    /// The node labelled `label`.
    pub fn node(&self, label: &str) -> Option<&NodeReport> {
        self.nodes.iter().find(|n| n.label == label)
    }

    /// Nodes per status.
    pub fn counts(&self) -> Counts {
        let mut c = Counts {
            nodes: self.nodes.len(),
            ..Counts::default()
        };
        for n in &self.nodes {
            match n.status {
                Status::Cached => c.cached += 1,
                Status::Executed { .. } => c.executed += 1,
                Status::Checked { .. } => c.checked += 1,
                Status::Failed { .. } => c.failed += 1,
                Status::Skipped { .. } => c.skipped += 1,
            }
        }
        c
    }

    /// The run as a Graphviz digraph, each node coloured by its status.
    pub fn to_dot(&self) -> String {
        let mut out = String::from(
            "digraph fixgate {\n  rankdir=LR;\n  node [shape=box, style=\"rounded,filled\", fontname=\"monospace\"];\n",
        );
        for (i, n) in self.nodes.iter().enumerate() {
            let (colour, status) = match &n.status {
                Status::Cached => ("#b7e1a1", "cached".to_string()),
                Status::Executed { reason } => ("#ffd27f", format!("executed: {reason}")),
                Status::Checked { check: Check::Same } => ("#a9cce3", "checked: same".into()),
                Status::Checked {
                    check: Check::Diverged { .. },
                } => ("#e59866", "checked: diverged".into()),
                Status::Checked {
                    check: Check::Errored { .. },
                } => ("#e59866", "checked: errored".into()),
                Status::Failed { cached, .. } => (
                    "#f1948a",
                    if *cached { "failed (cached)" } else { "failed" }.into(),
                ),
                Status::Skipped { because } => ("#dddddd", format!("skipped: {because} failed")),
            };
            let _ = writeln!(
                out,
                "  n{i} [label=\"{}\\n{}\", fillcolor=\"{colour}\"];",
                escape(&n.label),
                escape(&status)
            );
        }
        let index: std::collections::HashMap<&str, usize> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.label.as_str(), i))
            .collect();
        for (i, n) in self.nodes.iter().enumerate() {
            for input in &n.inputs {
                if let Some(j) = index.get(input.as_str()) {
                    let _ = writeln!(out, "  n{j} -> n{i};");
                }
            }
            for a in &n.after {
                if let Some(j) = index.get(a.as_str()) {
                    let _ = writeln!(out, "  n{j} -> n{i} [style=dashed];");
                }
            }
        }
        out.push_str("}\n");
        out
    }
}

/// Escapes text for a double-quoted Graphviz string.
fn escape(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
