//! Python source as the footprint and the reach rule read it, from the one source model
//! (`crate::python`): the functions and methods (their spans from the first decorator, as CPython
//! numbers a code object's first line, and a digest of their tokens), the classes, the tokens at
//! module level, the imports and what the module binds outside its functions.
//!
//! A source that does not parse is read as unknown: no function, a module digest of its bytes
//! (any edit of it changes its module), names bound that no statement shows, and imports of
//! anything.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::python::{self, ast, purity, Kind, Module, Ranged, Stmt, Tok};

/// One function or method: where it is and a digest of its tokens (decorators, signature and
/// body, nested definitions included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Def {
    /// Dotted names of the enclosing classes and functions, then its own, then `#n` for the
    /// n-th definition of the same name in the same scope.
    pub(crate) key: String,
    /// 1-based, first decorator to last line of the body.
    pub(crate) start: u32,
    pub(crate) end: u32,
    pub(crate) digest: blake3::Hash,
    /// A digest of its decorators and its `def` statement's first line (the signature,
    /// defaults included): what runs where it is defined, not when it is called.
    pub(crate) header: blake3::Hash,
    /// The names its tokens hold (decorators, signature and body, nested definitions
    /// included; the words inside its strings too), except the name each `def` or `class` of
    /// it defines: what its code can reach by name.
    pub(crate) words: BTreeSet<String>,
    /// The identifiers among `words` (none from inside a string): what its code can store
    /// one value of in another.
    pub(crate) idents: BTreeSet<String>,
    /// Whether it is a module-level function whose code reads nothing but its arguments
    /// ([`purity`]).
    pub(crate) pure: bool,
}

/// One class: where it is, and the names its whole text holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Class {
    /// Dotted names of the enclosing classes and functions, then its own.
    pub(crate) key: String,
    /// 1-based, first decorator to last line of the body.
    pub(crate) start: u32,
    pub(crate) end: u32,
    /// The names its tokens hold (decorators, bases, body, methods and nested classes
    /// included), as [`Def::words`].
    pub(crate) words: BTreeSet<String>,
    /// The names its decorators and its `class` line hold (its bases among them).
    pub(crate) header: BTreeSet<String>,
    /// The names its own body binds (fields, methods, nested classes): reached only through
    /// the class or its instances.
    pub(crate) bound: BTreeSet<String>,
    /// The identifiers among `words`, as [`Def::idents`].
    pub(crate) idents: BTreeSet<String>,
}

/// One module an `import` or `from ... import` statement names, anywhere in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Import {
    /// Leading dots of a relative import (0: absolute).
    pub(crate) level: u32,
    /// The module named (`a.b` of `import a.b` or `from a.b import c`; empty for `from . import c`).
    pub(crate) module: String,
    /// The names a `from` import takes (each may be a submodule); empty for `import`.
    pub(crate) names: Vec<String>,
}

/// What the footprint compares of one file.
#[derive(Clone, Debug)]
pub(crate) struct Source {
    /// Whether it parsed: if not, nothing below is known but `module`.
    pub(crate) parsed: bool,
    pub(crate) defs: Vec<Def>,
    /// Every class, nested ones included, in source order.
    pub(crate) classes: Vec<Class>,
    /// Everything outside the functions' bodies (class bodies included), each function standing
    /// as one `def NAME` token: a change here, an added, removed or moved function included, is
    /// a change at module level.
    pub(crate) module: blake3::Hash,
    pub(crate) imports: Vec<Import>,
    /// The names the module binds outside its functions (assignment targets, definitions,
    /// imports, class bodies' names included), or `None` when its code outside functions can
    /// bind names no statement shows (`globals()`, `setattr`, `vars`, `exec`, a module
    /// `__getattr__`, `from m import *`).
    pub(crate) globals: Option<BTreeSet<String>>,
    /// The names of `globals` that only imports bind, each with the first name of the module
    /// it is imported from (`""` for a relative import): a name bound by importing from
    /// outside the repository holds nothing of it.
    pub(crate) imported: BTreeMap<String, BTreeSet<String>>,
    /// The names `from ... import` statements outside functions bind (a class among them,
    /// perhaps under another name).
    pub(crate) from_imported: BTreeSet<String>,
    /// The names `import` statements outside functions bind (modules).
    pub(crate) modules_imported: BTreeSet<String>,
    /// The names `from ... import x as y` statements outside functions bind under another
    /// name (`y`).
    pub(crate) from_aliases: BTreeSet<String>,
    /// The names of `globals` that only class bodies bind ([`Class::bound`]): no module
    /// global, an attribute of a class.
    pub(crate) class_only: BTreeSet<String>,
    /// The names statements at the module's own level bind otherwise than by `def`, `class`
    /// or an import (assignments, `for`, `with`), each with the names those statements hold:
    /// what its value may hold.
    pub(crate) assigned_words: BTreeMap<String, BTreeSet<String>>,
    /// The names an import at the module's own level binds, and those a function rebinds
    /// (`global X`): they may hold anything.
    pub(crate) bound_opaquely: BTreeSet<String>,
    /// The identifiers of each logical line at the module's own level (definitions aside),
    /// whether it binds a name or not: `ALIASES.setdefault("d", _REG)` puts what one holds in
    /// another.
    pub(crate) statements: Vec<BTreeSet<String>>,
    /// Whether its code reads or resets a cache's own state (`f.cache_info()`,
    /// `.cache_clear()`, `.cache_parameters()`, or those names in a string, for `getattr`).
    pub(crate) cache_api: bool,
}

/// Names that read a module's globals without naming them: code that holds one may read any
/// (`getattr(mod, name)`, `sys.modules[name]`, `importlib.import_module`, `vars(mod)`).
pub(crate) const DYNAMIC_READ: &[&str] = &[
    "globals",
    "vars",
    "locals",
    "getattr",
    "__getattribute__",
    "__dict__",
    "__globals__",
    "__import__",
    "import_module",
    "modules",
    "eval",
    "exec",
    "attrgetter",
    "inspect",
    "reload",
];

/// Names that bind a module's globals without a statement that shows the name: a module whose
/// code outside functions holds one binds names no reading of it can list.
const DYNAMIC_BIND: &[&str] = &[
    "globals",
    "vars",
    "setattr",
    "__dict__",
    "__getattr__",
    "modules",
    "exec",
];

/// Reads one file.
pub(crate) fn parse(text: &str) -> Source {
    python::deep(|| read(text))
}

fn read(text: &str) -> Source {
    let m = Module::parse(text);
    let Some(body) = m.body() else {
        return Source::unknown(text);
    };
    let mut r = Reader {
        m: &m,
        out: Source::unknown(""),
        seen: HashMap::new(),
        module_level: BTreeSet::new(),
        assigned: BTreeSet::new(),
        outer: Vec::new(),
    };
    r.out.parsed = true;
    r.out.globals = Some(BTreeSet::new());
    r.out.cache_api = false;
    r.block(body, &[], Scope::Module);
    r.finish(body)
}

impl Source {
    /// A source nothing is known of but its bytes.
    fn unknown(text: &str) -> Source {
        let mut h = blake3::Hasher::new_derive_key("fixgate unparsed python v1");
        h.update(text.as_bytes());
        Source {
            parsed: false,
            defs: Vec::new(),
            classes: Vec::new(),
            module: h.finalize(),
            imports: Vec::new(),
            globals: None,
            imported: BTreeMap::new(),
            from_imported: BTreeSet::new(),
            modules_imported: BTreeSet::new(),
            from_aliases: BTreeSet::new(),
            class_only: BTreeSet::new(),
            assigned_words: BTreeMap::new(),
            bound_opaquely: BTreeSet::new(),
            statements: Vec::new(),
            cache_api: true,
        }
    }
}

/// Where a statement is: what its bindings bind.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    Module,
    /// A class body, by the class's index in [`Source::classes`].
    Class(usize),
    Function,
}

/// How a statement outside functions binds its names.
enum Binding<'a> {
    /// `import`, or `from` (with the module it imports from, and the names under another name).
    Import {
        from: bool,
        module: String,
        aliases: Vec<&'a str>,
    },
    Definition,
    /// Anything else, with the names its statement holds.
    Other(BTreeSet<String>),
}

struct Reader<'m> {
    m: &'m Module,
    out: Source,
    /// How many definitions of each dotted name were seen.
    seen: HashMap<String, u32>,
    /// Names bound at the module's own level (or by `global` in a function).
    module_level: BTreeSet<String>,
    /// Names bound outside functions otherwise than by imports.
    assigned: BTreeSet<String>,
    /// The functions outside functions, each with its `def` line's end: their bodies are what
    /// the module's tokens leave out.
    outer: Vec<(&'m ast::StmtFunctionDef, usize)>,
}

impl<'m> Reader<'m> {
    fn block(&mut self, body: &'m [Stmt], qual: &[&'m str], scope: Scope) {
        for stmt in python::scope(body) {
            match stmt {
                Stmt::FunctionDef(f) => {
                    self.def(f, stmt, qual, scope);
                    let mut inner = qual.to_vec();
                    inner.push(f.name.as_str());
                    self.block(&f.body, &inner, Scope::Function);
                }
                Stmt::ClassDef(c) => {
                    let class = self.class(c, stmt, qual, scope);
                    let mut inner = qual.to_vec();
                    inner.push(c.name.as_str());
                    let scope = if scope == Scope::Function {
                        Scope::Function
                    } else {
                        Scope::Class(class)
                    };
                    self.block(&c.body, &inner, scope);
                }
                Stmt::Import(i) => {
                    for a in &i.names {
                        self.import(scope, 0, a.name.to_string(), Vec::new(), a);
                    }
                }
                Stmt::ImportFrom(i) if i.names.iter().any(|a| &a.name == "*") => {
                    self.out.imports.push(from_import(i));
                    if scope != Scope::Function {
                        self.out.globals = None;
                    }
                }
                Stmt::ImportFrom(i) => {
                    self.out.imports.push(from_import(i));
                    let module = from_import(i).first_names().pop_first().unwrap_or_default();
                    if scope != Scope::Function {
                        let names: Vec<&str> = i.names.iter().map(python::alias).collect();
                        let aliases = (i.names.iter())
                            .filter_map(|a| a.asname.as_ref().map(|n| n.as_str()))
                            .collect();
                        let how = Binding::Import {
                            from: true,
                            module,
                            aliases,
                        };
                        self.bind(scope, &names, how);
                    }
                }
                // `global X` in a function binds X in the module when the function runs.
                Stmt::Global(g) if scope == Scope::Function => {
                    let names: Vec<String> = g.names.iter().map(|n| n.to_string()).collect();
                    if let Some(globals) = self.out.globals.as_mut() {
                        globals.extend(names.iter().cloned());
                    }
                    self.module_level.extend(names.iter().cloned());
                    self.out.bound_opaquely.extend(names.iter().cloned());
                    self.assigned.extend(names);
                }
                _ if scope != Scope::Function => {
                    let names = python::binds(stmt).unwrap_or_default();
                    let words = words(&self.m.header(stmt), true);
                    self.bind(scope, &names, Binding::Other(words));
                }
                _ => {}
            }
        }
    }

    fn import(
        &mut self,
        scope: Scope,
        level: u32,
        module: String,
        names: Vec<String>,
        a: &'m ast::Alias,
    ) {
        let import = Import {
            level,
            module,
            names,
        };
        let first = import.first_names().pop_first().unwrap_or_default();
        self.out.imports.push(import);
        if scope != Scope::Function {
            let how = Binding::Import {
                from: false,
                module: first,
                aliases: Vec::new(),
            };
            self.bind(scope, &[python::bound_name(a)], how);
        }
    }

    /// Notes the names a statement outside functions binds.
    fn bind(&mut self, scope: Scope, names: &[&str], how: Binding) {
        let owned = || names.iter().map(|n| n.to_string());
        if let Some(globals) = self.out.globals.as_mut() {
            globals.extend(owned());
        }
        match scope {
            Scope::Class(c) => self.out.classes[c].bound.extend(owned()),
            _ => {
                self.module_level.extend(owned());
                match &how {
                    Binding::Import { .. } => self.out.bound_opaquely.extend(owned()),
                    Binding::Other(words) => {
                        for n in owned() {
                            let entry = self.out.assigned_words.entry(n).or_default();
                            entry.extend(words.iter().cloned());
                        }
                    }
                    Binding::Definition => {}
                }
            }
        }
        match how {
            Binding::Import {
                from,
                module,
                aliases,
            } => {
                let (set, out) = (&mut self.out.from_imported, &mut self.out.modules_imported);
                match from {
                    true => set.extend(owned()),
                    false => out.extend(owned()),
                }
                self.out
                    .from_aliases
                    .extend(aliases.into_iter().map(str::to_owned));
                for n in owned() {
                    self.out
                        .imported
                        .entry(n)
                        .or_default()
                        .insert(module.clone());
                }
            }
            _ => self.assigned.extend(owned()),
        }
    }

    /// The key of the next definition of `name` in `qual`.
    fn key(&mut self, qual: &[&str], name: &str) -> (String, u32) {
        let dotted = qual
            .iter()
            .chain([&name])
            .copied()
            .collect::<Vec<_>>()
            .join(".");
        let count = self.seen.entry(dotted.clone()).or_default();
        *count += 1;
        (dotted, *count - 1)
    }

    fn def(&mut self, f: &'m ast::StmtFunctionDef, stmt: &'m Stmt, qual: &[&str], scope: Scope) {
        let (dotted, n) = self.key(qual, f.name.as_str());
        let (tokens, header) = (self.m.tokens_in(f.range), self.m.header(stmt));
        let (start, end) = self.m.span(f);
        self.out.defs.push(Def {
            key: format!("{dotted}#{n}"),
            start,
            end,
            digest: digest(&tokens),
            header: digest(&header),
            words: words(&tokens, true),
            idents: words(&tokens, false),
            // Only a module-level function's cache is a global a test fills.
            pure: scope == Scope::Module && purity::pure(f),
        });
        if scope != Scope::Function {
            self.outer.push((f, header.len()));
            self.bind(scope, &[f.name.as_str()], Binding::Definition);
        }
    }

    fn class(&mut self, c: &ast::StmtClassDef, stmt: &Stmt, qual: &[&str], scope: Scope) -> usize {
        let (dotted, _) = self.key(qual, c.name.as_str());
        let tokens = self.m.tokens_in(c.range);
        let (start, end) = self.m.span(c);
        self.out.classes.push(Class {
            key: dotted,
            start,
            end,
            words: words(&tokens, true),
            header: words(&self.m.header(stmt), true),
            bound: BTreeSet::new(),
            idents: words(&tokens, false),
        });
        if scope != Scope::Function {
            self.bind(scope, &[c.name.as_str()], Binding::Definition);
        }
        self.out.classes.len() - 1
    }

    fn finish(mut self, body: &[Stmt]) -> Source {
        let all = self.m.tokens().unwrap_or_default();
        let api = |t: &Tok| {
            matches!(
                t.unquoted(),
                "cache_info" | "cache_clear" | "cache_parameters"
            )
        };
        self.out.cache_api = (all.iter().enumerate())
            .any(|(i, t)| api(t) && (t.is_string() || i > 0 && all[i - 1].is(".")));
        // The module's tokens: a function outside functions stands as `def NAME`, and its own
        // line (its decorators and signature) still binds names no statement shows.
        let mut module = blake3::Hasher::new();
        let mut dynamic = false;
        let mut i = 0;
        while i < all.len() {
            let at = all[i].range.start();
            let outer = self.outer.iter().find(|(f, _)| f.range.start() == at);
            let (skip, shown) = match outer {
                Some((f, header)) => {
                    module.update(format!("def {}\n", f.name).as_bytes());
                    let end = all[i..].partition_point(|t| t.range.end() <= f.range.end());
                    (end, &all[i..i + header])
                }
                None => {
                    feed(&mut module, &all[i]);
                    (1, &all[i..=i])
                }
            };
            dynamic |= shown
                .iter()
                .any(|t| t.is_name() && DYNAMIC_BIND.contains(&t.text));
            i += skip.max(1);
        }
        if dynamic {
            self.out.globals = None;
        }
        self.out.module = module.finalize();
        // The identifiers of each logical line at the module's own level, definitions aside.
        let definitions: Vec<_> = (python::scope(body).into_iter())
            .filter(|s| matches!(s, Stmt::FunctionDef(_) | Stmt::ClassDef(_)))
            .map(|s| s.range())
            .collect();
        let outside = all
            .iter()
            .filter(|t| !definitions.iter().any(|d| d.contains_range(t.range)));
        let mut line = Vec::new();
        for t in outside.filter(|t| !matches!(t.kind, Kind::Indent | Kind::Dedent)) {
            match t.kind {
                Kind::Newline => self
                    .out
                    .statements
                    .push(words(&std::mem::take(&mut line), false)),
                _ => line.push(*t),
            }
        }
        let out = &mut self.out;
        out.imported.retain(|n, _| !self.assigned.contains(n));
        // A module that binds a builtin's name (`def len(x)`, `from m import sorted`, or names
        // no statement shows) calls its own, not the builtin: no function of it is pure.
        let shadows = self.module_level.iter().any(|n| purity::is_pure_builtin(n));
        if out.globals.is_none() || shadows {
            out.defs.iter_mut().for_each(|d| d.pure = false);
        }
        out.class_only = (out.classes.iter().flat_map(|c| c.bound.iter()))
            .filter(|n| !self.module_level.contains(*n))
            .cloned()
            .collect();
        self.out
    }
}

fn from_import(i: &ast::StmtImportFrom) -> Import {
    Import {
        level: i.level,
        module: i.module.as_ref().map(|m| m.to_string()).unwrap_or_default(),
        names: (i.names.iter())
            .filter(|a| &a.name != "*")
            .map(|a| a.name.to_string())
            .collect(),
    }
}

fn feed(h: &mut blake3::Hasher, t: &Tok) {
    match t.kind {
        Kind::Newline => h.update(b"\n"),
        Kind::Indent => h.update(b"\x01"),
        Kind::Dedent => h.update(b"\x02"),
        _ => h.update(t.text.as_bytes()).update(b"\0"),
    };
}

fn digest(tokens: &[Tok]) -> blake3::Hash {
    let mut h = blake3::Hasher::new();
    tokens.iter().for_each(|t| feed(&mut h, t));
    h.finalize()
}

/// The names `tokens` hold: identifiers and (with `strings`) the words inside strings
/// (`monkeypatch.setattr("pkg.reg.VALUES", ...)`), except the name a `def` or `class` defines
/// and a `getattr` whose attribute is a plain string (`getattr(x, "index", None)` reads
/// `x.index`, whose name the string gives: it is no dynamic read).
fn words(tokens: &[Tok], strings: bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, t) in tokens.iter().enumerate() {
        let defined = i > 0 && (tokens[i - 1].is("def") || tokens[i - 1].is("class"));
        let named_getattr = t.text == "getattr" && getattr_names(&tokens[i + 1..]);
        if t.is_name() && !defined && !named_getattr {
            out.insert(t.text.to_owned());
        }
        if strings && t.is_string() {
            let inner = t.text.split(|c: char| !(c.is_alphanumeric() || c == '_'));
            out.extend(inner.filter(|w| !w.is_empty()).map(str::to_owned));
        }
    }
    out
}

/// Whether the tokens after a `getattr` are a call whose second argument is one plain string
/// literal (no f-string, no concatenation): `(obj, "name")` or `(obj, "name", default)`.
fn getattr_names(after: &[Tok]) -> bool {
    if !after.first().is_some_and(|t| t.is("(")) {
        return false;
    }
    let mut depth = 0usize;
    for (k, t) in after.iter().enumerate() {
        match t.text {
            "(" | "[" | "{" if t.kind == Kind::Op => depth += 1,
            ")" | "]" | "}" if t.kind == Kind::Op => {
                depth -= 1;
                if depth == 0 {
                    return false; // one argument only
                }
            }
            "," if depth == 1 && t.kind == Kind::Op => {
                let plain = (after.get(k + 1))
                    .is_some_and(|a| a.is_string() && !a.text.starts_with(['f', 'F']));
                let next = after.get(k + 2);
                return plain && next.is_some_and(|n| n.is(",") || n.is(")"));
            }
            _ => {}
        }
    }
    false
}

impl Import {
    /// The first name of the module the statement imports from (`""` when relative).
    fn first_names(&self) -> BTreeSet<String> {
        let first = self.module.split('.').next().unwrap_or_default();
        BTreeSet::from([if self.level > 0 { "" } else { first }.to_owned()])
    }

    /// The absolute dotted names this import may load, for a file whose own dotted name is
    /// `me` (`pkg.mod`, or `pkg` for `pkg/__init__.py`, with `package` telling which).
    pub(crate) fn targets(&self, me: &str, package: bool) -> Vec<String> {
        let mut base = String::new();
        if self.level > 0 {
            let mut parts: Vec<&str> = me.split('.').filter(|p| !p.is_empty()).collect();
            let up = if package { self.level - 1 } else { self.level };
            for _ in 0..up {
                parts.pop();
            }
            base = parts.join(".");
        }
        let join = |a: &str, b: &str| match (a.is_empty(), b.is_empty()) {
            (true, _) => b.to_string(),
            (_, true) => a.to_string(),
            _ => format!("{a}.{b}"),
        };
        let module = join(&base, &self.module);
        let mut out = vec![module.clone()];
        out.extend(self.names.iter().map(|n| join(&module, n)));
        out.retain(|m| !m.is_empty());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_import_in_a_one_line_block_binds_and_imports() {
        let s = parse(
            "try: import pkg.helpers as h\nexcept ImportError: h = None\n\
             if TYPE_CHECKING: from pkg.reg import VALUES as V\n",
        );
        let globals = s.globals.clone().unwrap();
        assert!(
            globals.contains("h") && globals.contains("V"),
            "{globals:?}"
        );
        let modules: Vec<&str> = s.imports.iter().map(|i| i.module.as_str()).collect();
        assert_eq!(modules, ["pkg.helpers", "pkg.reg"]);
        assert!(s.modules_imported.contains("h"));
        assert!(s.from_imported.contains("V") && s.from_aliases.contains("V"));
        assert!(s.bound_opaquely.contains("h") && s.bound_opaquely.contains("V"));
    }

    fn keys(s: &Source) -> Vec<(&str, u32, u32)> {
        s.defs
            .iter()
            .map(|d| (d.key.as_str(), d.start, d.end))
            .collect()
    }

    #[test]
    fn spans_start_at_the_first_decorator_and_end_at_the_body() {
        let src = "import os\n\n@a\n@b(\n  1)\ndef f(x):\n    '''doc\n    more'''\n    return x\n\n\nclass C:\n    y = 1\n\n    def m(self):\n        def inner():\n            pass\n        return inner\n\n    async def n(self): return 2\n\nz = 3\n";
        let s = parse(src);
        assert_eq!(
            keys(&s),
            [
                ("f#0", 3, 9),
                ("C.m#0", 15, 18),
                ("C.m.inner#0", 16, 17),
                ("C.n#0", 20, 20)
            ]
        );
    }

    #[test]
    fn comments_and_layout_change_no_digest_and_a_body_change_changes_only_its_function() {
        let a = parse("def f(x):\n    return x + 1\n\ndef g():\n    return [1,\n 2]\n");
        let b =
            parse("# note\ndef f(x):\n    return x + 1  # same\n\n\ndef g():\n    return [1, 2]\n");
        assert_eq!(a.module, b.module);
        assert_eq!(a.defs[0].digest, b.defs[0].digest);
        assert_eq!(a.defs[1].digest, b.defs[1].digest);
        let c = parse("def f(x):\n    return 1 + x\n\ndef g():\n    return [1, 2]\n");
        assert_eq!(a.module, c.module);
        assert_ne!(a.defs[0].digest, c.defs[0].digest);
        assert_eq!(a.defs[1].digest, c.defs[1].digest);
        // A nested function's change is its parent's too.
        let p = parse("def f():\n    def g():\n        return 1\n    return g\n");
        let q = parse("def f():\n    def g():\n        return 2\n    return g\n");
        assert_ne!(p.defs[0].digest, q.defs[0].digest);
        assert_ne!(p.defs[1].digest, q.defs[1].digest);
    }

    #[test]
    fn a_getattr_of_a_plain_string_is_no_dynamic_read() {
        let held = |src: &str| parse(src).defs[0].words.contains("getattr");
        assert!(!held("def f(x):\n    return getattr(x, 'index', None)\n"));
        assert!(!held("def f(x):\n    return getattr(x, \"index\")\n"));
        assert!(held("def f(x, name):\n    return getattr(x, name)\n"));
        assert!(held("def f(x, n):\n    return getattr(x, f'{n}_x')\n"));
        assert!(held("def f(x):\n    return getattr(x, 'a' 'b')\n"));
        assert!(held("def f(x):\n    g = getattr\n    return g(x, 'a')\n"));
        assert!(parse("def f(x):\n    return getattr(x, 'index')\n").defs[0]
            .words
            .contains("index"));
    }

    #[test]
    fn module_level_changes_added_functions_and_class_bodies_change_the_module() {
        let base = parse("X = 1\n\ndef f():\n    return X\n\nclass C:\n    a = 1\n");
        for head in [
            "X = 2\n\ndef f():\n    return X\n\nclass C:\n    a = 1\n",
            "X = 1\n\ndef f():\n    return X\n\ndef g():\n    pass\n\nclass C:\n    a = 1\n",
            "X = 1\n\ndef f():\n    return X\n\nclass C:\n    a = 2\n",
            "import json\nX = 1\n\ndef f():\n    return X\n\nclass C:\n    a = 1\n",
        ] {
            assert_ne!(parse(head).module, base.module, "{head}");
        }
        let strings = parse("s = '''a\n# not a comment\n'''\nt = r'\\'\n");
        assert_ne!(strings.module, parse("s = '''a\n'''\nt = r'\\'\n").module);
    }

    #[test]
    fn imports_are_read_and_resolved_relative_to_the_file() {
        let s = parse(
            "import os.path as p, sys\nfrom . import reg\nfrom ..core import (a,\n  b as c)\ndef f():\n    from pkg.x import y\n",
        );
        let targets: Vec<Vec<String>> = s
            .imports
            .iter()
            .map(|i| i.targets("pkg.sub.mod", false))
            .collect();
        assert_eq!(
            targets,
            [
                vec!["os.path".to_string()],
                vec!["sys".into()],
                vec!["pkg.sub".into(), "pkg.sub.reg".into()],
                vec!["pkg.core".into(), "pkg.core.a".into(), "pkg.core.b".into()],
                vec!["pkg.x".into(), "pkg.x.y".into()],
            ]
        );
        assert_eq!(
            s.imports[2].targets("pkg", true),
            ["pkg".to_string(), "pkg.reg".into()]
        );
    }
}
