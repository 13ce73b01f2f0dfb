//! The patch's footprint: what of the repository it changed, in the terms the recorded runs
//! speak (repo-relative files and the first lines of code objects).
//!
//! - A Python file whose module-level tokens changed (a module-level statement, a class body,
//!   an added, removed or moved function, an import), or that was added or removed, changed
//!   at module level: every code object of it, and every value it holds.
//! - Otherwise each function or method whose tokens changed (decorators, signature, body; a
//!   nested function's change is its parent's too) changed, by its span in the head.
//!   Comments and layout are no change.
//! - A changed `conftest.py`, pytest configuration (`pytest.ini`, `pytest.toml`, `tox.ini`,
//!   `setup.cfg`, `pyproject.toml`, where the plugin list lives too) or interpreter start-up
//!   file (`sitecustomize.py`, a `.pth` file) changes everything: it runs before and around
//!   every test.
//! - Any other file changed is itself in the footprint (fixtures included): the tests that
//!   read it are affected.

use std::collections::{BTreeMap, BTreeSet};

use crate::audit::pysrc;

/// One file that differs between the base and the head, with its bytes on each side (`None`:
/// absent there). Only Python and configuration files need their bytes.
pub(crate) struct Change {
    pub(crate) path: String,
    pub(crate) base: Option<Vec<u8>>,
    pub(crate) head: Option<Vec<u8>>,
}

/// Why a patch's footprint is everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Everything {
    Conftest(String),
    Configuration(String),
    StartUp(String),
}

/// What the patch changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Footprint {
    /// Set when the change reaches every test.
    pub(crate) everything: Option<Everything>,
    /// Python files changed at module level, added or removed.
    pub(crate) modules: BTreeSet<String>,
    /// Per Python file, the head spans (first line, last line) of its changed functions.
    pub(crate) functions: BTreeMap<String, Vec<(u32, u32)>>,
    /// The same functions by their spans in the base, for what the base recorded (its lines are
    /// the base's: a function below a changed one starts elsewhere in the head).
    pub(crate) base_functions: BTreeMap<String, Vec<(u32, u32)>>,
    /// Every other changed file.
    pub(crate) files: BTreeSet<String>,
    /// Python files with a changed function whose decorators or `def` statement changed
    /// (they run when the module is imported, in the module's code).
    pub(crate) signatures: BTreeSet<String>,
    /// Every file, of any kind, that one side has and the other does not.
    pub(crate) added_or_removed: BTreeSet<String>,
}

const CONFIGURATION: [&str; 7] = [
    "pytest.ini",
    ".pytest.ini",
    "pytest.toml",
    ".pytest.toml",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
];

impl Footprint {
    /// Whether the code object of `path` starting at `line` (in the head) is in the footprint.
    pub(crate) fn has_code(&self, path: &str, line: u32) -> bool {
        self.modules.contains(path) || within(&self.functions, path, line)
    }

    /// The same for a code object the base recorded, `line` in the base.
    pub(crate) fn has_base_code(&self, path: &str, line: u32) -> bool {
        self.modules.contains(path) || within(&self.base_functions, path, line)
    }
}

fn within(spans: &BTreeMap<String, Vec<(u32, u32)>>, path: &str, line: u32) -> bool {
    spans
        .get(path)
        .is_some_and(|spans| spans.iter().any(|&(a, b)| a <= line && line <= b))
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The spans in `side` of its functions whose tokens differ in `other` (or that `other` lacks).
fn changed_spans(side: &pysrc::Source, other: &pysrc::Source) -> Vec<(u32, u32)> {
    let theirs: BTreeMap<&str, blake3::Hash> = other
        .defs
        .iter()
        .map(|d| (d.key.as_str(), d.digest))
        .collect();
    side.defs
        .iter()
        .filter(|d| theirs.get(d.key.as_str()) != Some(&d.digest))
        .map(|d| (d.start, d.end))
        .collect()
}

/// The footprint of `changes`.
pub(crate) fn footprint(changes: &[Change]) -> Footprint {
    let mut out = Footprint::default();
    for c in changes {
        if c.base.is_none() || c.head.is_none() {
            out.added_or_removed.insert(c.path.clone());
        }
        let name = file_name(&c.path);
        let everything = match name {
            "conftest.py" => Some(Everything::Conftest(c.path.clone())),
            n if CONFIGURATION.contains(&n) => Some(Everything::Configuration(c.path.clone())),
            "sitecustomize.py" | "usercustomize.py" => Some(Everything::StartUp(c.path.clone())),
            n if n.ends_with(".pth") => Some(Everything::StartUp(c.path.clone())),
            _ => None,
        };
        if let Some(e) = everything {
            out.everything.get_or_insert(e);
            continue;
        }
        if !name.ends_with(".py") {
            out.files.insert(c.path.clone());
            continue;
        }
        let (Some(base), Some(head)) = (&c.base, &c.head) else {
            out.modules.insert(c.path.clone());
            continue;
        };
        let (base, head) = (
            pysrc::parse(&String::from_utf8_lossy(base)),
            pysrc::parse(&String::from_utf8_lossy(head)),
        );
        if base.module != head.module {
            out.modules.insert(c.path.clone());
            continue;
        }
        let spans = changed_spans(&head, &base);
        let base_spans = changed_spans(&base, &head);
        // A function the head lacks changed its scope's tokens (a method) or the module's.
        let removed = base
            .defs
            .iter()
            .any(|d| !head.defs.iter().any(|h| h.key == d.key));
        if removed {
            out.modules.insert(c.path.clone());
        } else if !spans.is_empty() {
            let headers: BTreeMap<&str, blake3::Hash> = base
                .defs
                .iter()
                .map(|d| (d.key.as_str(), d.header))
                .collect();
            if head
                .defs
                .iter()
                .any(|d| headers.get(d.key.as_str()) != Some(&d.header))
            {
                out.signatures.insert(c.path.clone());
            }
            out.functions.insert(c.path.clone(), spans);
            out.base_functions.insert(c.path.clone(), base_spans);
        }
    }
    out
}

/// Which repository files each Python file imports, resolved by dotted name (over-approximate:
/// `import util` names every `util.py` of the tree; a package import names the package's
/// `__init__.py` and every parent's).
#[derive(Clone, Debug, Default)]
pub(crate) struct Imports {
    by_file: BTreeMap<String, BTreeSet<String>>,
}

impl Imports {
    /// Reads `files` (path, text) of one snapshot.
    #[cfg(test)]
    pub(crate) fn build(files: &[(String, String)]) -> Imports {
        let parsed: Vec<(String, pysrc::Source)> = files
            .iter()
            .map(|(p, t)| (p.clone(), pysrc::parse(t)))
            .collect();
        Imports::from_parsed(&parsed)
    }

    /// From `files` (path, parsed source) of one snapshot.
    pub(crate) fn from_parsed(files: &[(String, pysrc::Source)]) -> Imports {
        let mut by_name: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (path, _) in files {
            for name in dotted_names(path) {
                by_name.entry(name).or_default().insert(path.clone());
            }
        }
        let mut by_file = BTreeMap::new();
        for (path, source) in files {
            let me = dotted_names(path).into_iter().next().unwrap_or_default();
            let package = file_name(path) == "__init__.py";
            // What a file that does not parse imports is not known: anything.
            let mut found: BTreeSet<String> = match source.parsed {
                true => BTreeSet::new(),
                false => files.iter().map(|(p, _)| p.clone()).collect(),
            };
            for import in &source.imports {
                for target in import.targets(&me, package) {
                    let mut prefix = String::new();
                    for part in target.split('.') {
                        if !prefix.is_empty() {
                            prefix.push('.');
                        }
                        prefix.push_str(part);
                        if let Some(paths) = by_name.get(&prefix) {
                            found.extend(paths.iter().cloned());
                        }
                    }
                }
            }
            found.remove(path);
            by_file.insert(path.clone(), found);
        }
        Imports { by_file }
    }

    /// The repository files `path` imports.
    pub(crate) fn of(&self, path: &str) -> impl Iterator<Item = &String> {
        self.by_file.get(path).into_iter().flatten()
    }

    /// The files that import one of `targets`, directly or through others.
    pub(crate) fn importers(&self, targets: &BTreeSet<String>) -> BTreeSet<String> {
        let mut importers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (file, imports) in &self.by_file {
            for i in imports {
                importers.entry(i.as_str()).or_default().push(file.as_str());
            }
        }
        let mut reached: BTreeSet<String> = BTreeSet::new();
        let mut open: Vec<&str> = targets.iter().map(String::as_str).collect();
        while let Some(t) = open.pop() {
            for &f in importers.get(t).into_iter().flatten() {
                if reached.insert(f.to_owned()) {
                    open.push(f);
                }
            }
        }
        reached
    }
}

/// The dotted names a file may be imported as: its path's, and every suffix of it (a
/// `src/` layout, a test directory on `sys.path`), longest first.
fn dotted_names(path: &str) -> Vec<String> {
    let stem = path.strip_suffix(".py").unwrap_or(path);
    let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
    let parts: Vec<&str> = stem.split('/').collect();
    (0..parts.len()).map(|i| parts[i..].join(".")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(path: &str, base: Option<&str>, head: Option<&str>) -> Change {
        Change {
            path: path.into(),
            base: base.map(|b| b.as_bytes().to_vec()),
            head: head.map(|h| h.as_bytes().to_vec()),
        }
    }

    #[test]
    fn a_function_body_change_is_that_function_by_its_head_span() {
        let base =
            "import os\n\n\ndef add(x):\n    return x + 1\n\n\ndef sub(x):\n    return x - 1\n";
        let head = "import os\n\n\n# helper\n\ndef add(x):\n    return 1 + x\n\n\ndef sub(x):\n    return x - 1\n";
        let f = footprint(&[change("pkg/m.py", Some(base), Some(head))]);
        assert_eq!(f.functions["pkg/m.py"], [(6, 7)]);
        assert!(f.modules.is_empty() && f.everything.is_none());
        assert!(f.has_code("pkg/m.py", 6));
        assert!(!f.has_code("pkg/m.py", 10));
        assert!(!f.has_code("pkg/other.py", 6));
        // By the base's lines, for what the base recorded: add starts on line 4 there.
        assert_eq!(f.base_functions["pkg/m.py"], [(4, 5)]);
        assert!(f.has_base_code("pkg/m.py", 4));
        assert!(!f.has_base_code("pkg/m.py", 6));
    }

    #[test]
    fn module_level_changes_added_and_removed_files_and_removed_functions_are_the_module() {
        let f = footprint(&[
            change("a.py", Some("X = 1\n"), Some("X = 2\n")),
            change("b.py", None, Some("def f():\n    pass\n")),
            change("c.py", Some("def f():\n    pass\n"), None),
            change(
                "d.py",
                Some("def f():\n    pass\n\n\ndef g():\n    pass\n"),
                Some("def f():\n    pass\n"),
            ),
            change("e.py", Some("x = 1 # a\n"), Some("x = 1  # b\n")),
        ]);
        assert_eq!(
            f.modules.iter().map(String::as_str).collect::<Vec<_>>(),
            ["a.py", "b.py", "c.py", "d.py"]
        );
        assert!(f.functions.is_empty());
    }

    #[test]
    fn conftest_configuration_and_start_up_files_are_everything_and_others_are_files() {
        for (path, text) in [
            (
                "tests/conftest.py",
                "the patch changes tests/conftest.py, which runs around every test",
            ),
            (
                "pyproject.toml",
                "the patch changes pyproject.toml, which configures pytest for every test",
            ),
            (
                "sitecustomize.py",
                "the patch changes sitecustomize.py, which the interpreter runs at start-up",
            ),
        ] {
            let f = footprint(&[change(path, Some("a"), Some("b"))]);
            assert_eq!(f.everything.unwrap().to_string(), text);
        }
        let f = footprint(&[change("tests/fixtures/a.json", Some("1"), Some("2"))]);
        assert!(f.files.contains("tests/fixtures/a.json") && f.everything.is_none());
        assert_eq!(footprint(&[]), Footprint::default());
    }

    #[test]
    fn imports_resolve_to_repository_files_through_src_layouts_and_relative_imports() {
        let files: Vec<(String, String)> = [
            ("src/pkg/__init__.py", "from . import reg\n"),
            ("src/pkg/reg.py", "REG = {}\n"),
            ("src/pkg/m7.py", "import json\nfrom pkg.reg import REG\n"),
            ("tests/test_m7.py", "from pkg import m7\n"),
        ]
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect();
        let imports = Imports::build(&files);
        let of = |p: &str| imports.of(p).cloned().collect::<Vec<_>>();
        assert_eq!(
            of("src/pkg/m7.py"),
            ["src/pkg/__init__.py", "src/pkg/reg.py"]
        );
        assert_eq!(
            of("tests/test_m7.py"),
            ["src/pkg/__init__.py", "src/pkg/m7.py"]
        );
        assert_eq!(of("src/pkg/__init__.py"), ["src/pkg/reg.py"]);
    }
}
