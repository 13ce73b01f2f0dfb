//! What a run attempted outside its sandbox, read off its result: the audit hook's record of
//! writes outside the sandbox, and failures whose message is a read-only file system error.

use serde::{Deserialize, Serialize};

use crate::pytest::result::RunResult;

/// A write the run attempted outside its sandbox: blocked (read-only world, hidden folders) or,
/// without namespaces, possibly done. Either way a finding against the patch (`outside-write`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct OutsideWrite {
    /// The test that attempted it; `None` outside any test (collection, session fixtures).
    pub(crate) nodeid: Option<String>,
    /// `write`, `remove`, `rename` or `mkdir` as the audit hook saw it; `read-only` when the
    /// evidence is the failure itself (an EROFS error in the test's message, as a write made
    /// through a subprocess reports it when the test passes the error on).
    pub(crate) op: String,
    pub(crate) path: String,
}

/// Operations of the plugin's trace that change the file system.
const WRITE_OPS: [&str; 4] = ["write", "remove", "rename", "mkdir"];

/// Every write the run attempted outside its sandbox, per test, sorted: the audit hook's
/// record of accesses outside the sandbox, and failures whose message is a read-only file
/// system error naming a path.
pub(crate) fn outside_writes(result: &RunResult) -> Vec<OutsideWrite> {
    let mut out = Vec::new();
    let traces = result
        .tests
        .iter()
        .map(|t| (Some(&t.nodeid), &t.trace))
        .chain([(None, &result.session_trace)]);
    for (nodeid, trace) in traces {
        for o in &trace.outside {
            if WRITE_OPS.contains(&o.op.as_str()) {
                out.push(OutsideWrite {
                    nodeid: nodeid.cloned(),
                    op: o.op.clone(),
                    path: o.path.clone(),
                });
            }
        }
    }
    for t in &result.tests {
        let messages = t
            .phases
            .values()
            .filter_map(|p| p.message.as_deref())
            .chain(t.message.as_deref());
        for m in messages {
            for path in erofs_paths(m) {
                let seen = out
                    .iter()
                    .any(|w| w.nodeid.as_ref() == Some(&t.nodeid) && w.path == path);
                if !seen {
                    out.push(OutsideWrite {
                        nodeid: Some(t.nodeid.clone()),
                        op: "read-only".into(),
                        path,
                    });
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The paths a failure message reports as on a read-only file system, in the forms Python
/// (`[Errno 30] Read-only file system: '/x'`) and shells (`cannot create /x: Read-only file
/// system`) write them; and those a shell could not create for want of permission (`cannot
/// create /x: Permission denied`, as Landlock answers), a write by its own words.
fn erofs_paths(message: &str) -> Vec<String> {
    let mut out = error_paths(message, "Read-only file system", |_| true);
    out.extend(error_paths(message, "Permission denied", |l| {
        l.contains("cannot create ")
    }));
    out
}

/// The absolute paths a failure message reports `error` for on the lines `keep` accepts, in the
/// forms Python (`[Errno 13] Permission denied: '/x'`) and shells (`cannot open /x: Permission
/// denied`) write them.
pub(crate) fn error_paths(message: &str, error: &str, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    for line in message.lines().filter(|l| l.contains(error) && keep(l)) {
        if let Some(rest) = line.split(&format!("{error}: ")).nth(1) {
            let quoted = rest
                .strip_prefix('\'')
                .and_then(|r| r.split('\'').next())
                .or_else(|| rest.strip_prefix('"').and_then(|r| r.split('"').next()));
            if let Some(p) = quoted.filter(|p| p.starts_with('/')) {
                out.push(p.to_string());
                continue;
            }
        }
        for word in line.split_whitespace() {
            let word = word.trim_end_matches(':').trim_matches(['\'', '"']);
            if word.starts_with('/') && word.len() > 1 {
                out.push(word.to_string());
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_errors_name_their_paths() {
        assert_eq!(
            erofs_paths("OSError: [Errno 30] Read-only file system: '/tmp/evil.txt'"),
            vec!["/tmp/evil.txt"]
        );
        assert_eq!(
            erofs_paths("sh: 1: cannot create /home/u/x: Read-only file system"),
            vec!["/home/u/x"]
        );
        assert!(erofs_paths("AssertionError: assert 1 == 2").is_empty());
        assert_eq!(
            erofs_paths("sh: 1: cannot create /tmp/x.sh: Permission denied"),
            vec!["/tmp/x.sh"]
        );
        assert!(erofs_paths("PermissionError: [Errno 13] Permission denied: '/x'").is_empty());
    }
}
