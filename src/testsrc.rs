//! Test sources: what defines one test in its file, so that a patch's edit of it can be told
//! from an edit around it, and the text of one test function.
//!
//! # What defines a test
//!
//! A test's [`Definition`] is the tokens (see `crate::python`: no comments, no whitespace but the
//! blocks' structure, no trailing commas) of:
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
//! imports) is not part of it: editing it edits no other test. A file that does not parse
//! defines no test: every test of it is edited.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use ruff_text_size::TextSize;

use crate::python::{self, ast, Kind, Module, Ranged, Stmt, TextRange, Tok};

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
const MODULE_HOOKS: &str = "pytestmark __test__ setup_module teardown_module setUpModule \
    tearDownModule setup_function teardown_function load_tests collect_ignore";

/// Class members that act on every test of the class.
const CLASS_HOOKS: &str = "pytestmark __test__ setUp tearDown setUpClass tearDownClass \
    asyncSetUp asyncTearDown setup_method teardown_method setup_class teardown_class setup \
    teardown maxDiff longMessage failureException __init__ __new__ __init_subclass__";

fn hook(hooks: &str, name: &str) -> bool {
    hooks.split_whitespace().any(|h| h == name)
}

/// One Python source, parsed once for all the tests it holds.
pub(crate) struct SourceFile {
    m: Module,
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
    /// The lines it spans (1-based), for showing it; `None` for what has no lines here.
    rows: Option<(u32, u32)>,
}

impl Definition {
    fn part(&self, label: &str) -> &[Part] {
        self.parts.get(label).map(Vec::as_slice).unwrap_or_default()
    }
}

impl PartialEq for Definition {
    fn eq(&self, other: &Definition) -> bool {
        self.parts.len() == other.parts.len()
            && (self.parts.iter().zip(&other.parts)).all(|((a, pa), (b, pb))| {
                a == b
                    && pa.len() == pb.len()
                    && pa.iter().zip(pb).all(|(x, y)| x.tokens == y.tokens)
            })
    }
}

impl Eq for Definition {}

/// What a statement is to a test's definition.
enum What<'a> {
    Def(&'a str),
    Class(&'a str, &'a [Stmt]),
    /// Each name an import binds, with what it resolves to (`from a import b as c`: `c` is
    /// `a.b`; `import a.b`: `a` is the module `a`, with `a.b` loaded).
    Import(Vec<(&'a str, String)>),
    /// `from m import *`: binds what `m` has, unknown here.
    StarImport,
    /// An assignment: the names it binds (`X = …`, `A, B = …`, `X: int = …`) and those whose
    /// value it changes in place (`X[k] = …`, `X.a = …`, `X += …`).
    Assign {
        binds: Vec<&'a str>,
        mutates: Vec<&'a str>,
    },
    /// `if __name__ == "__main__":`, which never runs under pytest, or a string on its own (a
    /// docstring).
    Inert,
    /// Anything else, done when the module (or class) body runs: a call, a compound statement.
    Other,
}

impl<'a> What<'a> {
    fn of(m: &Module, stmt: &'a Stmt) -> What<'a> {
        let (mut binds, mut mutates) = (Vec::new(), Vec::new());
        let mut target = |e: &'a ast::Expr, whole| assigned(e, whole, &mut binds, &mut mutates);
        match stmt {
            Stmt::FunctionDef(f) => return What::Def(f.name.as_str()),
            Stmt::ClassDef(c) => return What::Class(c.name.as_str(), &c.body),
            Stmt::Import(i) => {
                let names = i
                    .names
                    .iter()
                    .map(|a| (python::bound_name(a), a.name.to_string()));
                return What::Import(names.collect());
            }
            Stmt::ImportFrom(i) if i.names.iter().any(|a| &a.name == "*") => {
                return What::StarImport
            }
            Stmt::ImportFrom(i) => {
                let module = i.module.as_ref().map_or("", |m| m.as_str());
                let from = format!("{}{module}", ".".repeat(i.level as usize));
                let names = i
                    .names
                    .iter()
                    .map(|a| (python::alias(a), format!("{from}.{}", a.name)));
                return What::Import(names.collect());
            }
            Stmt::If(i) if main_guard(&i.test) => return What::Inert,
            Stmt::Expr(_) if matches!(m.tokens_in(stmt.range())[..], [t] if t.is_string()) => {
                return What::Inert
            }
            Stmt::Assign(a) => a.targets.iter().for_each(|t| target(t, true)),
            Stmt::AnnAssign(a) => target(&a.target, true),
            Stmt::AugAssign(a) => target(&a.target, false),
            Stmt::TypeAlias(t) => target(&t.name, true),
            _ => return What::Other,
        }
        What::Assign { binds, mutates }
    }

    /// Every name it binds.
    fn binds(&self) -> Vec<&'a str> {
        match self {
            What::Def(n) | What::Class(n, _) => vec![n],
            What::Import(names) => names.iter().map(|(n, _)| *n).collect(),
            What::Assign { binds, mutates } => binds.iter().chain(mutates).copied().collect(),
            _ => Vec::new(),
        }
    }
}

/// The names an assignment's target binds (a name, a tuple or list of them, starred) or
/// changes in place (the name an attribute or item is of); `whole`: binds, not augments.
fn assigned<'a>(
    e: &'a ast::Expr,
    whole: bool,
    binds: &mut Vec<&'a str>,
    mutates: &mut Vec<&'a str>,
) {
    match e {
        ast::Expr::Name(n) if whole => binds.push(n.id.as_str()),
        ast::Expr::Name(n) => mutates.push(n.id.as_str()),
        ast::Expr::Tuple(t) => t
            .elts
            .iter()
            .for_each(|e| assigned(e, whole, binds, mutates)),
        ast::Expr::List(l) => l
            .elts
            .iter()
            .for_each(|e| assigned(e, whole, binds, mutates)),
        ast::Expr::Starred(s) => assigned(&s.value, whole, binds, mutates),
        ast::Expr::Attribute(a) => assigned(&a.value, false, binds, mutates),
        ast::Expr::Subscript(s) => assigned(&s.value, false, binds, mutates),
        _ => {}
    }
}

/// `__name__ == "__main__"`, either way round.
fn main_guard(test: &ast::Expr) -> bool {
    let Some(c) = test.as_compare_expr() else {
        return false;
    };
    let name = |e: &ast::Expr| matches!(e, ast::Expr::Name(n) if n.id.as_str() == "__name__");
    let main =
        |e: &ast::Expr| matches!(e, ast::Expr::StringLiteral(s) if s.value.to_str() == "__main__");
    matches!((&*c.ops, &*c.comparators), ([ast::CmpOp::Eq], [right])
        if name(&c.left) && main(right) || main(&c.left) && name(right))
}

impl SourceFile {
    pub(crate) fn parse(text: &str) -> SourceFile {
        SourceFile {
            m: Module::parse(text),
        }
    }

    fn stmts(&self) -> &[Stmt] {
        self.m.body().unwrap_or_default()
    }

    /// The definition of the test `nodeid` names; `None` when the file has no such function in
    /// those classes (a doctest, an inherited test, a generated one) or does not parse.
    pub(crate) fn definition(&self, nodeid: &str) -> Option<Definition> {
        let (_, func) = split_nodeid(nodeid);
        let mut scopes: Vec<&[Stmt]> = vec![self.m.body()?];
        let mut chain: Vec<(&Stmt, &str)> = Vec::new();
        for class in nodeid_classes(nodeid) {
            let body = scopes.last().copied().unwrap_or_default();
            let (cls, members) = body.iter().rev().find_map(|s| match What::of(&self.m, s) {
                What::Class(n, members) if n == class => Some((s, members)),
                _ => None,
            })?;
            chain.push((cls, class));
            scopes.push(members);
        }
        let own: Vec<&Stmt> = (scopes.last().copied().unwrap_or_default().iter())
            .filter(|s| matches!(What::of(&self.m, s), What::Def(n) if n == func))
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
        for (k, (cls, name)) in chain.iter().enumerate() {
            let header = self.m.header(cls);
            let range = header
                .first()
                .zip(header.last())
                .map(|(a, b)| a.range.cover(b.range));
            let range = range.unwrap_or(cls.range());
            let part = self.part(range, None);
            walk.def
                .parts
                .entry(format!("class {name}"))
                .or_default()
                .push(part);
            walk.queue.push((k, range));
            for m in scopes[k + 1].iter().filter(|m| self.acts_on_class(m)) {
                walk.add(format!("class {name} body"), m, k + 1, None);
            }
        }
        for m in self.stmts().iter().filter(|m| self.acts_on_module(m)) {
            walk.add("module".into(), m, 0, None);
        }
        Some(walk.finish())
    }

    /// The fixtures the file defines with a scope wider than one test
    /// (`@pytest.fixture(scope="module")`, `"class"`, `"package"`, `"session"`).
    pub(crate) fn wide_fixtures(&self) -> BTreeSet<String> {
        let wide = |d: &ast::Decorator| {
            let Some(call) = d.expression.as_call_expr() else {
                return false;
            };
            let fixture = match &*call.func {
                ast::Expr::Name(n) => n.id.as_str() == "fixture",
                ast::Expr::Attribute(a) => a.attr.as_str() == "fixture",
                _ => false,
            };
            fixture
                && call.arguments.keywords.iter().any(|k| {
                    k.arg.as_ref().is_some_and(|a| a.as_str() == "scope")
                        && matches!(&k.value, ast::Expr::StringLiteral(s) if s.value.to_str() != "function")
                })
        };
        (crate::python::nested(self.stmts()).into_iter())
            .filter_map(|s| s.as_function_def_stmt())
            .filter(|f| f.decorator_list.iter().any(wide))
            .map(|f| f.name.to_string())
            .collect()
    }

    /// The parameter names of the functions named `func` (at module level or in a class).
    pub(crate) fn parameters(&self, func: &str) -> BTreeSet<String> {
        (crate::python::nested(self.stmts()).into_iter())
            .filter_map(|s| s.as_function_def_stmt())
            .filter(|f| f.name.as_str() == func)
            .flat_map(|f| {
                let p = &f.parameters;
                (p.posonlyargs.iter().chain(&p.args).chain(&p.kwonlyargs))
                    .map(|a| a.name().to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The names of every function the file defines, at module level and in its classes.
    pub(crate) fn functions(&self) -> Vec<String> {
        fn walk(m: &Module, stmts: &[Stmt], out: &mut Vec<String>) {
            for s in stmts {
                match What::of(m, s) {
                    What::Def(n) => out.push(n.to_owned()),
                    What::Class(_, body) => walk(m, body, out),
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.m, self.stmts(), &mut out);
        out
    }

    /// Whether the file binds `name` at module level, or defines it in a class (a method).
    pub(crate) fn binds(&self, name: &str) -> bool {
        self.stmts().iter().any(|s| match What::of(&self.m, s) {
            What::Class(n, body) => {
                n == name
                    || body.iter().any(|m| {
                        matches!(What::of(&self.m, m), What::Def(n) | What::Class(n, _) if n == name)
                    })
            }
            what => what.binds().contains(&name),
        })
    }

    /// The module-level statements that change, at import, what the file does not define: an
    /// assignment into an imported module or class (`unittest.TestCase.assertEqual = …`,
    /// `os.environ["K"] = …`) or a `setattr(…)` call. Each as its tokens. A test module that
    /// does this acts on every test of the session, not only its own. A file that does not
    /// parse may do anything: it stands as one patch, of its bytes.
    pub(crate) fn import_time_patches(&self) -> BTreeSet<String> {
        if self.m.body().is_none() {
            return BTreeSet::from([self.all_tokens()]);
        }
        (self.stmts().iter())
            .filter(|s| match What::of(&self.m, s) {
                What::Assign { mutates, .. } => mutates.iter().any(|m| !self.defines(m)),
                What::Other => self
                    .m
                    .tokens_in(s.range())
                    .first()
                    .is_some_and(|t| t.text == "setattr"),
                _ => false,
            })
            .map(|s| self.normalised(s.range(), None))
            .collect()
    }

    /// The whole file's tokens: what is compared when a test's function cannot be found. A file
    /// that does not parse is its bytes, marked so that no parsed file equals it.
    pub(crate) fn all_tokens(&self) -> String {
        match self.m.body() {
            Some(_) => self.normalised(self.m.range(), None),
            None => format!("\0unparsed\0{}", self.m.text()),
        }
    }

    /// The source of every function named `name`, from its first decorator to its last line,
    /// as [`function_source`] gives it.
    pub(crate) fn function_source(&self, name: &str) -> Option<String> {
        let defs = python::nested(self.m.body()?)
            .into_iter()
            .filter(|s| matches!(s, Stmt::FunctionDef(f) if f.name.as_str() == name));
        let mut out = String::new();
        for s in defs {
            let (first, last) = self.m.span(s);
            for l in self.m.lines(first, last) {
                out.push_str(l.trim_end());
                out.push('\n');
            }
        }
        (!out.is_empty()).then_some(out)
    }

    fn acts_on_module(&self, s: &Stmt) -> bool {
        match What::of(&self.m, s) {
            What::Other | What::StarImport => true,
            // A change in place of something the file does not define (`os.environ[k] = v`,
            // `pkg.price.RATE = 0`, `sys.path.append(…)` is a call): global state.
            What::Assign { mutates, .. } if mutates.iter().any(|m| !self.defines(m)) => true,
            what @ (What::Def(_) | What::Assign { .. }) => {
                self.autouse(s)
                    || (what.binds().iter())
                        .any(|n| hook(MODULE_HOOKS, n) || n.starts_with("pytest_"))
            }
            _ => false,
        }
    }

    /// Whether the module binds `name` itself, by a def, a class or an assignment.
    fn defines(&self, name: &str) -> bool {
        self.stmts().iter().any(|s| match What::of(&self.m, s) {
            What::Def(n) | What::Class(n, _) => n == name,
            What::Assign { binds, .. } => binds.contains(&name),
            _ => false,
        })
    }

    fn acts_on_class(&self, s: &Stmt) -> bool {
        match What::of(&self.m, s) {
            What::Other | What::StarImport => true,
            what @ (What::Def(_) | What::Assign { .. }) => {
                self.autouse(s) || what.binds().iter().any(|n| hook(CLASS_HOOKS, n))
            }
            _ => false,
        }
    }

    /// Whether `s` is a fixture every test uses: `@pytest.fixture(autouse=True)`.
    fn autouse(&self, s: &Stmt) -> bool {
        python::decorators(s).iter().any(|d| {
            let t = self.m.tokens_in(d.range());
            t.iter().any(|t| t.text == "fixture")
                && t.windows(3)
                    .any(|w| w[0].text == "autouse" && w[1].text == "=" && w[2].text == "True")
        })
    }

    /// The tokens of `range` and the lines they span; `rename`: the function name written as a
    /// placeholder.
    fn part(&self, range: TextRange, rename: Option<&str>) -> Part {
        Part {
            tokens: self.normalised(range, rename),
            rows: Some(self.m.span(range)),
        }
    }

    /// The tokens of `range`: a logical line's end and a block's indent and dedent stand as
    /// marks (reindenting is no edit); formatters add and drop the comma before a closing
    /// bracket, which is left out.
    fn normalised(&self, range: TextRange, rename: Option<&str>) -> String {
        let t = self.m.tokens_in(range);
        let mut out = String::new();
        for (k, tok) in t.iter().enumerate() {
            let closing = |n: &Tok| n.is(")") || n.is("]") || n.is("}");
            match tok.kind {
                Kind::Newline => out.push('\n'),
                Kind::Indent => out.push_str(" {"),
                Kind::Dedent => out.push_str(" }"),
                _ if tok.is(",") && t.get(k + 1).is_some_and(closing) => {}
                _ => {
                    let renamed = k > 0 && t[k - 1].is("def") && Some(tok.text) == rename;
                    out.push(' ');
                    out.push_str(if renamed { "<test>" } else { tok.text });
                }
            }
        }
        out
    }

    /// The trimmed source lines of `rows`, blank ones left out.
    fn text_of(&self, (first, last): (u32, u32)) -> Vec<String> {
        (self.m.lines(first, last).map(str::trim))
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
    /// Statements already part of the definition, by their start.
    seen: HashSet<TextSize>,
    /// Code whose names are still to read: (scope depth, its range).
    queue: Vec<(usize, TextRange)>,
    unbound: BTreeSet<String>,
}

impl Walk<'_> {
    /// Adds statement `s` (seen from `depth` class scopes) under `label`, and queues its names.
    fn add(&mut self, label: String, s: &Stmt, depth: usize, rename: Option<&str>) {
        if !self.seen.insert(s.start()) {
            return;
        }
        let part = self.file.part(s.range(), rename);
        self.def.parts.entry(label).or_default().push(part);
        self.queue.push((depth, s.range()));
    }

    fn finish(mut self) -> Definition {
        while let Some((depth, range)) = self.queue.pop() {
            let t = self.file.m.tokens_in(range);
            let mut names: Vec<(String, bool)> = Vec::new();
            for (k, tok) in t.iter().enumerate() {
                let after = |text: &str| k > 0 && t[k - 1].is(text);
                match tok.kind {
                    // What a `def` or `class` binds is no read.
                    Kind::Name if after("def") || after("class") => {}
                    Kind::Name if !after(".") => names.push((tok.text.to_owned(), true)),
                    Kind::Name if k > 1 && matches!(t[k - 2].text, "self" | "cls") => {
                        names.push((tok.text.to_owned(), false))
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
            for (name, bare) in names {
                self.resolve(&name, depth, bare);
            }
        }
        if !self.unbound.is_empty() {
            let tokens = self.unbound.iter().cloned().collect::<Vec<_>>().join(" ");
            let part = Part { tokens, rows: None };
            self.def
                .parts
                .insert("names from outside the file".into(), vec![part]);
        }
        self.def
    }

    /// Every binding of `name` visible from `depth` class scopes (the class scopes first; a
    /// method body sees only the module's, but reading more is only more careful).
    fn resolve(&mut self, name: &str, depth: usize, bare: bool) {
        let mut found = false;
        for d in (0..=depth).rev() {
            for s in self.scopes[d].iter() {
                let what = What::of(&self.file.m, s);
                if !what.binds().contains(&name) {
                    continue;
                }
                found = true;
                if let What::Import(binds) = what {
                    for (n, target) in binds.into_iter().filter(|(n, _)| *n == name) {
                        let part = Part {
                            tokens: target,
                            rows: Some(self.file.m.span(s)),
                        };
                        let parts = self.def.parts.entry(format!("import {n}")).or_default();
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
/// registered from). A source that does not parse may define any: it stands as one name no
/// function has, of its bytes.
pub(crate) fn pytest_hooks(text: &str) -> BTreeSet<String> {
    let m = Module::parse(text);
    let Some(body) = m.body() else {
        return BTreeSet::from([format!("\0unparsed\0{text}")]);
    };
    (python::nested(body).into_iter())
        .filter_map(|s| s.as_function_def_stmt())
        .map(|f| f.name.to_string())
        .filter(|n| n.starts_with("pytest_"))
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
        let (bp, hp) = (base.1.part(label), head.1.part(label));
        let show = |file: &SourceFile, parts: &[Part], other: &[Part], out: &mut String| {
            for p in parts
                .iter()
                .filter(|p| !other.iter().any(|o| o.tokens == p.tokens))
            {
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

/// The source of function `name` in Python `text`: its decorators, `def` line and body, each
/// line as written (trailing whitespace aside). `None` when the file has no such function or
/// does not parse. Every definition of the name is included, so a redefinition is part of the
/// text too.
pub(crate) fn function_source(text: &str, name: &str) -> Option<String> {
    SourceFile::parse(text).function_source(name)
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

    #[test]
    fn wide_fixtures_and_the_parameters_that_request_them() {
        let text = "import pytest\n\n\n@pytest.fixture(scope=\"module\")\ndef store():\n    return []\n\n\n\
                    @pytest.fixture\ndef item():\n    return 1\n\n\n@fixture(scope='function')\ndef plain():\n    return 2\n\n\n\
                    class TestChain:\n    def test_add(self, store, item):\n        store.append(item)\n";
        let f = SourceFile::parse(text);
        assert_eq!(f.wide_fixtures(), ["store".to_string()].into());
        assert_eq!(
            f.parameters("test_add"),
            ["item", "self", "store"].map(String::from).into()
        );
        assert!(f.parameters("test_gone").is_empty());
    }

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

    /// The line scanner took a `def` inside a multi-line string for a function, and ended a
    /// function at a string's line that was indented less.
    #[test]
    fn a_def_in_a_string_is_no_function_and_a_string_does_not_end_one() {
        let src = "X = \"\"\"\ndef test_a():\n    pass\n\"\"\"\n\ndef test_b():\n    s = '''\nend\n'''\n    assert s\n";
        assert!(function_source(src, "test_a").is_none());
        assert_eq!(
            function_source(src, "test_b").unwrap(),
            "def test_b():\n    s = '''\nend\n'''\n    assert s\n"
        );
        assert_eq!(SourceFile::parse(src).functions(), ["test_b"]);
    }

    #[test]
    fn a_file_that_does_not_parse_defines_no_test_and_equals_no_parsed_file() {
        let good = SourceFile::parse("def test_a():\n    pass\n");
        for bad in [
            "def test_a(:\n    pass\n",
            "def test_a():\n\tif x:\n        pass\n",
        ] {
            let f = SourceFile::parse(bad);
            assert!(f.definition("t.py::test_a").is_none(), "{bad}");
            assert_ne!(f.all_tokens(), good.all_tokens());
            assert!(!f.import_time_patches().is_empty());
            assert_eq!(pytest_hooks(bad).len(), 1);
        }
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
