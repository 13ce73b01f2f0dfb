//! The triage step: every test's bucket and signals from its evidence (the rules are
//! `audit::triage`). Pure and cheap, a node so that `graph` and `explain` show it and a warm
//! audit finds it.

use std::collections::BTreeMap;

use fixgate_cache::KeyWriter;
use fixgate_graph::{NodeError, NodeId};

use crate::audit::triage::{self, Confirm, Evidence, Triage};
use crate::engine::kind::NodeKind;
use crate::engine::step::{Computed, Engine, Key, Step};
use crate::error::Result;

/// Every test's triage, after the runs its evidence came from (`after`).
pub(crate) fn triage(
    engine: &Engine,
    evidence: BTreeMap<String, Evidence>,
    after: &[NodeId],
) -> Result<(NodeId, BTreeMap<String, Triage>)> {
    let (added, triaged) = engine.run_step(TriageOf { evidence }, &[], after)?;
    Ok((added.id, triaged))
}

/// Every test's triage from its evidence.
pub(crate) struct TriageOf {
    pub(crate) evidence: BTreeMap<String, Evidence>,
}

impl Step for TriageOf {
    type Output = BTreeMap<String, Triage>;

    fn kind(&self) -> NodeKind {
        NodeKind::Triage
    }

    fn key(&self, key: &mut Key) {
        let TriageOf { evidence } = self;
        key.param("evidence", evidence_key(evidence));
    }

    fn compute(&self, _: &[&[u8]]) -> Result<Computed<Self::Output>, NodeError> {
        Ok(Computed::new(
            (self.evidence.iter())
                .map(|(id, e)| (id.clone(), triage::triage(e)))
                .collect(),
        ))
    }
}

/// The canonical key of the evidence of every test: each field of each test's [`Evidence`].
fn evidence_key(evidence: &BTreeMap<String, Evidence>) -> String {
    let mut w = KeyWriter::new("evidence");
    w.u64(evidence.len() as u64);
    for (id, e) in evidence {
        let Evidence {
            outcomes,
            confirm,
            alone,
            dirty_groups,
            polluter_in_pair,
            state_setter_in_pair,
            edited_by_patch,
            reruns,
            unexplained,
            nio,
            flaky_too,
            leaks,
        } = e;
        w.str(id);
        w.list(outcomes, |w, (label, o)| {
            w.str(&label.to_string()).str(o.as_str());
        });
        match confirm {
            Some(Confirm { failing, passing }) => {
                for reruns in [failing, passing] {
                    w.list(reruns, |w, o| {
                        w.str(o.as_str());
                    });
                }
            }
            None => {
                w.str("\0none");
            }
        };
        w.str(alone.map(|o| o.as_str()).unwrap_or("\0none"));
        w.list(dirty_groups, |w, g| {
            w.str(g);
        });
        w.u64(u64::from(*polluter_in_pair))
            .u64(u64::from(*state_setter_in_pair))
            .u64(u64::from(*edited_by_patch))
            .u64(u64::from(*reruns))
            .u64(u64::from(*unexplained))
            .str(nio.map(|n| n.as_str()).unwrap_or("\0none"))
            .u64(u64::from(*flaky_too));
        w.list(leaks, |w, change| {
            w.str(&change.to_string());
        });
    }
    w.finish().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::nio::Idempotence;
    use crate::audit::order::OrderLabel;
    use crate::pytest::events::StateChange;
    use crate::pytest::result::Outcome;

    fn evidence(e: Evidence) -> BTreeMap<String, Evidence> {
        BTreeMap::from([("t.py::a".to_string(), e)])
    }

    /// Every field of the evidence changes the key: a field left out of it would let a
    /// cached triage of other evidence be read.
    #[test]
    fn every_field_of_the_evidence_is_in_the_key() {
        let base = Evidence {
            outcomes: vec![(OrderLabel::File, Outcome::Passed)],
            ..Evidence::default()
        };
        let changed: Vec<Evidence> = vec![
            Evidence {
                outcomes: vec![(OrderLabel::File, Outcome::Failed)],
                ..base.clone()
            },
            Evidence {
                confirm: Some(Confirm {
                    failing: vec![Outcome::Failed],
                    passing: vec![],
                }),
                ..base.clone()
            },
            Evidence {
                alone: Some(Outcome::Passed),
                ..base.clone()
            },
            Evidence {
                dirty_groups: vec!["db".into()],
                ..base.clone()
            },
            Evidence {
                polluter_in_pair: true,
                ..base.clone()
            },
            Evidence {
                state_setter_in_pair: true,
                ..base.clone()
            },
            Evidence {
                edited_by_patch: true,
                ..base.clone()
            },
            Evidence {
                reruns: 1,
                ..base.clone()
            },
            Evidence {
                unexplained: true,
                ..base.clone()
            },
            Evidence {
                nio: Some(Idempotence::NonIdempotent),
                ..base.clone()
            },
            Evidence {
                flaky_too: true,
                ..base.clone()
            },
            Evidence {
                leaks: vec![StateChange::Cwd],
                ..base.clone()
            },
        ];
        let key = |e: &Evidence| evidence_key(&evidence(e.clone()));
        let mut seen = vec![key(&base)];
        for e in &changed {
            let k = key(e);
            assert!(!seen.contains(&k), "{e:?}");
            seen.push(k);
        }
        assert_eq!(key(&base), key(&base.clone()));
    }
}
