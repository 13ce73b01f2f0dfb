//! What a test's code can reach of the repository's module globals by name: which tests read
//! what a state writer wrote (docs/impact.md, "The scope").
//!
//! A test reaches a module's global through code that names it: the global itself
//! (`VALUES`, after `from reg import VALUES`), the module (`reg.VALUES`), or another global
//! of the module that holds it (`CFG.debug` when the writer changed `Config.debug` and
//! `CFG = Config()`). The code a test ran is known per code object (first lines, by file):
//! each is read as the outermost function around it, its decorators, signature and nested
//! definitions included, with the words inside its strings (`monkeypatch.setattr(
//! "pkg.reg.VALUES", ...)`). Where that cannot tell, the caller falls back to what the test
//! sees (its file and what that imports): a code object outside any function, a method of a
//! class (its class's attributes are reached through `self`), code that reaches globals
//! without naming them (`getattr`, `globals()`, `sys.modules`, `importlib`, `eval`: see
//! [`pysrc::DYNAMIC_READ`]), a module that binds globals no statement shows.

use std::collections::{BTreeMap, BTreeSet};

use crate::audit::pysrc::{self, Source};
use crate::pytest::events::CodeRan;

/// One file as this rule reads it.
#[derive(Clone, Debug)]
struct File {
    /// The outermost functions and methods: first line, last line, name (with its classes),
    /// the names they hold.
    defs: Vec<(u32, u32, String, BTreeSet<String>)>,
    /// The names it binds outside functions (`None`: not all are known).
    globals: Option<BTreeSet<String>>,
}

impl File {
    fn new(source: Source) -> File {
        let mut defs: Vec<(u32, u32, String, BTreeSet<String>)> = Vec::new();
        // `defs` is in source order, each before the functions nested in it.
        for d in source.defs {
            if !defs.iter().any(|(a, b, ..)| *a <= d.start && d.end <= *b) {
                let name = d.key.split('#').next().unwrap_or_default().to_owned();
                defs.push((d.start, d.end, name, d.words));
            }
        }
        File {
            defs,
            globals: source.globals,
        }
    }

    /// The names of the outermost function around `line`.
    fn around(&self, line: u32) -> Option<&BTreeSet<String>> {
        self.defs
            .iter()
            .find(|(a, b, ..)| *a <= line && line <= *b)
            .map(|(.., w)| w)
    }

    /// Whether the module-level function `name` is among the code objects `firsts`.
    fn ran(&self, name: &str, firsts: &[u32]) -> bool {
        self.defs
            .iter()
            .any(|(a, _, n, _)| n == name && firsts.contains(a))
    }
}

/// The repository's Python files as this rule reads them: the head's, and the base's of the
/// files the patch changed (for code the base's runs numbered).
#[derive(Clone, Debug, Default)]
pub(crate) struct Names {
    head: BTreeMap<String, File>,
    base: BTreeMap<String, File>,
}

impl Names {
    /// From the head's Python files and the base's versions of the changed ones, parsed.
    pub(crate) fn build(head: Vec<(String, Source)>, base_changed: Vec<(String, Source)>) -> Names {
        let read = |files: Vec<(String, Source)>| {
            files
                .into_iter()
                .map(|(p, s)| (p, File::new(s)))
                .collect::<BTreeMap<_, _>>()
        };
        Names {
            head: read(head),
            base: read(base_changed),
        }
    }

    /// The file `path` as code numbered by the base's lines (`base`) or the head's reads it.
    fn file(&self, path: &str, base: bool) -> Option<&File> {
        match base {
            true => self.base.get(path).or_else(|| self.head.get(path)),
            false => self.head.get(path),
        }
    }

    /// The names the code of test `nodeid` holds (`code`: what its recording says it ran, by
    /// the base's lines when `base`), or `None` when they cannot tell what it reaches: a
    /// method of a class (its class's attributes are reached through `self`), a test that is
    /// no function of its file that the recording saw run (a doctest, another plugin's item:
    /// their code is not the repository's functions), code outside every function, code that
    /// reaches globals without naming them.
    pub(crate) fn of_test(
        &self,
        nodeid: &str,
        code: &CodeRan,
        base: bool,
    ) -> Option<BTreeSet<&str>> {
        let plain = nodeid.split('[').next().unwrap_or(nodeid);
        let (path, name) = plain.split_once("::")?;
        if name.contains("::") || !self.file(path, base)?.ran(name, code.get(path)?) {
            return None;
        }
        self.of_code(code, base)
    }

    /// The names the functions that ran while the suite was collected hold (`code`, the
    /// session's recording), or `None` when a file is not read or they reach globals without
    /// naming them. What they computed may be any test's (a `pytest_generate_tests` hook's
    /// parameters). Code outside functions (modules' and classes' bodies, their lambdas and
    /// comprehensions) is left out: what it computed is bound in the modules' globals, which
    /// the state pass and [`Names::reaching`] see.
    pub(crate) fn of_collection(&self, code: &CodeRan, base: bool) -> Option<BTreeSet<&str>> {
        let mut out = BTreeSet::new();
        for (path, firsts) in code {
            let file = self.file(path, base)?;
            for &line in firsts {
                out.extend(file.around(line).into_iter().flatten().map(String::as_str));
            }
        }
        let dynamic = pysrc::DYNAMIC_READ.iter().any(|d| out.contains(d));
        (!dynamic).then_some(out)
    }

    /// The names the recorded `code` holds (its lines the base's when `base`), or `None` when
    /// some code object is outside every function, or the code reaches globals without
    /// naming them.
    fn of_code(&self, code: &CodeRan, base: bool) -> Option<BTreeSet<&str>> {
        let mut out = BTreeSet::new();
        for (path, firsts) in code {
            let file = self.file(path, base)?;
            for &line in firsts {
                out.extend(file.around(line)?.iter().map(String::as_str));
            }
        }
        let dynamic = pysrc::DYNAMIC_READ.iter().any(|d| out.contains(d));
        (!dynamic).then_some(out)
    }

    /// The names through which code reaches the globals of module `path`: its own name, the
    /// names it binds and `written` (the globals a writer changed, whatever bound them), or
    /// `None` when it binds names no statement shows or is not a Python file of the tree.
    pub(crate) fn reaching<'a>(
        &self,
        path: &str,
        written: impl Iterator<Item = &'a str>,
    ) -> Option<BTreeSet<String>> {
        let mut out: BTreeSet<String> = BTreeSet::new();
        for file in [self.head.get(path), self.base.get(path)]
            .into_iter()
            .flatten()
        {
            out.extend(file.globals.as_ref()?.iter().cloned());
        }
        if !self.head.contains_key(path) && !self.base.contains_key(path) {
            return None;
        }
        out.insert(module_name(path).to_owned());
        out.extend(written.map(str::to_owned));
        Some(out)
    }
}

/// The name a module is bound by when imported: its file's stem, or its package's name.
fn module_name(path: &str) -> &str {
    let stem = path.strip_suffix(".py").unwrap_or(path);
    let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
    stem.rsplit('/').next().unwrap_or(stem)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(files: &[(&str, &str)]) -> Names {
        let parsed: Vec<(String, Source)> = files
            .iter()
            .map(|(p, t)| (p.to_string(), pysrc::parse(t)))
            .collect();
        Names::build(parsed, Vec::new())
    }

    fn code(entries: &[(&str, &[u32])]) -> CodeRan {
        entries
            .iter()
            .map(|(p, l)| (p.to_string(), l.to_vec()))
            .collect()
    }

    #[test]
    fn a_test_holds_the_names_of_the_functions_it_ran_and_a_module_is_reached_by_its_bindings() {
        let n = names(&[
            (
                "src/pkg/reg.py",
                "import os\nVALUES = {}\n\n\nclass Config:\n    debug = False\n\n\nCFG = Config()\n\n\ndef get(k, d=VALUES):\n    return d.get(k)\n",
            ),
            (
                "tests/test_a.py",
                "from pkg import reg\nfrom pkg import m\n\n\ndef test_plain():\n    assert m.add(1) == 2\n\n\ndef test_reader():\n    assert reg.VALUES.get('x') is None\n\n\n@pytest.mark.parametrize('x', [1])\ndef test_patched(monkeypatch, x):\n    monkeypatch.setattr(\"pkg.other.THING\", x)\n\n\ndef test_dynamic():\n    assert getattr(m, 'X')\n",
            ),
        ]);
        let reach = n
            .reaching("src/pkg/reg.py", ["Config"].into_iter())
            .unwrap();
        assert_eq!(
            reach.iter().map(String::as_str).collect::<Vec<_>>(),
            ["CFG", "Config", "VALUES", "debug", "get", "os", "reg"]
        );
        let plain = n
            .of_code(&code(&[("tests/test_a.py", &[5])]), false)
            .unwrap();
        assert!(plain.contains("m") && plain.contains("add"));
        assert!(
            !plain.contains("test_plain"),
            "a def's own name is not a use"
        );
        assert!(plain.iter().all(|w| !reach.contains(*w)));
        let reader = n
            .of_code(&code(&[("tests/test_a.py", &[9])]), false)
            .unwrap();
        assert!(reader.contains("reg") && reader.contains("VALUES"));
        // Decorators and the words inside strings count.
        let patched = n
            .of_code(&code(&[("tests/test_a.py", &[13])]), false)
            .unwrap();
        assert!(patched.contains("parametrize") && patched.contains("THING"));
        // Dynamic access, a line outside every function, a file not read: not known.
        assert_eq!(n.of_code(&code(&[("tests/test_a.py", &[19])]), false), None);
        assert_eq!(n.of_code(&code(&[("tests/test_a.py", &[0])]), false), None);
        assert_eq!(n.of_code(&code(&[("tests/other.py", &[3])]), false), None);
        assert_eq!(n.reaching("src/pkg/missing.py", std::iter::empty()), None);
    }

    #[test]
    fn a_module_that_binds_names_dynamically_is_reached_by_any() {
        let n = names(&[
            ("a.py", "X = 1\nglobals()['Y'] = 2\n"),
            ("b.py", "def __getattr__(name):\n    return name\n"),
            (
                "c.py",
                "for i in range(3):\n    pass\nwith open('f') as fh:\n    pass\n",
            ),
            (
                "d.py",
                "def init():\n    global CACHE, OTHER\n    CACHE = {}\n",
            ),
        ]);
        assert_eq!(n.reaching("a.py", std::iter::empty()), None);
        assert_eq!(n.reaching("b.py", std::iter::empty()), None);
        let c = n.reaching("c.py", std::iter::empty()).unwrap();
        assert!(c.contains("i") && c.contains("fh") && c.contains("c"));
        // A name a function binds with `global` is the module's.
        let d = n.reaching("d.py", std::iter::empty()).unwrap();
        assert!(d.contains("CACHE") && d.contains("OTHER") && d.contains("init"));
    }

    #[test]
    fn nested_functions_are_their_outermost_function() {
        let n = names(&[(
            "t.py",
            "def outer():\n    def inner():\n        return SECRET\n    return inner()\n",
        )]);
        let w = n.of_code(&code(&[("t.py", &[2])]), false).unwrap();
        assert!(w.contains("SECRET") && w.contains("inner"));
    }

    #[test]
    fn only_a_module_level_test_function_the_recording_saw_run_is_read_by_its_names() {
        let n = names(&[(
            "tests/t.py",
            "import reg\n\n\ndef test_a():\n    assert reg.X\n\n\nclass TestB:\n    def test_b(self):\n        assert self.x\n\n\ndef helper():\n    \"\"\"\n    >>> reg.X\n    \"\"\"\n",
        )]);
        let ran = |lines: &[u32]| code(&[("tests/t.py", lines)]);
        let a = n
            .of_test("tests/t.py::test_a[1-x::y]", &ran(&[4]), false)
            .unwrap();
        assert!(a.contains("reg") && a.contains("X"));
        // A method, a doctest, a test whose own function is not in its recording.
        assert_eq!(
            n.of_test("tests/t.py::TestB::test_b", &ran(&[9]), false),
            None
        );
        assert_eq!(n.of_test("tests/t.py::t.helper", &ran(&[13]), false), None);
        assert_eq!(n.of_test("tests/t.py::test_a", &ran(&[13]), false), None);
        assert_eq!(n.of_test("tests/t.py::test_a", &code(&[]), false), None);
    }
}
