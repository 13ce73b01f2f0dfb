//! Python source as the footprint reads it: tokens without comments and layout, the spans of
//! functions and methods (from the first decorator to the end of the body, as CPython numbers a
//! code object's first line), the module-level tokens, and the imports.
//!
//! A tokenizer, not a parser: strings (with their prefixes, triple quotes and escapes),
//! comments, brackets, backslash continuations and indentation are enough to find logical
//! lines and blocks. What it cannot read (an unterminated string) it reads to the end of the
//! file, which only makes a span larger.

use std::collections::{BTreeMap, BTreeSet};

mod purity;

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
    /// A digest of its decorators and its `def` statement (the signature, defaults
    /// included): what runs where it is defined, not when it is called.
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

/// An `import` or `from ... import` statement, anywhere in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Import {
    /// Leading dots of a relative import (0: absolute).
    pub(crate) level: usize,
    /// The module named (`a.b` of `import a.b` or `from a.b import c`; empty for `from . import c`).
    pub(crate) module: String,
    /// The names a `from` import takes (each may be a submodule); empty for `import`.
    pub(crate) names: Vec<String>,
}

/// What the footprint compares of one file.
#[derive(Clone, Debug)]
pub(crate) struct Source {
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
    /// `__getattr__`).
    pub(crate) globals: Option<BTreeSet<String>>,
    /// The names of `globals` that only imports bind, each with the first name of every
    /// module its statements import (`""` for a relative import): a name bound by importing
    /// from outside the repository holds nothing of it.
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
    /// The identifiers of each statement at the module's own level (definitions aside), whether
    /// it binds a name or not: `ALIASES.setdefault("d", _REG)` puts what one holds in another.
    pub(crate) statements: Vec<BTreeSet<String>>,
    /// Whether its code reads or resets a cache's own state (`f.cache_info()`,
    /// `.cache_clear()`, `.cache_parameters()`, or those names in a string, for `getattr`).
    pub(crate) cache_api: bool,
}

#[derive(Clone, Debug)]
struct Token<'a> {
    text: &'a str,
    line: u32,
}

/// A logical line: its indentation, its tokens, its first and last physical line.
#[derive(Debug)]
struct Logical<'a> {
    indent: usize,
    tokens: Vec<Token<'a>>,
    last: u32,
}

fn logical_lines(text: &str) -> Vec<Logical<'_>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0usize, 1u32);
    let mut cur: Vec<Token> = Vec::new();
    let mut indent = 0usize;
    let mut at_line_start = true;
    let mut depth = 0usize;
    let mut last = 1u32;
    while i < b.len() {
        let c = b[i];
        if at_line_start {
            let mut col = 0;
            while i < b.len() && (b[i] == b' ' || b[i] == b'\t' || b[i] == b'\x0c') {
                col += if b[i] == b'\t' { 8 - col % 8 } else { 1 };
                i += 1;
            }
            if i >= b.len() {
                break;
            }
            if b[i] == b'\n' || b[i] == b'#' || b[i] == b'\r' {
                at_line_start = b[i] == b'\n';
                if b[i] == b'\n' {
                    line += 1;
                    i += 1;
                }
                if i < b.len() && b[i] == b'#' {
                    at_line_start = false;
                }
                continue;
            }
            indent = col;
            at_line_start = false;
            continue;
        }
        match c {
            b'\n' => {
                line += 1;
                i += 1;
                if depth == 0 && !cur.is_empty() {
                    out.push(Logical {
                        indent,
                        tokens: std::mem::take(&mut cur),
                        last,
                    });
                }
                if depth == 0 {
                    at_line_start = true;
                }
            }
            b' ' | b'\t' | b'\r' | b'\x0c' => i += 1,
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'\\' if b.get(i + 1) == Some(&b'\n') => {
                i += 2;
                line += 1;
            }
            b'\\' if b.get(i + 1) == Some(&b'\r') && b.get(i + 2) == Some(&b'\n') => {
                i += 3;
                line += 1;
            }
            _ => {
                let start = i;
                let first = line;
                if let Some(end) = string_end(b, i, &mut line) {
                    i = end;
                } else if c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80 {
                    while i < b.len()
                        && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80)
                    {
                        i += 1;
                    }
                    // A number's fraction or exponent stays one token.
                    if c.is_ascii_digit() {
                        while i < b.len()
                            && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_')
                        {
                            i += 1;
                        }
                    }
                } else {
                    match c {
                        b'(' | b'[' | b'{' => depth += 1,
                        b')' | b']' | b'}' => depth = depth.saturating_sub(1),
                        _ => {}
                    }
                    i += 1;
                    // Text boundaries: `i` may sit inside a multi-byte character only after a
                    // byte >= 0x80, which the name branch consumes; punctuation is ASCII.
                }
                last = line;
                cur.push(Token {
                    text: &text[start..i],
                    line: first,
                });
            }
        }
    }
    if !cur.is_empty() {
        out.push(Logical {
            indent,
            tokens: cur,
            last,
        });
    }
    out
}

/// The end of a string literal starting at `i` (with its prefix), counting the newlines inside
/// it; `None` when no string starts there.
fn string_end(b: &[u8], i: usize, line: &mut u32) -> Option<usize> {
    let mut j = i;
    while j < b.len() && j - i < 3 && b"rRbBuUfF".contains(&b[j]) {
        j += 1;
    }
    if j >= b.len() || (b[j] != b'\'' && b[j] != b'"') {
        return None;
    }
    if j > i && !b[i..j].iter().all(|c| b"rRbBuUfF".contains(c)) {
        return None;
    }
    let raw = b[i..j].iter().any(|c| *c == b'r' || *c == b'R');
    let q = b[j];
    let triple = b.get(j + 1) == Some(&q) && b.get(j + 2) == Some(&q);
    let mut k = if triple { j + 3 } else { j + 1 };
    while k < b.len() {
        let c = b[k];
        if c == b'\\' && !raw {
            if b.get(k + 1) == Some(&b'\n') {
                *line += 1;
            }
            k += 2;
            continue;
        }
        if c == b'\\' && raw {
            k += 2;
            continue;
        }
        if c == b'\n' {
            *line += 1;
            if !triple {
                return Some(k);
            }
        }
        if c == q {
            if !triple {
                return Some(k + 1);
            }
            if b.get(k + 1) == Some(&q) && b.get(k + 2) == Some(&q) {
                return Some(k + 3);
            }
        }
        k += 1;
    }
    Some(b.len())
}

fn is_def(tokens: &[Token]) -> Option<(bool, String)> {
    let (first, rest) = tokens.split_first()?;
    let (keyword, rest) = match first.text {
        "async" => (rest.first()?.text, &rest[1..]),
        t => (t, rest),
    };
    let name = rest.first()?.text.to_string();
    match keyword {
        "def" => Some((true, name)),
        "class" => Some((false, name)),
        _ => None,
    }
}

/// An open block while reading: a function (with the digest of its tokens so far) or a class.
struct Open {
    indent: usize,
    name: String,
    /// The function's index in `defs` and its hasher; `None` for a class.
    def: Option<(usize, blake3::Hasher)>,
    /// The class's index in `classes`; `None` for a function.
    class: Option<usize>,
    /// Its words so far.
    words: BTreeSet<String>,
    /// Its identifiers so far.
    idents: BTreeSet<String>,
    /// What a function's code reads so far; `None` for a class.
    purity: Option<purity::Purity>,
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

/// The names a statement's tokens hold: identifiers, and the words inside strings
/// (`monkeypatch.setattr("pkg.reg.VALUES", ...)`), except the name a `def` or `class` defines
/// and a `getattr` whose attribute is a plain string (`getattr(x, "index", None)` reads
/// `x.index`, whose name the string gives: it is no dynamic read).
fn words<'a>(tokens: &'a [Token<'a>]) -> impl Iterator<Item = &'a str> {
    tokens.iter().enumerate().flat_map(move |(i, t)| {
        let string = is_string(t.text);
        let defined = i > 0 && matches!(tokens[i - 1].text, "def" | "class");
        let named_getattr = t.text == "getattr" && getattr_names(&tokens[i + 1..]);
        let whole = (is_name(t.text)
            && !string
            && !defined
            && !named_getattr
            && !KEYWORDS.contains(&t.text))
        .then_some(t.text);
        let inner = string
            .then(|| {
                t.text
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .filter(|w| !w.is_empty())
            })
            .into_iter()
            .flatten();
        whole.into_iter().chain(inner)
    })
}

/// Whether the tokens after a `getattr` are a call whose second argument is one plain string
/// literal (no f-string, no concatenation): `(obj, "name")` or `(obj, "name", default)`.
fn getattr_names(after: &[Token]) -> bool {
    if after.first().map(|t| t.text) != Some("(") {
        return false;
    }
    let mut depth = 0usize;
    for (k, t) in after.iter().enumerate() {
        match t.text {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return false; // one argument only
                }
            }
            "," if depth == 1 => {
                let attr = after.get(k + 1).map(|t| t.text).unwrap_or_default();
                let next = after.get(k + 2).map(|t| t.text);
                let prefix = attr.chars().take_while(|c| !matches!(c, '\'' | '"'));
                let plain = is_string(attr) && !prefix.into_iter().any(|c| matches!(c, 'f' | 'F'));
                return plain && matches!(next, Some("," | ")"));
            }
            _ => {}
        }
    }
    false
}

/// The identifiers of `tokens`: [`words`] without those inside strings.
fn idents<'a>(tokens: &'a [Token<'a>]) -> impl Iterator<Item = &'a str> {
    tokens.iter().enumerate().filter_map(move |(i, t)| {
        let defined = i > 0 && matches!(tokens[i - 1].text, "def" | "class");
        (is_name(t.text) && !is_string(t.text) && !defined && !KEYWORDS.contains(&t.text))
            .then_some(t.text)
    })
}

/// The names an import statement binds with `as` (`y` of `from m import x as y`).
fn aliases<'a>(tokens: &'a [Token<'a>]) -> impl Iterator<Item = &'a str> {
    tokens
        .windows(2)
        .filter(|w| w[0].text == "as")
        .map(|w| w[1].text)
}

/// Whether a token is a name (an identifier or a keyword; a string with a prefix too, which
/// [`is_string`] tells apart).
fn is_name(text: &str) -> bool {
    let b = text.as_bytes()[0];
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

/// A cache's own state: what it holds (`cache_info`) and its reset.
fn cache_api_name(name: &str) -> bool {
    matches!(name, "cache_info" | "cache_clear" | "cache_parameters")
}

/// A token without its string prefix (`rb'x'` is `'x'`).
fn unprefixed(text: &str) -> &str {
    text.trim_start_matches(|c: char| "rRbBuUfF".contains(c))
}

/// Whether a token is a string literal (with its prefix).
fn is_string(text: &str) -> bool {
    unprefixed(text).starts_with(['\'', '"'])
}

/// Python's keywords: no name any code reaches a value by.
const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// The names a statement outside functions binds, or `None` when it binds names it does not
/// show (`from m import *`): a definition's, an import's (`import a.b` binds `a`; `as` binds
/// its alias), those of `global`, `nonlocal` and `del`, and the targets left of a top-level `=`
/// (or `:=`, `+=`, an annotation), of `for` and of `as`. Over-approximate: every name of a
/// target (`d[k] = v` gives `d` and `k`).
fn bound<'a>(tokens: &'a [Token<'a>]) -> Option<Vec<&'a str>> {
    let name = |t: &Token| is_name(t.text) && !is_string(t.text) && !KEYWORDS.contains(&t.text);
    // `try: import x`: what the header binds (`with a as b:`), then what the import does.
    if let Some(body) = one_line_import(tokens) {
        let header = &tokens[..tokens.len() - body.len()];
        let mut out: Vec<&str> = header.iter().filter(|t| name(t)).map(|t| t.text).collect();
        out.extend(bound(body)?);
        return Some(out);
    }
    let texts: Vec<&str> = tokens.iter().map(|t| t.text).collect();
    match texts[0] {
        "def" | "class" => return Some(texts.get(1).copied().into_iter().collect()),
        "async" => return Some(texts.get(2).copied().into_iter().collect()),
        "global" | "nonlocal" | "del" => {
            return Some(
                tokens[1..]
                    .iter()
                    .filter(|t| name(t))
                    .map(|t| t.text)
                    .collect(),
            )
        }
        "import" | "from" => {
            if texts.contains(&"*") {
                return None;
            }
            // Each clause binds its alias, or for `import a.b` its first name, for `from m
            // import a` its name.
            let start = match texts[0] {
                "import" => 1,
                _ => texts.iter().position(|t| *t == "import")? + 1,
            };
            let mut out = Vec::new();
            for clause in texts[start..].split(|t| *t == ",") {
                let clause: Vec<&str> = clause
                    .iter()
                    .copied()
                    .filter(|t| !matches!(*t, "(" | ")"))
                    .collect();
                match clause.iter().position(|t| *t == "as") {
                    Some(k) => out.extend(clause.get(k + 1).copied()),
                    None => out.extend(clause.first().copied()),
                }
            }
            return Some(out);
        }
        _ => {}
    }
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut after_for = false;
    for (i, t) in tokens.iter().enumerate() {
        match t.text {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth = depth.saturating_sub(1),
            _ => {}
        }
        let prev = i.checked_sub(1).map(|p| tokens[p].text);
        let next = tokens.get(i + 1).map(|n| n.text);
        // `x = 1`, `x += 1`, `x: int = 1`, `(y := f())`, not `==`, `<=`, `>=`, `!=`.
        let assigns =
            t.text == "=" && !matches!(prev, Some("=" | "<" | ">" | "!")) && next != Some("=");
        if assigns && (depth == 0 || prev == Some(":")) {
            out.extend(tokens[..i].iter().filter(|t| name(t)).map(|t| t.text));
        }
        // An annotation without a value (`x: int`), or a one-line block (`if x: y = 1`).
        if depth == 0 && t.text == ":" && next.is_some() {
            out.extend(tokens[..i].iter().filter(|t| name(t)).map(|t| t.text));
        }
        if t.text == "for" {
            after_for = true;
        } else if t.text == "in" {
            after_for = false;
        } else if after_for && name(t) {
            out.push(t.text);
        }
        if prev == Some("as") && name(t) {
            out.push(t.text);
        }
    }
    Some(out)
}

fn feed(h: &mut blake3::Hasher, tokens: &[Token]) {
    for t in tokens {
        h.update(t.text.as_bytes());
        h.update(b"\0");
    }
    h.update(b"\n");
}

/// Reads one file.
pub(crate) fn parse(text: &str) -> Source {
    let lines = logical_lines(text);
    let mut defs: Vec<Def> = Vec::new();
    let mut module = blake3::Hasher::new();
    let mut imports = Vec::new();
    let mut open: Vec<Open> = Vec::new();
    let mut seen: std::collections::HashMap<String, u32> = Default::default();
    let mut decorators: Vec<usize> = Vec::new();
    let mut prev_last = 0u32;
    let mut globals: Option<BTreeSet<String>> = Some(BTreeSet::new());
    let mut classes: Vec<Class> = Vec::new();
    // Names bound outside functions by statements other than imports, and by imports (with
    // the modules they import from).
    let mut assigned: BTreeSet<String> = BTreeSet::new();
    let mut imported: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut from_imported: BTreeSet<String> = BTreeSet::new();
    let mut modules_imported: BTreeSet<String> = BTreeSet::new();
    let mut from_aliases: BTreeSet<String> = BTreeSet::new();
    // Names bound at the module's own level (or by `global` in a function).
    let mut module_level: BTreeSet<String> = BTreeSet::new();
    let mut assigned_words: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut bound_opaquely: BTreeSet<String> = BTreeSet::new();
    let mut statements: Vec<BTreeSet<String>> = Vec::new();
    let close = |o: Open, defs: &mut Vec<Def>, classes: &mut Vec<Class>, last: u32| {
        if let Some((d, h)) = o.def {
            defs[d].end = last.max(defs[d].start);
            defs[d].digest = h.finalize();
            defs[d].words = o.words;
            defs[d].idents = o.idents;
            defs[d].pure = o.purity.is_some_and(|p| p.pure());
        } else if let Some(c) = o.class {
            classes[c].end = last.max(classes[c].start);
            classes[c].words = o.words;
            classes[c].idents = o.idents;
        }
    };
    let mut cache_api = false;
    for (n, l) in lines.iter().enumerate() {
        cache_api |= l
            .tokens
            .iter()
            .enumerate()
            .any(|(i, t)| match is_string(t.text) {
                true => cache_api_name(unprefixed(t.text).trim_matches(['\'', '"'])),
                false => i > 0 && l.tokens[i - 1].text == "." && cache_api_name(t.text),
            });
        while open.last().is_some_and(|o| l.indent <= o.indent) {
            let o = open.pop().expect("checked");
            close(o, &mut defs, &mut classes, prev_last);
        }
        let import = read_import(&l.tokens);
        if let Some(import) = &import {
            imports.push(import.clone());
        }
        if l.tokens[0].text == "@" {
            decorators.push(n);
            prev_last = l.last;
            continue;
        }
        let decorated = std::mem::take(&mut decorators);
        let header = is_def(&l.tokens);
        let in_function = open.iter().any(|o| o.def.is_some());
        // The statement's tokens (its decorators first) go to every enclosing function, or,
        // outside functions, to the module; a function's own statement stands in the module
        // as one token.
        let mut statement: Vec<Token> = Vec::new();
        for &d in &decorated {
            statement.extend(lines[d].tokens.iter().cloned());
        }
        statement.extend(l.tokens.iter().cloned());
        for o in open.iter_mut() {
            if let Some((_, h)) = o.def.as_mut() {
                feed(h, &statement);
            }
            o.words.extend(words(&statement).map(str::to_owned));
            o.idents.extend(idents(&statement).map(str::to_owned));
            if let Some(p) = o.purity.as_mut() {
                p.statement(&statement);
            }
        }
        // `global X` in a function binds X in the module when the function runs.
        if in_function && l.tokens[0].text == "global" {
            if let (Some(g), Some(names)) = (globals.as_mut(), bound(&l.tokens)) {
                g.extend(names.iter().map(|n| n.to_string()));
                module_level.extend(names.iter().map(|n| n.to_string()));
                bound_opaquely.extend(names.iter().map(|n| n.to_string()));
                assigned.extend(names.into_iter().map(str::to_owned));
            }
        }
        if open.is_empty() && header.is_none() {
            statements.push(idents(&statement).map(str::to_owned).collect());
        }
        if !in_function {
            if statement.iter().any(|t| DYNAMIC_BIND.contains(&t.text)) {
                globals = None;
            }
            match bound(&l.tokens) {
                Some(names) => {
                    if let Some(g) = globals.as_mut() {
                        g.extend(names.iter().map(|n| n.to_string()));
                    }
                    // Outside functions, every open block is a class: the innermost binds.
                    match open.last().and_then(|o| o.class) {
                        Some(c) => classes[c].bound.extend(names.iter().map(|n| n.to_string())),
                        None => {
                            module_level.extend(names.iter().map(|n| n.to_string()));
                            match (&import, &header) {
                                (Some(_), _) => {
                                    bound_opaquely.extend(names.iter().map(|n| n.to_string()))
                                }
                                (None, None) => {
                                    for n in &names {
                                        assigned_words
                                            .entry(n.to_string())
                                            .or_default()
                                            .extend(words(&statement).map(str::to_owned));
                                    }
                                }
                                // A definition's value is its own text (`Source::defs`,
                                // `Source::classes`).
                                (None, Some(_)) => {}
                            }
                        }
                    }
                    match &import {
                        Some(import) => {
                            let statement = one_line_import(&l.tokens).unwrap_or(&l.tokens);
                            if statement[0].text == "from" {
                                from_imported.extend(names.iter().map(|n| n.to_string()));
                                from_aliases.extend(aliases(statement).map(str::to_owned));
                            } else {
                                modules_imported.extend(names.iter().map(|n| n.to_string()));
                            }
                            let from = import.first_names();
                            for n in names {
                                imported
                                    .entry(n.to_owned())
                                    .or_default()
                                    .extend(from.iter().cloned());
                            }
                        }
                        None => assigned.extend(names.into_iter().map(str::to_owned)),
                    }
                }
                None => globals = None,
            }
        }
        match (&header, in_function) {
            (Some((true, name)), false) => {
                module.update(format!("def {name}\n").as_bytes());
            }
            (_, false) => feed(&mut module, &statement),
            _ => {}
        }
        if let Some((is_function, name)) = header {
            let mut qual: Vec<&str> = open.iter().map(|o| o.name.as_str()).collect();
            qual.push(&name);
            let qual = qual.join(".");
            let count = seen.entry(qual.clone()).or_default();
            let key = format!("{qual}#{count}");
            *count += 1;
            let def = is_function.then(|| {
                let mut h = blake3::Hasher::new();
                feed(&mut h, &statement);
                let mut header = blake3::Hasher::new();
                feed(&mut header, &statement);
                defs.push(Def {
                    key,
                    start: statement[0].line,
                    end: l.last,
                    digest: blake3::hash(b""),
                    header: header.finalize(),
                    words: BTreeSet::new(),
                    idents: BTreeSet::new(),
                    pure: false,
                });
                (defs.len() - 1, h)
            });
            let class = (!is_function).then(|| {
                classes.push(Class {
                    key: qual,
                    start: statement[0].line,
                    end: l.last,
                    words: BTreeSet::new(),
                    header: words(&statement).map(str::to_owned).collect(),
                    bound: BTreeSet::new(),
                    idents: BTreeSet::new(),
                });
                classes.len() - 1
            });
            let block = Open {
                indent: l.indent,
                name,
                def,
                class,
                words: words(&statement).map(str::to_owned).collect(),
                idents: idents(&statement).map(str::to_owned).collect(),
                // Only a module-level function's cache is a global a test fills.
                purity: (is_function && open.is_empty()).then(|| purity::Purity::new(&statement)),
            };
            // `def f(): return 1` has no indented body.
            if l.tokens.last().is_some_and(|t| t.text == ":") {
                open.push(block);
            } else {
                close(block, &mut defs, &mut classes, l.last);
            }
        }
        prev_last = l.last;
    }
    while let Some(o) = open.pop() {
        close(o, &mut defs, &mut classes, prev_last);
    }
    imported.retain(|n, _| !assigned.contains(n));
    // A module that binds a builtin's name (`def len(x)`, `from m import sorted`, or names no
    // statement shows) calls its own, not the builtin: no function of it is called pure.
    let shadows = |n: &String| purity::PURE_BUILTINS.contains(&n.as_str());
    if globals.is_none() || module_level.iter().any(shadows) {
        for d in &mut defs {
            d.pure = false;
        }
    }
    let class_only = (classes.iter().flat_map(|c| c.bound.iter()))
        .filter(|n| !module_level.contains(*n))
        .cloned()
        .collect();
    Source {
        defs,
        classes,
        module: module.finalize(),
        imports,
        globals,
        imported,
        from_imported,
        modules_imported,
        from_aliases,
        class_only,
        assigned_words,
        bound_opaquely,
        statements,
        cache_api,
    }
}

/// The import a logical line makes, if it is one.
/// The import a one-line compound statement makes after its header (`try: import x`,
/// `if TYPE_CHECKING: from a import b`), if it is one.
fn one_line_import<'a, 'b>(tokens: &'b [Token<'a>]) -> Option<&'b [Token<'a>]> {
    const HEADERS: &[&str] = &[
        "try", "else", "finally", "if", "elif", "while", "for", "with", "except", "async",
    ];
    if !HEADERS.contains(&tokens.first()?.text) {
        return None;
    }
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate() {
        match t.text {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth = depth.saturating_sub(1),
            ":" if depth == 0 => {
                let body = &tokens[i + 1..];
                return matches!(body.first()?.text, "import" | "from").then_some(body);
            }
            _ => {}
        }
    }
    None
}

fn read_import(tokens: &[Token]) -> Option<Import> {
    if let Some(body) = one_line_import(tokens) {
        return read_import(body);
    }
    let texts: Vec<&str> = tokens.iter().map(|t| t.text).collect();
    match *texts.first()? {
        "import" => {
            // `import a.b as c, d`: the first dotted name of each clause.
            let mut modules = Vec::new();
            let mut current = String::new();
            let mut skipping = false;
            for t in &texts[1..] {
                match *t {
                    "," => {
                        if !current.is_empty() {
                            modules.push(std::mem::take(&mut current));
                        }
                        skipping = false;
                    }
                    "as" => skipping = true,
                    "(" | ")" => {}
                    t if !skipping => current.push_str(t),
                    _ => {}
                }
            }
            if !current.is_empty() {
                modules.push(current);
            }
            // Several modules: one import each is what the caller needs; keep the first here
            // and the rest as names of an absolute import of "" (resolved one by one).
            let first = modules.first()?.clone();
            Some(Import {
                level: 0,
                module: first,
                names: modules[1..].iter().map(|m| format!("\0{m}")).collect(),
            })
        }
        "from" => {
            let mut k = 1;
            let mut level = 0;
            while k < texts.len() && (texts[k] == "." || texts[k] == "...") {
                level += texts[k].len();
                k += 1;
            }
            let mut module = String::new();
            while k < texts.len() && texts[k] != "import" {
                module.push_str(texts[k]);
                k += 1;
            }
            let mut names = Vec::new();
            let mut skipping = false;
            for t in texts.get(k + 1..).unwrap_or_default() {
                match *t {
                    "," => skipping = false,
                    "as" => skipping = true,
                    "(" | ")" | "*" => {}
                    t if !skipping => names.push(t.to_string()),
                    _ => {}
                }
            }
            Some(Import {
                level,
                module,
                names,
            })
        }
        _ => None,
    }
}

impl Import {
    /// The first name of every module the statement imports from (`""` when relative).
    fn first_names(&self) -> BTreeSet<String> {
        if self.level > 0 {
            return BTreeSet::from([String::new()]);
        }
        let first = |m: &str| m.split('.').next().unwrap_or_default().to_owned();
        let mut out = BTreeSet::from([first(&self.module)]);
        // `import a, b`: the further modules are names marked with a NUL (read_import).
        out.extend(
            self.names
                .iter()
                .filter_map(|n| n.strip_prefix('\0'))
                .map(first),
        );
        out
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
        for n in &self.names {
            match n.strip_prefix('\0') {
                Some(other) => out.push(other.to_string()),
                None => out.push(join(&module, n)),
            }
        }
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
                vec!["os.path".to_string(), "sys".into()],
                vec!["pkg.sub".into(), "pkg.sub.reg".into()],
                vec!["pkg.core".into(), "pkg.core.a".into(), "pkg.core.b".into()],
                vec!["pkg.x".into(), "pkg.x.y".into()],
            ]
        );
        assert_eq!(
            s.imports[1].targets("pkg", true),
            ["pkg".to_string(), "pkg.reg".into()]
        );
    }
}
