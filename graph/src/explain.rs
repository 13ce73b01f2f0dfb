//! Why a node executed: the diff between the derivation it had last time and the one it has now.

use std::collections::BTreeSet;
use std::fmt;

use fixgate_cache::{ActionRecord, Dep, Digest, Store, TraceEntry, Warning};
use serde::{Deserialize, Serialize};

use crate::derivation::last_seen_key;
use crate::Derivation;

/// Why a node executed instead of coming from the cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum Reason {
    /// Nothing cached for it, and nothing recorded that would say what changed (first run, or
    /// the entry was evicted).
    NoEntry,
    /// A file it reads changed (`None`: did not exist).
    InputChanged {
        /// Repo-relative path.
        path: String,
        /// Digest at the last cached run.
        old: Option<Digest>,
        /// Digest now.
        new: Option<Digest>,
    },
    /// A parameter changed, appeared or disappeared.
    ParamChanged {
        /// The parameter.
        name: String,
    },
    /// fixgate was upgraded (or downgraded) since the last cached run.
    VersionChanged {
        /// The version of the last cached run.
        old: String,
        /// This version.
        new: String,
    },
    /// The output of a node it depends on changed (or its inputs are other nodes now).
    InputOutputChanged {
        /// The input's label.
        label: String,
    },
    /// The run was forced.
    Forced,
    /// The node is never cached.
    Transient,
}

/// The first eight hex digits of a digest, enough to tell two versions of a file apart.
fn short(d: &Option<Digest>) -> String {
    match d {
        Some(d) => format!("b3:{}", &d.to_hex()[..8]),
        None => "absent".to_string(),
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NoEntry => write!(f, "no cache entry"),
            Reason::InputChanged { path, old, new } => {
                write!(f, "{path} changed ({} → {})", short(old), short(new))
            }
            Reason::ParamChanged { name } => write!(f, "parameter {name} changed"),
            Reason::VersionChanged { old, new } => {
                write!(f, "fixgate version changed ({old} → {new})")
            }
            Reason::InputOutputChanged { label } => write!(f, "output of {label} changed"),
            Reason::Forced => write!(f, "forced"),
            Reason::Transient => write!(f, "never cached"),
        }
    }
}

/// Bump when [`LastSeen`]'s layout changes, so that an old record is ignored, not misread.
const LAST_SEEN_SCHEMA: u32 = 1;

/// What a node looked like at its last cached run, kept per label to explain the next miss.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LastSeen {
    schema: u32,
    derivation: Derivation,
    input_labels: Vec<String>,
    /// For a traced node, the dependency set of that run.
    deps: Vec<Dep>,
}

impl LastSeen {
    pub(crate) fn new(derivation: &Derivation, input_labels: &[String], deps: &[Dep]) -> LastSeen {
        LastSeen {
            schema: LAST_SEEN_SCHEMA,
            derivation: derivation.clone(),
            input_labels: input_labels.to_vec(),
            deps: deps.to_vec(),
        }
    }

    /// Loads the record of `label`; a missing one is `None`, an unreadable one too, with a
    /// warning.
    pub(crate) fn load(
        store: &dyn Store,
        scope: &str,
        label: &str,
        warn: &mut Vec<Warning>,
    ) -> Option<LastSeen> {
        let record = store.get_action(&last_seen_key(scope, label))?;
        let bytes = store.get_blob(&record.output)?;
        match postcard::from_bytes::<LastSeen>(&bytes) {
            Ok(seen) if seen.schema == LAST_SEEN_SCHEMA => Some(seen),
            Ok(_) => None,
            Err(e) => {
                warn.push(Warning::CorruptValue {
                    what: format!("last derivation of {label}"),
                    why: e.to_string(),
                });
                None
            }
        }
    }

    /// Stores this record for `label` unless `previous` already says the same.
    pub(crate) fn save(
        &self,
        store: &dyn Store,
        scope: &str,
        label: &str,
        previous: Option<&LastSeen>,
    ) {
        if previous == Some(self) {
            return;
        }
        // A plain struct into a Vec cannot fail to serialize.
        let bytes = postcard::to_stdvec(self).expect("postcard encodes plain structs");
        let output = store.put_blob(&bytes);
        store.put_action(
            &last_seen_key(scope, label),
            &ActionRecord {
                output,
                failed: false,
            },
        );
    }
}

/// Answers the current digest of a path (`None`: absent).
pub(crate) type Current<'a> = &'a dyn Fn(&str) -> Option<Digest>;

/// The first difference between the last cached run of a node and now, in the order a reader
/// cares about: the tool, the parameters, the files, the inputs, the discovered dependencies.
pub(crate) fn explain(
    last: Option<&LastSeen>,
    now: &Derivation,
    input_labels: &[String],
    current: Option<Current<'_>>,
) -> Reason {
    let Some(last) = last else {
        return Reason::NoEntry;
    };
    let was = &last.derivation;
    if was.version != now.version {
        return Reason::VersionChanged {
            old: was.version.clone(),
            new: now.version.clone(),
        };
    }
    let names: BTreeSet<&String> = was.params.keys().chain(now.params.keys()).collect();
    if let Some(name) = names
        .into_iter()
        .find(|n| was.params.get(*n) != now.params.get(*n))
    {
        return Reason::ParamChanged { name: name.clone() };
    }
    let paths: BTreeSet<&String> = was.files.keys().chain(now.files.keys()).collect();
    if let Some(path) = paths
        .into_iter()
        .find(|p| was.files.get(*p) != now.files.get(*p))
    {
        return Reason::InputChanged {
            path: path.clone(),
            old: was.files.get(path).copied(),
            new: now.files.get(path).copied(),
        };
    }
    let count = was.inputs.len().max(now.inputs.len());
    for i in 0..count {
        let same_label = last.input_labels.get(i) == input_labels.get(i);
        if !same_label || was.inputs.get(i) != now.inputs.get(i) {
            let label = input_labels
                .get(i)
                .or_else(|| last.input_labels.get(i))
                .cloned()
                .unwrap_or_default();
            return Reason::InputOutputChanged { label };
        }
    }
    if let Some(current) = current {
        let trace = TraceEntry {
            deps: last.deps.clone(),
            output: Digest::of(b""),
        };
        if let Some((dep, new)) = trace.first_changed(current) {
            return Reason::InputChanged {
                path: dep.path.clone(),
                old: dep.digest,
                new,
            };
        }
    }
    Reason::NoEntry
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::Param;

    fn derivation() -> Derivation {
        Derivation {
            kind: "seed-run".to_string(),
            version: "0.1.0".to_string(),
            params: BTreeMap::from([("seed".to_string(), Param::from("1"))]),
            files: BTreeMap::from([("a.json".to_string(), Digest::of(b"a"))]),
            inputs: vec![Digest::of(b"in")],
        }
    }

    fn seen(d: &Derivation) -> LastSeen {
        LastSeen::new(d, &["collect(head)".to_string()], &[])
    }

    #[test]
    fn each_kind_of_change_is_named() {
        let labels = ["collect(head)".to_string()];
        let base = derivation();
        assert_eq!(explain(None, &base, &labels, None), Reason::NoEntry);
        assert_eq!(
            explain(Some(&seen(&base)), &base, &labels, None),
            Reason::NoEntry
        );

        let mut d = base.clone();
        d.version = "0.2.0".into();
        assert!(matches!(
            explain(Some(&seen(&base)), &d, &labels, None),
            Reason::VersionChanged { .. }
        ));

        let mut d = base.clone();
        d.params.insert("jobs".into(), Param::from("2"));
        assert_eq!(
            explain(Some(&seen(&base)), &d, &labels, None),
            Reason::ParamChanged {
                name: "jobs".into()
            }
        );

        let mut d = base.clone();
        d.files.insert("a.json".into(), Digest::of(b"a2"));
        assert_eq!(
            explain(Some(&seen(&base)), &d, &labels, None),
            Reason::InputChanged {
                path: "a.json".into(),
                old: Some(Digest::of(b"a")),
                new: Some(Digest::of(b"a2")),
            }
        );

        let mut d = base.clone();
        d.inputs = vec![Digest::of(b"in2")];
        assert_eq!(
            explain(Some(&seen(&base)), &d, &labels, None),
            Reason::InputOutputChanged {
                label: "collect(head)".into()
            }
        );
    }

    #[test]
    fn a_changed_discovered_dependency_is_named() {
        let base = derivation();
        let last = LastSeen::new(&base, &[], &[Dep::file("b.py", Digest::of(b"b"))]);
        let reason = explain(Some(&last), &base, &[], Some(&|_| None));
        assert_eq!(
            reason,
            Reason::InputChanged {
                path: "b.py".into(),
                old: Some(Digest::of(b"b")),
                new: None,
            }
        );
        assert_eq!(
            reason.to_string(),
            format!(
                "b.py changed (b3:{} → absent)",
                &Digest::of(b"b").to_hex()[..8]
            )
        );
    }
}
