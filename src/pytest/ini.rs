//! pytest's configuration, found in a snapshot the way pytest finds it (its
//! `_pytest/config/findpaths.py`): for a folder, the file pytest takes its options from and the
//! rootdir it picks; the options themselves; and the collection rules they set
//! (`python_files`, `python_classes`, `python_functions`, `testpaths`). Runs read the
//! repository root's; `fixgate init` registers its markers in the file found there.

use std::collections::BTreeMap;

/// The configuration files pytest looks for in a folder, in its order of precedence
/// (`pytest.toml` and `.pytest.toml` are pytest 9's). `pytest.toml` and `pytest.ini` (and their
/// dot forms) configure pytest whatever they hold; the others only with pytest's section.
pub(crate) const FILES: [&str; 7] = [
    "pytest.toml",
    ".pytest.toml",
    "pytest.ini",
    ".pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
];

/// Each option with its words: an ini value split on whitespace, a TOML array's items.
pub(crate) type Options = BTreeMap<String, Vec<String>>;

/// Where a configuration file holds pytest's options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Section {
    /// An ini file's section: `pytest` (pytest.ini, tox.ini) or `tool:pytest` (setup.cfg).
    Ini(&'static str),
    /// A TOML table by its keys: `pytest` (pytest.toml), `tool.pytest` (pyproject.toml, native
    /// TOML values: pytest 9) or `tool.pytest.ini_options` (pyproject.toml, ini-style values).
    Toml(&'static [&'static str]),
}

/// The table of pyproject.toml that every pytest reads (pytest 9 reads `[tool.pytest]` too).
pub(crate) const PYPROJECT_INI_OPTIONS: Section = Section::Toml(&["tool", "pytest", "ini_options"]);

/// The file pytest takes its configuration from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConfigFile {
    /// Its path in the repository.
    pub(crate) path: String,
    /// Where pytest's options are in it, or would be written.
    pub(crate) section: Section,
    /// The options; `None` for a `pyproject.toml` without pytest's tables, which pytest names
    /// as its configuration file for want of another: it places the rootdir, and every option
    /// is pytest's default.
    pub(crate) options: Option<Options>,
}

/// What pytest finds when it starts in a folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Located {
    /// The rootdir, a folder of the repository (`""`: its root).
    pub(crate) rootdir: String,
    /// The configuration file; `None`: none (every option is pytest's default).
    pub(crate) file: Option<ConfigFile>,
}

/// What pytest finds when it starts in `folder` (a folder of the repository, `""` for its root)
/// with no path arguments, `read` giving the text of a file of the repository: upward from
/// `folder` to the root, the first folder with one of [`FILES`] that configures pytest (by the
/// order of [`FILES`] within a folder) is the rootdir and that file the configuration; else the
/// nearest `pyproject.toml` names both; else the nearest folder with a `setup.py` is the rootdir;
/// else `folder` is. What lies above the repository is not looked at: a run sees only its
/// snapshot.
pub(crate) fn locate(folder: &str, read: impl Fn(&str) -> Option<String>) -> Located {
    let folder = folder.trim_matches('/');
    let mut nearest_pyproject = None;
    for dir in upward(folder) {
        for name in FILES {
            let path = join(dir, name);
            let Some(text) = read(&path) else { continue };
            let (section, options) = load(name, &text);
            if name == "pyproject.toml" && nearest_pyproject.is_none() {
                nearest_pyproject = Some((dir, path.clone()));
            }
            if let Some(options) = options {
                return Located {
                    rootdir: dir.to_owned(),
                    file: Some(ConfigFile {
                        path,
                        section,
                        options: Some(options),
                    }),
                };
            }
        }
    }
    if let Some((dir, path)) = nearest_pyproject {
        return Located {
            rootdir: dir.to_owned(),
            file: Some(ConfigFile {
                path,
                section: PYPROJECT_INI_OPTIONS,
                options: None,
            }),
        };
    }
    let rootdir = upward(folder)
        .find(|dir| read(&join(dir, "setup.py")).is_some())
        .unwrap_or(folder);
    Located {
        rootdir: rootdir.to_owned(),
        file: None,
    }
}

/// `folder` and each folder above it, up to the repository's root (`""`).
fn upward(folder: &str) -> impl Iterator<Item = &str> {
    std::iter::successors(Some(folder), |dir| match dir.is_empty() {
        true => None,
        false => Some(dir.rfind('/').map_or("", |i| &dir[..i])),
    })
}

fn join(dir: &str, name: &str) -> String {
    match dir.is_empty() {
        true => name.to_owned(),
        false => format!("{dir}/{name}"),
    }
}

/// Where the file named `name` holds pytest's options, and the options when it configures
/// pytest (`None`: it does not), as pytest's loader for that name reads it.
fn load(name: &str, text: &str) -> (Section, Option<Options>) {
    match name {
        "pytest.toml" | ".pytest.toml" => (
            Section::Toml(&["pytest"]),
            Some(toml_table(text, &["pytest"]).unwrap_or_default()),
        ),
        "pytest.ini" | ".pytest.ini" => (
            Section::Ini("pytest"),
            Some(ini_section(text, "pytest").unwrap_or_default()),
        ),
        "pyproject.toml" => pyproject(text),
        "tox.ini" => (Section::Ini("pytest"), ini_section(text, "pytest")),
        _ => (
            Section::Ini("tool:pytest"),
            ini_section(text, "tool:pytest"),
        ),
    }
}

/// One snapshot's pytest configuration, at its root.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PytestIni {
    /// The file it came from; `None`: pytest's defaults.
    pub(crate) file: Option<String>,
    /// Each option with its words. `pyproject.toml`'s `[project.entry-points.pytest11]` (the
    /// plugins the project installs) is held as the option `entry-points.pytest11`.
    pub(crate) values: Options,
}

impl PytestIni {
    /// The configuration pytest would use at the repository's root, with `read` giving a
    /// file's text.
    pub(crate) fn find(read: impl Fn(&str) -> Option<String>) -> PytestIni {
        let mut ini = PytestIni::default();
        if let Some(ConfigFile {
            path,
            options: Some(options),
            ..
        }) = locate("", &read).file
        {
            ini.file = Some(path);
            ini.values = options;
        }
        // The plugins a project installs load whichever file configures pytest.
        if let Some(plugins) = read("pyproject.toml").and_then(|t| entry_points(&t)) {
            ini.values.insert("entry-points.pytest11".into(), plugins);
        }
        ini
    }

    fn words(&self, key: &str, default: &[&str]) -> Vec<String> {
        self.values
            .get(key)
            .cloned()
            .unwrap_or_else(|| default.iter().map(|s| s.to_string()).collect())
    }

    pub(crate) fn python_files(&self) -> Vec<String> {
        self.words("python_files", &["test_*.py", "*_test.py"])
    }

    pub(crate) fn python_functions(&self) -> Vec<String> {
        self.words("python_functions", &["test"])
    }

    pub(crate) fn python_classes(&self) -> Vec<String> {
        self.words("python_classes", &["Test"])
    }

    pub(crate) fn testpaths(&self) -> Vec<String> {
        self.words("testpaths", &[])
    }

    /// Whether pytest would collect `path` (repo-relative) as a test module by its name: its
    /// file name matches a `python_files` pattern (a pattern with a `/` matches the path).
    pub(crate) fn is_test_file(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        self.python_files().iter().any(|p| {
            let subject = if p.contains('/') { path } else { name };
            fnmatch(p, subject)
        })
    }

    /// Whether `name` names a test function (`python_functions`: a prefix, or a glob).
    pub(crate) fn is_test_function(&self, name: &str) -> bool {
        prefix_or_glob(&self.python_functions(), name)
    }

    /// Whether `name` names a test class (`python_classes`, the same rule).
    pub(crate) fn is_test_class(&self, name: &str) -> bool {
        prefix_or_glob(&self.python_classes(), name)
    }
}

/// pytest's rule for `python_functions` and `python_classes`: a name matches an option that is
/// its prefix, or a glob (`*`, `?`, `[`) that matches it whole.
fn prefix_or_glob(options: &[String], name: &str) -> bool {
    options
        .iter()
        .any(|o| name.starts_with(o.as_str()) || (o.contains(['*', '?', '[']) && fnmatch(o, name)))
}

/// Python's `fnmatch`: `*` and `?` match any characters (`/` too), `[…]` a set.
fn fnmatch(pattern: &str, subject: &str) -> bool {
    globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .build()
        .is_ok_and(|g| g.compile_matcher().is_match(subject))
}

/// The options of an ini file's `[section]`: `key = value` or `key: value`, indented lines
/// continuing the value, `#` and `;` comment lines; each value split on whitespace. `None`
/// when the file has no such section.
fn ini_section(text: &str, section: &str) -> Option<Options> {
    let mut values = Options::new();
    let mut inside = false;
    let mut found = false;
    let mut key: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        if let Some(name) = trimmed.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            inside = name.trim() == section;
            found |= inside;
            key = None;
            continue;
        }
        if !inside || trimmed.is_empty() {
            continue;
        }
        let continues = line.starts_with([' ', '\t']);
        match (continues, &key) {
            (true, Some(k)) => values
                .entry(k.clone())
                .or_default()
                .extend(trimmed.split_whitespace().map(str::to_string)),
            _ => {
                let at = trimmed.find(['=', ':']);
                let (k, v) = match at {
                    Some(i) => (trimmed[..i].trim(), trimmed[i + 1..].trim()),
                    None => (trimmed, ""),
                };
                values.insert(
                    k.to_string(),
                    v.split_whitespace().map(str::to_string).collect(),
                );
                key = Some(k.to_string());
            }
        }
    }
    found.then_some(values)
}

/// A `pyproject.toml`'s pytest table: `[tool.pytest.ini_options]`, else pytest 9's
/// `[tool.pytest]` when it holds anything (pytest refuses a file with both: the ini-style table
/// is the one every pytest reads).
fn pyproject(text: &str) -> (Section, Option<Options>) {
    let doc = text.parse::<toml::Table>().ok();
    let pytest = doc
        .as_ref()
        .and_then(|d| d.get("tool")?.get("pytest")?.as_table());
    let Some(pytest) = pytest else {
        return (PYPROJECT_INI_OPTIONS, None);
    };
    if let Some(ini) = pytest.get("ini_options").and_then(toml::Value::as_table) {
        return (PYPROJECT_INI_OPTIONS, Some(words_of(ini)));
    }
    match pytest.is_empty() {
        true => (PYPROJECT_INI_OPTIONS, None),
        false => (Section::Toml(&["tool", "pytest"]), Some(words_of(pytest))),
    }
}

/// The table at `path` of a TOML text as options; `None` when there is no such table or the
/// text is not TOML.
fn toml_table(text: &str, path: &[&str]) -> Option<Options> {
    let doc = text.parse::<toml::Table>().ok()?;
    let mut table = &doc;
    for key in path {
        table = table.get(*key)?.as_table()?;
    }
    Some(words_of(table))
}

/// A TOML table's values as words (a string split on whitespace, an array's items), its
/// tables left out.
fn words_of(table: &toml::Table) -> Options {
    let words = |v: &toml::Value| -> Vec<String> {
        match v {
            toml::Value::String(s) => s.split_whitespace().map(str::to_string).collect(),
            toml::Value::Array(a) => a
                .iter()
                .map(|x| match x {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect(),
            other => vec![other.to_string()],
        }
    };
    table
        .iter()
        .filter(|(_, v)| !v.is_table())
        .map(|(k, v)| (k.clone(), words(v)))
        .collect()
}

/// `[project.entry-points.pytest11]` of a `pyproject.toml`: `name = module` lines, as words.
fn entry_points(text: &str) -> Option<Vec<String>> {
    let table = toml_table(text, &["project", "entry-points", "pytest11"])?;
    Some(
        table
            .into_iter()
            .map(|(k, v)| format!("{k}={}", v.join(" ")))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(files: &[(&str, &str)]) -> PytestIni {
        PytestIni::find(|f| {
            files
                .iter()
                .find(|(n, _)| *n == f)
                .map(|(_, t)| t.to_string())
        })
    }

    #[test]
    fn pytest_finds_its_file_by_precedence_and_section() {
        // setup.cfg without [tool:pytest] and a pyproject without the table are no configuration.
        let ini = find(&[
            ("setup.cfg", "[metadata]\nname = x\n"),
            ("pyproject.toml", "[project]\nname = \"x\"\n"),
            (
                "tox.ini",
                "[pytest]\npython_files = check_*.py\n    *_check.py\n",
            ),
        ]);
        assert_eq!(ini.file.as_deref(), Some("tox.ini"));
        assert_eq!(ini.python_files(), ["check_*.py", "*_check.py"]);
        let ini = find(&[
            ("pytest.ini", "# nothing\n"),
            ("tox.ini", "[pytest]\npython_files = check_*.py\n"),
        ]);
        assert_eq!(
            ini.file.as_deref(),
            Some("pytest.ini"),
            "pytest.ini wins, even empty"
        );
        assert_eq!(ini.python_files(), ["test_*.py", "*_test.py"]);
        let ini = find(&[(
            "pyproject.toml",
            "[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\naddopts = \"-q --deselect t.py::a\"\n\n\
             [project.entry-points.pytest11]\nmine = \"pkg.plugin\"\n",
        )]);
        assert_eq!(ini.file.as_deref(), Some("pyproject.toml"));
        assert_eq!(ini.testpaths(), ["tests"]);
        assert_eq!(ini.values["addopts"], ["-q", "--deselect", "t.py::a"]);
        assert_eq!(ini.values["entry-points.pytest11"], ["mine=pkg.plugin"]);
        let ini = find(&[(
            "setup.cfg",
            "[tool:pytest]\npython_functions: check_ test_\n",
        )]);
        assert_eq!(ini.python_functions(), ["check_", "test_"]);
        assert_eq!(find(&[]), PytestIni::default());
    }

    /// What [`locate`] finds in `folder` of a repository holding `files` (path, text).
    fn located(files: &[(&str, &str)], folder: &str) -> (String, Option<(String, Section)>) {
        let found = locate(folder, |p| {
            files
                .iter()
                .find(|(n, _)| *n == p)
                .map(|(_, t)| t.to_string())
        });
        (found.rootdir, found.file.map(|f| (f.path, f.section)))
    }

    /// The cases below were run through pytest 9.2 (`pytest --co` in the folder, its header's
    /// `rootdir:` and `configfile:`), which agreed with each.
    #[test]
    fn located_as_pytest_9_finds_its_configuration_and_rootdir() {
        let ini = Section::Ini;
        let toml = Section::Toml;
        let case =
            |files: &[(&str, &str)], folder, rootdir: &str, file: Option<(&str, Section)>| {
                let file = file.map(|(path, section)| (path.to_owned(), section));
                assert_eq!(
                    located(files, folder),
                    (rootdir.to_owned(), file),
                    "{files:?} in {folder:?}"
                );
            };
        // Upward from the folder: a tox.ini without [pytest] is passed over.
        case(
            &[("pytest.ini", "[pytest]\n"), ("sub/tox.ini", "[tox]\n")],
            "sub/pkg",
            "",
            Some(("pytest.ini", ini("pytest"))),
        );
        // A pyproject.toml without pytest's tables names the rootdir when nothing configures
        // pytest, but gives way to a configuration further up.
        let bare = "[project]\nname = 'x'\n";
        case(
            &[("sub/pyproject.toml", bare)],
            "sub/pkg",
            "sub",
            Some(("sub/pyproject.toml", PYPROJECT_INI_OPTIONS)),
        );
        case(
            &[
                ("setup.cfg", "[tool:pytest]\nmarkers = m\n"),
                ("sub/pyproject.toml", bare),
            ],
            "sub",
            "",
            Some(("setup.cfg", ini("tool:pytest"))),
        );
        case(
            &[("setup.py", ""), ("sub/pyproject.toml", bare)],
            "sub",
            "sub",
            Some(("sub/pyproject.toml", PYPROJECT_INI_OPTIONS)),
        );
        // No configuration: the nearest setup.py's folder, else the folder itself.
        case(&[("setup.py", "")], "sub", "", None);
        case(&[("sub/test_a.py", "")], "sub", "sub", None);
        // By precedence within a folder.
        case(
            &[
                ("pytest.toml", "[pytest]\nmarkers = ['m']\n"),
                ("pytest.ini", "[pytest]\n"),
                ("pyproject.toml", "[tool.pytest.ini_options]\n"),
            ],
            "",
            "",
            Some(("pytest.toml", toml(&["pytest"]))),
        );
        case(
            &[
                ("pyproject.toml", "[tool.pytest]\nmarkers = ['m']\n"),
                ("tox.ini", "[pytest]\n"),
            ],
            "",
            "",
            Some(("pyproject.toml", toml(&["tool", "pytest"]))),
        );
        case(
            &[(".pytest.ini", "[pytest]\n"), ("tox.ini", "[pytest]\n")],
            "",
            "",
            Some((".pytest.ini", ini("pytest"))),
        );
        // An empty [tool.pytest] is no configuration; an empty pytest.ini or pytest.toml is.
        case(
            &[
                ("pyproject.toml", "[tool.pytest]\n"),
                ("setup.cfg", "[tool:pytest]\n"),
            ],
            "",
            "",
            Some(("setup.cfg", ini("tool:pytest"))),
        );
        case(
            &[
                ("pyproject.toml", "[tool.pytest.ini_options]\n"),
                ("sub/pytest.ini", ""),
            ],
            "sub",
            "sub",
            Some(("sub/pytest.ini", ini("pytest"))),
        );
        case(
            &[("pytest.ini", "[pytest]\n"), ("sub/pytest.toml", "")],
            "sub/",
            "sub",
            Some(("sub/pytest.toml", toml(&["pytest"]))),
        );
    }

    #[test]
    fn pytest_toml_reads_its_pytest_table_and_pyproject_its_native_table() {
        let ini = find(&[(
            "pytest.toml",
            "[pytest]\npython_files = ['check_*.py']\ntestpaths = ['t']\n",
        )]);
        assert_eq!(ini.file.as_deref(), Some("pytest.toml"));
        assert_eq!(ini.python_files(), ["check_*.py"]);
        assert_eq!(ini.testpaths(), ["t"]);
        let ini = find(&[(
            "pyproject.toml",
            "[tool.pytest]\npython_functions = ['check_']\n",
        )]);
        assert_eq!(ini.python_functions(), ["check_"]);
        // A bare pyproject.toml is where pytest's rootdir is, but no options come from it.
        let ini = find(&[("pyproject.toml", "[project]\nname = 'x'\n")]);
        assert_eq!(ini, PytestIni::default());
    }

    #[test]
    fn test_files_functions_and_classes_follow_pytests_rules() {
        let default = PytestIni::default();
        assert!(default.is_test_file("tests/test_a.py"));
        assert!(default.is_test_file("a_test.py"));
        assert!(!default.is_test_file("tests/mod_checks.py"));
        assert!(default.is_test_function("test_x") && default.is_test_function("testx"));
        assert!(!default.is_test_function("check_x"));
        assert!(default.is_test_class("TestThing") && !default.is_test_class("ThingTests"));
        let custom = find(&[(
            "pytest.ini",
            "[pytest]\npython_files = *_checks.py\npython_functions = check_* test\npython_classes = *Suite\n",
        )]);
        assert!(custom.is_test_file("tests/mod_checks.py"));
        assert!(!custom.is_test_file("tests/test_a.py"));
        assert!(custom.is_test_function("check_x") && custom.is_test_function("test_y"));
        assert!(custom.is_test_class("MathSuite") && !custom.is_test_class("TestMath"));
    }
}
