//! What `fixgate init` infers from one traced run: a fixture group for each directory of files
//! tests read that no group covers, and the `writes` markers the tests that change them need.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use crate::cmd::init::edits::Edits;
use crate::cmd::init::pyedit::{ensure_import_pytest, find_def, insert_lines};
use crate::cmd::init::toml_file;
use crate::config::{self, Config, ConfigSource, FixtureGroups, MANIFEST_FILE, PYPROJECT_FILE};
use crate::error::{Error, Result};
use crate::lock;
use crate::pytest::result::RunResult;
use crate::repo_path::RepoPath;
use crate::snapshot::Snapshot;

/// Files a test reads that are configuration or code, never fixtures.
const NOT_FIXTURES: [&str; 8] = [
    "pyproject.toml",
    "setup.cfg",
    "setup.py",
    "tox.ini",
    "pytest.ini",
    "conftest.py",
    MANIFEST_FILE,
    lock::FILE_NAME,
];

#[derive(Serialize)]
pub(super) struct ProposedGroup {
    pub(super) name: String,
    pub(super) globs: Vec<String>,
}

#[derive(Serialize)]
pub(super) struct ProposedMarker {
    pub(super) nodeid: String,
    pub(super) groups: Vec<String>,
    /// False when the test's `def` could not be found: add the marker by hand.
    pub(super) placed: bool,
}

fn is_code_or_config(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    path.ends_with(".py")
        || path.ends_with(".pyc")
        || path.ends_with(".pyi")
        || NOT_FIXTURES.contains(&name)
        || path.starts_with(".git/")
        || path.split('/').any(|c| c == "__pycache__")
}

/// The fixture files tests touched: files of the snapshot (so not created by the run) that
/// some test (or a session fixture) read, wrote or removed, and that are not code.
fn touched_files(snapshot: &Snapshot, result: &RunResult) -> BTreeSet<String> {
    let traces = result
        .tests
        .iter()
        .map(|t| &t.trace)
        .chain(std::iter::once(&result.session_trace));
    let mut out = BTreeSet::new();
    for t in traces {
        let paths = t
            .read
            .iter()
            .chain(&t.sqlite)
            .chain(&t.write)
            .chain(&t.remove)
            .chain(t.rename.iter().flat_map(|(a, b)| [a, b]));
        for p in paths {
            if !is_code_or_config(p) && snapshot.find(&RepoPath::from(p.as_str())).is_some() {
                out.insert(p.clone());
            }
        }
    }
    out
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

/// Proposes a group for each directory holding touched files that no declared group covers.
/// A directory without Python code below it is taken whole (`dir/**`); one with code gets a
/// glob per file extension read in it, so the group never covers a test module that `init`
/// itself edits.
pub(super) fn propose_groups(
    snapshot: &Snapshot,
    config: &Config,
    result: &RunResult,
    edits: &mut Edits,
) -> Result<(String, Vec<ProposedGroup>)> {
    // Default groups are a guess, replaced by what the tests actually read.
    let declared = config.groups.source() != ConfigSource::Default;
    let uncovered: Vec<String> = touched_files(snapshot, result)
        .into_iter()
        .filter(|p| {
            !declared
                || config
                    .groups
                    .group_of(&RepoPath::from(p.as_str()))
                    .is_none()
        })
        .collect();

    let all_paths: Vec<String> = snapshot.paths().iter().map(|p| p.to_string()).collect();
    let has_code_below = |dir: &str| {
        let prefix = format!("{dir}/");
        all_paths
            .iter()
            .any(|p| p.starts_with(&prefix) && is_code_or_config(p))
    };

    // Directory → the files read in it; the repository root is never a group.
    let mut dirs: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for p in &uncovered {
        let d = parent(p);
        if !d.is_empty() {
            dirs.entry(d).or_default().push(p);
        }
    }
    let whole: BTreeMap<&str, bool> = dirs.keys().map(|d| (*d, !has_code_below(d))).collect();
    let mut taken: BTreeSet<String> = config
        .groups
        .groups()
        .iter()
        .filter(|_| declared)
        .map(|g| g.name.clone())
        .collect();
    let mut proposed = Vec::new();
    for (dir, files) in &dirs {
        // Inside a directory already taken whole, nothing more to add.
        let covered = whole
            .iter()
            .any(|(d, w)| *w && d != dir && dir.starts_with(&format!("{d}/")));
        if covered {
            continue;
        }
        let globs: Vec<String> = if whole.get(dir).copied().unwrap_or(false) {
            vec![format!("{dir}/**")]
        } else {
            let exts: BTreeSet<String> = files
                .iter()
                .map(|f| {
                    let name = f.rsplit('/').next().unwrap_or(f);
                    match name.rsplit_once('.') {
                        Some((stem, ext)) if !stem.is_empty() => format!("{dir}/*.{ext}"),
                        _ => (*f).to_owned(),
                    }
                })
                .collect();
            exts.into_iter().collect()
        };
        proposed.push(ProposedGroup {
            name: group_name(dir, &mut taken),
            globs,
        });
    }

    // Written where the repository declares its groups already; a new fixtures.manifest
    // otherwise (the simpler file, and pyproject.toml keeps only settings).
    let manifest = edits.text(MANIFEST_FILE)?;
    let pyproject = edits.text(PYPROJECT_FILE)?;
    let in_pyproject = manifest.is_none()
        && config.groups.source() == ConfigSource::Pyproject
        && pyproject.is_some();
    if proposed.is_empty() {
        let file = if in_pyproject {
            PYPROJECT_FILE
        } else {
            MANIFEST_FILE
        };
        return Ok((file.to_owned(), proposed));
    }
    if in_pyproject {
        let mut doc = toml_file::parse(PYPROJECT_FILE, &pyproject.unwrap_or_default())?;
        let groups = toml_file::table(PYPROJECT_FILE, &mut doc, &["tool", "fixgate", "groups"])?;
        for g in &proposed {
            let globs: toml_edit::Array = g.globs.iter().collect();
            groups.insert(&g.name, toml_edit::value(globs));
        }
        edits.set(PYPROJECT_FILE, doc.to_string())?;
        return Ok((PYPROJECT_FILE.to_owned(), proposed));
    }
    let mut text = manifest.unwrap_or_else(|| {
        "# Fixture groups (name: glob), proposed by `fixgate init` from the files tests read.\n"
            .to_owned()
    });
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    for g in &proposed {
        for glob in &g.globs {
            let _ = writeln!(text, "{}: {glob}", g.name);
        }
    }
    edits.set(MANIFEST_FILE, text)?;
    Ok((MANIFEST_FILE.to_owned(), proposed))
}

/// A group name from a directory's last component, made valid and unique.
fn group_name(dir: &str, taken: &mut BTreeSet<String>) -> String {
    let last = dir.rsplit('/').next().unwrap_or(dir);
    let mut base: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if base.is_empty() || base.starts_with(['.', '-']) {
        base.insert(0, 'g');
    }
    let name = if taken.contains(&base) {
        (2..)
            .map(|n| format!("{base}-{n}"))
            .find(|n| !taken.contains(n))
            .unwrap_or(base)
    } else {
        base
    };
    taken.insert(name.clone());
    name
}

/// The configuration with the proposed group files, so markers and the lock use the new groups.
pub(super) fn reload(edits: &Edits, snapshot: &Snapshot) -> Result<Config> {
    let manifest = edits.text(MANIFEST_FILE)?;
    let pyproject = edits.text(PYPROJECT_FILE)?;
    let paths = snapshot.paths();
    config::load(&config::ConfigInputs {
        manifest_file: manifest.as_deref().map(str::as_bytes),
        pyproject: pyproject.as_deref().map(str::as_bytes),
        paths: &paths,
    })
    .map_err(|e| {
        Error::bug(format!(
            "the group set-up `fixgate init` wrote is invalid: {e}"
        ))
    })
}

/// A function's path inside its module: `["TestC", "test_x"]`.
type FuncPath = Vec<String>;

/// The `writes` markers each test needs: the groups of the files it wrote, removed or renamed,
/// less those its markers already name.
pub(super) fn propose_markers(
    result: &RunResult,
    groups: &FixtureGroups,
    edits: &mut Edits,
) -> Result<Vec<ProposedMarker>> {
    // Test file → (function path in the file → groups), so parametrized ids share one marker.
    let mut by_file: BTreeMap<String, BTreeMap<FuncPath, (String, BTreeSet<String>)>> =
        BTreeMap::new();
    for t in &result.tests {
        let written = t
            .trace
            .write
            .iter()
            .chain(&t.trace.remove)
            .chain(t.trace.rename.iter().flat_map(|(a, b)| [a, b]));
        let needed: BTreeSet<String> = written
            .filter_map(|p| groups.group_of(&RepoPath::from(p.as_str())))
            .filter(|g| !t.writes_marker.iter().any(|m| m == g))
            .map(str::to_owned)
            .collect();
        if needed.is_empty() {
            continue;
        }
        let mut parts = t.nodeid.split("::");
        let file = parts.next().unwrap_or_default().to_owned();
        let mut func: Vec<String> = parts.map(str::to_owned).collect();
        if let Some(last) = func.last_mut() {
            if let Some(i) = last.find('[') {
                last.truncate(i);
            }
        }
        let entry = by_file
            .entry(file)
            .or_default()
            .entry(func)
            .or_insert_with(|| (t.nodeid.clone(), BTreeSet::new()));
        entry.1.extend(needed);
    }

    let mut out = Vec::new();
    for (file, funcs) in by_file {
        let Some(mut text) = edits.text(&file)? else {
            out.extend(funcs.into_values().map(|(nodeid, g)| ProposedMarker {
                nodeid,
                groups: g.into_iter().collect(),
                placed: false,
            }));
            continue;
        };
        let mut placed_any = false;
        for (func, (nodeid, needed)) in funcs {
            let groups: Vec<String> = needed.into_iter().collect();
            let placed = match find_def(&text, &func) {
                Some((line, indent)) => {
                    let args: Vec<String> = groups.iter().map(|g| format!("{g:?}")).collect();
                    let mark = format!("{indent}@pytest.mark.writes({})", args.join(", "));
                    text = insert_lines(&text, line, &[mark]);
                    placed_any = true;
                    true
                }
                None => false,
            };
            out.push(ProposedMarker {
                nodeid,
                groups,
                placed,
            });
        }
        if placed_any {
            text = ensure_import_pytest(&text);
            edits.set(&file, text)?;
        }
    }
    out.sort_by(|a, b| a.nodeid.cmp(&b.nodeid));
    Ok(out)
}
