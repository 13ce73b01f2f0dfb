//! The configuration's vocabulary: fixture groups as declared, where they came from, the
//! `[tool.fixgate]` settings, and the errors that say where a file is wrong.

use serde::Serialize;

/// How a test's dependencies are determined (`[tool.fixgate] deps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum DepsMode {
    /// From the read trace recorded while the tests run.
    #[default]
    Traced,
    /// Every test depends on every fixture group.
    Conservative,
}

/// The remote executor settings of `[tool.fixgate]` (and, the same three, of the command line).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct RemoteExecConfig {
    pub(crate) executor: Option<String>,
    pub(crate) instance: Option<String>,
    /// `remote-platform = { container-image = "docker://…" }`, sorted by key.
    pub(crate) platform: Vec<(String, String)>,
}

/// Bounds from `[tool.fixgate.limits]` (`u64::MAX`: unlimited); `None` means the key is not set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct LimitsConfig {
    /// Bytes of address space of each process of a run.
    pub(crate) memory: Option<u64>,
    /// Processes (and threads) of a run at once.
    pub(crate) processes: Option<u64>,
    /// Bytes a run may write: to any one file, its sandbox, `/tmp`, `/dev/shm`.
    pub(crate) disk: Option<u64>,
    /// `[tool.fixgate] read-paths`: absolute paths outside the repository that runs may read
    /// (a data folder the suite needs), where containment would not let them.
    pub(crate) read_paths: Vec<std::path::PathBuf>,
}

/// Limits from `[tool.fixgate.budget]`; `None` means the key is not set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct BudgetConfig {
    pub(crate) max_seconds: Option<u64>,
    pub(crate) max_tests: Option<u64>,
    pub(crate) max_frozen: Option<u64>,
    pub(crate) max_new_skips: Option<u64>,
}

/// One fixture group: a name and its globs, relative to the repository root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Group {
    pub(crate) name: String,
    /// In declaration order (manifest lines first, then pyproject entries), without duplicates.
    pub(crate) globs: Vec<String>,
}

/// Where the fixture groups came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ConfigSource {
    Manifest,
    Pyproject,
    Both,
    Default,
}

/// A configuration file that cannot be used. `Display` is the full message: where, what, and
/// what to do about it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
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
