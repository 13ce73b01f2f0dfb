//! Test-source replay: every test the patch edited (not added) that passes at head runs again
//! with the base's version of its test file, and of the conftest files above it, on the head's
//! code. The answer key written in the test itself is caught like the one in fixtures.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use fixgate_graph::NodeId;

use crate::audit::source_replay::{Reading, SourceRead};
use crate::engine::kind::NodeKind;
use crate::engine::runs::{Engine, Role, RunRequest};
use crate::error::{Error, Result};
use crate::pytest::result::RunResult;
use crate::repo_path::RepoPath;
use crate::snapshot::Snapshot;

/// A test to replay: its head node id, and the node id of the base's version of it (the same,
/// unless the patch renamed the test).
pub struct Candidate {
    pub nodeid: String,
    pub base_nodeid: String,
}

impl Candidate {
    fn renamed(&self) -> bool {
        self.nodeid != self.base_nodeid
    }
}

/// The edited tests worth replaying: they pass at head, and the base has them, by name or as a
/// test the patch renamed ([`crate::audit::renamed`]: a head test new by name whose body matches
/// a base test of the same file that is gone at head).
pub fn candidates(
    edited: &BTreeSet<String>,
    base_ids: &HashSet<&str>,
    head_ids: &HashSet<&str>,
    head_run: &RunResult,
    base: &Snapshot,
    head: &Snapshot,
) -> Vec<Candidate> {
    let green = |id: &str| head_run.outcome_of(id).is_some_and(|o| o.is_green());
    let renamed = renamed_tests(edited, base_ids, head_ids, base, head);
    edited
        .iter()
        .filter(|id| green(id))
        .filter_map(|id| {
            let base_nodeid = match base_ids.contains(id.as_str()) {
                true => id.clone(),
                false => renamed.get(id.as_str())?.clone(),
            };
            Some(Candidate {
                nodeid: id.clone(),
                base_nodeid,
            })
        })
        .collect()
}

/// The new head tests (edited, unknown to the base) that are renamed base tests, with the base's
/// node id of each. A file is read only when it has tests on both sides of the rename.
fn renamed_tests(
    edited: &BTreeSet<String>,
    base_ids: &HashSet<&str>,
    head_ids: &HashSet<&str>,
    base: &Snapshot,
    head: &Snapshot,
) -> BTreeMap<String, String> {
    let mut new: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for id in edited.iter().filter(|id| !base_ids.contains(id.as_str())) {
        let (file, func) = crate::testsrc::split_nodeid(id);
        new.entry(file).or_default().insert(func);
    }
    let mut gone: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for id in base_ids.iter().filter(|id| !head_ids.contains(*id)) {
        let (file, func) = crate::testsrc::split_nodeid(id);
        if new.contains_key(file) {
            gone.entry(file).or_default().insert(func);
        }
    }
    let mut out = BTreeMap::new();
    for (file, gone_funcs) in &gone {
        let text = |s: &Snapshot| {
            s.read_path(file)
                .ok()
                .flatten()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
        };
        let (Some(b), Some(h)) = (text(base), text(head)) else {
            continue;
        };
        let sources = |text: &str, funcs: &BTreeSet<&str>| -> Vec<(String, String)> {
            funcs
                .iter()
                .filter_map(|f| {
                    let source = crate::testsrc::function_source(text, f)?;
                    Some((f.to_string(), source))
                })
                .collect()
        };
        // A name still defined at head is not gone (a parameter changed, say), and a new name
        // the base defines is not new.
        let gone_funcs: BTreeSet<&str> = gone_funcs
            .iter()
            .copied()
            .filter(|f| crate::testsrc::function_source(&h, f).is_none())
            .collect();
        let new_funcs: BTreeSet<&str> = new[file]
            .iter()
            .copied()
            .filter(|f| crate::testsrc::function_source(&b, f).is_none())
            .collect();
        let (gone_src, new_src) = (sources(&b, &gone_funcs), sources(&h, &new_funcs));
        for (new_name, old_name) in crate::audit::renamed::pair(&gone_src, &new_src) {
            for id in edited.iter() {
                let (f, func) = crate::testsrc::split_nodeid(id);
                if f != *file || func != new_name {
                    continue;
                }
                let old = crate::audit::renamed::renamed_nodeid(id, new_name, old_name);
                if let Some(old) = old.filter(|o| base_ids.contains(o.as_str())) {
                    out.insert(id.clone(), old);
                }
            }
        }
    }
    out
}

/// Adds the replay run: the head's tree with the base's bytes of each candidate's test file and
/// of every `conftest.py` on its way up that differs, running the head's file order (less the
/// tests the base's files do not have; a renamed test under its base name, in its head place),
/// so each candidate runs after what ran before it when it passed at head: the same evidence
/// but for the test code.
pub fn start(
    engine: &Engine,
    base: &Snapshot,
    head: &Snapshot,
    tests: &[Candidate],
    file_order: &[String],
    base_ids: &HashSet<&str>,
    after: &[NodeId],
) -> Result<NodeId> {
    let mut files: BTreeSet<String> = BTreeSet::new();
    for c in tests {
        let (file, _) = crate::testsrc::split_nodeid(&c.nodeid);
        files.insert(file.to_string());
        let mut dir = file;
        while let Some((parent, _)) = dir.rsplit_once('/') {
            files.insert(format!("{parent}/conftest.py"));
            dir = parent;
        }
        files.insert("conftest.py".to_string());
    }
    let mut overlay = Vec::new();
    let mut replaced: BTreeSet<&str> = BTreeSet::new();
    for f in &files {
        let (b, h) = (base.read_path(f)?, head.read_path(f)?);
        if b != h {
            replaced.insert(f.as_str());
            overlay.push((RepoPath::from(f.as_str()), b));
        }
    }
    // A replaced test file holds the base's tests only.
    let base_name: BTreeMap<&str, &str> = tests
        .iter()
        .filter(|c| c.renamed())
        .map(|c| (c.nodeid.as_str(), c.base_nodeid.as_str()))
        .collect();
    let order: Vec<String> = file_order
        .iter()
        .map(|id| base_name.get(id.as_str()).copied().unwrap_or(id.as_str()))
        .filter(|id| {
            let (file, _) = crate::testsrc::split_nodeid(id);
            !replaced.contains(file) || base_ids.contains(id)
        })
        .map(str::to_string)
        .collect();
    let mut req = RunRequest::new(
        NodeKind::SourceReplayRun.label(),
        NodeKind::SourceReplayRun,
        Role::Head,
        order,
    )
    .after(after);
    req.overlay = overlay;
    engine.add_run(&req)
}

/// Waits for the replay and reads each test, with the lines the patch changed in it (around it,
/// in its scope, when its own lines are the same; `collected`: both sides' node ids, which say
/// what is a test).
pub fn read<'a>(
    engine: &Engine,
    node: NodeId,
    tests: &[Candidate],
    head_run: &RunResult,
    (base, head): (&Snapshot, &Snapshot),
    collected: impl IntoIterator<Item = &'a str> + Clone,
) -> Result<Vec<SourceRead>> {
    let result = engine
        .wait_run(node)?
        .map_err(|e| Error::Infra(format!("the test-source replay failed: {e}")))?;
    let mut texts: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut out = Vec::new();
    for c in tests {
        let id = &c.nodeid;
        let (file, func) = crate::testsrc::split_nodeid(id);
        let (_, base_func) = crate::testsrc::split_nodeid(&c.base_nodeid);
        if !texts.contains_key(file) {
            let text = |s: &Snapshot| {
                s.read_path(file)
                    .ok()
                    .flatten()
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default()
            };
            texts.insert(file.to_string(), (text(base), text(head)));
        }
        let (b, h) = &texts[file];
        let source = |t: &str, f: &str| crate::testsrc::function_source(t, f).unwrap_or_default();
        // A renamed test's base source under its head name: the rename is `renamed_from`, and
        // the lines shown are what else changed.
        let base_source =
            source(b, base_func).replacen(&format!("def {base_func}"), &format!("def {func}"), 1);
        let (mut base_lines, mut head_lines) =
            crate::testsrc::changed_lines(&base_source, &source(h, func));
        if base_lines.is_empty() && head_lines.is_empty() {
            // The test's own lines are the same: the edit is around it.
            let names = crate::testsrc::TestNames::of(file, collected.clone());
            let around = |t: &str| crate::testsrc::outside_tests(t, &names).of_test(id);
            (base_lines, head_lines) = crate::testsrc::changed_lines(&around(b), &around(h));
        }
        let head_outcome = head_run
            .outcome_of(id)
            .unwrap_or(crate::pytest::result::Outcome::Error);
        let on_base = result.outcome_of(&c.base_nodeid);
        out.push(SourceRead {
            nodeid: id.clone(),
            renamed_from: c.renamed().then(|| c.base_nodeid.clone()),
            head: head_outcome,
            base_test_code: on_base,
            reading: Reading::of(head_outcome, on_base),
            base_lines,
            head_lines,
        });
    }
    Ok(out)
}
