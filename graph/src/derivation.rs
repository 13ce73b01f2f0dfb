//! Derivations: everything a node's result depends on, and the cache keys computed from it.

use std::collections::BTreeMap;

use fixgate_cache::{Dep, Digest, KeyWriter};
use serde::{Deserialize, Serialize};

/// Key domains the graph uses for itself; no node kind may take one of these names.
pub(crate) const RESERVED_KINDS: [&str; 3] = ["trace-stable", "trace-output", "last-seen"];

/// A parameter value: text (a seed, a selection, an interpreter version) or raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Param {
    /// Text.
    Str(String),
    /// Raw bytes (never equal to the text of the same bytes).
    Bytes(Vec<u8>),
}

impl From<&str> for Param {
    fn from(s: &str) -> Param {
        Param::Str(s.to_string())
    }
}

impl From<String> for Param {
    fn from(s: String) -> Param {
        Param::Str(s)
    }
}

impl From<Vec<u8>> for Param {
    fn from(b: Vec<u8>) -> Param {
        Param::Bytes(b)
    }
}

impl From<&[u8]> for Param {
    fn from(b: &[u8]) -> Param {
        Param::Bytes(b.to_vec())
    }
}

/// Everything a node's result depends on: what it is, which fixgate computes it, its
/// parameters, the files it reads (known up front) and the outputs of its inputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Derivation {
    /// The node kind, e.g. `seed-run`.
    pub kind: String,
    /// The fixgate version: a new version never reuses an old version's results.
    pub version: String,
    /// Parameters by name.
    pub params: BTreeMap<String, Param>,
    /// Repo-relative paths of the files it reads, with their digests.
    pub files: BTreeMap<String, Digest>,
    /// The output digests of the nodes it depends on, in edge order.
    pub inputs: Vec<Digest>,
}

impl Derivation {
    fn write_params(w: &mut KeyWriter, params: &BTreeMap<String, Param>) {
        w.map(params, |w, p| {
            match p {
                Param::Str(s) => w.str(s),
                Param::Bytes(b) => w.bytes(b),
            };
        });
    }

    /// The action-cache key of a node whose dependencies are all known up front.
    pub fn key(&self) -> Digest {
        let mut w = KeyWriter::new(&self.kind);
        w.str(&self.version);
        Self::write_params(&mut w, &self.params);
        w.digest_map(&self.files).digests(&self.inputs);
        w.finish()
    }

    /// The key under which a node's verifying traces are indexed: its kind, version,
    /// parameters and inputs, but not its files, which the traces themselves record and check.
    pub fn stable_key(&self) -> Digest {
        let mut w = KeyWriter::new("trace-stable");
        w.str(&self.kind).str(&self.version);
        Self::write_params(&mut w, &self.params);
        w.digests(&self.inputs);
        w.finish()
    }
}

/// The action-cache key of a traced node's result: its stable key and the full dependency set
/// of the execution, so that two executions with different dependencies never share an entry.
pub(crate) fn trace_output_key(stable: &Digest, deps: &[Dep]) -> Digest {
    KeyWriter::new("trace-output")
        .digest(stable)
        .list(deps, |w, d| {
            w.str(&d.path).opt_digest(d.digest.as_ref());
        })
        .finish()
}

/// Where the last derivation seen for a node is kept, for explaining the next miss.
pub(crate) fn last_seen_key(scope: &str, label: &str) -> Digest {
    KeyWriter::new("last-seen").str(scope).str(label).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derivation() -> Derivation {
        Derivation {
            kind: "seed-run".to_string(),
            version: "0.1.0".to_string(),
            params: BTreeMap::from([("seed".to_string(), Param::from("3"))]),
            files: BTreeMap::from([("tests/db.json".to_string(), Digest::of(b"db"))]),
            inputs: vec![Digest::of(b"collect")],
        }
    }

    #[test]
    fn every_field_is_in_the_key() {
        let base = derivation();
        let mut changed = Vec::new();
        let mut d = base.clone();
        d.kind = "manifest".into();
        changed.push(d);
        let mut d = base.clone();
        d.version = "0.2.0".into();
        changed.push(d);
        let mut d = base.clone();
        d.params.insert("seed".into(), Param::from("4"));
        changed.push(d);
        let mut d = base.clone();
        d.params.insert("seed".into(), Param::from(&b"3"[..]));
        changed.push(d);
        let mut d = base.clone();
        d.files.insert("tests/db.json".into(), Digest::of(b"db2"));
        changed.push(d);
        let mut d = base.clone();
        d.inputs.push(Digest::of(b"more"));
        changed.push(d);
        for d in changed {
            assert_ne!(d.key(), base.key(), "{d:?}");
        }
        assert_eq!(derivation().key(), base.key());
    }

    #[test]
    fn the_stable_key_ignores_files_only() {
        let base = derivation();
        let mut d = base.clone();
        d.files.insert("other.py".into(), Digest::of(b"x"));
        assert_eq!(d.stable_key(), base.stable_key());
        d.inputs.clear();
        assert_ne!(d.stable_key(), base.stable_key());
        assert_ne!(base.stable_key(), base.key());
    }

    #[test]
    fn trace_output_keys_differ_by_dependency_set() {
        let s = derivation().stable_key();
        let a = trace_output_key(&s, &[Dep::file("f", Digest::of(b"1"))]);
        let b = trace_output_key(&s, &[Dep::file("f", Digest::of(b"2"))]);
        let c = trace_output_key(&s, &[Dep::absent("f")]);
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_ne!(b, c);
    }
}
