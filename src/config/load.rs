//! The configuration of one snapshot: what it is read from, and how the two files and the
//! defaults combine (groups unioned, a group declared twice refused).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::defaults::default_groups;
use crate::config::groups::FixtureGroups;
use crate::config::manifest::parse_manifest;
use crate::config::model::{
    BudgetConfig, ConfigError, ConfigSource, DepsMode, Group, LimitsConfig, RemoteExecConfig,
};
use crate::config::pyproject::{parse_pyproject, Pyproject};
use crate::repo_path::RepoPath;

/// What [`load`] reads: the snapshot's copies of the configuration files and its file list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConfigInputs<'a> {
    /// Content of `fixtures.manifest`, if the snapshot has it.
    pub(crate) manifest_file: Option<&'a [u8]>,
    /// Content of `pyproject.toml`, if the snapshot has it.
    pub(crate) pyproject: Option<&'a [u8]>,
    /// Every file path of the snapshot, sorted; only used to derive default groups.
    pub(crate) paths: &'a [RepoPath],
}

/// The resolved configuration of one snapshot.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Config {
    pub(crate) groups: FixtureGroups,
    pub(crate) deps: DepsMode,
    pub(crate) budget: BudgetConfig,
    /// `[tool.fixgate.limits]`: each run's bounds.
    pub(crate) limits: LimitsConfig,
    /// `[tool.fixgate] lock`: the lock file's repo-relative path, when set.
    pub(crate) lock: Option<String>,
    /// `[tool.fixgate] nio = true`: audits add the nio order (each test twice in a row), as
    /// `--nio` does.
    pub(crate) nio: bool,
    /// `[tool.fixgate] scoped = true`: audits are impact-scoped (the file-order and reversed
    /// runs record, the shuffled orders run what the patch can affect), as `--scoped` asks.
    pub(crate) scoped: bool,
    /// `[tool.fixgate] source-checks = "block"`: the source-side findings make the verdict
    /// unverified, as `--strict-source` does.
    pub(crate) source_checks_block: bool,
    /// `[tool.fixgate] remote-executor`, `remote-instance` and `remote-platform`: where an
    /// audit's runs execute (read from the base, which is trusted: a patch cannot send its
    /// code to a service of its choosing).
    pub(crate) remote_exec: RemoteExecConfig,
    /// Problems that do not stop the run (unknown keys, directories without a default group),
    /// each a full message that names the file and says what to do.
    pub(crate) warnings: Vec<String>,
}

/// Reads the fixture groups and `[tool.fixgate]` settings of one snapshot.
///
/// Groups from both files are unioned; when neither declares any, default groups are derived
/// from `paths`: one per directory under `tests/fixtures/` and `tests/data/`.
pub(crate) fn load(inputs: &ConfigInputs) -> Result<Config, ConfigError> {
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
        limits: py.limits,
        lock: py.lock,
        nio: py.nio,
        scoped: py.scoped,
        source_checks_block: py.source_checks_block,
        remote_exec: py.remote_exec,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    //! The files' rules as a user meets them: through `load`, the one entry, so that each
    //! parser's messages are checked with the line and key `load` reports.

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
    fn read_paths_are_absolute_paths() {
        let config = pyproject("[tool.fixgate]\nread-paths = [\"/data/corpus\", \"/srv/x\"]\n");
        assert_eq!(
            config.limits.read_paths,
            vec![
                std::path::PathBuf::from("/data/corpus"),
                std::path::PathBuf::from("/srv/x")
            ]
        );
        let err = pyproject_err("[tool.fixgate]\nread-paths = [\"data\"]\n");
        assert_eq!(
            err,
            "pyproject.toml line 2, tool.fixgate.read-paths: expected a list of absolute paths, \
             found the relative path \"data\"; write read-paths = [\"/data/corpus\"]"
        );
        let err = pyproject_err("[tool.fixgate]\nread-paths = \"/data\"\n");
        assert!(err.contains("found a string"), "{err}");
    }

    #[test]
    fn pyproject_limits_are_sizes_counts_or_unlimited() {
        let config = pyproject(
            "[tool.fixgate.limits]\n\
             memory = \"1.5G\"\n\
             processes = 4096\n\
             disk = \"unlimited\"\n",
        );
        assert_eq!(
            config.limits,
            LimitsConfig {
                memory: Some(3 << 29),
                processes: Some(4096),
                disk: Some(u64::MAX),
                read_paths: Vec::new(),
            }
        );
        assert_eq!(pyproject("").limits, LimitsConfig::default());
        let err = pyproject_err("[tool.fixgate.limits]\nmemory = \"lots\"\n");
        assert_eq!(
            err,
            "pyproject.toml line 2, tool.fixgate.limits.memory: expected a size such as \"512M\" \
             or \"4G\" or \"unlimited\", found \"lots\"; write memory = \"4G\""
        );
        let err = pyproject_err("[tool.fixgate.limits]\nprocesses = 0\n");
        assert!(
            err.contains("expected a whole number above 0") && err.contains("found 0"),
            "{err}"
        );
        let err = pyproject_err("[tool.fixgate]\nlimits = 3\n");
        assert!(
            err.contains("write a [tool.fixgate.limits] header"),
            "{err}"
        );
        let config = pyproject("[tool.fixgate.limits]\ncpu = 2\n");
        assert!(
            config.warnings[0].contains("tool.fixgate.limits.cpu"),
            "{:?}",
            config.warnings
        );
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
    fn pyproject_nio_is_a_boolean_and_off_by_default() {
        assert!(!pyproject("[tool.fixgate]\n").nio);
        let config = pyproject("[tool.fixgate]\nnio = true\n");
        assert!(config.nio && config.warnings.is_empty());
        assert!(pyproject_err("[tool.fixgate]\nnio = 1\n").contains(
            "tool.fixgate.nio: expected true or false, found an integer; write nio = true"
        ));
    }

    #[test]
    fn pyproject_scoped_is_a_boolean_and_off_by_default() {
        assert!(!pyproject("[tool.fixgate]\n").scoped);
        let config = pyproject("[tool.fixgate]\nscoped = true\n");
        assert!(config.scoped && config.warnings.is_empty());
        assert!(pyproject_err("[tool.fixgate]\nscoped = \"yes\"\n")
            .contains("tool.fixgate.scoped: expected true or false, found a string"));
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
        let err = pyproject_err("[tool.fixgate]\nremote-platform = { pool = 3 }\n");
        assert!(err.contains("tool.fixgate.remote-platform"), "{err}");
        let err = pyproject_err("[tool.fixgate]\nremote-executor = 1\n");
        assert!(err.contains("expected a string, found an integer"), "{err}");
    }

    #[test]
    fn source_checks_is_warn_or_block() {
        assert!(!pyproject("[tool.fixgate]\nsource-checks = \"warn\"\n").source_checks_block);
        assert!(pyproject("[tool.fixgate]\nsource-checks = \"block\"\n").source_checks_block);
        assert!(!pyproject("[tool.fixgate]\n").source_checks_block);
        let err = match load_with(
            None,
            Some("[tool.fixgate]\nsource-checks = \"loud\"\n"),
            &[],
        ) {
            Ok(_) => panic!("an unknown value is an error"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("expected \"warn\" or \"block\""), "{err}");
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
                 keys are \"groups\", \"deps\", \"budget\", \"limits\", \"lock\", \"remote-cache\", \"fork\", \
                 \"nio\", \"scoped\", \"source-checks\", \"remote-executor\", \"remote-instance\", \"remote-platform\" and \"read-paths\"",
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
