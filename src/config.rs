//! Project configuration: fixture groups from `fixtures.manifest` and `[tool.fixgate]` in
//! `pyproject.toml` (or defaults from the snapshot's file list), plus the other `[tool.fixgate]`
//! settings, validated with file and line so that every message says where and what to do.
//!
//! Everything here works on bytes handed in by the caller (the snapshot's copy of each file), never
//! on the working tree, so the base's configuration is read from the base.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use globset::{Candidate, GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Serialize;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::repo_path::RepoPath;

/// The manifest file at the repository root.
pub const MANIFEST_FILE: &str = "fixtures.manifest";
/// The Python project file at the repository root; fixgate reads `[tool.fixgate]` from it.
pub const PYPROJECT_FILE: &str = "pyproject.toml";

/// The roots scanned for default groups, with the name of the group of files directly inside.
/// `tests/data` comes second so that it is the one renamed when a directory name collides.
const DEFAULT_ROOTS: [(&str, &str); 2] = [("tests/fixtures", "fixtures"), ("tests/data", "data")];

const EXAMPLE_LINE: &str = "\"db: tests/fixtures/db/*.sqlite\"";
const EXAMPLE_TOML: &str = "db = [\"tests/fixtures/db/*.sqlite\"]";
const NAME_RULE: &str = "use only letters, digits, '_', '.' and '-'";

/// What [`load`] reads: the snapshot's copies of the configuration files and its file list.
#[derive(Clone, Copy, Debug)]
pub struct ConfigInputs<'a> {
    /// Content of `fixtures.manifest`, if the snapshot has it.
    pub manifest_file: Option<&'a [u8]>,
    /// Content of `pyproject.toml`, if the snapshot has it.
    pub pyproject: Option<&'a [u8]>,
    /// Every file path of the snapshot, sorted; only used to derive default groups.
    pub paths: &'a [RepoPath],
}

/// The resolved configuration of one snapshot.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    pub groups: FixtureGroups,
    pub deps: DepsMode,
    pub budget: BudgetConfig,
    /// `[tool.fixgate] lock`: the lock file's repo-relative path, when set.
    pub lock: Option<String>,
    /// `[tool.fixgate] nio = true`: audits add the nio order (each test twice in a row), as
    /// `--nio` does.
    pub nio: bool,
    /// `[tool.fixgate] remote-executor`, `remote-instance` and `remote-platform`: where an
    /// audit's runs execute (read from the base, which is trusted: a patch cannot send its
    /// code to a service of its choosing).
    pub remote_exec: RemoteExecConfig,
    /// Problems that do not stop the run (unknown keys, directories without a default group),
    /// each a full message that names the file and says what to do.
    pub warnings: Vec<String>,
}

/// The remote executor settings of `[tool.fixgate]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RemoteExecConfig {
    pub executor: Option<String>,
    pub instance: Option<String>,
    /// `remote-platform = { container-image = "docker://…" }`, sorted by key.
    pub platform: Vec<(String, String)>,
}

/// How a test's dependencies are determined (`[tool.fixgate] deps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum DepsMode {
    /// From the read trace recorded while the tests run.
    #[default]
    Traced,
    /// Every test depends on every fixture group.
    Conservative,
}

/// Limits from `[tool.fixgate.budget]`; `None` means the key is not set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BudgetConfig {
    pub max_seconds: Option<u64>,
    pub max_tests: Option<u64>,
    pub max_frozen: Option<u64>,
    pub max_new_skips: Option<u64>,
}

/// One fixture group: a name and its globs, relative to the repository root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Group {
    pub name: String,
    /// In declaration order (manifest lines first, then pyproject entries), without duplicates.
    pub globs: Vec<String>,
}

/// Where the fixture groups came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConfigSource {
    Manifest,
    Pyproject,
    Both,
    Default,
}

/// The fixture groups of a snapshot with their globs compiled. Cloning is cheap (shared).
#[derive(Clone, Debug)]
pub struct FixtureGroups {
    inner: Arc<GroupsInner>,
}

#[derive(Debug)]
struct GroupsInner {
    /// Sorted by name.
    groups: Vec<Group>,
    /// Every glob of every group, added in group order, so a lower match index is an earlier
    /// group by name.
    set: GlobSet,
    /// For each glob in `set`, the index of its group in `groups`.
    owners: Vec<usize>,
    source: ConfigSource,
}

/// A configuration file that cannot be used. `Display` is the full message: where, what, and
/// what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A line of `fixtures.manifest` is malformed.
    #[error("fixtures.manifest line {line}: {message}")]
    Manifest { line: usize, message: String },
    /// `pyproject.toml` is not valid UTF-8 or not valid TOML.
    #[error("pyproject.toml line {line}: {message}")]
    PyprojectSyntax { line: usize, message: String },
    /// A value under `[tool.fixgate]` is wrong; `key` is its dotted path.
    #[error("pyproject.toml line {line}, {key}: {message}")]
    Pyproject {
        line: usize,
        key: String,
        message: String,
    },
    /// The same group name is declared in both files.
    #[error(
        "group {name:?} is defined in both fixtures.manifest line {manifest_line} and \
         pyproject.toml line {pyproject_line}; define each group in one file only"
    )]
    DuplicateGroup {
        name: String,
        manifest_line: usize,
        pyproject_line: usize,
    },
    /// The globs are individually valid but could not be compiled together.
    #[error("failed to compile the fixture group globs: {0}; use fewer or simpler globs")]
    GlobSet(String),
}

/// Reads the fixture groups and `[tool.fixgate]` settings of one snapshot.
///
/// Groups from both files are unioned; when neither declares any, default groups are derived
/// from `paths`: one per directory under `tests/fixtures/` and `tests/data/`.
pub fn load(inputs: &ConfigInputs) -> Result<Config, ConfigError> {
    let manifest = match inputs.manifest_file {
        Some(bytes) => parse_manifest(bytes)?,
        None => BTreeMap::new(),
    };
    let py = match inputs.pyproject {
        Some(bytes) => parse_pyproject(bytes)?,
        None => Pyproject::default(),
    };
    let mut py_warnings = py.warnings;
    py_warnings.sort_by_key(|(line, _)| *line);
    let mut warnings: Vec<String> = py_warnings.into_iter().map(|(_, w)| w).collect();

    // BTreeMap order makes the reported duplicate the first one by name, every time.
    for (name, declared) in &py.groups {
        if let Some(m) = manifest.get(name) {
            return Err(ConfigError::DuplicateGroup {
                name: name.clone(),
                manifest_line: m.line,
                pyproject_line: declared.line,
            });
        }
    }

    let source = match (manifest.is_empty(), py.groups.is_empty()) {
        (false, false) => ConfigSource::Both,
        (false, true) => ConfigSource::Manifest,
        (true, false) => ConfigSource::Pyproject,
        (true, true) => ConfigSource::Default,
    };
    let groups = if source == ConfigSource::Default {
        default_groups(inputs.paths, &mut warnings)
    } else {
        manifest
            .into_iter()
            .chain(py.groups)
            .map(|(name, declared)| Group {
                name,
                globs: declared.globs,
            })
            .collect()
    };

    Ok(Config {
        groups: FixtureGroups::build(groups, source)?,
        deps: py.deps,
        budget: py.budget,
        lock: py.lock,
        nio: py.nio,
        remote_exec: py.remote_exec,
        warnings,
    })
}

impl FixtureGroups {
    /// Compiles `groups` (already validated); sorts them by name.
    pub(crate) fn build(
        mut groups: Vec<Group>,
        source: ConfigSource,
    ) -> Result<FixtureGroups, ConfigError> {
        groups.sort_by(|a, b| a.name.cmp(&b.name));
        let mut builder = GlobSetBuilder::new();
        let mut owners = Vec::new();
        for (index, group) in groups.iter().enumerate() {
            for glob in &group.globs {
                builder.add(compile_glob(glob).map_err(|e| ConfigError::GlobSet(e.to_string()))?);
                owners.push(index);
            }
        }
        let set = builder
            .build()
            .map_err(|e| ConfigError::GlobSet(e.to_string()))?;
        Ok(FixtureGroups {
            inner: Arc::new(GroupsInner {
                groups,
                set,
                owners,
                source,
            }),
        })
    }

    /// The groups, sorted by name; each group's globs in declaration order.
    pub fn groups(&self) -> &[Group] {
        &self.inner.groups
    }

    /// The groups' part of a cache key: manifests and leases depend on them.
    pub(crate) fn key(&self) -> String {
        let mut w = fixgate_cache::KeyWriter::new("groups");
        w.list(self.groups(), |w, g| {
            w.str(&g.name).list(&g.globs, |w, glob| {
                w.str(glob);
            });
        });
        w.finish().to_string()
    }

    /// The group called `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&Group> {
        let groups = &self.inner.groups;
        groups
            .binary_search_by(|g| g.name.as_str().cmp(name))
            .ok()
            .and_then(|i| groups.get(i))
    }

    pub fn source(&self) -> ConfigSource {
        self.inner.source
    }

    pub fn is_empty(&self) -> bool {
        self.inner.groups.is_empty()
    }

    /// The first group, by name, with a glob that matches `path`. Matching is on the raw bytes,
    /// so a non-UTF-8 file name belongs to a group like any other.
    pub fn group_of(&self, path: &RepoPath) -> Option<&str> {
        let candidate = Candidate::new(Path::new(OsStr::from_bytes(path.as_bytes())));
        let inner = &*self.inner;
        // Globs were added in group order, so the smallest owner is the first group by name.
        inner
            .set
            .matches_candidate(&candidate)
            .into_iter()
            .filter_map(|i| inner.owners.get(i).copied())
            .min()
            .and_then(|g| inner.groups.get(g))
            .map(|g| g.name.as_str())
    }

    /// The directories a watcher must cover to see every file the globs can match: for each glob,
    /// its leading components without glob metacharacters (the last component is a file name,
    /// so it never counts). Sorted, deduplicated, and without roots nested inside another root;
    /// `""` is the repository root.
    pub fn watch_roots(&self) -> Vec<String> {
        let all: BTreeSet<String> = self
            .inner
            .groups
            .iter()
            .flat_map(|g| g.globs.iter())
            .map(|glob| literal_dir_prefix(glob))
            .collect();
        let mut roots: Vec<String> = Vec::new();
        for root in all {
            let nested = roots.iter().any(|r| {
                r.is_empty()
                    || root
                        .strip_prefix(r.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            });
            if !nested {
                roots.push(root);
            }
        }
        roots
    }
}

impl Serialize for FixtureGroups {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View<'a> {
            source: ConfigSource,
            groups: &'a [Group],
        }
        View {
            source: self.source(),
            groups: self.groups(),
        }
        .serialize(s)
    }
}

/// The leading directory components of `glob` that hold no glob metacharacter. A backslash
/// counts as one too: it escapes the next character, so the component is not literal text.
fn literal_dir_prefix(glob: &str) -> String {
    let mut parts: Vec<&str> = glob.split('/').collect();
    parts.pop();
    parts
        .into_iter()
        .take_while(|c| !c.contains(['*', '?', '[', '{', '\\']))
        .collect::<Vec<_>>()
        .join("/")
}

/// The one place globs are compiled, so validation and matching can never disagree:
/// `*` stays within one directory, `**` crosses directories.
fn compile_glob(glob: &str) -> Result<globset::Glob, globset::Error> {
    GlobBuilder::new(glob).literal_separator(true).build()
}

/// A group as one file declares it, with the line that first declares it.
#[derive(Debug)]
struct Declared {
    line: usize,
    globs: Vec<String>,
}

impl Declared {
    fn add(&mut self, glob: &str) {
        if !self.globs.iter().any(|g| g == glob) {
            self.globs.push(glob.to_owned());
        }
    }
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!(
            "the group name is empty; name the group ({NAME_RULE})"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        return Err(format!("group name {name:?} is not valid; {NAME_RULE}"));
    }
    Ok(())
}

/// Checks one glob; the message names the glob and says how to fix it.
fn check_glob(glob: &str) -> Result<(), String> {
    if glob.is_empty() {
        return Err(
            "the glob is empty; write a pattern relative to the repository root, for \
                    example \"tests/fixtures/db/*.sqlite\""
                .to_owned(),
        );
    }
    if glob.starts_with('/') {
        return Err(format!(
            "glob {glob:?} is absolute; write it relative to the repository root, for example \
             \"tests/fixtures/db/*.sqlite\""
        ));
    }
    let parts: Vec<&str> = glob.split('/').collect();
    if parts.contains(&"..") {
        return Err(format!(
            "glob {glob:?} escapes the repository through \"..\"; fixture globs can only name \
             files inside the repository, relative to its root"
        ));
    }
    if glob.ends_with('/') {
        // Paths are files, so a trailing slash would silently match nothing.
        return Err(format!(
            "glob {glob:?} ends with \"/\" and would match no file; write \"{glob}**\" for \
             everything under that directory"
        ));
    }
    if parts.iter().any(|p| p.is_empty() || *p == ".") {
        // Snapshot paths are normalized, so "./x" or "a//b" would silently match nothing.
        return Err(format!(
            "glob {glob:?} has an empty or \".\" component and would match no file; write it \
             relative to the repository root without \"./\" or \"//\""
        ));
    }
    compile_glob(glob).map_err(|e| {
        format!(
            "invalid glob {glob:?}: {}; fix the pattern (* matches within one directory, ** \
             across directories)",
            e.kind()
        )
    })?;
    Ok(())
}

/// Parses `fixtures.manifest`: `name: glob` per line, `#` comments, blank lines.
fn parse_manifest(bytes: &[u8]) -> Result<BTreeMap<String, Declared>, ConfigError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut groups: BTreeMap<String, Declared> = BTreeMap::new();
    for (index, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = index + 1;
        let err = |message: String| ConfigError::Manifest { line, message };
        let text = std::str::from_utf8(raw).map_err(|_| {
            err("the line is not valid UTF-8; save fixtures.manifest as UTF-8".to_owned())
        })?;
        let text = strip_comment(text).trim();
        if text.is_empty() {
            continue;
        }
        let Some((name, glob)) = text.split_once(':') else {
            return Err(err(format!(
                "expected \"name: glob\", found {text:?}; write one group per line, for example \
                 {EXAMPLE_LINE}"
            )));
        };
        let (name, glob) = (name.trim(), glob.trim());
        check_name(name).map_err(|m| err(format!("{m}, for example {EXAMPLE_LINE}")))?;
        check_glob(glob).map_err(|m| err(format!("group {name:?}: {m}")))?;
        groups
            .entry(name.to_owned())
            .or_insert_with(|| Declared {
                line,
                globs: Vec::new(),
            })
            .add(glob);
    }
    Ok(groups)
}

/// Drops a whole-line comment, or a trailing one: `#` after whitespace, so that a `#` inside a
/// file name (`tests/#1/*`) stays part of the glob.
fn strip_comment(line: &str) -> &str {
    if line.trim_start().starts_with('#') {
        return "";
    }
    match line
        .as_bytes()
        .windows(2)
        .position(|w| matches!(w[0], b' ' | b'\t') && w[1] == b'#')
    {
        // The position is an ASCII byte, so slicing there is on a char boundary.
        Some(i) => &line[..i],
        None => line,
    }
}

/// What `[tool.fixgate]` says.
#[derive(Debug, Default)]
struct Pyproject {
    groups: BTreeMap<String, Declared>,
    deps: DepsMode,
    budget: BudgetConfig,
    lock: Option<String>,
    /// `remote-cache`: the URL of a shared cache (see `engine::store`).
    remote_cache: Option<String>,
    /// `fork = false`: every run in a fresh interpreter, no fork server.
    fork: Option<bool>,
    /// `nio = true`: the nio order in every audit.
    nio: bool,
    remote_exec: RemoteExecConfig,
    /// Each with its line, for sorting.
    warnings: Vec<(usize, String)>,
}

/// The text of `pyproject.toml`, to turn byte spans into line numbers.
struct Doc<'t> {
    text: &'t str,
}

impl Doc<'_> {
    fn line(&self, offset: usize) -> usize {
        line_at(self.text.as_bytes(), offset)
    }

    fn err(&self, span: Range<usize>, key: &str, message: String) -> ConfigError {
        ConfigError::Pyproject {
            line: self.line(span.start),
            key: key.to_owned(),
            message,
        }
    }

    /// A warning with its line, so warnings can be put back in file order: TOML tables iterate
    /// by key, not by position.
    fn warn_unknown(&self, span: Range<usize>, key: &str, known: &str) -> (usize, String) {
        let line = self.line(span.start);
        let message = format!(
            "pyproject.toml line {line}: unknown key {key:?} is ignored; known keys are {known}"
        );
        (line, message)
    }
}

/// The 1-based line of byte `offset`.
fn line_at(bytes: &[u8], offset: usize) -> usize {
    let end = offset.min(bytes.len());
    bytes[..end].iter().filter(|&&b| b == b'\n').count() + 1
}

/// A value's TOML type with its article, for "found ..." in messages.
fn a_type(value: &DeValue) -> String {
    let name = value.type_str();
    let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {name}")
}

/// A TOML key as it would be written in a dotted path: bare when it can be, quoted otherwise.
fn toml_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
    {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

type Entry<'a, 'i> = (
    &'a Spanned<toml::de::DeString<'i>>,
    &'a Spanned<DeValue<'i>>,
);

fn parse_pyproject(bytes: &[u8]) -> Result<Pyproject, ConfigError> {
    let text = std::str::from_utf8(bytes).map_err(|e| ConfigError::PyprojectSyntax {
        line: line_at(bytes, e.valid_up_to()),
        message: "the file is not valid UTF-8; save pyproject.toml as UTF-8".to_owned(),
    })?;
    let doc = Doc { text };
    let root = DeTable::parse(text).map_err(|e| ConfigError::PyprojectSyntax {
        line: doc.line(e.span().map_or(0, |s| s.start)),
        message: format!(
            "invalid TOML: {}; fix the syntax so that the file parses",
            e.message().trim_end().replace('\n', "; ")
        ),
    })?;
    let mut out = Pyproject::default();

    // A `tool` that is not a table is the Python tooling's problem, not ours: there is simply
    // no `[tool.fixgate]` in it.
    let Some(DeValue::Table(tool)) = root.get_ref().get("tool").map(|v| v.get_ref()) else {
        return Ok(out);
    };
    let Some((fixgate_key, fixgate)) = tool.get_key_value("fixgate") else {
        return Ok(out);
    };
    let DeValue::Table(fixgate) = fixgate.get_ref() else {
        return Err(doc.err(
            fixgate_key.span(),
            "tool.fixgate",
            format!(
                "expected a table, found {}; write the settings under a [tool.fixgate] header",
                a_type(fixgate.get_ref())
            ),
        ));
    };

    for (key, value) in fixgate.iter() {
        match key.get_ref().as_ref() {
            "groups" => out.groups = parse_groups(&doc, (key, value))?,
            "deps" => out.deps = parse_deps(&doc, (key, value))?,
            "budget" => out.budget = parse_budget(&doc, (key, value), &mut out.warnings)?,
            "lock" => out.lock = Some(parse_lock(&doc, (key, value))?),
            "remote-cache" => match value.get_ref() {
                DeValue::String(url) => out.remote_cache = Some(url.to_string()),
                other => {
                    return Err(doc.err(
                        key.span(),
                        "tool.fixgate.remote-cache",
                        format!(
                            "expected a URL string, found {}; write remote-cache = \
                             \"grpc://cache.example:8980\" (or http://, https://, grpcs://)",
                            a_type(other)
                        ),
                    ))
                }
            },
            "fork" => out.fork = Some(parse_fork(&doc, (key, value))?),
            "nio" => out.nio = parse_nio(&doc, (key, value))?,
            "remote-executor" => {
                out.remote_exec.executor =
                    Some(parse_string(&doc, (key, value), "grpc://host:8980")?)
            }
            "remote-instance" => {
                out.remote_exec.instance = Some(parse_string(&doc, (key, value), "main")?)
            }
            "remote-platform" => out.remote_exec.platform = parse_platform(&doc, (key, value))?,
            other => out.warnings.push(doc.warn_unknown(
                key.span(),
                &format!("tool.fixgate.{}", toml_key(other)),
                "\"groups\", \"deps\", \"budget\", \"lock\", \"remote-cache\", \"fork\", \
                 \"nio\", \"remote-executor\", \"remote-instance\" and \"remote-platform\"",
            )),
        }
    }
    Ok(out)
}

/// `[tool.fixgate] remote-cache` of a `pyproject.toml`, if set.
pub fn remote_cache(pyproject: &[u8]) -> Result<Option<String>, ConfigError> {
    Ok(parse_pyproject(pyproject)?.remote_cache)
}

fn parse_groups(doc: &Doc, (key, value): Entry) -> Result<BTreeMap<String, Declared>, ConfigError> {
    let DeValue::Table(table) = value.get_ref() else {
        return Err(doc.err(
            key.span(),
            "tool.fixgate.groups",
            format!(
                "expected a table of groups, found {}; write a [tool.fixgate.groups] header \
                 followed by lines like {EXAMPLE_TOML}",
                a_type(value.get_ref())
            ),
        ));
    };
    let mut groups = BTreeMap::new();
    for (name_key, globs_value) in table.iter() {
        let name = name_key.get_ref().as_ref();
        let path = format!("tool.fixgate.groups.{}", toml_key(name));
        check_name(name).map_err(|m| doc.err(name_key.span(), &path, m))?;

        let wrong_type = |found: &str, span: Range<usize>| {
            doc.err(
                span,
                &path,
                format!(
                    "expected a glob string or an array of glob strings, found {found}; write \
                     it like {EXAMPLE_TOML}"
                ),
            )
        };
        let items: Vec<(&str, Range<usize>)> = match globs_value.get_ref() {
            DeValue::String(s) => vec![(s.as_ref(), globs_value.span())],
            DeValue::Array(array) => {
                let mut items = Vec::with_capacity(array.len());
                for item in array.iter() {
                    match item.get_ref() {
                        DeValue::String(s) => items.push((s.as_ref(), item.span())),
                        other => {
                            return Err(wrong_type(
                                &format!("an array holding {}", a_type(other)),
                                item.span(),
                            ))
                        }
                    }
                }
                items
            }
            other => return Err(wrong_type(&a_type(other), name_key.span())),
        };
        if items.is_empty() {
            return Err(doc.err(
                name_key.span(),
                &path,
                format!(
                    "group {name:?} has no globs; list at least one, for example {EXAMPLE_TOML}"
                ),
            ));
        }

        let mut declared = Declared {
            line: doc.line(name_key.span().start),
            globs: Vec::new(),
        };
        for (glob, span) in items {
            check_glob(glob).map_err(|m| doc.err(span, &path, m))?;
            declared.add(glob);
        }
        groups.insert(name.to_owned(), declared);
    }
    Ok(groups)
}

fn parse_fork(doc: &Doc, (key, value): Entry) -> Result<bool, ConfigError> {
    match value.get_ref() {
        DeValue::Boolean(b) => Ok(*b),
        other => Err(doc.err(
            key.span(),
            "tool.fixgate.fork",
            format!(
                "expected true or false, found {}; write fork = false to run every order in a \
                 fresh interpreter",
                a_type(other)
            ),
        )),
    }
}

/// A string setting, e.g. `remote-executor = "grpc://host:8980"`.
fn parse_string(doc: &Doc, (key, value): Entry, example: &str) -> Result<String, ConfigError> {
    let name = format!("tool.fixgate.{}", key.get_ref());
    match value.get_ref() {
        DeValue::String(text) => Ok(text.to_string()),
        other => Err(doc.err(
            key.span(),
            &name,
            format!(
                "expected a string, found {}; write {} = \"{example}\"",
                a_type(other),
                key.get_ref()
            ),
        )),
    }
}

/// `remote-platform = { KEY = "VALUE", ... }`.
fn parse_platform(doc: &Doc, (key, value): Entry) -> Result<Vec<(String, String)>, ConfigError> {
    let wrong = |found: &str| {
        doc.err(
            key.span(),
            "tool.fixgate.remote-platform",
            format!(
                "expected a table of strings, found {found}; write remote-platform = \
                 {{ container-image = \"docker://python:3.12\" }}"
            ),
        )
    };
    let DeValue::Table(table) = value.get_ref() else {
        return Err(wrong(&a_type(value.get_ref())));
    };
    let mut out = Vec::new();
    for (k, v) in table.iter() {
        match v.get_ref() {
            DeValue::String(text) => out.push((k.get_ref().to_string(), text.to_string())),
            other => return Err(wrong(&a_type(other))),
        }
    }
    out.sort();
    Ok(out)
}

fn parse_nio(doc: &Doc, (key, value): Entry) -> Result<bool, ConfigError> {
    match value.get_ref() {
        DeValue::Boolean(b) => Ok(*b),
        other => Err(doc.err(
            key.span(),
            "tool.fixgate.nio",
            format!(
                "expected true or false, found {}; write nio = true to run every test twice in \
                 a row in one more order",
                a_type(other)
            ),
        )),
    }
}

/// `[tool.fixgate] fork` of a `pyproject.toml`: `Some(false)` turns the fork server off. A file
/// that does not parse says nothing here (loading the configuration reports it).
pub(crate) fn fork_setting(pyproject: &[u8]) -> Option<bool> {
    parse_pyproject(pyproject).ok().and_then(|p| p.fork)
}

fn parse_deps(doc: &Doc, (key, value): Entry) -> Result<DepsMode, ConfigError> {
    let found = match value.get_ref() {
        DeValue::String(s) => match s.as_ref() {
            "traced" => return Ok(DepsMode::Traced),
            "conservative" => return Ok(DepsMode::Conservative),
            other => format!("{other:?}"),
        },
        other => a_type(other),
    };
    Err(doc.err(
        key.span(),
        "tool.fixgate.deps",
        format!(
            "expected \"traced\" or \"conservative\", found {found}; write deps = \"traced\" \
             (the default) or deps = \"conservative\""
        ),
    ))
}

/// `lock = "tests/fixtures.lock.json"`: a relative path inside the repository, since the lock
/// is read from the snapshot (the base's copy in an audit), never from outside it.
fn parse_lock(doc: &Doc, (key, value): Entry) -> Result<String, ConfigError> {
    let found = match value.get_ref() {
        DeValue::String(s) => {
            let path = s.as_ref().trim_start_matches("./");
            let inside = !path.is_empty()
                && !path.starts_with('/')
                && path
                    .split('/')
                    .all(|c| !c.is_empty() && c != "." && c != "..");
            if inside {
                return Ok(path.to_owned());
            }
            format!("{:?}", s.as_ref())
        }
        other => a_type(other),
    };
    Err(doc.err(
        key.span(),
        "tool.fixgate.lock",
        format!(
            "expected a path relative to the repository root, found {found}; write e.g. \
             lock = \"tests/fixtures.lock.json\""
        ),
    ))
}

fn parse_budget(
    doc: &Doc,
    (key, value): Entry,
    warnings: &mut Vec<(usize, String)>,
) -> Result<BudgetConfig, ConfigError> {
    let DeValue::Table(table) = value.get_ref() else {
        return Err(doc.err(
            key.span(),
            "tool.fixgate.budget",
            format!(
                "expected a table, found {}; write a [tool.fixgate.budget] header followed by \
                 lines like max_seconds = 600",
                a_type(value.get_ref())
            ),
        ));
    };
    let mut budget = BudgetConfig::default();
    for (limit_key, limit) in table.iter() {
        let name = limit_key.get_ref().as_ref();
        let slot = match name {
            "max_seconds" => &mut budget.max_seconds,
            "max_tests" => &mut budget.max_tests,
            "max_frozen" => &mut budget.max_frozen,
            "max_new_skips" => &mut budget.max_new_skips,
            other => {
                warnings.push(doc.warn_unknown(
                    limit_key.span(),
                    &format!("tool.fixgate.budget.{}", toml_key(other)),
                    "\"max_seconds\", \"max_tests\", \"max_frozen\" and \"max_new_skips\"",
                ));
                continue;
            }
        };
        let path = format!("tool.fixgate.budget.{name}");
        let found = match limit.get_ref() {
            DeValue::Integer(n) => match u64::from_str_radix(n.as_str(), n.radix()) {
                Ok(n) => {
                    *slot = Some(n);
                    continue;
                }
                Err(_) if n.as_str().starts_with('-') => format!("{n}, which is negative"),
                Err(_) => format!("{n}, which is too large"),
            },
            other => a_type(other),
        };
        return Err(doc.err(
            limit_key.span(),
            &path,
            format!("expected a whole number of 0 or more, found {found}; write {name} = 10"),
        ));
    }
    Ok(budget)
}

/// Groups derived from the file list when no file declares any: one per first-level directory
/// under `tests/fixtures/` and `tests/data/` (glob `<root>/<dir>/**`), plus `fixtures` / `data`
/// for files directly inside each root (glob `<root>/*`). A directory of `tests/data` whose name
/// is already taken becomes `data-<name>`; a directory whose name is not a valid group name gets
/// no group and a warning.
fn default_groups(paths: &[RepoPath], warnings: &mut Vec<String>) -> Vec<Group> {
    let mut groups = Vec::new();
    let mut taken = BTreeSet::new();
    for (root, root_group) in DEFAULT_ROOTS {
        let mut dirs: BTreeSet<&[u8]> = BTreeSet::new();
        let mut root_files = false;
        for path in paths {
            let Some(rest) = path
                .as_bytes()
                .strip_prefix(root.as_bytes())
                .and_then(|r| r.strip_prefix(b"/"))
            else {
                continue;
            };
            match rest.iter().position(|&b| b == b'/') {
                Some(slash) => {
                    dirs.insert(&rest[..slash]);
                }
                None if !rest.is_empty() => root_files = true,
                None => {}
            }
        }

        for dir in dirs {
            let name = match std::str::from_utf8(dir) {
                Ok(name) if check_name(name).is_ok() && name != "." && name != ".." => name,
                _ => {
                    let mut shown = root.as_bytes().to_vec();
                    shown.push(b'/');
                    shown.extend_from_slice(dir);
                    warnings.push(format!(
                        "no default fixture group for directory \"{}\": its name is not a valid \
                         group name ({NAME_RULE}); declare its group in fixtures.manifest",
                        RepoPath::from_bytes(shown)
                    ));
                    continue;
                }
            };
            let fallback = format!("{root_group}-{name}");
            groups.push(Group {
                name: claim(&mut taken, name, &fallback),
                // The name has no glob metacharacter (checked above), so it is literal here.
                globs: vec![format!("{root}/{name}/**")],
            });
        }
        if root_files {
            groups.push(Group {
                name: claim(&mut taken, root_group, &format!("{root_group}-root")),
                globs: vec![format!("{root}/*")],
            });
        }
    }
    groups
}

/// Takes `preferred` if it is free, else `fallback`, else `fallback-2`, `-3`, ...: default names
/// must be unique and must not depend on anything but the file list.
fn claim(taken: &mut BTreeSet<String>, preferred: &str, fallback: &str) -> String {
    let name = if !taken.contains(preferred) {
        preferred.to_owned()
    } else if !taken.contains(fallback) {
        fallback.to_owned()
    } else {
        (2..)
            .map(|n| format!("{fallback}-{n}"))
            .find(|n| !taken.contains(n))
            .unwrap_or_else(|| fallback.to_owned())
    };
    taken.insert(name.clone());
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[&str]) -> Vec<RepoPath> {
        let mut v: Vec<RepoPath> = list.iter().map(|p| RepoPath::from(*p)).collect();
        v.sort();
        v
    }

    fn load_with(
        manifest: Option<&str>,
        pyproject: Option<&str>,
        files: &[&str],
    ) -> Result<Config, ConfigError> {
        let files = paths(files);
        load(&ConfigInputs {
            manifest_file: manifest.map(str::as_bytes),
            pyproject: pyproject.map(str::as_bytes),
            paths: &files,
        })
    }

    fn manifest(text: &str) -> Config {
        match load_with(Some(text), None, &[]) {
            Ok(c) => c,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    fn pyproject(text: &str) -> Config {
        match load_with(None, Some(text), &[]) {
            Ok(c) => c,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    fn manifest_err(text: &str) -> String {
        match load_with(Some(text), None, &[]) {
            Ok(c) => panic!("expected an error, got {:?}", c.groups.groups()),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn remote_execution_is_read_from_tool_fixgate() {
        let c = pyproject(
            "[tool.fixgate]\nremote-executor = \"grpc://re.example:8980\"\nremote-instance = \
             \"main\"\nremote-platform = { pool = \"small\", container-image = \"docker://p\" }\n",
        );
        assert_eq!(
            c.remote_exec.executor.as_deref(),
            Some("grpc://re.example:8980")
        );
        assert_eq!(c.remote_exec.instance.as_deref(), Some("main"));
        assert_eq!(
            c.remote_exec.platform,
            [
                ("container-image".to_string(), "docker://p".to_string()),
                ("pool".to_string(), "small".to_string())
            ]
        );
        let err = load(&ConfigInputs {
            manifest_file: None,
            pyproject: Some(b"[tool.fixgate]\nremote-platform = { pool = 3 }\n"),
            paths: &[],
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("tool.fixgate.remote-platform"), "{err}");
    }

    #[test]
    fn remote_cache_is_read_from_tool_fixgate_and_must_be_a_string() {
        let with = b"[tool.fixgate]\nremote-cache = \"grpc://cache.example:8980\"\n";
        assert_eq!(
            remote_cache(with).unwrap().as_deref(),
            Some("grpc://cache.example:8980")
        );
        assert!(pyproject(std::str::from_utf8(with).unwrap())
            .warnings
            .is_empty());
        assert_eq!(
            remote_cache(b"[tool.fixgate]\ndeps = \"traced\"\n").unwrap(),
            None
        );
        let err = remote_cache(b"[tool.fixgate]\nremote-cache = 8980\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("tool.fixgate.remote-cache"), "{err}");
        assert!(err.contains("expected a URL string"), "{err}");
    }

    fn pyproject_err(text: &str) -> String {
        match load_with(None, Some(text), &[]) {
            Ok(c) => panic!("expected an error, got {:?}", c.groups.groups()),
            Err(e) => e.to_string(),
        }
    }

    fn summary(config: &Config) -> Vec<(String, Vec<String>)> {
        config
            .groups
            .groups()
            .iter()
            .map(|g| (g.name.clone(), g.globs.clone()))
            .collect()
    }

    fn group(name: &str, globs: &[&str]) -> (String, Vec<String>) {
        (
            name.to_owned(),
            globs.iter().map(|g| g.to_string()).collect(),
        )
    }

    fn group_of<'a>(config: &'a Config, path: &str) -> Option<&'a str> {
        config.groups.group_of(&RepoPath::from(path))
    }

    // --- fixtures.manifest ---

    #[test]
    fn manifest_comments_blank_lines_and_multiple_lines_per_group() {
        let config = manifest(
            "# fixture groups\n\
             \n\
             db: tests/fixtures/db/*.sqlite   # the shared database\n\
             \x20 # indented comment\n\
             golden: tests/golden/**\r\n\
             db: tests/fixtures/db/*.json\n\
             db: tests/fixtures/db/*.sqlite\n\
             odd: tests/#1/*.txt\n",
        );
        assert_eq!(
            summary(&config),
            vec![
                group(
                    "db",
                    &["tests/fixtures/db/*.sqlite", "tests/fixtures/db/*.json"]
                ),
                group("golden", &["tests/golden/**"]),
                group("odd", &["tests/#1/*.txt"]),
            ]
        );
        assert_eq!(config.groups.source(), ConfigSource::Manifest);
        assert_eq!(config.deps, DepsMode::Traced);
        assert_eq!(config.budget, BudgetConfig::default());
        assert!(config.warnings.is_empty());
    }

    #[test]
    fn manifest_line_without_colon() {
        assert_eq!(
            manifest_err("# groups\n\n\n\n\nok: a/*\ndb\n"),
            "fixtures.manifest line 7: expected \"name: glob\", found \"db\"; write one group per \
             line, for example \"db: tests/fixtures/db/*.sqlite\""
        );
    }

    #[test]
    fn manifest_empty_name() {
        let e = manifest_err("a: x/*\n : tests/x/*\n");
        assert!(
            e.starts_with("fixtures.manifest line 2: the group name is empty;"),
            "{e}"
        );
    }

    #[test]
    fn manifest_invalid_name() {
        let e = manifest_err("\nmy db: tests/x/*\n");
        assert!(
            e.starts_with(
                "fixtures.manifest line 2: group name \"my db\" is not valid; use only letters"
            ),
            "{e}"
        );
        let e = manifest_err("db/x: tests/x/*\n");
        assert!(
            e.starts_with("fixtures.manifest line 1: group name \"db/x\""),
            "{e}"
        );
    }

    #[test]
    fn manifest_empty_glob() {
        let e = manifest_err("a: x/*\nb: x/*\ndb:   # nothing yet\n");
        assert!(
            e.starts_with("fixtures.manifest line 3: group \"db\": the glob is empty;"),
            "{e}"
        );
    }

    #[test]
    fn manifest_invalid_glob_shows_globset_error() {
        let e = manifest_err("db: tests/[db/*.sqlite\n");
        assert!(e.starts_with("fixtures.manifest line 1: group \"db\": invalid glob \"tests/[db/*.sqlite\": unclosed character class"), "{e}");
    }

    #[test]
    fn manifest_glob_escaping_the_repo() {
        let e = manifest_err("a: x/*\ndb: /etc/*.conf\n");
        assert!(
            e.starts_with(
                "fixtures.manifest line 2: group \"db\": glob \"/etc/*.conf\" is absolute;"
            ),
            "{e}"
        );
        let e = manifest_err("a: x/*\nb: x/*\ndb: tests/../../secret/*\n");
        assert!(e.starts_with("fixtures.manifest line 3: group \"db\": glob \"tests/../../secret/*\" escapes the repository"), "{e}");
        let e = manifest_err("db: ../x\n");
        assert!(e.contains("escapes the repository"), "{e}");
    }

    #[test]
    fn manifest_globs_that_would_match_nothing() {
        let e = manifest_err("db: tests/fixtures/db/\n");
        assert!(e.contains("write \"tests/fixtures/db/**\""), "{e}");
        let e = manifest_err("db: ./tests/x/*\n");
        assert!(e.starts_with("fixtures.manifest line 1: group \"db\": glob \"./tests/x/*\" has an empty or \".\" component"), "{e}");
    }

    #[test]
    fn manifest_not_utf8() {
        let files = paths(&[]);
        let e = load(&ConfigInputs {
            manifest_file: Some(b"a: x/*\nb: x/\xff*\n"),
            pyproject: None,
            paths: &files,
        });
        let e = e
            .map(|_| ())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("fixtures.manifest line 2: the line is not valid UTF-8"),
            "{e}"
        );
    }

    #[test]
    fn manifest_with_only_comments_falls_back_to_defaults() {
        let config = match load_with(Some("# nothing\n\n"), None, &["tests/fixtures/db/a.sqlite"]) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(config.groups.source(), ConfigSource::Default);
        assert_eq!(
            summary(&config),
            vec![group("db", &["tests/fixtures/db/**"])]
        );
    }

    // --- matching ---

    #[test]
    fn double_star_crosses_directories_and_single_star_does_not() {
        let config = manifest(
            "deep: tests/deep/**\n\
             flat: tests/flat/*\n\
             mid: tests/**/golden/*.json\n",
        );
        assert_eq!(group_of(&config, "tests/deep/a"), Some("deep"));
        assert_eq!(group_of(&config, "tests/deep/a/b/c.txt"), Some("deep"));
        assert_eq!(group_of(&config, "tests/flat/a.txt"), Some("flat"));
        assert_eq!(group_of(&config, "tests/flat/sub/a.txt"), None);
        assert_eq!(group_of(&config, "tests/golden/x.json"), Some("mid"));
        assert_eq!(group_of(&config, "tests/a/b/golden/x.json"), Some("mid"));
        assert_eq!(group_of(&config, "tests/a/golden/sub/x.json"), None);
        assert_eq!(group_of(&config, "src/flat/a.txt"), None);
    }

    #[test]
    fn overlapping_groups_resolve_to_the_first_by_name() {
        let config = manifest("zeta: tests/**\nalpha: tests/fixtures/*\n");
        assert_eq!(group_of(&config, "tests/fixtures/a.json"), Some("alpha"));
        assert_eq!(group_of(&config, "tests/other/a.json"), Some("zeta"));
    }

    #[test]
    fn non_utf8_paths_match_on_raw_bytes() {
        let config = manifest("db: tests/fixtures/db/*.sqlite\nall: data/**\n");
        let odd = RepoPath::from_bytes(b"tests/fixtures/db/caf\xe9.sqlite".to_vec());
        assert_eq!(config.groups.group_of(&odd), Some("db"));
        let odd = RepoPath::from_bytes(b"data/\xff\xfe/x".to_vec());
        assert_eq!(config.groups.group_of(&odd), Some("all"));
        let odd = RepoPath::from_bytes(b"\xff/tests/fixtures/db/a.sqlite".to_vec());
        assert_eq!(config.groups.group_of(&odd), None);
    }

    #[test]
    fn watch_roots_are_sorted_deduplicated_and_outermost() {
        let config = manifest(
            "a: tests/fixtures/db/*.sqlite\n\
             b: tests/fixtures/db/sub/*.json\n\
             c: tests/fixtures/**\n\
             d: tests/fixtures-extra/x.json\n\
             e: data/{a,b}/*.csv\n\
             f: golden/*/out.txt\n\
             g: golden/*/other.txt\n",
        );
        assert_eq!(
            config.groups.watch_roots(),
            vec!["data", "golden", "tests/fixtures", "tests/fixtures-extra"]
        );
        let config = manifest("a: **/*.sqlite\nb: tests/x/*\n");
        assert_eq!(config.groups.watch_roots(), vec![""]);
        let config = manifest("a: top.json\nb: tests/x/*\n");
        assert_eq!(config.groups.watch_roots(), vec![""]);
        let config = manifest("a: tests/x/?.json\nb: tests/[xy]/a\n");
        assert_eq!(config.groups.watch_roots(), vec!["tests"]);
    }

    // --- pyproject.toml ---

    #[test]
    fn pyproject_groups_arrays_and_single_strings() {
        let config = pyproject(
            "[project]\nname = \"demo\"\n\n\
             [tool.fixgate.groups]\n\
             db = [\"tests/fixtures/db/*.sqlite\", \"tests/fixtures/db/*.json\"]\n\
             golden = \"tests/golden/**\"\n",
        );
        assert_eq!(
            summary(&config),
            vec![
                group(
                    "db",
                    &["tests/fixtures/db/*.sqlite", "tests/fixtures/db/*.json"]
                ),
                group("golden", &["tests/golden/**"]),
            ]
        );
        assert_eq!(config.groups.source(), ConfigSource::Pyproject);
        assert_eq!(config.groups.get("golden").map(|g| g.globs.len()), Some(1));
        assert!(config.groups.get("nope").is_none());
    }

    #[test]
    fn pyproject_deps_and_budget() {
        let config = pyproject(
            "[tool.fixgate]\n\
             deps = \"conservative\"\n\
             [tool.fixgate.budget]\n\
             max_seconds = 600\n\
             max_new_skips = 0\n\
             max_tests = 0x10\n",
        );
        assert_eq!(config.deps, DepsMode::Conservative);
        assert_eq!(
            config.budget,
            BudgetConfig {
                max_seconds: Some(600),
                max_tests: Some(16),
                max_frozen: None,
                max_new_skips: Some(0),
            }
        );
        assert!(config.groups.is_empty());
        assert_eq!(config.groups.source(), ConfigSource::Default);
    }

    #[test]
    fn pyproject_without_tool_fixgate_is_fine() {
        let config = pyproject("[project]\nname = \"demo\"\n[tool.black]\nline-length = 100\n");
        assert!(config.groups.is_empty());
        assert_eq!(config.deps, DepsMode::Traced);
        assert!(config.warnings.is_empty());
        assert!(pyproject("").warnings.is_empty());
    }

    #[test]
    fn pyproject_fork_is_a_boolean() {
        assert_eq!(fork_setting(b"[tool.fixgate]\nfork = false\n"), Some(false));
        assert_eq!(fork_setting(b"[tool.fixgate]\nfork = true\n"), Some(true));
        assert_eq!(fork_setting(b"[tool.fixgate]\ndeps = \"traced\"\n"), None);
        assert!(pyproject("[tool.fixgate]\nfork = false\n")
            .warnings
            .is_empty());
        assert!(pyproject_err("[tool.fixgate]\nfork = \"no\"\n").contains("expected true or false"));
    }

    #[test]
    fn pyproject_nio_is_a_boolean_and_off_by_default() {
        assert!(!pyproject("[tool.fixgate]\n").nio);
        let config = pyproject("[tool.fixgate]\nnio = true\n");
        assert!(config.nio && config.warnings.is_empty());
        assert!(pyproject_err("[tool.fixgate]\nnio = 1\n").contains(
            "tool.fixgate.nio: expected true or false, found an integer; write nio = true"
        ));
    }

    #[test]
    fn pyproject_unknown_keys_warn() {
        let config = pyproject(
            "[tool.fixgate]\n\
             deps = \"traced\"\n\
             colour = true\n\
             [tool.fixgate.budget]\n\
             max_seconds = 5\n\
             max_minutes = 1\n",
        );
        assert_eq!(config.budget.max_seconds, Some(5));
        assert_eq!(
            config.warnings,
            vec![
                "pyproject.toml line 3: unknown key \"tool.fixgate.colour\" is ignored; known \
                 keys are \"groups\", \"deps\", \"budget\", \"lock\", \"remote-cache\", \"fork\" \
                 and \"nio\"",
                "pyproject.toml line 6: unknown key \"tool.fixgate.budget.max_minutes\" is \
                 ignored; known keys are \"max_seconds\", \"max_tests\", \"max_frozen\" and \
                 \"max_new_skips\"",
            ]
        );
    }

    #[test]
    fn pyproject_invalid_toml_shows_the_parser_message_and_line() {
        let e = pyproject_err("[project]\nname = \"demo\"\n[tool.fixgate\n");
        assert!(
            e.starts_with("pyproject.toml line 3: invalid TOML: "),
            "{e}"
        );
        assert!(
            e.ends_with("; fix the syntax so that the file parses"),
            "{e}"
        );
        let e = pyproject_err("a = 1\na = 2\n");
        assert!(
            e.starts_with("pyproject.toml line 2: invalid TOML: "),
            "{e}"
        );
    }

    #[test]
    fn pyproject_not_utf8() {
        let files = paths(&[]);
        let e = load(&ConfigInputs {
            manifest_file: None,
            pyproject: Some(b"[project]\nname = \"d\xffmo\"\n"),
            paths: &files,
        });
        let e = e
            .map(|_| ())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("pyproject.toml line 2: the file is not valid UTF-8"),
            "{e}"
        );
    }

    #[test]
    fn pyproject_wrong_types() {
        let e = pyproject_err("[tool]\nfixgate = 3\n");
        assert!(
            e.starts_with(
                "pyproject.toml line 2, tool.fixgate: expected a table, found an integer"
            ),
            "{e}"
        );

        let e = pyproject_err("[tool.fixgate]\ngroups = [\"a/*\"]\n");
        assert!(e.starts_with("pyproject.toml line 2, tool.fixgate.groups: expected a table of groups, found an array"), "{e}");

        let e = pyproject_err("[tool.fixgate.groups]\nok = \"a/*\"\ndb = 3\n");
        assert!(e.starts_with("pyproject.toml line 3, tool.fixgate.groups.db: expected a glob string or an array of glob strings, found an integer"), "{e}");

        let e = pyproject_err("[tool.fixgate.groups]\ndb = [\n  \"a/*\",\n  4,\n]\n");
        assert!(e.starts_with("pyproject.toml line 4, tool.fixgate.groups.db: expected a glob string or an array of glob strings, found an array holding an integer"), "{e}");

        let e = pyproject_err("[tool.fixgate.groups]\ndb = []\n");
        assert!(
            e.starts_with(
                "pyproject.toml line 2, tool.fixgate.groups.db: group \"db\" has no globs"
            ),
            "{e}"
        );

        let e = pyproject_err("[tool.fixgate]\n\ndeps = \"fast\"\n");
        assert_eq!(
            e,
            "pyproject.toml line 3, tool.fixgate.deps: expected \"traced\" or \"conservative\", \
             found \"fast\"; write deps = \"traced\" (the default) or deps = \"conservative\""
        );
        let e = pyproject_err("[tool.fixgate]\ndeps = 1\n");
        assert!(e.contains("found an integer"), "{e}");

        let e = pyproject_err("[tool.fixgate]\nbudget = 5\n");
        assert!(
            e.starts_with(
                "pyproject.toml line 2, tool.fixgate.budget: expected a table, found an integer"
            ),
            "{e}"
        );

        let e = pyproject_err("[tool.fixgate.budget]\nmax_tests = 1\nmax_seconds = -5\n");
        assert!(e.starts_with("pyproject.toml line 3, tool.fixgate.budget.max_seconds: expected a whole number of 0 or more, found -5, which is negative"), "{e}");
        let e = pyproject_err("[tool.fixgate.budget]\nmax_frozen = 1.5\n");
        assert!(e.starts_with("pyproject.toml line 2, tool.fixgate.budget.max_frozen: expected a whole number of 0 or more, found a float"), "{e}");
        let e = pyproject_err("[tool.fixgate.budget]\nmax_new_skips = \"0\"\n");
        assert!(e.contains("found a string"), "{e}");
    }

    #[test]
    fn pyproject_invalid_names_and_globs_name_their_line() {
        let e = pyproject_err("[tool.fixgate.groups]\nok = \"a/*\"\n\"my db\" = \"x/*\"\n");
        assert!(e.starts_with("pyproject.toml line 3, tool.fixgate.groups.\"my db\": group name \"my db\" is not valid"), "{e}");
        let e = pyproject_err("[tool.fixgate.groups]\n\"\" = \"x/*\"\n");
        assert!(
            e.starts_with(
                "pyproject.toml line 2, tool.fixgate.groups.\"\": the group name is empty"
            ),
            "{e}"
        );
        let e = pyproject_err("[tool.fixgate.groups]\ndb = [\n  \"a/*\",\n  \"../b/*\",\n]\n");
        assert!(e.starts_with("pyproject.toml line 4, tool.fixgate.groups.db: glob \"../b/*\" escapes the repository"), "{e}");
        let e = pyproject_err("[tool.fixgate.groups]\ndb = \"\"\n");
        assert!(
            e.starts_with("pyproject.toml line 2, tool.fixgate.groups.db: the glob is empty"),
            "{e}"
        );
        let e = pyproject_err("[tool.fixgate.groups]\ndb = \"/abs/*\"\n");
        assert!(e.contains("is absolute"), "{e}");
        let e = pyproject_err("[tool.fixgate.groups]\n\ndb = \"a/{b\"\n");
        assert!(e.starts_with("pyproject.toml line 3, tool.fixgate.groups.db: invalid glob \"a/{b\": unclosed alternate group"), "{e}");
    }

    #[test]
    fn pyproject_inline_and_dotted_group_tables() {
        let config = pyproject("[tool.fixgate]\ngroups = { db = \"a/*\" }\n");
        assert_eq!(summary(&config), vec![group("db", &["a/*"])]);
        let config = pyproject("tool.fixgate.groups.db = [\"a/*\"]\n");
        assert_eq!(summary(&config), vec![group("db", &["a/*"])]);
    }

    // --- both files ---

    #[test]
    fn groups_from_both_files_are_unioned() {
        let config = match load_with(
            Some("db: tests/fixtures/db/*\n"),
            Some("[tool.fixgate.groups]\ngolden = \"tests/golden/**\"\napi = [\"tests/api/*\"]\n"),
            &["tests/fixtures/other/x"],
        ) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(config.groups.source(), ConfigSource::Both);
        assert_eq!(
            summary(&config),
            vec![
                group("api", &["tests/api/*"]),
                group("db", &["tests/fixtures/db/*"]),
                group("golden", &["tests/golden/**"]),
            ]
        );
    }

    #[test]
    fn a_group_in_both_files_is_an_error() {
        let e = load_with(
            Some("# groups\napi: tests/api/*\ndb: tests/fixtures/db/*\n"),
            Some("[project]\n\n[tool.fixgate.groups]\ndb = \"tests/db/*\"\n"),
            &[],
        )
        .map(|_| ())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert_eq!(
            e,
            "group \"db\" is defined in both fixtures.manifest line 3 and pyproject.toml line 4; \
             define each group in one file only"
        );
    }

    // --- defaults ---

    #[test]
    fn defaults_from_fixture_and_data_roots() {
        let config = match load_with(
            None,
            Some("[project]\nname = \"demo\"\n"),
            &[
                "src/app.py",
                "tests/test_app.py",
                "tests/fixtures/db/a.sqlite",
                "tests/fixtures/db/nested/b.sqlite",
                "tests/fixtures/golden/out.json",
                "tests/fixtures/README.md",
                "tests/data/db/x.csv",
                "tests/data/images/a.png",
                "tests/data/other/deep/file",
            ],
        ) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(config.groups.source(), ConfigSource::Default);
        assert_eq!(
            summary(&config),
            vec![
                group("data-db", &["tests/data/db/**"]),
                group("db", &["tests/fixtures/db/**"]),
                group("fixtures", &["tests/fixtures/*"]),
                group("golden", &["tests/fixtures/golden/**"]),
                group("images", &["tests/data/images/**"]),
                group("other", &["tests/data/other/**"]),
            ]
        );
        assert_eq!(
            group_of(&config, "tests/fixtures/db/nested/b.sqlite"),
            Some("db")
        );
        assert_eq!(group_of(&config, "tests/data/db/x.csv"), Some("data-db"));
        assert_eq!(
            group_of(&config, "tests/fixtures/README.md"),
            Some("fixtures")
        );
        assert_eq!(group_of(&config, "tests/test_app.py"), None);
        assert_eq!(
            config.groups.watch_roots(),
            vec![
                "tests/data/db",
                "tests/data/images",
                "tests/data/other",
                "tests/fixtures"
            ]
        );
    }

    #[test]
    fn defaults_root_files_group_for_data() {
        let config = match load_with(None, None, &["tests/data/a.csv", "tests/data/b.csv"]) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(summary(&config), vec![group("data", &["tests/data/*"])]);
    }

    #[test]
    fn defaults_never_collide() {
        let config = match load_with(
            None,
            None,
            &[
                "tests/fixtures/data/a",
                "tests/fixtures/fixtures/a",
                "tests/fixtures/x.json",
                "tests/data/y.csv",
                "tests/data/fixtures/b",
            ],
        ) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(
            summary(&config),
            vec![
                group("data", &["tests/fixtures/data/**"]),
                group("data-fixtures", &["tests/data/fixtures/**"]),
                group("data-root", &["tests/data/*"]),
                group("fixtures", &["tests/fixtures/fixtures/**"]),
                group("fixtures-root", &["tests/fixtures/*"]),
            ]
        );
    }

    #[test]
    fn defaults_skip_directories_that_are_not_group_names() {
        let files = vec![
            RepoPath::from("tests/fixtures/good/a"),
            RepoPath::from("tests/fixtures/my dir/a"),
            RepoPath::from_bytes(b"tests/fixtures/\xff/a".to_vec()),
        ];
        let config = match load(&ConfigInputs {
            manifest_file: None,
            pyproject: None,
            paths: &files,
        }) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(
            summary(&config),
            vec![group("good", &["tests/fixtures/good/**"])]
        );
        assert_eq!(config.warnings.len(), 2);
        assert!(
            config.warnings[0].contains("\"tests/fixtures/my dir\""),
            "{:?}",
            config.warnings
        );
        assert!(
            config.warnings[1].contains("\"tests/fixtures/\\xFF\""),
            "{:?}",
            config.warnings
        );
    }

    #[test]
    fn no_roots_means_no_groups() {
        let config = match load_with(
            None,
            None,
            &["src/a.py", "tests/test_a.py", "tests/fixturesx/a"],
        ) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert!(config.groups.is_empty());
        assert_eq!(config.groups.source(), ConfigSource::Default);
        assert!(config.groups.watch_roots().is_empty());
        assert_eq!(group_of(&config, "src/a.py"), None);
    }

    #[test]
    fn serializes_source_and_groups() {
        let config = manifest("db: a/*\n");
        let json = serde_json::to_string(&config.groups).unwrap_or_default();
        assert_eq!(
            json,
            r#"{"source":"manifest","groups":[{"name":"db","globs":["a/*"]}]}"#
        );
        let json = serde_json::to_string(&DepsMode::Conservative).unwrap_or_default();
        assert_eq!(json, r#""conservative""#);
    }

    #[test]
    fn lock_key_takes_a_path_inside_the_repository() {
        let config = pyproject("[tool.fixgate]\nlock = \"./tests/fixtures.lock.json\"\n");
        assert_eq!(config.lock.as_deref(), Some("tests/fixtures.lock.json"));
        for bad in ["\"/etc/lock\"", "\"../lock\"", "3"] {
            let err = match load_with(None, Some(&format!("[tool.fixgate]\nlock = {bad}\n")), &[]) {
                Ok(c) => panic!("expected an error for {bad}, got {:?}", c.lock),
                Err(e) => e.to_string(),
            };
            assert!(err.contains("tool.fixgate.lock"), "{err}");
            assert!(err.contains("relative to the repository root"), "{err}");
        }
    }
}
