//! `fixgate init`: runs the suite once with the trace and proposes the set-up a repository needs
//! (fixture groups from the directories tests read, `writes` markers for the tests that write
//! them, the markers registered in the pytest configuration, a first lock) as a unified diff;
//! `--apply` writes it. The one command that may modify the user's tree, and only when asked.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use crate::cli::InitArgs;
use crate::config::{self, Config, ConfigSource, FixtureGroups, MANIFEST_FILE, PYPROJECT_FILE};
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::exit;
use crate::lock::{self, Lock};
use crate::manifest::{self, Hashing};
use crate::pytest::driver::RunResult;
use crate::repo_path::RepoPath;
use crate::snapshot::Snapshot;

/// The marker lines, as the plugin registers them, so plain pytest with `--strict-markers`
/// accepts the markers fixgate asks for.
const MARKERS: [(&str, &str); 2] = [
    (
        "writes",
        "writes(*groups): the fixture groups this test may change (fixgate lease).",
    ),
    (
        "serial",
        "serial: keep this test in collection order; fixgate never shuffles it.",
    ),
];

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
struct ProposedGroup {
    name: String,
    globs: Vec<String>,
}

#[derive(Serialize)]
struct ProposedMarker {
    nodeid: String,
    groups: Vec<String>,
    /// False when the test's `def` could not be found: add the marker by hand.
    placed: bool,
}

#[derive(Serialize)]
struct Report {
    schema: u32,
    groups_file: String,
    groups: Vec<ProposedGroup>,
    markers: Vec<ProposedMarker>,
    /// The pytest configuration file the markers are registered in; `None` when they are.
    registration: Option<String>,
    /// The lock to create; `None` when the repository has one.
    lock: Option<String>,
    /// Every file the proposal changes.
    files: Vec<String>,
    diff: String,
    applied: bool,
    changed: bool,
    tests: usize,
}

pub fn run(ctx: &Ctx, args: &InitArgs) -> Result<i32> {
    let snapshot = ctx.repo.snapshot(None)?;
    let config = ctx.config(&snapshot)?;
    let runner = ctx.runner(&args.sandbox)?;
    let pb = ctx.progress(0, "init");
    let result = runner.run_seed(
        &snapshot,
        0,
        &config.groups,
        crate::pytest::driver::Record::NONE,
        pb.as_ref(),
    );
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    let result = result?;
    for w in &result.warnings {
        ctx.warn(w);
    }

    let mut edits = Edits::new(&snapshot);
    let (groups_file, groups) = propose_groups(&snapshot, &config, &result, &mut edits)?;
    let new_config = reload(&edits, &snapshot)?;
    let markers = propose_markers(&result, &new_config.groups, &mut edits)?;
    let registration = propose_registration(&mut edits)?;
    let lock = propose_lock(&snapshot, &new_config, &mut edits)?;
    if lock.is_none() {
        warn_stale_lock(ctx, &snapshot, &new_config)?;
    }

    let changes = edits.changes();
    let diff: String = changes
        .iter()
        .map(|(path, old, new)| unified_diff(path, old.as_deref(), new))
        .collect();
    if args.apply {
        for (path, _, new) in &changes {
            let full = ctx.repo.root.join(path);
            if let Some(dir) = full.parent() {
                std::fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e))?;
            }
            write_atomically(&full, new.as_bytes())?;
        }
    }
    let report = Report {
        schema: 1,
        groups_file,
        groups,
        markers,
        registration,
        lock,
        files: changes.iter().map(|(p, _, _)| p.clone()).collect(),
        changed: !changes.is_empty(),
        applied: args.apply && !changes.is_empty(),
        diff,
        tests: result.tests.len(),
    };
    ctx.emit_report(&report, || render(&report))?;
    Ok(exit::PASS)
}

/// The files the proposal changes: path → (content before, content after).
struct Edits<'s> {
    snapshot: &'s Snapshot,
    files: BTreeMap<String, (Option<String>, String)>,
}

impl<'s> Edits<'s> {
    fn new(snapshot: &'s Snapshot) -> Edits<'s> {
        Edits {
            snapshot,
            files: BTreeMap::new(),
        }
    }

    /// The current text of `path`: as edited so far, else the working tree's.
    fn text(&self, path: &str) -> Result<Option<String>> {
        if let Some((_, new)) = self.files.get(path) {
            return Ok(Some(new.clone()));
        }
        match self.snapshot.read_path(path)? {
            None => Ok(None),
            Some(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| {
                Error::Usage(format!(
                    "failed to edit {path}: it is not valid UTF-8; save it as UTF-8, or make \
                     the change shown by `fixgate init` by hand"
                ))
            }),
        }
    }

    fn set(&mut self, path: &str, text: String) -> Result<()> {
        let before = match self.files.remove(path) {
            Some((before, _)) => before,
            None => self.text(path)?,
        };
        self.files.insert(path.to_owned(), (before, text));
        Ok(())
    }

    /// The files whose text differs from before, sorted by path.
    fn changes(&self) -> Vec<(String, Option<String>, String)> {
        self.files
            .iter()
            .filter(|(_, (old, new))| old.as_deref() != Some(new.as_str()))
            .map(|(p, (old, new))| (p.clone(), old.clone(), new.clone()))
            .collect()
    }
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
fn propose_groups(
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
        && pyproject
            .as_deref()
            .is_some_and(|t| header_line(t, "[tool.fixgate.groups]").is_some());
    if proposed.is_empty() {
        let file = if in_pyproject {
            PYPROJECT_FILE
        } else {
            MANIFEST_FILE
        };
        return Ok((file.to_owned(), proposed));
    }
    if in_pyproject {
        let text = pyproject.unwrap_or_default();
        let at = header_line(&text, "[tool.fixgate.groups]").unwrap_or(0) + 1;
        let lines: Vec<String> = proposed
            .iter()
            .map(|g| {
                let globs: Vec<String> = g.globs.iter().map(|x| format!("{x:?}")).collect();
                format!("{} = [{}]", g.name, globs.join(", "))
            })
            .collect();
        edits.set(PYPROJECT_FILE, insert_lines(&text, at, &lines))?;
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
fn reload(edits: &Edits, snapshot: &Snapshot) -> Result<Config> {
    let manifest = edits.text(MANIFEST_FILE)?;
    let pyproject = edits.text(PYPROJECT_FILE)?;
    let paths = snapshot.paths();
    config::load(&config::ConfigInputs {
        manifest_file: manifest.as_deref().map(str::as_bytes),
        pyproject: pyproject.as_deref().map(str::as_bytes),
        paths: &paths,
    })
    .map_err(|e| {
        Error::Infra(format!(
            "bug: the group set-up `fixgate init` wrote is invalid: {e}"
        ))
    })
}

/// A function's path inside its module: `["TestC", "test_x"]`.
type FuncPath = Vec<String>;

/// The `writes` markers each test needs: the groups of the files it wrote, removed or renamed,
/// less those its markers already name.
fn propose_markers(
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

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The line index of `def name(` for a function path (`["TestC", "test_x"]`), with its
/// indentation; a class narrows the search to the lines indented below it.
fn find_def(text: &str, path: &[String]) -> Option<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let (mut from, mut to, mut min_indent) = (0, lines.len(), 0);
    for (i, name) in path.iter().enumerate() {
        let last = i + 1 == path.len();
        let found = (from..to).find(|&n| {
            let l = lines[n];
            let ind = indent_of(l);
            if ind < min_indent || (i == 0 && ind != 0) {
                return false;
            }
            let t = l.trim_start();
            if last {
                let t = t.strip_prefix("async ").unwrap_or(t);
                t.strip_prefix("def ")
                    .and_then(|r| r.strip_prefix(name.as_str()))
                    .is_some_and(|r| r.trim_start().starts_with('('))
            } else {
                t.strip_prefix("class ")
                    .and_then(|r| r.strip_prefix(name.as_str()))
                    .is_some_and(|r| r.starts_with([':', '(', ' ']))
            }
        })?;
        let ind = indent_of(lines[found]);
        if last {
            return Some((found, lines[found][..ind].to_owned()));
        }
        // The class body: the following lines indented deeper (blank lines included).
        from = found + 1;
        to = (from..lines.len())
            .find(|&n| !lines[n].trim().is_empty() && indent_of(lines[n]) <= ind)
            .unwrap_or(lines.len());
        min_indent = ind + 1;
    }
    None
}

/// Adds `import pytest` when the module does not import it: before its first import, after a
/// docstring and `from __future__` lines.
fn ensure_import_pytest(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.iter().any(|l| {
        l.starts_with("import pytest")
            && l["import pytest".len()..]
                .chars()
                .next()
                .is_none_or(|c| c.is_whitespace() || c == ',' || c == '#')
    }) {
        return text.to_owned();
    }
    let mut at = 0;
    let mut i = 0;
    // A leading docstring.
    while i < lines.len() && (lines[i].trim().is_empty() || lines[i].starts_with('#')) {
        i += 1;
    }
    if let Some(first) = lines.get(i) {
        let t = first.trim_start();
        if let Some(q) = ["\"\"\"", "'''"].into_iter().find(|q| t.starts_with(q)) {
            let rest = &t[3..];
            let mut end = i;
            if !rest.contains(q) {
                end = (i + 1..lines.len())
                    .find(|&n| lines[n].contains(q))
                    .unwrap_or(i);
            }
            at = end + 1;
        }
    }
    let first_import = (at..lines.len()).find(|&n| {
        let l = lines[n];
        (l.starts_with("import ") || l.starts_with("from ")) && !l.starts_with("from __future__")
    });
    let after_future = (at..lines.len())
        .filter(|&n| lines[n].starts_with("from __future__"))
        .max()
        .map(|n| n + 1);
    let at = first_import.or(after_future).unwrap_or(at);
    insert_lines(text, at, &["import pytest".to_owned()])
}

/// `text` with `new` inserted before line `at` (0-based; past the end appends).
fn insert_lines(text: &str, at: usize, new: &[String]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let at = at.min(lines.len());
    for (k, l) in new.iter().enumerate() {
        lines.insert(at + k, l.clone());
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// The 0-based index of the line that is exactly `header` (a TOML or ini section header).
fn header_line(text: &str, header: &str) -> Option<usize> {
    text.lines().position(|l| {
        let l = l.split('#').next().unwrap_or(l).trim();
        l == header
    })
}

/// Where pytest reads its configuration, in pytest's own order of precedence.
enum PytestConfig {
    Ini {
        file: &'static str,
        section: &'static str,
    },
    Pyproject,
}

fn pytest_config(edits: &Edits) -> Result<(PytestConfig, Option<String>)> {
    if let Some(t) = edits.text("pytest.ini")? {
        return Ok((
            PytestConfig::Ini {
                file: "pytest.ini",
                section: "[pytest]",
            },
            Some(t),
        ));
    }
    let pyproject = edits.text(PYPROJECT_FILE)?;
    if let Some(t) = &pyproject {
        if header_line(t, "[tool.pytest.ini_options]").is_some() {
            return Ok((PytestConfig::Pyproject, pyproject));
        }
    }
    for (file, section) in [("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]")] {
        if let Some(t) = edits.text(file)? {
            if header_line(&t, section).is_some() {
                return Ok((PytestConfig::Ini { file, section }, Some(t)));
            }
        }
    }
    // No pytest configuration yet: pyproject.toml when the project has one (adding the
    // section there changes nothing else), a new pytest.ini otherwise.
    if pyproject.is_some() {
        return Ok((PytestConfig::Pyproject, pyproject));
    }
    Ok((
        PytestConfig::Ini {
            file: "pytest.ini",
            section: "[pytest]",
        },
        None,
    ))
}

/// Registers `writes` and `serial` in the pytest configuration when it does not yet.
fn propose_registration(edits: &mut Edits) -> Result<Option<String>> {
    let (kind, text) = pytest_config(edits)?;
    match kind {
        PytestConfig::Ini { file, section } => {
            let text = text.unwrap_or_default();
            let new = register_ini(&text, section);
            if new == text {
                return Ok(None);
            }
            edits.set(file, new)?;
            Ok(Some(file.to_owned()))
        }
        PytestConfig::Pyproject => {
            let text = text.unwrap_or_default();
            let new = register_pyproject(&text)?;
            if new == text {
                return Ok(None);
            }
            edits.set(PYPROJECT_FILE, new)?;
            Ok(Some(PYPROJECT_FILE.to_owned()))
        }
    }
}

/// The marker name of a registration line (`writes(*groups): ...` → `writes`).
fn marker_name(entry: &str) -> &str {
    let e = entry.trim().trim_matches(['"', '\'', ',']);
    let end = e.find([':', '(']).unwrap_or(e.len());
    e[..end].trim()
}

fn register_ini(text: &str, section: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let Some(head) = header_line(text, section) else {
        let mut out = text.to_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(section);
        out.push_str("\nmarkers =\n");
        for (_, line) in MARKERS {
            let _ = writeln!(out, "    {line}");
        }
        return out;
    };
    let end = (head + 1..lines.len())
        .find(|&n| lines[n].trim_start().starts_with('['))
        .unwrap_or(lines.len());
    let key = (head + 1..end).find(|&n| {
        let l = lines[n];
        indent_of(l) == 0
            && l.strip_prefix("markers")
                .is_some_and(|r| r.trim_start().starts_with(['=', ':']))
    });
    match key {
        None => {
            let mut new = vec!["markers =".to_owned()];
            new.extend(MARKERS.iter().map(|(_, l)| format!("    {l}")));
            insert_lines(text, head + 1, &new)
        }
        Some(k) => {
            let first = lines[k]
                .split_once(['=', ':'])
                .map_or("", |(_, v)| v.trim());
            let mut present: BTreeSet<&str> = BTreeSet::new();
            if !first.is_empty() {
                present.insert(marker_name(first));
            }
            let mut last = k;
            for (n, l) in lines.iter().enumerate().take(end).skip(k + 1) {
                if l.trim().is_empty() || indent_of(l) == 0 {
                    break;
                }
                present.insert(marker_name(l));
                last = n;
            }
            let missing: Vec<String> = MARKERS
                .iter()
                .filter(|(name, _)| !present.contains(name))
                .map(|(_, l)| format!("    {l}"))
                .collect();
            if missing.is_empty() {
                text.to_owned()
            } else {
                insert_lines(text, last + 1, &missing)
            }
        }
    }
}

fn register_pyproject(text: &str) -> Result<String> {
    let present: BTreeSet<String> = match text.parse::<toml::Table>() {
        Ok(doc) => doc
            .get("tool")
            .and_then(|t| t.get("pytest"))
            .and_then(|t| t.get("ini_options"))
            .and_then(|t| t.get("markers"))
            .and_then(|m| m.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str())
                    .map(|s| marker_name(s).to_owned())
                    .collect()
            })
            .unwrap_or_default(),
        Err(e) => {
            return Err(Error::Usage(format!(
                "failed to read pyproject.toml: {}; fix it, then run `fixgate init` again",
                e.message()
            )))
        }
    };
    let missing: Vec<&str> = MARKERS
        .iter()
        .filter(|(name, _)| !present.contains(*name))
        .map(|(_, l)| *l)
        .collect();
    if missing.is_empty() {
        return Ok(text.to_owned());
    }
    let entries: Vec<String> = missing.iter().map(|l| format!("    {l:?},")).collect();
    let lines: Vec<&str> = text.lines().collect();
    let Some(head) = header_line(text, "[tool.pytest.ini_options]") else {
        let mut out = text.to_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("[tool.pytest.ini_options]\nmarkers = [\n");
        for e in &entries {
            let _ = writeln!(out, "{e}");
        }
        out.push_str("]\n");
        return Ok(out);
    };
    let end = (head + 1..lines.len())
        .find(|&n| lines[n].trim_start().starts_with('['))
        .unwrap_or(lines.len());
    let key = (head + 1..end).find(|&n| {
        lines[n]
            .strip_prefix("markers")
            .is_some_and(|r| r.trim_start().starts_with('='))
    });
    let Some(k) = key else {
        let mut new = vec!["markers = [".to_owned()];
        new.extend(entries);
        new.push("]".to_owned());
        return Ok(insert_lines(text, head + 1, &new));
    };
    // The array's closing bracket: on the key's line (one-line array) or the first line after
    // it that is only `]`.
    let value = lines[k].split_once('=').map_or("", |(_, v)| v.trim());
    if value.starts_with('[') && value.trim_end().ends_with(']') {
        let inner = value[1..value.len() - 1].trim().trim_end_matches(',');
        let mut items: Vec<String> = if inner.is_empty() {
            Vec::new()
        } else {
            vec![inner.to_owned()]
        };
        items.extend(missing.iter().map(|l| format!("{l:?}")));
        let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
        out[k] = format!("markers = [{}]", items.join(", "));
        let mut s = out.join("\n");
        s.push('\n');
        return Ok(s);
    }
    let Some(close) = (k + 1..end).find(|&n| lines[n].trim() == "]") else {
        return Err(Error::Usage(
            "failed to register the markers in pyproject.toml: its \
             [tool.pytest.ini_options] markers array is in a form `fixgate init` does not \
             edit; add \"writes(*groups): ...\" and \"serial: ...\" to it by hand"
                .to_owned(),
        ));
    };
    let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    if close > k + 1 {
        let prev = &mut out[close - 1];
        if !prev.trim_end().ends_with(',') {
            prev.push(',');
        }
    }
    for (i, e) in entries.into_iter().enumerate() {
        out.insert(close + i, e);
    }
    let mut s = out.join("\n");
    s.push('\n');
    Ok(s)
}

/// A first lock when the repository has none, under the new groups.
fn propose_lock(snapshot: &Snapshot, config: &Config, edits: &mut Edits) -> Result<Option<String>> {
    if lock::locate(snapshot, config)?.is_some() {
        return Ok(None);
    }
    let path = lock::lookup_order(config)[0].to_owned();
    let manifest = manifest::build(snapshot, &config.groups, Hashing { stat_cache: None })?;
    if manifest.files.is_empty() {
        return Ok(None);
    }
    edits.set(&path, Lock::from_manifest(&manifest).to_json())?;
    Ok(Some(path))
}

/// An existing lock is never rewritten by `init` (re-pinning could accept a changed fixture
/// nobody reviewed), but when the proposed groups make it differ, the user is told.
fn warn_stale_lock(ctx: &Ctx, snapshot: &Snapshot, config: &Config) -> Result<()> {
    let Some(found) = lock::locate(snapshot, config)? else {
        return Ok(());
    };
    let Ok(pinned) = Lock::parse(&found.bytes, &found.path) else {
        return Ok(());
    };
    let manifest = manifest::build(snapshot, &config.groups, Hashing { stat_cache: None })?;
    let mut read = lock::snapshot_reader(snapshot)?;
    let drift = pinned.check_with(&manifest, &mut read);
    if !drift.is_empty() {
        ctx.warn(&format!(
            "{} differs from the fixtures under these groups in {} file(s); review it with \
             `fixgate lock --check` and re-pin with `fixgate lock` if the change is intended",
            found.path,
            drift.len()
        ));
    }
    Ok(())
}

/// A unified diff of one file (`old` `None`: a new file), three lines of context.
fn unified_diff(path: &str, old: Option<&str>, new: &str) -> String {
    let a: Vec<&str> = old.map(|o| o.lines().collect()).unwrap_or_default();
    let b: Vec<&str> = new.lines().collect();
    let ops = line_ops(&a, &b);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "--- {}",
        if old.is_some() {
            format!("a/{path}")
        } else {
            "/dev/null".to_owned()
        }
    );
    let _ = writeln!(out, "+++ b/{path}");
    const CONTEXT: usize = 3;
    let changed: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| !matches!(op, Op::Same(..)))
        .map(|(i, _)| i)
        .collect();
    let mut i = 0;
    while i < changed.len() {
        let start = changed[i].saturating_sub(CONTEXT);
        let mut j = i;
        while j + 1 < changed.len() && changed[j + 1] <= changed[j] + 2 * CONTEXT + 1 {
            j += 1;
        }
        let end = (changed[j] + CONTEXT + 1).min(ops.len());
        let (mut a_start, mut b_start) = (0, 0);
        for op in &ops[..start] {
            match op {
                Op::Same(..) => {
                    a_start += 1;
                    b_start += 1;
                }
                Op::Del(_) => a_start += 1,
                Op::Add(_) => b_start += 1,
            }
        }
        let (mut a_len, mut b_len) = (0, 0);
        let mut body = String::new();
        for op in &ops[start..end] {
            match op {
                Op::Same(l) => {
                    a_len += 1;
                    b_len += 1;
                    let _ = writeln!(body, " {l}");
                }
                Op::Del(l) => {
                    a_len += 1;
                    let _ = writeln!(body, "-{l}");
                }
                Op::Add(l) => {
                    b_len += 1;
                    let _ = writeln!(body, "+{l}");
                }
            }
        }
        let from = |start: usize, len: usize| if len == 0 { start } else { start + 1 };
        let _ = writeln!(
            out,
            "@@ -{},{a_len} +{},{b_len} @@",
            from(a_start, a_len),
            from(b_start, b_len)
        );
        out.push_str(&body);
        i = j + 1;
    }
    out
}

enum Op<'a> {
    Same(&'a str),
    Del(&'a str),
    Add(&'a str),
}

/// A line edit script by longest common subsequence, after trimming the common ends; files
/// too large for the table show their middle as replaced, still a correct diff.
fn line_ops<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Op<'a>> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .iter()
        .rev()
        .zip(b[pre..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let mut ops: Vec<Op> = a[..pre].iter().map(|l| Op::Same(l)).collect();
    if am.len().saturating_mul(bm.len()) > 16_000_000 {
        ops.extend(am.iter().map(|l| Op::Del(l)));
        ops.extend(bm.iter().map(|l| Op::Add(l)));
    } else {
        let (n, m) = (am.len(), bm.len());
        let mut t = vec![0u32; (n + 1) * (m + 1)];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                t[i * (m + 1) + j] = if am[i] == bm[j] {
                    t[(i + 1) * (m + 1) + j + 1] + 1
                } else {
                    t[(i + 1) * (m + 1) + j].max(t[i * (m + 1) + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && am[i] == bm[j] {
                ops.push(Op::Same(am[i]));
                i += 1;
                j += 1;
            } else if j < m && (i == n || t[i * (m + 1) + j + 1] >= t[(i + 1) * (m + 1) + j]) {
                ops.push(Op::Add(bm[j]));
                j += 1;
            } else {
                ops.push(Op::Del(am[i]));
                i += 1;
            }
        }
    }
    ops.extend(a[a.len() - suf..].iter().map(|l| Op::Same(l)));
    ops
}

fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).map_err(|e| Error::io("create a file in", dir, e))?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(|e| Error::io("write", tmp.path(), e))?;
    // Keep the file's mode: an edited test module stays as it was.
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(tmp.path(), meta.permissions());
    }
    tmp.persist(path)
        .map_err(|e| Error::io("write", path, e.error))?;
    Ok(())
}

fn render(r: &Report) -> String {
    let mut out = String::new();
    if !r.changed {
        let _ = writeln!(
            out,
            "already set up: nothing to change ({} tests traced; every file they read is in a \
             group, every writing test holds its lease, the markers are registered)",
            r.tests
        );
        for m in r.markers.iter().filter(|m| !m.placed) {
            let _ = writeln!(
                out,
                "add by hand: @pytest.mark.writes({}) on {}",
                m.groups.join(", "),
                m.nodeid
            );
        }
        return out;
    }
    for g in &r.groups {
        let _ = writeln!(
            out,
            "group {}: {}  ({})",
            g.name,
            g.globs.join(" "),
            r.groups_file
        );
    }
    for m in &r.markers {
        let _ = writeln!(
            out,
            "{} @pytest.mark.writes({}) on {}",
            if m.placed { "marker" } else { "add by hand:" },
            m.groups
                .iter()
                .map(|g| format!("{g:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            m.nodeid
        );
    }
    if let Some(f) = &r.registration {
        let _ = writeln!(out, "register the markers in {f}");
    }
    if let Some(l) = &r.lock {
        let _ = writeln!(out, "first lock: {l}");
    }
    out.push('\n');
    out.push_str(&r.diff);
    out.push('\n');
    if r.applied {
        let _ = writeln!(out, "applied: {} file(s) written", r.files.len());
    } else {
        out.push_str("nothing was written; run `fixgate init --apply` to apply this\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_functions_and_methods_and_skips_lookalikes() {
        let src = "import os\n\ndef test_ab():\n    pass\n\ndef test_a():\n    pass\n\n\
                   class TestC:\n    def test_a(self):\n        pass\n";
        assert_eq!(find_def(src, &["test_a".into()]), Some((5, String::new())));
        assert_eq!(
            find_def(src, &["TestC".into(), "test_a".into()]),
            Some((9, "    ".into()))
        );
        assert_eq!(find_def(src, &["test_z".into()]), None);
    }

    #[test]
    fn adds_import_pytest_after_the_docstring_once() {
        let src = "\"\"\"Doc.\"\"\"\nfrom __future__ import annotations\nimport os\n";
        let out = ensure_import_pytest(src);
        assert_eq!(
            out,
            "\"\"\"Doc.\"\"\"\nfrom __future__ import annotations\nimport pytest\nimport os\n"
        );
        assert_eq!(ensure_import_pytest(&out), out);
    }

    #[test]
    fn registers_markers_in_each_config_form_once() {
        let ini = "[pytest]\naddopts = -q\nmarkers =\n    slow: slow tests\n";
        let once = register_ini(ini, "[pytest]");
        assert!(
            once.contains("    slow: slow tests\n    writes(*groups)"),
            "{once}"
        );
        assert_eq!(register_ini(&once, "[pytest]"), once);

        let py = "[project]\nname = \"x\"\n\n[tool.pytest.ini_options]\nmarkers = [\"slow: s\"]\n";
        let once = register_pyproject(py).unwrap();
        assert!(
            once.contains("markers = [\"slow: s\", \"writes(*groups)"),
            "{once}"
        );
        assert_eq!(register_pyproject(&once).unwrap(), once);

        let multi = "[tool.pytest.ini_options]\nmarkers = [\n    \"slow: s\"\n]\n";
        let once = register_pyproject(multi).unwrap();
        assert!(once.contains("\"slow: s\",\n    \"writes"), "{once}");
        assert!(once.parse::<toml::Table>().is_ok(), "{once}");
    }

    #[test]
    fn unified_diff_of_an_insertion() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let new = "a\nb\nc\nd\nX\ne\nf\ng\nh\n";
        let d = unified_diff("t.py", Some(old), new);
        assert_eq!(
            d,
            "--- a/t.py\n+++ b/t.py\n@@ -2,6 +2,7 @@\n b\n c\n d\n+X\n e\n f\n g\n"
        );
        let created = unified_diff("n.txt", None, "x\n");
        assert_eq!(created, "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1,1 @@\n+x\n");
    }
}
