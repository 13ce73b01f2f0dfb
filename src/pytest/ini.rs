//! The suite's own pytest configuration, read from a snapshot as pytest finds it at the
//! repository root: which file holds it, its values, and the collection rules it sets
//! (`python_files`, `python_classes`, `python_functions`, `testpaths`).

use std::collections::BTreeMap;

/// The configuration files pytest looks for in the root directory, in its order of precedence
/// (`pytest.toml` is pytest 9's); each is used only when it holds pytest's section.
pub(crate) const FILES: [&str; 7] = [
    "pytest.toml",
    ".pytest.toml",
    "pytest.ini",
    ".pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
];

/// One snapshot's pytest configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PytestIni {
    /// The file it came from; `None`: pytest's defaults.
    pub(crate) file: Option<String>,
    /// Each option with its words (an ini value split on whitespace, a TOML array's items).
    /// `pyproject.toml`'s `[project.entry-points.pytest11]` (the plugins the project installs)
    /// is held as the option `entry-points.pytest11`.
    pub(crate) values: BTreeMap<String, Vec<String>>,
}

impl PytestIni {
    /// The configuration pytest would use, with `read` giving a root file's text.
    pub(crate) fn find(read: impl Fn(&str) -> Option<String>) -> PytestIni {
        let mut ini = PytestIni::default();
        for file in FILES {
            let Some(text) = read(file) else { continue };
            let values = match file {
                "pytest.toml" | ".pytest.toml" => toml_values(&text, &["tool", "pytest"])
                    .or_else(|| toml_values(&text, &[]))
                    .unwrap_or_default(),
                "pyproject.toml" => {
                    let Some(v) = toml_values(&text, &["tool", "pytest", "ini_options"])
                        .or_else(|| toml_values(&text, &["tool", "pytest"]))
                    else {
                        continue;
                    };
                    v
                }
                "pytest.ini" | ".pytest.ini" => ini_section(&text, "pytest").unwrap_or_default(),
                "tox.ini" => match ini_section(&text, "pytest") {
                    Some(v) => v,
                    None => continue,
                },
                _ => match ini_section(&text, "tool:pytest") {
                    Some(v) => v,
                    None => continue,
                },
            };
            ini.file = Some(file.to_string());
            ini.values = values;
            break;
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
fn ini_section(text: &str, section: &str) -> Option<BTreeMap<String, Vec<String>>> {
    let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
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

/// The table at `path` of a TOML text, each value as words; `None` when there is no such table
/// or the text is not TOML.
fn toml_values(text: &str, path: &[&str]) -> Option<BTreeMap<String, Vec<String>>> {
    let doc = text.parse::<toml::Table>().ok()?;
    let mut table = &doc;
    for key in path {
        table = table.get(*key)?.as_table()?;
    }
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
    Some(
        table
            .iter()
            .filter(|(_, v)| !v.is_table())
            .map(|(k, v)| (k.clone(), words(v)))
            .collect(),
    )
}

/// `[project.entry-points.pytest11]` of a `pyproject.toml`: `name = module` lines, as words.
fn entry_points(text: &str) -> Option<Vec<String>> {
    let table = toml_values(text, &["project", "entry-points", "pytest11"])?;
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
