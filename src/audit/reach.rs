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
//! sees (its file and what that imports): a code object outside any function, a test that is
//! no function or method of its file the recording saw run, code that reaches globals
//! without naming them (`getattr`, `globals()`, `sys.modules`, `importlib`, `eval`: see
//! [`pysrc::DYNAMIC_READ`]), a module that binds globals no statement shows.

use std::collections::{BTreeMap, BTreeSet};

use crate::audit::pysrc::{self, Class, Source};
use crate::pytest::events::CodeRan;

/// One outermost function or method of a file.
#[derive(Clone, Debug)]
struct Function {
    /// Its first and last lines.
    start: u32,
    end: u32,
    /// Its name, dotted with its classes.
    name: String,
    /// The names it holds ([`pysrc::Def::words`]), and its identifiers among them.
    words: BTreeSet<String>,
    idents: BTreeSet<String>,
    /// Whether its code reads nothing but its arguments ([`pysrc::Def::pure`]).
    pure: bool,
}

/// One file as this rule reads it.
#[derive(Clone, Debug)]
struct File {
    /// The outermost functions and methods, in source order.
    defs: Vec<Function>,
    /// Its classes, nested ones included.
    classes: Vec<Class>,
    /// The names it binds outside functions (`None`: not all are known), less those that only
    /// imports from outside the repository bind (`from itertools import chain` holds nothing
    /// of the repository's).
    globals: Option<BTreeSet<String>>,
    /// The names `from` imports of the repository's modules bind: one may be a class under
    /// another name (`from .cases import Base as B`).
    from_repo: BTreeSet<String>,
    /// The names `from ... import x as y` binds under another name.
    from_aliases: BTreeSet<String>,
    /// The names `import` statements bind (modules).
    modules: BTreeSet<String>,
    /// Every name it binds outside functions but by imports from outside the repository
    /// (empty when not all are known).
    bound: BTreeSet<String>,
    /// The names its assignments (and `for`, `with`) at the module's own level bind, each
    /// with the names those statements hold.
    assigned: BTreeMap<String, BTreeSet<String>>,
    /// The names bound by an import of the repository's, or rebound by a function (`global`).
    opaque: BTreeSet<String>,
    /// The identifiers of each statement at the module's own level (definitions aside).
    statements: Vec<BTreeSet<String>>,
    /// Whether its code reads or resets a cache's own state ([`pysrc::Source::cache_api`]).
    cache_api: bool,
}

impl File {
    /// `repo`: the names of the repository's files and folders (a module outside it is none).
    fn new(source: Source, repo: &BTreeSet<String>) -> File {
        let mut defs: Vec<Function> = Vec::new();
        // `defs` is in source order, each before the functions nested in it.
        for d in source.defs {
            if !defs.iter().any(|f| f.start <= d.start && d.end <= f.end) {
                defs.push(Function {
                    start: d.start,
                    end: d.end,
                    name: d.key.split('#').next().unwrap_or_default().to_owned(),
                    words: d.words,
                    idents: d.idents,
                    pure: d.pure,
                });
            }
        }
        // Whether a name may hold the repository's objects: bound by an assignment, a
        // definition, or an import of one of its modules (relative, `""`, or by first name).
        let imported = &source.imported;
        let repo_held = |n: &String| {
            imported.get(n).is_none_or(|from| {
                from.iter()
                    .any(|m| m.is_empty() || repo.contains(m.as_str()))
            })
        };
        File {
            statements: source.statements,
            cache_api: source.cache_api,
            assigned: source.assigned_words,
            opaque: (source.bound_opaquely.into_iter())
                .filter(repo_held)
                .collect(),
            from_aliases: source.from_aliases.into_iter().filter(repo_held).collect(),
            modules: source.modules_imported,
            // What may stand for a class of the repository: not a name only an import from
            // outside it binds (`TestCase`).
            bound: (source.globals.iter().flatten())
                .filter(|n| repo_held(n))
                .cloned()
                .collect(),
            defs,
            classes: source.classes,
            // A name only a class body binds is an attribute of the class, reached through it
            // (see `Names::reaching`).
            globals: (source.globals).map(|g| {
                g.into_iter()
                    .filter(|n| repo_held(n) && !source.class_only.contains(n))
                    .collect()
            }),
            from_repo: source.from_imported.into_iter().filter(repo_held).collect(),
        }
    }

    /// The names of this module that may hold what a writer changed among its globals
    /// `written`, and the classes among them: to a fixpoint, a written global; a name bound by
    /// an import of the repository's or rebound by a function (either may hold anything); a
    /// name whose assignments, a module-level function or a class (bases, decorators, body,
    /// methods) whose text names one that may hold it or reaches globals without naming them
    /// (`CFG = Config()` when `Config` was written; `def get(): return _REG`); and every name
    /// of the module that a statement at its own level, a function or a class names beside one
    /// that may hold it (`ALIASES.setdefault("d", _REG)`, `def init(): TABLE["r"] = _REG`, a
    /// call `configure(SETTINGS)` of a function that stores the registry in its argument).
    /// Any other name holds nothing written: `_marker = object()` holds no `lru_cache`, nor do
    /// the fields of a dataclass that names none of these.
    fn holding(&self, written: &BTreeSet<&str>) -> (BTreeSet<String>, Vec<&Class>) {
        let own = |key: &str| key.rsplit('.').next().unwrap_or(key).to_owned();
        let functions = || self.defs.iter().filter(|f| !f.name.contains('.'));
        // Each name with the text its value comes from.
        let valued: Vec<(String, &BTreeSet<String>)> = (self.classes.iter())
            .map(|c| (own(&c.key), &c.words))
            .chain(functions().map(|f| (f.name.clone(), &f.words)))
            .chain(self.assigned.iter().map(|(n, w)| (n.clone(), w)))
            .collect();
        let known: BTreeSet<&str> = valued.iter().map(|(n, _)| n.as_str()).collect();
        let mut holds: BTreeSet<String> = (self.globals.iter().flatten())
            .filter(|n| !known.contains(n.as_str()) || self.opaque.contains(*n))
            .cloned()
            .chain(written.iter().map(|w| w.to_string()))
            .collect();
        let may_hold = |words: &BTreeSet<String>, holds: &BTreeSet<String>| {
            words
                .iter()
                .any(|w| holds.contains(w) || pysrc::DYNAMIC_READ.contains(&w.as_str()))
        };
        // The module's names, and every text that may put what one holds into another.
        let names: BTreeSet<&str> = (self.globals.iter().flatten().map(String::as_str))
            .chain(known.iter().copied())
            .collect();
        // Their identifiers: the words inside a string (`__all__`, a docstring's example) move
        // no value.
        let texts: Vec<&BTreeSet<String>> = (self.classes.iter().map(|c| &c.idents))
            .chain(functions().map(|f| &f.idents))
            .chain(self.statements.iter())
            .collect();
        loop {
            let mut more: BTreeSet<String> = (valued.iter())
                .filter(|(name, words)| !holds.contains(name) && may_hold(words, &holds))
                .map(|(name, _)| name.clone())
                .collect();
            for text in texts.iter().filter(|t| may_hold(t, &holds)) {
                more.extend(
                    (text.iter())
                        .filter(|w| names.contains(w.as_str()) && !holds.contains(*w))
                        .cloned(),
                );
            }
            if more.is_empty() {
                break;
            }
            holds.extend(more);
        }
        let classes = (self.classes.iter())
            .filter(|c| holds.contains(&own(&c.key)))
            .collect();
        (holds, classes)
    }

    /// The names of the outermost function around `line`.
    fn around(&self, line: u32) -> Option<&BTreeSet<String>> {
        self.def_around(line).map(|f| &f.words)
    }

    /// The outermost function around `line`.
    fn def_around(&self, line: u32) -> Option<&Function> {
        self.defs.iter().find(|f| f.start <= line && line <= f.end)
    }

    /// Whether the function `name` (dotted with its classes) is among the code objects `firsts`.
    fn ran(&self, name: &str, firsts: &[u32]) -> bool {
        self.defs
            .iter()
            .any(|f| f.name == name && firsts.contains(&f.start))
    }

    /// The class `key` and the classes nested in it.
    fn within(&self, key: &str) -> Vec<&Class> {
        let inside = |c: &&Class| {
            c.key == key || (c.key.strip_prefix(key)).is_some_and(|rest| rest.starts_with('.'))
        };
        self.classes.iter().filter(inside).collect()
    }
}

/// The repository's Python files as this rule reads them: the head's, and the base's of the
/// files the patch changed (for code the base's runs numbered).
#[derive(Clone, Debug, Default)]
pub(crate) struct Names {
    head: BTreeMap<String, File>,
    base: BTreeMap<String, File>,
    /// Every class of those files by its own name: (the base's file, path, index).
    classes: BTreeMap<String, Vec<(bool, String, usize)>>,
    /// Every name any of those files binds outside functions.
    bound: BTreeSet<String>,
}

impl Names {
    /// From the head's Python files and the base's versions of the changed ones, parsed.
    pub(crate) fn build(head: Vec<(String, Source)>, base_changed: Vec<(String, Source)>) -> Names {
        let repo: BTreeSet<String> = (head.iter().chain(&base_changed))
            .flat_map(|(p, _)| p.split('/'))
            .map(|part| part.strip_suffix(".py").unwrap_or(part).to_owned())
            .collect();
        let read = |files: Vec<(String, Source)>| {
            files
                .into_iter()
                .map(|(p, s)| {
                    let file = File::new(s, &repo);
                    (p, file)
                })
                .collect::<BTreeMap<_, _>>()
        };
        let (head, base) = (read(head), read(base_changed));
        let mut classes: BTreeMap<String, Vec<(bool, String, usize)>> = BTreeMap::new();
        for (is_base, files) in [(false, &head), (true, &base)] {
            for (path, file) in files {
                for (i, c) in file.classes.iter().enumerate() {
                    let name = c.key.rsplit('.').next().unwrap_or(&c.key);
                    classes
                        .entry(name.to_owned())
                        .or_default()
                        .push((is_base, path.clone(), i));
                }
            }
        }
        let bound = (head.values().chain(base.values()))
            .flat_map(|f| f.bound.iter().cloned())
            .collect();
        Names {
            head,
            base,
            classes,
            bound,
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
    /// the base's lines when `base`), or `None` when they cannot tell what it reaches: a test
    /// that is no function or method of its file that the recording saw run (a doctest,
    /// another plugin's item, an inherited test method: their code is not the repository's
    /// functions), code outside every function, code that reaches globals without naming
    /// them. A method also holds what its class can give it through `self`: the names of its
    /// whole class (a `setUpClass` runs in the class's first test only) and of the
    /// repository's classes it derives from; `None` when a base may be a class of the
    /// repository under another name.
    pub(crate) fn of_test(
        &self,
        nodeid: &str,
        code: &CodeRan,
        base: bool,
    ) -> Option<BTreeSet<&str>> {
        let plain = nodeid.split('[').next().unwrap_or(nodeid);
        let (path, name) = plain.split_once("::")?;
        let file = self.file(path, base)?;
        if !file.ran(&name.replace("::", "."), code.get(path)?) {
            return None;
        }
        let mut out = self.of_code(code, base)?;
        if let Some((class, _)) = name.split_once("::") {
            out.extend(self.of_class(file, class)?);
            // Its classes' own names: `type(self).cache = ...` writes the class.
            let qual = name.replace("::", ".");
            let mut key = String::new();
            for part in qual.split('.').take(qual.split('.').count() - 1) {
                if !key.is_empty() {
                    key.push('.');
                }
                key.push_str(part);
                let c = file.classes.iter().find(|c| c.key == key)?;
                out.insert(c.key.rsplit('.').next().unwrap_or(&c.key));
            }
            if pysrc::DYNAMIC_READ.iter().any(|d| out.contains(d)) {
                return None;
            }
        }
        Some(out)
    }

    /// The names the module-level class `key` of `file` holds, with the classes nested in it
    /// and the repository's classes their headers name (bases, decorators), through theirs;
    /// `None` when a header names what a `from` import of the repository bound, which may be
    /// a class under another name.
    fn of_class<'a>(&'a self, file: &'a File, key: &str) -> Option<BTreeSet<&'a str>> {
        let mut out: BTreeSet<&str> = BTreeSet::new();
        let mut seen: BTreeSet<(bool, &str, usize)> = BTreeSet::new();
        let mut todo: Vec<(&File, Vec<&Class>)> = vec![(file, file.within(key))];
        while let Some((f, classes)) = todo.pop() {
            for c in classes {
                out.extend(c.words.iter().map(String::as_str));
                for w in &c.header {
                    // A module (`unittest` of `unittest.TestCase`): its attribute is a word of
                    // its own. A name bound under another name, or by something other than a
                    // class statement (an assignment, a function, a call's result): the class
                    // it stands for is not known.
                    if f.modules.contains(w) {
                        continue;
                    }
                    if f.from_aliases.contains(w) {
                        return None;
                    }
                    match self.classes.get(w) {
                        Some(named) => {
                            for (is_base, path, i) in named {
                                if !seen.insert((*is_base, path.as_str(), *i)) {
                                    continue;
                                }
                                let files = if *is_base { &self.base } else { &self.head };
                                let other = &files[path];
                                let key = other.classes[*i].key.as_str();
                                todo.push((other, other.within(key)));
                            }
                        }
                        None if f.from_repo.contains(w) || self.bound.contains(w) => return None,
                        None => {}
                    }
                }
            }
        }
        Some(out)
    }

    /// The functions that ran while the suite was collected (`code`, the session's
    /// recording), or `None` when a file is not read or they reach globals without naming
    /// them. What they computed may be any test's (a `pytest_generate_tests` hook's
    /// parameters). Code outside functions (modules' and classes' bodies, their lambdas and
    /// comprehensions) is left out: what it computed is bound in the modules' globals, which
    /// the state pass and [`Names::reaching`] see.
    pub(crate) fn of_collection<'a>(
        &'a self,
        code: &'a CodeRan,
        base: bool,
    ) -> Option<Collection<'a>> {
        let mut functions = Vec::new();
        for (path, firsts) in code {
            let file = self.file(path, base)?;
            for &line in firsts {
                if let Some(Function { name, words, .. }) = file.def_around(line) {
                    let own = name.rsplit('.').next().unwrap_or(name);
                    // A hook by its name, or by pluggy's marker under another name
                    // (`@pytest.hookimpl(specname="pytest_generate_tests")`).
                    let hook = own.starts_with("pytest_") || words.contains("hookimpl");
                    if pysrc::DYNAMIC_READ.iter().any(|d| words.contains(*d)) {
                        return None;
                    }
                    functions.push((path.as_str(), hook, words));
                }
            }
        }
        Some(Collection { functions })
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

    /// The names through which code reaches what a writer changed among the globals of module
    /// `path` (`written`): its own name, `written`, the names it binds that may hold what was
    /// written, and the names the bodies of such classes bind ([`File::holding`]); `None` when
    /// it binds names no statement shows or is not a Python file of the tree.
    pub(crate) fn reaching<'a>(
        &self,
        path: &str,
        written: impl Iterator<Item = &'a str>,
    ) -> Option<BTreeSet<String>> {
        let written: BTreeSet<&str> = written.collect();
        let mut out: BTreeSet<String> = BTreeSet::new();
        for file in [self.head.get(path), self.base.get(path)]
            .into_iter()
            .flatten()
        {
            file.globals.as_ref()?;
            let (holds, classes) = file.holding(&written);
            out.extend(holds);
            for c in classes {
                out.extend(c.bound.iter().cloned());
            }
        }
        if !self.head.contains_key(path) && !self.base.contains_key(path) {
            return None;
        }
        out.insert(module_name(path).to_owned());
        out.extend(written.iter().map(|w| w.to_string()));
        Some(out)
    }

    /// Whether any code of the repository, base or head, names a cache's own state
    /// (`f.cache_info()`, `.cache_clear()`, `.cache_parameters()`): a test that reads how full a
    /// cache is reads what filled it.
    fn inspects_caches(&self) -> bool {
        (self.head.values().chain(self.base.values())).any(|f| f.cache_api)
    }

    /// Whether the global `name` of module `path` is only ever a function that reads nothing
    /// but its arguments (in the base and in the head): a cache of it that holds only frozen
    /// values (`StateChange::Cache`) is what calls would compute again. Not when the module
    /// binds the name any other way (`f = lru_cache(g)`, an import, a `global` rebind).
    pub(crate) fn pure_function(&self, path: &str, name: &str) -> bool {
        let files: Vec<&File> = [self.head.get(path), self.base.get(path)]
            .into_iter()
            .flatten()
            .collect();
        !files.is_empty()
            && !self.inspects_caches()
            && files.iter().all(|file| {
                let defs: Vec<&Function> = (file.defs.iter()).filter(|f| f.name == name).collect();
                !defs.is_empty()
                    && defs.iter().all(|f| f.pure)
                    && !file.assigned.contains_key(name)
                    && !file.opaque.contains(name)
                    && !file.from_repo.contains(name)
                    && !file.modules.contains(name)
            })
    }
}

/// The functions that ran while the suite was collected, as [`Names::of_collection`] reads
/// them: each one's file, whether it is a pytest hook (`pytest_*`), the names it holds.
#[derive(Clone, Debug)]
pub(crate) struct Collection<'a> {
    functions: Vec<(&'a str, bool, &'a BTreeSet<String>)>,
}

impl Collection<'_> {
    /// Whether a function run while collecting names one of `names`, those that reach module
    /// `path`'s globals: what it computed may then hold what that module holds. The module's
    /// own functions other than hooks do not count: what they computed reaches a test through
    /// a caller outside the module (a hook, a decorator of the test's, each naming the
    /// function it called) or through the module's globals (`_PRIMES = tuple(sieve(211))`),
    /// both of which the rule sees.
    pub(crate) fn names(&self, path: &str, names: &BTreeSet<String>) -> bool {
        (self.functions.iter())
            .filter(|(p, hook, _)| *p != path || *hook)
            .any(|(.., words)| words.iter().any(|w| names.contains(w)))
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
                "from pkg import reg\nfrom pkg import m\n\n\ndef test_plain():\n    assert m.add(1) == 2\n\n\ndef test_reader():\n    assert reg.VALUES.get('x') is None\n\n\n@pytest.mark.parametrize('x', [1])\ndef test_patched(monkeypatch, x):\n    monkeypatch.setattr(\"pkg.other.THING\", x)\n\n\ndef test_dynamic():\n    name = 'X'\n    assert getattr(m, name)\n",
            ),
        ]);
        let reach = n
            .reaching("src/pkg/reg.py", ["Config"].into_iter())
            .unwrap();
        // An instance of the written class holds it; a dict of its own, and the function that
        // returns that dict, hold nothing of it.
        assert_eq!(
            reach.iter().map(String::as_str).collect::<Vec<_>>(),
            ["CFG", "Config", "debug", "reg"]
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
    fn a_class_bodys_names_reach_the_module_only_through_a_class_that_may_hold_what_was_written() {
        let n = names(&[(
            "pkg/recipes.py",
            "from dataclasses import dataclass\nfrom functools import lru_cache\n\n\
             _marker = object()\n\n\n@lru_cache\ndef _shift(n):\n    return n\n\n\n\
             @dataclass\nclass Stats:\n    size: int\n    mean: float\n\n\n\
             class Holder:\n    def __init__(self):\n        self.f = _shift\n\n    \
             def call(self):\n        return self.f(1)\n\n\n\
             class Outer(Holder):\n    limit = 3\n\n\n\
             class Flags:\n    on = _marker\n\n\n\
             class Looked:\n    def find(self, name):\n        return globals()[name]\n",
        )]);
        let reach = n
            .reaching("pkg/recipes.py", ["_shift"].into_iter())
            .unwrap();
        // The dataclass names nothing that may hold the cache: its fields are no way to it.
        for field in ["size", "mean"] {
            assert!(!reach.contains(field), "{field}: {reach:?}");
        }
        // A class whose method keeps the cached function, one that inherits from it, one
        // that reaches globals by a string.
        for name in ["Holder", "call", "Outer", "limit", "Looked", "find"] {
            assert!(reach.contains(name), "{name}: {reach:?}");
        }
        // A sentinel, and a class whose field is that sentinel, hold no cache.
        for name in ["_marker", "Flags", "on", "Stats"] {
            assert!(!reach.contains(name), "{name}: {reach:?}");
        }
        // A written class: its fields are what changed.
        let written = n.reaching("pkg/recipes.py", ["Stats"].into_iter()).unwrap();
        assert!(written.contains("size") && written.contains("mean"));
        assert!(!written.contains("call"), "{written:?}");
    }

    #[test]
    fn a_name_that_a_statement_or_function_fills_with_what_may_hold_the_written_object_holds_it() {
        let n = names(&[(
            "pkg/reg.py",
            "import collections\n\n_REG = {'mode': 'fast'}\nALIASES = {}\n\
             ALIASES.setdefault('default', _REG)\nTABLE = {}\n\n\n\
             def _init():\n    TABLE['main'] = _REG\n\n\n_init()\n\n\n\
             class Settings:\n    pass\n\n\nSETTINGS = Settings()\n\n\n\
             def _configure(s):\n    s.table = _REG\n\n\n_configure(SETTINGS)\n\
             VIEW = collections.ChainMap()\nVIEW.maps.append(_REG)\n\
             ALIAS = None\nALIAS >>= _REG\nOTHER = {}\n__all__ = ['ALIASES', 'OTHER']\n\n\n\
             def lookup(name):\n    \"\"\"`lookup('OTHER')` is like `_REG`.\"\"\"\n    return ALIASES[name]\n",
        )]);
        let reach = n.reaching("pkg/reg.py", ["_REG"].into_iter()).unwrap();
        for name in [
            "ALIASES", "TABLE", "_init", "SETTINGS", "Settings", "VIEW", "ALIAS",
        ] {
            assert!(reach.contains(name), "{name}: {reach:?}");
        }
        // A name in a string beside one (`__all__`, a docstring) is not filled by it.
        assert!(!reach.contains("OTHER"), "{reach:?}");
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
        // `for` and `with` bind names; what they hold comes from their statements.
        let c = n.reaching("c.py", ["fh"].into_iter()).unwrap();
        assert!(
            c.contains("fh") && c.contains("c") && !c.contains("i"),
            "{c:?}"
        );
        // A name a function binds with `global` is the module's.
        let d = n.reaching("d.py", std::iter::empty()).unwrap();
        assert!(d.contains("CACHE") && d.contains("OTHER"));
        // A plain function that names what the module holds can hand it out.
        assert!(d.contains("init"));
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
    fn a_test_function_or_method_the_recording_saw_run_is_read_by_its_names() {
        let n = names(&[(
            "tests/t.py",
            "import reg\n\n\ndef test_a():\n    assert reg.X\n\n\nclass TestB:\n    def test_b(self):\n        assert self.x\n\n\ndef helper():\n    \"\"\"\n    >>> reg.X\n    \"\"\"\n",
        )]);
        let ran = |lines: &[u32]| code(&[("tests/t.py", lines)]);
        let a = n
            .of_test("tests/t.py::test_a[1-x::y]", &ran(&[4]), false)
            .unwrap();
        assert!(a.contains("reg") && a.contains("X"));
        // A method holds its class's names.
        let b = n
            .of_test("tests/t.py::TestB::test_b", &ran(&[9]), false)
            .unwrap();
        assert!(b.contains("x") && !b.contains("reg"), "{b:?}");
        // A doctest, a test whose own function is not in its recording.
        assert_eq!(n.of_test("tests/t.py::t.helper", &ran(&[13]), false), None);
        assert_eq!(n.of_test("tests/t.py::test_a", &ran(&[13]), false), None);
        assert_eq!(n.of_test("tests/t.py::test_a", &code(&[]), false), None);
        assert_eq!(
            n.of_test("tests/t.py::TestB::test_b", &ran(&[4]), false),
            None
        );
    }

    #[test]
    fn a_method_holds_its_whole_class_and_the_repository_s_classes_it_derives_from() {
        let n = names(&[
            (
                "tests/cases.py",
                "import unittest\nfrom pkg import reg\n\n\nclass Base(unittest.TestCase):\n    \
                 @classmethod\n    def setUpClass(cls):\n        cls.values = reg.VALUES\n",
            ),
            (
                "tests/t.py",
                "import unittest\nfrom cases import Base\nfrom cases import Base as Aliased\n\n\n\
                 class TestOwn(unittest.TestCase):\n    @classmethod\n    def setUpClass(cls):\n        \
                 cls.held = OWN\n\n    def test_own(self):\n        assert self.held\n\n\n\
                 class TestDerived(Base):\n    def test_derived(self):\n        assert self.values\n\n\n\
                 class TestAliased(Aliased):\n    def test_aliased(self):\n        assert self.values\n\n\n\
                 class TestOuter:\n    class TestInner(Base):\n        def test_inner(self):\n            \
                 assert self.values\n\n\n\
                 class TestChild(TestOwn):\n    pass\n",
            ),
        ]);
        let ran = |lines: &[u32]| code(&[("tests/t.py", lines)]);
        // setUpClass ran in another test: the class's own text still names what it set.
        let own = n
            .of_test("tests/t.py::TestOwn::test_own", &ran(&[11]), false)
            .unwrap();
        assert!(own.contains("OWN") && own.contains("held"), "{own:?}");
        // A base of the repository's, by its own name: its class's text too.
        let derived = n
            .of_test("tests/t.py::TestDerived::test_derived", &ran(&[16]), false)
            .unwrap();
        assert!(
            derived.contains("reg") && derived.contains("VALUES"),
            "{derived:?}"
        );
        let inner = n
            .of_test(
                "tests/t.py::TestOuter::TestInner::test_inner",
                &ran(&[27]),
                false,
            )
            .unwrap();
        assert!(inner.contains("reg"), "{inner:?}");
        // A base imported from the repository under another name is not known.
        assert_eq!(
            n.of_test("tests/t.py::TestAliased::test_aliased", &ran(&[21]), false),
            None
        );
        // An inherited test method is not the class's own function.
        assert_eq!(
            n.of_test("tests/t.py::TestChild::test_own", &ran(&[11]), false),
            None
        );
    }

    #[test]
    fn a_module_s_own_functions_run_while_collecting_do_not_read_it_for_every_test_but_its_hooks_do(
    ) {
        let n = names(&[
            (
                "pkg/reg.py",
                "VALUES = {}\n\n\ndef _fill():\n    VALUES['x'] = 1\n\n\n_fill()\n\n\n\
                 def pytest_generate_tests(metafunc):\n    metafunc.parametrize('v', [VALUES])\n\n\n\
                 @pytest.hookimpl(specname='pytest_generate_tests')\n\
                 def _params(metafunc):\n    metafunc.parametrize('w', [VALUES])\n",
            ),
            (
                "tests/conftest.py",
                "from pkg import reg\n\n\ndef make():\n    return reg.VALUES\n",
            ),
        ]);
        let reaching = n.reaching("pkg/reg.py", ["VALUES"].into_iter()).unwrap();
        let fill = code(&[("pkg/reg.py", &[4])]);
        let hook = code(&[("pkg/reg.py", &[12])]);
        let other = code(&[("tests/conftest.py", &[4])]);
        let at = |c| n.of_collection(c, false).unwrap();
        assert!(!at(&fill).names("pkg/reg.py", &reaching));
        assert!(at(&hook).names("pkg/reg.py", &reaching));
        // A hook under another name.
        let renamed = code(&[("pkg/reg.py", &[16])]);
        assert!(at(&renamed).names("pkg/reg.py", &reaching));
        assert!(at(&other).names("pkg/reg.py", &reaching));
        // Another module's function naming it reads it for every test, its own does not.
        let values: BTreeSet<String> = ["VALUES".to_string()].into();
        assert!(at(&fill).names("tests/conftest.py", &values));
    }

    #[test]
    fn a_plain_function_reaches_its_module_only_when_it_names_what_the_module_holds() {
        let n = names(&[(
            "pkg/reg.py",
            "_REG = {}\n\n\ndef add(x):\n    return x + 1\n\n\ndef get():\n    return _REG\n\n\n\
             def wrap():\n    return get()\n",
        )]);
        let reach = n.reaching("pkg/reg.py", ["_REG"].into_iter()).unwrap();
        assert!(reach.contains("get") && reach.contains("wrap"), "{reach:?}");
        assert!(!reach.contains("add"), "{reach:?}");
    }

    #[test]
    fn a_function_holds_what_its_decorators_defaults_and_annotations_name() {
        let n = names(&[(
            "pkg/reg.py",
            "import functools\n\nVALUES = {}\n\n\ndef plain(a, b=1, *c, d='x', **e):\n    pass\n\n\n\
             def held(d=VALUES):\n    pass\n\n\ndef typed(x: VALUES) -> None:\n    pass\n\n\n\
             def returns() -> VALUES:\n    pass\n\n\n@functools.cache\ndef cached():\n    pass\n\n\n\
             def later():\n    pass\n\n\nlater = functools.cache(later)\n",
        )]);
        let reach = n.reaching("pkg/reg.py", ["VALUES"].into_iter()).unwrap();
        for held in ["held", "typed", "returns"] {
            assert!(reach.contains(held), "{held}: {reach:?}");
        }
        assert!(!reach.contains("plain"), "{reach:?}");
        // A cache is written through its function, not through what it names.
        let reach = n
            .reaching("pkg/reg.py", ["cached", "later"].into_iter())
            .unwrap();
        assert!(
            reach.contains("cached") && reach.contains("later"),
            "{reach:?}"
        );
        assert!(
            !reach.contains("plain") && !reach.contains("held"),
            "{reach:?}"
        );
    }

    #[test]
    fn a_pure_cached_function_is_pure_unless_the_repository_reads_a_caches_state() {
        let module = (
            "pkg/m.py",
            "from functools import lru_cache\n\n\n@lru_cache\ndef odd(n):\n    return n >> 1\n\n\n\
             @lru_cache\ndef scaled(n):\n    return n * FACTOR\n\n\nFACTOR = 2\n\n\n\
             def window(xs):\n    cache = []\n    cache_clear = cache.clear\n    cache_clear()\n",
        );
        let n = names(&[module]);
        // `window`'s local `cache_clear` reads no cache's state.
        assert!(n.pure_function("pkg/m.py", "odd"));
        assert!(!n.pure_function("pkg/m.py", "scaled"), "reads a global");
        assert!(!n.pure_function("pkg/other.py", "odd"), "not its file");
        for reads in [
            "from pkg.m import odd\n\n\ndef test_fill():\n    assert odd.cache_info().hits == 0\n",
            "from pkg import m\n\n\ndef test_reset():\n    getattr(m.odd, 'cache_clear')()\n",
        ] {
            let n = names(&[module, ("tests/test_m.py", reads)]);
            assert!(!n.pure_function("pkg/m.py", "odd"), "{reads}");
        }
    }

    #[test]
    fn a_method_names_its_classes_and_a_base_it_cannot_resolve_falls_back() {
        let n = names(&[
            ("tests/cases.py", "class Base:\n    pass\n\n\nclass Other:\n    pass\n"),
            (
                "tests/t.py",
                "import unittest\nimport cases\nfrom cases import Other as Base\n\n\n\
                 Made = cases.Base\n\n\n\
                 class TestX(unittest.TestCase):\n    def test_use(self):\n        assert self.cache\n\n\n\
                 class TestAliased(Base):\n    def test_a(self):\n        pass\n\n\n\
                 class TestMade(Made):\n    def test_m(self):\n        pass\n",
            ),
            (
                "tests/u.py",
                "import cases\n\n\nclass TestDotted(cases.Base):\n    def test_d(self):\n        pass\n",
            ),
            (
                "tests/v.py",
                "from unittest import TestCase\n\n\nclass TestV(TestCase):\n    def test_v(self):\n        pass\n",
            ),
        ]);
        let ran = |lines: &[u32]| code(&[("tests/t.py", lines)]);
        let x = n
            .of_test("tests/t.py::TestX::test_use", &ran(&[10]), false)
            .unwrap();
        assert!(x.contains("TestX"), "{x:?}");
        // An alias shadowing a class of the same name, a base bound by an assignment.
        assert_eq!(
            n.of_test("tests/t.py::TestAliased::test_a", &ran(&[15]), false),
            None
        );
        assert_eq!(
            n.of_test("tests/t.py::TestMade::test_m", &ran(&[20]), false),
            None
        );
        // A module's attribute: the class by its own name.
        // A base from outside the repository, imported by its name.
        let v = code(&[("tests/v.py", &[5])]);
        assert!(n.of_test("tests/v.py::TestV::test_v", &v, false).is_some());
        let dotted = code(&[("tests/u.py", &[5])]);
        assert!(n
            .of_test("tests/u.py::TestDotted::test_d", &dotted, false)
            .is_some());
    }

    #[test]
    fn a_name_only_an_import_from_outside_the_repository_binds_does_not_reach_a_module() {
        let n = names(&[
            (
                "pkg/reg.py",
                "from itertools import chain\nfrom functools import lru_cache as cache\n\
                 from . import util\nfrom pkg.util import helper\nimport os\nimport pkg.other as other\n\
                 from collections import deque\ndeque = list\n\n\n\
                 @cache\ndef shift(n):\n    return n\n",
            ),
            ("pkg/util.py", "def helper():\n    pass\n"),
        ]);
        // The repository's modules and functions it imports may hold anything (a name bound
        // both ways too); a function of its own holds what was written only when it names it.
        let reach = n.reaching("pkg/reg.py", ["shift"].into_iter()).unwrap();
        for name in ["reg", "util", "helper", "other", "deque", "shift"] {
            assert!(reach.contains(name), "{name}: {reach:?}");
        }
        for name in ["chain", "cache", "os"] {
            assert!(!reach.contains(name), "{name}: {reach:?}");
        }
    }
}
