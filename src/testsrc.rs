//! Test sources: what defines one test in its file, so that a patch's edit of it can be told
//! from an edit around it, and the text of one test function.
//!
//! # What defines a test
//!
//! A test's [`Definition`] is the tokens (see [`tokens`]: no comments, no whitespace but the
//! indentation's structure, no trailing commas) of:
//!
//! - its own function, decorators included (marks, parametrization), under a placeholder name;
//! - the header and decorators of each class it is in, and those class members that act on every
//!   test of the class: `setUp`/`tearDown` and the other set-up and tear-down methods, autouse
//!   fixtures, `pytestmark`, `__test__`, statements that are not definitions;
//! - the module's statements that act on every test: calls and compound statements run at import
//!   (`sys.path.insert(…)`, a `try:` around imports), star imports, `pytestmark`, `setup_module`
//!   and the other module hooks, `pytest_*` functions, autouse fixtures;
//! - every module-level (or class-level) binding of a name that any of those reads, recursively:
//!   helpers, fixtures it takes as arguments, constants, classes. A name bound by an import is
//!   what it resolves to (`from a import b as c` is `a.b`), not the import line, so moving,
//!   merging or adding imports is no edit while importing a name from elsewhere is;
//! - the names read that the file does not bind (builtins, conftest fixtures): a patch that binds
//!   one of them in the file edits the test.
//!
//! Two versions of a test are the same test when their definitions are equal. What else the
//! file holds (other tests, helpers nothing here reads, comments, blank lines, the order of
//! imports) is not part of it: editing it edits no other test.

mod outline;
pub(crate) mod tokens;

use std::collections::{BTreeMap, BTreeSet, HashSet};

use outline::{is_keyword, Stmt, StmtKind};
use tokens::{Kind, Line};

/// The file and function a node id names: `tests/test_x.py::TestC::test_f[1-2]` →
/// (`tests/test_x.py`, `test_f`).
pub(crate) fn split_nodeid(nodeid: &str) -> (&str, &str) {
    let (file, rest) = nodeid.split_once("::").unwrap_or((nodeid, ""));
    let func = rest.rsplit("::").next().unwrap_or("");
    let func = func.split('[').next().unwrap_or(func);
    (file, func)
}

/// The classes a node id's test is in, outer first: `t.py::A::B::test_f[x]` → `[A, B]`.
fn nodeid_classes(nodeid: &str) -> Vec<&str> {
    let rest = nodeid.split_once("::").map_or("", |(_, r)| r);
    let rest = rest.split('[').next().unwrap_or(rest);
    let mut parts: Vec<&str> = rest.split("::").collect();
    parts.pop();
    parts
}

/// Module-level names that act on every test of the file.
const MODULE_HOOKS: [&str; 10] = [
    "pytestmark",
    "__test__",
    "setup_module",
    "teardown_module",
    "setUpModule",
    "tearDownModule",
    "setup_function",
    "teardown_function",
    "load_tests",
    "collect_ignore",
];

/// Class members that act on every test of the class.
const CLASS_HOOKS: [&str; 20] = [
    "pytestmark",
    "__test__",
    "setUp",
    "tearDown",
    "setUpClass",
    "tearDownClass",
    "asyncSetUp",
    "asyncTearDown",
    "setup_method",
    "teardown_method",
    "setup_class",
    "teardown_class",
    "setup",
    "teardown",
    "maxDiff",
    "longMessage",
    "failureException",
    "__init__",
    "__new__",
    "__init_subclass__",
];

/// One Python source, tokenized and outlined once for all the tests it holds.
pub(crate) struct SourceFile {
    rows: Vec<String>,
    lines: Vec<Line>,
    stmts: Vec<Stmt>,
}

/// What defines one test (see the module documentation). Equal definitions: the same test.
#[derive(Clone, Debug, Default)]
pub(crate) struct Definition {
    /// What each part is (`test`, `class TestC`, `name HELPER`, …) → its statements.
    parts: BTreeMap<String, Vec<Part>>,
}

#[derive(Clone, Debug)]
struct Part {
    /// The normalised tokens: what is compared.
    tokens: String,
    /// The physical rows it spans, for showing it; `None` for what has no lines here.
    rows: Option<(usize, usize)>,
}

impl PartialEq for Definition {
    fn eq(&self, other: &Definition) -> bool {
        self.parts.len() == other.parts.len()
            && self
                .parts
                .iter()
                .zip(&other.parts)
                .all(|((a, pa), (b, pb))| {
                    a == b
                        && pa.len() == pb.len()
                        && pa.iter().zip(pb).all(|(x, y)| x.tokens == y.tokens)
                })
    }
}

impl Eq for Definition {}

impl SourceFile {
    pub(crate) fn parse(text: &str) -> SourceFile {
        let lines = tokens::lines(text);
        let stmts = outline::outline(&lines);
        SourceFile {
            rows: text.lines().map(str::to_string).collect(),
            lines,
            stmts,
        }
    }

    /// The definition of the test `nodeid` names; `None` when the file has no such function in
    /// those classes (a doctest, an inherited test, a generated one).
    pub(crate) fn definition(&self, nodeid: &str) -> Option<Definition> {
        let (_, func) = split_nodeid(nodeid);
        let mut scopes: Vec<&[Stmt]> = vec![&self.stmts];
        let mut chain: Vec<&Stmt> = Vec::new();
        for class in nodeid_classes(nodeid) {
            let body = scopes.last().copied().unwrap_or_default();
            let cls = body
                .iter()
                .rev()
                .find(|s| matches!(&s.kind, StmtKind::Class(n, _) if n == class))?;
            let StmtKind::Class(_, members) = &cls.kind else {
                unreachable!("found as a class")
            };
            chain.push(cls);
            scopes.push(members);
        }
        let own: Vec<&Stmt> = scopes
            .last()
            .copied()
            .unwrap_or_default()
            .iter()
            .filter(|s| matches!(&s.kind, StmtKind::Def(n) if n == func))
            .collect();
        if own.is_empty() {
            return None;
        }
        let mut walk = Walk {
            file: self,
            scopes: &scopes,
            def: Definition::default(),
            seen: HashSet::new(),
            queue: Vec::new(),
            unbound: BTreeSet::new(),
        };
        for s in own {
            walk.add("test".into(), s, chain.len(), Some(func));
        }
        for (k, cls) in chain.iter().enumerate() {
            let name = cls.defined_name().unwrap_or_default();
            let header = Part {
                tokens: self.normalised(cls.start, cls.header + 1, None),
                rows: Some(self.rows_of(cls.start, cls.header + 1)),
            };
            walk.def
                .parts
                .entry(format!("class {name}"))
                .or_default()
                .push(header);
            walk.queue.push((k, cls.start, cls.header + 1));
            for m in scopes[k + 1].iter().filter(|m| self.acts_on_class(m)) {
                walk.add(format!("class {name} body"), m, k + 1, None);
            }
        }
        for m in self.stmts.iter().filter(|m| self.acts_on_module(m)) {
            walk.add("module".into(), m, 0, None);
        }
        Some(walk.finish())
    }

    /// The names of every function the file defines, at module level and in its classes.
    pub(crate) fn functions(&self) -> Vec<String> {
        fn walk(stmts: &[Stmt], out: &mut Vec<String>) {
            for s in stmts {
                match &s.kind {
                    StmtKind::Def(n) => out.push(n.clone()),
                    StmtKind::Class(_, body) => walk(body, out),
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.stmts, &mut out);
        out
    }

    /// Whether the file binds `name` at module level, or defines it in a class (a method).
    pub(crate) fn binds(&self, name: &str) -> bool {
        self.stmts.iter().any(|s| {
            s.binds().contains(&name)
                || matches!(&s.kind, StmtKind::Class(_, body)
                    if body.iter().any(|m| m.defined_name() == Some(name)))
        })
    }

    /// The module-level statements that change, at import, what the file does not define: an
    /// assignment into an imported module or class (`unittest.TestCase.assertEqual = …`,
    /// `os.environ["K"] = …`) or a `setattr(…)` call. Each as its tokens. A test module that
    /// does this acts on every test of the session, not only its own.
    pub(crate) fn import_time_patches(&self) -> BTreeSet<String> {
        self.stmts
            .iter()
            .filter(|s| match &s.kind {
                StmtKind::Assign { mutates, .. } => mutates.iter().any(|m| !self.defines(m)),
                StmtKind::Other => self.lines[s.header].starts_with("setattr"),
                _ => false,
            })
            .map(|s| self.normalised(s.start, s.end, None))
            .collect()
    }

    /// The whole file's tokens: what is compared when a test's function cannot be found.
    pub(crate) fn all_tokens(&self) -> String {
        self.normalised(0, self.lines.len(), None)
    }

    fn acts_on_module(&self, s: &Stmt) -> bool {
        match &s.kind {
            StmtKind::Other | StmtKind::StarImport => true,
            // A change in place of something the file does not define (`os.environ[k] = v`,
            // `pkg.price.RATE = 0`, `sys.path.append(…)` is a call): global state.
            StmtKind::Assign { mutates, .. } if mutates.iter().any(|m| !self.defines(m)) => true,
            StmtKind::Def(_) | StmtKind::Assign { .. } => {
                self.autouse(s)
                    || s.binds()
                        .iter()
                        .any(|n| MODULE_HOOKS.contains(n) || n.starts_with("pytest_"))
            }
            _ => false,
        }
    }

    /// Whether the module binds `name` itself, by a def, a class or an assignment.
    fn defines(&self, name: &str) -> bool {
        self.stmts.iter().any(|s| match &s.kind {
            StmtKind::Def(n) | StmtKind::Class(n, _) => n == name,
            StmtKind::Assign { binds, .. } => binds.iter().any(|b| b == name),
            _ => false,
        })
    }

    fn acts_on_class(&self, s: &Stmt) -> bool {
        match &s.kind {
            StmtKind::Other | StmtKind::StarImport => true,
            StmtKind::Def(_) | StmtKind::Assign { .. } => {
                self.autouse(s) || s.binds().iter().any(|n| CLASS_HOOKS.contains(n))
            }
            _ => false,
        }
    }

    /// Whether `s` is a fixture every test uses: `@pytest.fixture(autouse=True)`.
    fn autouse(&self, s: &Stmt) -> bool {
        self.lines[s.start..s.header].iter().any(|l| {
            let t = &l.tokens;
            t.iter().any(|t| t.text == "fixture")
                && t.windows(3)
                    .any(|w| w[0].text == "autouse" && w[1].text == "=" && w[2].text == "True")
        })
    }

    /// The tokens of `lines[start..end]`, one logical line a row, each with its depth in the
    /// statement's indentation (the depth, not the columns: reindenting is no edit);
    /// `rename`: the function name written as a placeholder.
    fn normalised(&self, start: usize, end: usize, rename: Option<&str>) -> String {
        let mut out = String::new();
        let mut indents: Vec<usize> = Vec::new();
        for line in &self.lines[start..end] {
            while indents.last().is_some_and(|&i| i > line.indent) {
                indents.pop();
            }
            if indents.last() != Some(&line.indent) {
                indents.push(line.indent);
            }
            out.push_str(&indents.len().to_string());
            let t = &line.tokens;
            let def_name = |k: usize| {
                rename.is_some_and(|r| {
                    t[k].text == r && k > 0 && t[k - 1].text == "def" && t[k].kind == Kind::Name
                })
            };
            for (k, tok) in t.iter().enumerate() {
                // Formatters add and drop the comma before a closing bracket.
                let closing = t
                    .get(k + 1)
                    .is_some_and(|n| matches!(n.text.as_str(), ")" | "]" | "}"));
                if tok.text == "," && closing {
                    continue;
                }
                out.push(' ');
                out.push_str(if def_name(k) { "<test>" } else { &tok.text });
            }
            out.push('\n');
        }
        out
    }

    /// The physical rows of `lines[start..end]`.
    fn rows_of(&self, start: usize, end: usize) -> (usize, usize) {
        (
            self.lines[start].first,
            self.lines[end.max(start + 1) - 1].last,
        )
    }

    /// The trimmed source lines of `rows`, blank ones left out.
    fn text_of(&self, rows: (usize, usize)) -> Vec<String> {
        self.rows
            .get(rows.0..=rows.1.min(self.rows.len().saturating_sub(1)))
            .unwrap_or_default()
            .iter()
            .map(|r| r.trim())
            .filter(|r| !r.is_empty())
            .map(str::to_string)
            .collect()
    }
}

/// The walk from a test over the names it reads.
struct Walk<'a> {
    file: &'a SourceFile,
    /// The module's statements, then each enclosing class's, outer first.
    scopes: &'a [&'a [Stmt]],
    def: Definition,
    /// Statements already part of the definition, by their first line.
    seen: HashSet<usize>,
    /// Lines whose names are still to read: (scope depth, start, end).
    queue: Vec<(usize, usize, usize)>,
    unbound: BTreeSet<String>,
}

impl Walk<'_> {
    /// Adds statement `s` (seen from `depth` class scopes) under `label`, and queues its names.
    fn add(&mut self, label: String, s: &Stmt, depth: usize, rename: Option<&str>) {
        if !self.seen.insert(s.start) {
            return;
        }
        let part = Part {
            tokens: self.file.normalised(s.start, s.end, rename),
            rows: Some(self.file.rows_of(s.start, s.end)),
        };
        self.def.parts.entry(label).or_default().push(part);
        self.queue.push((depth, s.start, s.end));
    }

    fn finish(mut self) -> Definition {
        while let Some((depth, start, end)) = self.queue.pop() {
            let lines = &self.file.lines[start..end];
            let mut names: Vec<(String, bool)> = Vec::new();
            for line in lines {
                let t = &line.tokens;
                for (k, tok) in t.iter().enumerate() {
                    match tok.kind {
                        Kind::Name if is_keyword(&tok.text) => {}
                        // What a `def` or `class` binds is no read.
                        Kind::Name
                            if k > 0 && matches!(t[k - 1].text.as_str(), "def" | "class") => {}
                        Kind::Name => {
                            let after_dot = k > 0 && t[k - 1].text == ".";
                            if !after_dot {
                                names.push((tok.text.clone(), true));
                            } else if k > 1 && matches!(t[k - 2].text.as_str(), "self" | "cls") {
                                names.push((tok.text.clone(), false));
                            }
                        }
                        // `usefixtures("db")`, `parametrize("x", …)`: a name in a string.
                        Kind::Literal => {
                            let inner = tok.text.trim_matches(['"', '\'']);
                            let ident = !inner.is_empty()
                                && inner.chars().all(|c| c.is_alphanumeric() || c == '_')
                                && !inner.starts_with(|c: char| c.is_ascii_digit());
                            if ident && tok.text.len() == inner.len() + 2 {
                                names.push((inner.to_string(), false));
                            }
                        }
                        _ => {}
                    }
                }
            }
            for (name, bare) in names {
                self.resolve(&name, depth, bare);
            }
        }
        if !self.unbound.is_empty() {
            let tokens = self.unbound.iter().cloned().collect::<Vec<_>>().join(" ");
            self.def.parts.insert(
                "names from outside the file".into(),
                vec![Part { tokens, rows: None }],
            );
        }
        self.def
    }

    /// Every binding of `name` visible from `depth` class scopes (the class scopes first; a
    /// method body sees only the module's, but reading more is only more careful).
    fn resolve(&mut self, name: &str, depth: usize, bare: bool) {
        let mut found = false;
        for d in (0..=depth).rev() {
            let scope = self.scopes[d];
            for s in scope.iter() {
                if !s.binds().contains(&name) {
                    continue;
                }
                found = true;
                if let StmtKind::Import(binds) = &s.kind {
                    for (n, target) in binds.iter().filter(|(n, _)| n == name) {
                        let label = format!("import {n}");
                        let part = Part {
                            tokens: target.clone(),
                            rows: Some(self.file.rows_of(s.start, s.end)),
                        };
                        let parts = self.def.parts.entry(label).or_default();
                        if !parts.iter().any(|p| p.tokens == part.tokens) {
                            parts.push(part);
                            parts.sort_by(|a, b| a.tokens.cmp(&b.tokens));
                        }
                    }
                    continue;
                }
                self.add(format!("name {name}"), s, d, None);
            }
        }
        if !found && bare {
            self.unbound.insert(name.to_string());
        }
    }
}

/// The names of the `pytest_*` functions a Python source defines (hooks, wherever they are
/// registered from).
pub(crate) fn pytest_hooks(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| {
            let rest = def_rest(l.trim_start())?;
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            name.starts_with("pytest_").then_some(name)
        })
        .collect()
}

/// The lines a patch changed in what defines a test: the lines of each part of `base` that
/// `head` lacks, and of each part of `head` that `base` lacks (see [`changed_lines`]).
pub(crate) fn edit_lines(
    base: (&SourceFile, &Definition),
    head: (&SourceFile, &Definition),
) -> (Vec<String>, Vec<String>) {
    let labels: BTreeSet<&String> = base.1.parts.keys().chain(head.1.parts.keys()).collect();
    let (mut b_text, mut h_text) = (String::new(), String::new());
    for label in labels {
        let (bp, hp) = (
            base.1
                .parts
                .get(label)
                .map(Vec::as_slice)
                .unwrap_or_default(),
            head.1
                .parts
                .get(label)
                .map(Vec::as_slice)
                .unwrap_or_default(),
        );
        let show = |file: &SourceFile, parts: &[Part], other: &[Part], out: &mut String| {
            for p in parts {
                if other.iter().any(|o| o.tokens == p.tokens) {
                    continue;
                }
                let lines = match p.rows {
                    Some(rows) => file.text_of(rows),
                    None => vec![format!("(from outside the file: {})", p.tokens)],
                };
                for l in lines {
                    out.push_str(&l);
                    out.push('\n');
                }
            }
        };
        show(base.0, bp, hp, &mut b_text);
        show(head.0, hp, bp, &mut h_text);
    }
    changed_lines(&b_text, &h_text)
}

/// The source of function `name` in Python `text`: its decorators, `def` line and indented body.
/// `None` when the file has no such function. Every definition of the name is included, so a
/// redefinition is part of the text too.
pub(crate) fn function_source(text: &str, name: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let is_target = def_rest(trimmed).is_some_and(|rest| {
            rest.strip_prefix(name)
                .is_some_and(|after| after.trim_start().starts_with('('))
        });
        if !is_target {
            i += 1;
            continue;
        }
        // Decorators directly above belong to the test (a new skip marker is an edit).
        let mut start = i;
        while start > 0 && lines[start - 1].trim_start().starts_with('@') {
            start -= 1;
        }
        let mut end = block_end(&lines, i, indent);
        let next = end;
        while end > i + 1 && lines[end - 1].trim().is_empty() {
            end -= 1;
        }
        for l in &lines[start..end] {
            out.push_str(l.trim_end());
            out.push('\n');
        }
        i = next;
    }
    (!out.is_empty()).then_some(out)
}

/// What follows `def ` (or `async def `) on a trimmed line that defines a function.
fn def_rest(trimmed: &str) -> Option<&str> {
    trimmed
        .strip_prefix("async def ")
        .or_else(|| trimmed.strip_prefix("def "))
}

/// The line after the block that starts at `start` (a `def` indented by `indent`): the first
/// later line indented no deeper that is not blank, a comment or a closing parenthesis.
fn block_end(lines: &[&str], start: usize, indent: usize) -> usize {
    let mut end = start + 1;
    while end < lines.len() {
        let l = lines[end];
        let t = l.trim_start();
        if !t.is_empty()
            && (l.len() - t.len()) <= indent
            && !t.starts_with('#')
            && !t.starts_with(')')
        {
            break;
        }
        end += 1;
    }
    end
}

/// The lines of `base` that `head` lacks and the lines of `head` that `base` lacks, trimmed:
/// the edited lines of a test, as the report shows them.
pub(crate) fn changed_lines(base: &str, head: &str) -> (Vec<String>, Vec<String>) {
    let trim = |t: &str| -> Vec<String> {
        t.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    };
    let (b, h) = (trim(base), trim(head));
    (
        b.iter().filter(|l| !h.contains(l)).cloned().collect(),
        h.iter().filter(|l| !b.contains(l)).cloned().collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the test `nodeid` is the same test in both versions of its file.
    fn same(base: &str, head: &str, nodeid: &str) -> bool {
        let (b, h) = (SourceFile::parse(base), SourceFile::parse(head));
        let (bd, hd) = (b.definition(nodeid), h.definition(nodeid));
        assert!(bd.is_some() && hd.is_some(), "{nodeid} not found");
        bd == hd
    }

    const FILE: &str = "import os\nimport json\nfrom pkg.price import total, RATE\n\n\
        CASES = [(5, 8.0)]\n\n\
        def helper(x):\n    return total(x)\n\n\
        @pytest.fixture\ndef cart():\n    return {}\n\n\
        def test_a(cart):\n    assert helper(5) == 8.0  # five\n\n\
        @pytest.mark.parametrize('n, want', CASES)\ndef test_b(n, want):\n    assert total(n) == want\n\n\
        class TestC:\n    attr = 3\n\n    def setUp(self):\n        self.x = 1\n\n    def test_m(self):\n        assert self.x == 1\n\n    def test_n(self):\n        assert self.attr == 3\n";

    #[test]
    fn comments_whitespace_and_moved_or_added_imports_are_no_edit() {
        for id in ["t.py::test_a", "t.py::test_b", "t.py::TestC::test_m"] {
            let commented = FILE.replace("# five", "# five items, see #12");
            assert!(same(FILE, &commented, id), "{id}: a comment");
            let spaced = FILE.replace("assert helper(5) == 8.0", "assert helper( 5 )==8.0");
            assert!(same(FILE, &spaced, id), "{id}: whitespace");
            let moved = FILE.replacen(
                "import os\nimport json\nfrom pkg.price import total, RATE\n",
                "from pkg.price import RATE\nimport json\nfrom pkg.price import (\n    total,\n)\nimport os, sys\n",
                1,
            );
            assert!(same(FILE, &moved, id), "{id}: imports moved and added");
        }
    }

    #[test]
    fn an_edit_of_another_test_or_an_unread_helper_is_no_edit() {
        let other = FILE.replace("assert total(n) == want", "assert total(n) == want + 0");
        assert!(same(FILE, &other, "t.py::test_a"));
        assert!(!same(FILE, &other, "t.py::test_b"));
        // A new test, a new test class, a new check_* function: none edits test_a.
        let added = format!(
            "{FILE}\ndef check_c():\n    assert 1\n\nclass TestNew:\n    def test_x(self):\n        pass\n"
        );
        assert!(same(FILE, &added, "t.py::test_a"));
        assert!(same(FILE, &added, "t.py::TestC::test_m"));
        // test_n reads `attr`; test_m does not.
        let attr = FILE.replace("attr = 3", "attr = 4");
        assert!(same(FILE, &attr, "t.py::TestC::test_m"));
        assert!(!same(FILE, &attr, "t.py::TestC::test_n"));
    }

    #[test]
    fn what_the_test_reads_is_part_of_it() {
        // A helper it calls, the fixture it takes, the parametrization's data.
        let helper = FILE.replace("return total(x)", "return total(x) * 0.9");
        assert!(!same(FILE, &helper, "t.py::test_a"));
        assert!(same(FILE, &helper, "t.py::test_b"));
        let fixture = FILE.replace("return {}", "return {'a': 1}");
        assert!(!same(FILE, &fixture, "t.py::test_a"));
        let rows = FILE.replace("CASES = [(5, 8.0)]", "CASES = [(5, 8.0), (0, 0)]");
        assert!(!same(FILE, &rows, "t.py::test_b"));
        assert!(same(FILE, &rows, "t.py::test_a"));
        // An import that now brings another object.
        let elsewhere = FILE.replace(
            "from pkg.price import total, RATE",
            "from pkg.cheap import total\nfrom pkg.price import RATE",
        );
        assert!(!same(FILE, &elsewhere, "t.py::test_b"));
        // A class's set-up is part of each of its tests; a mark is part of the test.
        let setup = FILE.replace("self.x = 1", "self.x = 2");
        assert!(!same(FILE, &setup, "t.py::TestC::test_m"));
        let marked = FILE.replace("def test_a(cart):", "@pytest.mark.skip\ndef test_a(cart):");
        assert!(!same(FILE, &marked, "t.py::test_a"));
        // What runs at import acts on every test; so does an autouse fixture.
        let import_time = FILE.replace(
            "CASES = [(5, 8.0)]",
            "CASES = [(5, 8.0)]\nos.environ['RATE'] = '0'",
        );
        assert!(!same(FILE, &import_time, "t.py::test_a"));
        let autouse =
            format!("{FILE}\n@pytest.fixture(autouse=True)\ndef patch_total():\n    pass\n");
        assert!(!same(FILE, &autouse, "t.py::test_a"));
        // A name from a conftest, now bound in the file: another fixture.
        let reads_config = FILE.replace("def test_a(cart):", "def test_a(cart, pytestconfig):");
        let shadowed = format!("{reads_config}\n@pytest.fixture\ndef pytestconfig():\n    pass\n");
        assert!(!same(&reads_config, &shadowed, "t.py::test_a"));
    }

    #[test]
    fn edit_lines_show_the_changed_parts_only() {
        let helper = FILE.replace("return total(x)", "return total(x) * 0.9");
        let (b, h) = (SourceFile::parse(FILE), SourceFile::parse(&helper));
        let id = "t.py::test_a";
        let (bd, hd) = (b.definition(id).unwrap(), h.definition(id).unwrap());
        assert_eq!(
            edit_lines((&b, &bd), (&h, &hd)),
            (
                vec!["return total(x)".to_string()],
                vec!["return total(x) * 0.9".to_string()]
            )
        );
    }

    #[test]
    fn import_time_patches_are_assignments_into_what_the_file_does_not_define() {
        let f = SourceFile::parse(
            "import os, unittest\nCFG = {}\nCFG['a'] = 1\nunittest.TestCase.assertEqual = lambda *a: None\n\
             os.environ['TZ'] = 'UTC'\nsetattr(os, 'sep', '/')\nsys.path.insert(0, '.')\n",
        );
        let patches: Vec<String> = f.import_time_patches().into_iter().collect();
        assert_eq!(patches.len(), 3, "{patches:?}");
        assert!(patches.iter().any(|p| p.contains("assertEqual")));
        assert!(patches
            .iter()
            .all(|p| !p.contains("CFG") && !p.contains("insert")));
    }

    #[test]
    fn functions_bindings_and_hooks_are_found() {
        let f = SourceFile::parse(FILE);
        assert_eq!(
            f.functions(),
            ["helper", "cart", "test_a", "test_b", "setUp", "test_m", "test_n"]
        );
        assert!(f.binds("CASES") && f.binds("total") && f.binds("setUp"));
        assert!(!f.binds("x"));
        let hooks = pytest_hooks("def pytest_configure(config):\n    pass\nclass P:\n    async def pytest_runtest_call(self, item):\n        pass\ndef pytestish():\n    pass\n");
        assert_eq!(
            hooks.into_iter().collect::<Vec<_>>(),
            ["pytest_configure", "pytest_runtest_call"]
        );
    }

    #[test]
    fn changed_lines_are_each_sides_own() {
        let (b, h) = changed_lines(
            "def t():\n    assert f() == 8.0\n",
            "def t():\n    assert f() == 7.2\n",
        );
        assert_eq!(b, ["assert f() == 8.0"]);
        assert_eq!(h, ["assert f() == 7.2"]);
    }

    #[test]
    fn splits_node_ids() {
        assert_eq!(split_nodeid("tests/t.py::test_a"), ("tests/t.py", "test_a"));
        assert_eq!(
            split_nodeid("tests/t.py::C::test_b[x-1]"),
            ("tests/t.py", "test_b")
        );
        assert_eq!(nodeid_classes("t.py::A::B::test_c[a::b]"), ["A", "B"]);
        assert!(nodeid_classes("t.py::test_c").is_empty());
    }

    #[test]
    fn finds_a_function_with_decorators_and_body_only() {
        let src = "import x\n\n@pytest.mark.skip\ndef test_a():\n    assert 1\n\n    assert 2\n\ndef test_ab():\n    pass\n";
        assert_eq!(
            function_source(src, "test_a").unwrap(),
            "@pytest.mark.skip\ndef test_a():\n    assert 1\n\n    assert 2\n"
        );
        assert_eq!(
            function_source(src, "test_ab").unwrap(),
            "def test_ab():\n    pass\n"
        );
        assert!(function_source(src, "test_c").is_none());
    }

    #[test]
    fn methods_in_classes_end_at_the_next_method() {
        let src = "class TestC:\n    def test_m(self):\n        assert 1\n    def test_n(self):\n        pass\n";
        assert_eq!(
            function_source(src, "test_m").unwrap(),
            "    def test_m(self):\n        assert 1\n"
        );
    }
}
