//! One Python source model: every reader of Python source (the footprint and what code reaches,
//! the test-edit rule, renamed tests, the source-side tricks, `fixgate init`'s edits) reads a
//! [`Module`], parsed once by ruff's parser (docs/design.md, "Reading Python").
//!
//! A module gives its statements (ruff's syntax tree, with byte ranges), its tokens without
//! trivia (no comment, no layout; a logical line's end and a block's indent and dedent stand as
//! tokens, an f-string or t-string is one literal), its lines, and each definition's span as
//! CPython numbers a code object's lines: from its first decorator to its body's last token.
//!
//! Source that does not parse (a syntax error, a truncated file, an unterminated string, tabs
//! and spaces mixed so that the blocks are ambiguous, a NUL byte, nesting deeper than
//! [`MAX_DEPTH`]) has no statements: each reader takes it as changed, never as unchanged.

pub(crate) mod purity;

use ruff_python_ast::statement_visitor::{walk_stmt, StatementVisitor};
use ruff_python_ast::token::TokenKind;
use ruff_python_ast::visitor::{walk_expr, Visitor};
pub(crate) use ruff_python_ast::{self as ast, Stmt};
use ruff_python_parser::lexer;
use ruff_python_parser::Mode;
use ruff_source_file::LineIndex;
pub(crate) use ruff_text_size::{Ranged, TextRange};

/// How deep a syntax tree may nest (an estimate from the tokens, see [`too_deep`]) before the
/// source counts as unreadable. CPython gives up between 1,000 and 3,000 levels ("too complex",
/// a recursion error while compiling); what nests deeper runs nowhere. The bound keeps every
/// walk of the tree, and its drop, off the end of the stack.
pub(crate) const MAX_DEPTH: usize = 2_000;

/// How many blocks may nest: CPython's own limit ("too many levels of indentation").
const MAX_BLOCKS: usize = 100;

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An identifier, or a soft keyword (`match`, `case`, `type`: names elsewhere).
    Name,
    Keyword,
    /// A number or a string (its prefix and quotes included; an f-string with its fields).
    Literal,
    Op,
    /// The end of a logical line.
    Newline,
    Indent,
    Dedent,
}

/// One token of a [`Module`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tok<'a> {
    pub(crate) kind: Kind,
    pub(crate) text: &'a str,
    pub(crate) range: TextRange,
}

impl Tok<'_> {
    /// An identifier that names something (no keyword).
    pub(crate) fn is_name(&self) -> bool {
        self.kind == Kind::Name
    }

    /// A string literal, with any prefix (`rb'x'`, `f"{x}"`).
    pub(crate) fn is_string(&self) -> bool {
        self.kind == Kind::Literal && self.text.ends_with(['\'', '"'])
    }

    /// What a string literal holds between its quotes (the token itself otherwise).
    pub(crate) fn unquoted(&self) -> &str {
        match self.is_string() {
            true => (self
                .text
                .trim_start_matches(|c: char| c.is_ascii_alphabetic()))
            .trim_matches(['\'', '"']),
            false => self.text,
        }
    }

    /// Whether it is the operator or keyword `text`.
    pub(crate) fn is(&self, text: &str) -> bool {
        matches!(self.kind, Kind::Op | Kind::Keyword) && self.text == text
    }
}

/// One Python source, parsed.
pub(crate) struct Module {
    text: String,
    /// `None`: it does not parse.
    body: Option<Vec<Stmt>>,
    /// `None`: nested too deep to read at all.
    tokens: Option<Vec<(Kind, TextRange)>>,
    lines: LineIndex,
}

impl Module {
    pub(crate) fn parse(text: &str) -> Module {
        deep(|| {
            let lines = LineIndex::from_source_text(text);
            if too_deep(text) {
                let text = text.to_owned();
                let (body, tokens) = (None, None);
                return Module {
                    text,
                    body,
                    tokens,
                    lines,
                };
            }
            let parsed =
                ruff_python_parser::parse_unchecked_source(text, ast::PySourceType::Python);
            let tokens = tokens(parsed.tokens());
            // What a version of Python has not (or no longer) is syntax all the same: which one runs
            // the suite is the interpreter's to say.
            let body = (parsed.errors().is_empty() && tabs_consistent(text, &tokens))
                .then(|| parsed.into_syntax().body.into());
            let tokens = Some(tokens);
            Module {
                text: text.to_owned(),
                body,
                tokens,
                lines,
            }
        })
    }

    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Its statements; `None` when it does not parse.
    pub(crate) fn body(&self) -> Option<&[Stmt]> {
        self.body.as_deref()
    }

    /// Every token; `None` when it nests too deep to read ([`MAX_DEPTH`]).
    pub(crate) fn tokens(&self) -> Option<Vec<Tok<'_>>> {
        let all = self.tokens.as_ref()?;
        Some(
            all.iter()
                .map(|&(kind, range)| self.tok(kind, range))
                .collect(),
        )
    }

    /// The tokens within `range`. A dedent (or the last line's end) where a statement starts or
    /// ends belongs to what is around it: none is at the edge of a range.
    pub(crate) fn tokens_in(&self, range: TextRange) -> Vec<Tok<'_>> {
        let all = self.tokens.as_deref().unwrap_or_default();
        let from = all.partition_point(|(_, r)| r.start() < range.start());
        let edge =
            |r: &TextRange| r.is_empty() && [range.start(), range.end()].contains(&r.start());
        (all[from..].iter())
            .take_while(|(_, r)| r.start() <= range.end())
            .filter(|(_, r)| r.end() <= range.end() && !edge(r))
            .map(|&(kind, range)| self.tok(kind, range))
            .collect()
    }

    /// The range of the whole source.
    pub(crate) fn range(&self) -> TextRange {
        TextRange::up_to(ruff_text_size::TextSize::of(self.text.as_str()))
    }

    fn tok(&self, kind: Kind, range: TextRange) -> Tok<'_> {
        let text = &self.text[range];
        Tok { kind, text, range }
    }

    /// The 1-based line of a byte offset.
    pub(crate) fn line(&self, offset: ruff_text_size::TextSize) -> u32 {
        self.lines.line_index(offset).get() as u32
    }

    /// The first and last lines of a node (a definition's from its first decorator).
    pub(crate) fn span(&self, node: impl Ranged) -> (u32, u32) {
        (self.line(node.start()), self.line(node.end()))
    }

    /// A statement's first logical line (its decorators too): a definition's or a compound
    /// statement's header, all of a simple statement.
    pub(crate) fn header(&self, stmt: &Stmt) -> Vec<Tok<'_>> {
        let tokens = self.tokens_in(stmt.range());
        let keyword = match stmt {
            Stmt::FunctionDef(_) | Stmt::ClassDef(_) => tokens
                .iter()
                .position(|t| t.is("def") || t.is("class"))
                .unwrap_or(0),
            _ => 0,
        };
        let end = (tokens[keyword..]
            .iter()
            .position(|t| t.kind == Kind::Newline))
        .map_or(tokens.len(), |n| keyword + n);
        tokens[..end].to_vec()
    }

    /// The source lines `first..=last` (1-based), each as written.
    pub(crate) fn lines(&self, first: u32, last: u32) -> impl Iterator<Item = &str> {
        let count = last.saturating_sub(first) as usize + 1;
        (self.text.lines())
            .skip(first.saturating_sub(1) as usize)
            .take(count)
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let body = self.body.take();
        deep(|| drop(body));
    }
}

/// Runs `f`, a walk of a syntax tree (or its drop) that recurses once a level, on a stack with
/// room for [`MAX_DEPTH`] levels of it: 32 KiB a level, where a debug build takes about 2 (a
/// thread's default stack of 2 MiB holds about 1,000). A walk of the blocks alone needs none:
/// they nest [`MAX_BLOCKS`] deep at most.
pub(crate) fn deep<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(32 << 20, 64 << 20, f)
}

/// The tokens of a parse without trivia: comments and line breaks inside brackets go, an f- or
/// t-string becomes one literal.
fn tokens(all: &ast::token::Tokens) -> Vec<(Kind, TextRange)> {
    let mut out = Vec::new();
    let mut string: Vec<TextRange> = Vec::new(); // the open f- and t-strings
    for t in all.iter() {
        let kind = match t.kind() {
            TokenKind::FStringStart | TokenKind::TStringStart => {
                string.push(t.range());
                continue;
            }
            TokenKind::FStringEnd | TokenKind::TStringEnd => {
                let start = string.pop().unwrap_or(t.range());
                if string.is_empty() {
                    out.push((Kind::Literal, start.cover(t.range())));
                }
                continue;
            }
            _ if !string.is_empty() => continue,
            TokenKind::Comment | TokenKind::NonLogicalNewline | TokenKind::EndOfFile => continue,
            TokenKind::Newline => Kind::Newline,
            TokenKind::Indent => Kind::Indent,
            TokenKind::Dedent => Kind::Dedent,
            TokenKind::Name => Kind::Name,
            k if k.is_soft_keyword() => Kind::Name,
            k if k.is_keyword() => Kind::Keyword,
            TokenKind::Int | TokenKind::Float | TokenKind::Complex | TokenKind::String => {
                Kind::Literal
            }
            _ => Kind::Op,
        };
        out.push((kind, t.range()));
    }
    // A string left open (a parse error) stands as one literal to the end.
    if let (Some(start), Some(last)) = (string.first(), all.last()) {
        out.push((Kind::Literal, start.cover(last.range())));
    }
    out
}

/// Whether each logical line's indentation compares with the blocks open the same way when a tab
/// is 8 columns and when it is 1, as CPython requires (a `TabError` otherwise). Ruff's lexer
/// counts a tab as 2 columns, which takes `\tif x:` then eight spaces for a deeper block.
fn tabs_consistent(text: &str, tokens: &[(Kind, TextRange)]) -> bool {
    let mut open = vec![(0usize, 0usize)]; // (columns, characters) of each block
    let mut line_start = true;
    for &(kind, range) in tokens {
        match kind {
            Kind::Newline => line_start = true,
            Kind::Indent | Kind::Dedent => {}
            _ if line_start => {
                line_start = false;
                let at = range.start().to_usize();
                let from = text[..at].rfind(['\n', '\r']).map_or(0, |n| n + 1);
                let (mut col, mut chars) = (0, 0);
                for c in text[from..at].chars() {
                    (col, chars) = match c {
                        '\t' => ((col / 8 + 1) * 8, chars + 1),
                        '\x0c' => (0, 0),
                        _ => (col + 1, chars + 1),
                    };
                }
                let &(top, top_chars) = open.last().unwrap_or(&(0, 0));
                if col > top {
                    if chars <= top_chars {
                        return false;
                    }
                    open.push((col, chars));
                    continue;
                }
                while open.last().is_some_and(|&(c, _)| c > col) {
                    open.pop();
                }
                if open.last() != Some(&(col, chars)) {
                    return false;
                }
            }
            _ => {}
        }
    }
    true
}

/// Whether the syntax tree of `text` may nest deeper than [`MAX_DEPTH`], read from its tokens
/// alone (the lexer keeps no stack): every level of a tree has a token of its own, and an
/// element of a bracket (a comma's) or a statement starts over from the depth of its bracket or
/// block. A lambda's parameters (`lambda a, b: ...`) are no elements: its body nests.
fn too_deep(text: &str) -> bool {
    let mut lexer = lexer::lex(text, Mode::Module);
    // Per open bracket, outermost first: the tokens since its element began, and the lambdas
    // whose parameters are open there.
    let mut levels: Vec<(usize, usize)> = vec![(0, 0)];
    let (mut depth, mut blocks) = (0usize, 0usize);
    loop {
        let kind = lexer.next_token();
        let level = levels.len() - 1;
        match kind {
            TokenKind::EndOfFile => return false,
            TokenKind::Comment | TokenKind::NonLogicalNewline => continue,
            TokenKind::Indent => blocks += 1,
            TokenKind::Dedent => blocks = blocks.saturating_sub(1),
            TokenKind::Lpar | TokenKind::Lsqb | TokenKind::Lbrace => {
                levels[level].0 += 1;
                depth += 1;
                levels.push((0, 0));
            }
            TokenKind::Rpar | TokenKind::Rsqb | TokenKind::Rbrace if level > 0 => {
                depth -= levels.pop().map_or(0, |(n, _)| n);
            }
            TokenKind::Comma if levels[level].1 == 0 => {
                depth -= std::mem::take(&mut levels[level].0);
            }
            TokenKind::Newline | TokenKind::Semi if level == 0 => {
                depth -= std::mem::take(&mut levels[0].0);
                levels[0].1 = 0;
            }
            _ => {
                let (count, lambdas) = &mut levels[level];
                *count += 1;
                depth += 1;
                match kind {
                    TokenKind::Lambda => *lambdas += 1,
                    TokenKind::Colon => *lambdas = lambdas.saturating_sub(1),
                    _ => {}
                }
            }
        }
        if depth + blocks > MAX_DEPTH || blocks > MAX_BLOCKS {
            return true;
        }
    }
}

/// Every statement of `body` and of the blocks nested in it, functions' and classes' included,
/// in source order.
pub(crate) fn nested(body: &[Stmt]) -> Vec<&Stmt> {
    struct All<'a>(Vec<&'a Stmt>);
    impl<'a> StatementVisitor<'a> for All<'a> {
        fn visit_stmt(&mut self, stmt: &'a Stmt) {
            self.0.push(stmt);
            walk_stmt(self, stmt);
        }
    }
    let mut all = All(Vec::new());
    all.visit_body(body);
    all.0
}

/// The statements of one scope: `body`'s and those of its compound statements' blocks, but not
/// what a `def` or `class` holds.
pub(crate) fn scope(body: &[Stmt]) -> Vec<&Stmt> {
    struct Scope<'a>(Vec<&'a Stmt>);
    impl<'a> StatementVisitor<'a> for Scope<'a> {
        fn visit_stmt(&mut self, stmt: &'a Stmt) {
            self.0.push(stmt);
            if !matches!(stmt, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
                walk_stmt(self, stmt);
            }
        }
    }
    let mut scope = Scope(Vec::new());
    scope.visit_body(body);
    scope.0
}

/// The names a statement binds in its scope (its own, not its blocks'): a definition's, an
/// import's (`import a.b` binds `a`, `as` its alias), the targets of an assignment, a `for`, a
/// `with`, a `del`, a `global` or `nonlocal`, an `except ... as`, a `type` alias and the
/// walrus targets in it. `None` for `from m import *`, which binds names no statement shows.
pub(crate) fn binds(stmt: &Stmt) -> Option<Vec<&str>> {
    let mut stores = Stores(Vec::new());
    match stmt {
        Stmt::FunctionDef(f) => return Some(vec![f.name.as_str()]),
        Stmt::ClassDef(c) => return Some(vec![c.name.as_str()]),
        Stmt::Import(i) => return Some(i.names.iter().map(bound_name).collect()),
        Stmt::ImportFrom(i) if i.names.iter().any(|a| &a.name == "*") => return None,
        Stmt::ImportFrom(i) => return Some(i.names.iter().map(alias).collect()),
        Stmt::Global(g) => return Some(g.names.iter().map(|n| n.as_str()).collect()),
        Stmt::Nonlocal(n) => return Some(n.names.iter().map(|n| n.as_str()).collect()),
        Stmt::Try(t) => stores.0.extend(t.handlers.iter().filter_map(|h| {
            let ast::ExceptHandler::ExceptHandler(h) = h;
            h.name.as_ref().map(|n| n.as_str())
        })),
        _ => {}
    }
    stores.visit_stmt(stmt);
    Some(stores.0)
}

/// The names an expression stores to (an assignment's target, a walrus in it), not those of
/// the comprehensions and lambdas in it, which stay there.
pub(crate) fn stores(expr: &ast::Expr) -> Vec<&str> {
    let mut stores = Stores(Vec::new());
    stores.visit_expr(expr);
    stores.0
}

struct Stores<'a>(Vec<&'a str>);

impl<'a> Visitor<'a> for Stores<'a> {
    fn visit_expr(&mut self, expr: &'a ast::Expr) {
        match expr {
            ast::Expr::Name(n) if !n.ctx.is_load() => self.0.push(n.id.as_str()),
            ast::Expr::ListComp(_)
            | ast::Expr::SetComp(_)
            | ast::Expr::DictComp(_)
            | ast::Expr::Generator(_)
            | ast::Expr::Lambda(_) => return,
            _ => {}
        }
        walk_expr(self, expr);
    }

    fn visit_body(&mut self, _: &'a [Stmt]) {}
}

/// The name an `import` clause binds: its alias, or the first part of its dotted name.
pub(crate) fn bound_name(a: &ast::Alias) -> &str {
    match &a.asname {
        Some(alias) => alias.as_str(),
        None => a.name.as_str().split('.').next().unwrap_or_default(),
    }
}

/// The name a `from` import clause binds.
pub(crate) fn alias(a: &ast::Alias) -> &str {
    a.asname.as_ref().unwrap_or(&a.name).as_str()
}

/// A definition's decorators (none for any other statement).
pub(crate) fn decorators(stmt: &Stmt) -> &[ast::Decorator] {
    match stmt {
        Stmt::FunctionDef(f) => &f.decorator_list,
        Stmt::ClassDef(c) => &c.decorator_list,
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts<'a>(tokens: &[Tok<'a>]) -> Vec<&'a str> {
        let text = |t: &Tok<'a>| match t.kind {
            Kind::Newline => "\\n",
            Kind::Indent => ">",
            Kind::Dedent => "<",
            _ => t.text,
        };
        tokens.iter().map(text).collect()
    }

    #[test]
    fn tokens_leave_out_comments_and_layout_and_keep_strings_whole() {
        let m = Module::parse("x = f'a # b {y!r:>{w}}' + r\"c\"  # d\nif (a,\n  b):\n    pass\n");
        assert_eq!(
            texts(&m.tokens().unwrap()),
            [
                "x",
                "=",
                "f'a # b {y!r:>{w}}'",
                "+",
                "r\"c\"",
                "\n",
                "if",
                "(",
                "a",
                ",",
                "b",
                ")",
                ":",
                "\n",
                ">",
                "pass",
                "\n",
                "<"
            ]
            .map(|t| if t == "\n" { "\\n" } else { t })
        );
        let t = Module::parse("t = t\"{name}\"\n");
        assert_eq!(texts(&t.tokens().unwrap())[2], "t\"{name}\"");
    }

    #[test]
    fn current_grammar_parses() {
        for src in [
            "x = f\"{f\"{1 + 1}\"}\" + f\"{'\\n'.join(a)}\"\n",
            "t = t\"hello {name!r:>{w}}\"\n",
            "type Point[T] = tuple[T, T]\ndef f[T](x: T) -> T: return x\n",
            "match x:\n    case {'a': 1, **rest}:\n        pass\n    case P(x=0) | [1, *_]:\n        pass\n",
            "try:\n    pass\nexcept* ValueError:\n    pass\n",
        ] {
            assert!(Module::parse(src).body().is_some(), "{src}");
        }
    }

    #[test]
    fn what_does_not_parse_has_no_statements_and_never_panics() {
        let deep =
            |open: &str, close: &str, n| format!("x = {}1{}\n", open.repeat(n), close.repeat(n));
        let blocks = |n: usize| {
            let ifs: String = (0..n)
                .map(|k| format!("{}if x:\n", " ".repeat(k)))
                .collect();
            format!("{ifs}{}pass\n", " ".repeat(n))
        };
        let huge = "def f(x):\n    return [x, 'y', 3.0]\n\n\n".repeat(20_000);
        for (what, src) in [
            ("truncated", "def f(x):\n    return (x +\n".to_owned()),
            (
                "unterminated string",
                "s = 'abc\ndef g(): pass\n".to_owned(),
            ),
            (
                "tabs and spaces",
                "if x:\n\ty = 1\n        z = 2\n".to_owned(),
            ),
            // A tab is 8 columns to CPython, 1 character: the `if`'s block is not deeper.
            (
                "a tab then eight spaces",
                "def f():\n\tif x:\n        pass\n".to_owned(),
            ),
            (
                "spaces then a tab",
                "if x:\n        y = 1\n\tz = 2\n".to_owned(),
            ),
            ("a NUL byte", "x = 1\0\ny = 2\n".to_owned()),
            ("brackets", deep("(", ")", 10_000)),
            ("lists", deep("[", "]", 10_000)),
            ("negations", deep("not ", "", 10_000)),
            ("a sum", format!("x = 1{}\n", " + 1".repeat(10_000))),
            ("attributes", format!("x = a{}\n", ".b".repeat(10_000))),
            (
                "lambdas",
                format!("x = {}1\n", "lambda a, b=lambda c, d: 1, e: ".repeat(3_000)),
            ),
            ("blocks", blocks(150)),
        ] {
            let m = Module::parse(&src);
            assert!(m.body().is_none(), "{what}");
        }
        let m = Module::parse(&huge);
        assert_eq!(m.body().map(<[Stmt]>::len), Some(20_000));
        // Tabs CPython reads the same at 8 columns and at 1 are read.
        for src in [
            "if x:\n\ty = 1\n\tif y:\n\t\tz = 2\n\tw = 3\n",
            "if x:\n\t  y = 1\n",
        ] {
            assert!(Module::parse(src).body().is_some(), "{src}");
        }
        // A deep tree CPython still compiles is read.
        assert!(Module::parse(&blocks(90)).body().is_some());
        assert!(Module::parse(&deep("(", ")", 150)).body().is_some());
        assert!(Module::parse(&format!("x = 1{}\n", " + 1".repeat(900)))
            .body()
            .is_some());
    }

    /// Source made of Python's structure (blocks, brackets, strings, decorators) cut anywhere.
    fn pythonish() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let part = prop_oneof![
            Just("def test_a("),
            Just("class C:"),
            Just("@pytest.fixture(autouse=True)"),
            Just("import os"),
            Just("from . import *"),
            Just("x = "),
            Just("lambda a: "),
            Just("if __name__ == '__main__':"),
            Just("try:"),
            Just("except* E as e:"),
            Just("match x:"),
            Just("case [1, *_]:"),
            Just("type T = int"),
            Just("("),
            Just(")"),
            Just("["),
            Just("]"),
            Just("{"),
            Just("}"),
            Just(":"),
            Just(","),
            Just("\n"),
            Just("\n    "),
            Just("\t"),
            Just("\\\n"),
            Just("'''"),
            Just("\""),
            Just("f'{"),
            Just("t\"{x!r:>{w}}\""),
            Just("# c"),
            Just("\0"),
            Just("é"),
        ];
        proptest::collection::vec(part, 0..60).prop_map(|p| p.concat())
    }

    proptest::proptest! {
        /// Every reader answers every source, whole or cut anywhere, without a panic; what
        /// does not parse defines no test.
        #[test]
        fn every_reader_answers_any_source(src in pythonish()) {
            let m = Module::parse(&src);
            let _ = (m.tokens(), m.body().map(nested));
            let _ = crate::audit::pysrc::parse(&src);
            let f = crate::testsrc::SourceFile::parse(&src);
            let def = f.definition("t.py::C::test_a").or(f.definition("t.py::test_a"));
            proptest::prop_assert!(m.body().is_some() || def.is_none());
            let _ = (f.functions(), f.import_time_patches(), f.all_tokens());
            let _ = crate::testsrc::pytest_hooks(&src);
        }
    }

    #[test]
    fn spans_run_from_the_first_decorator_to_the_last_token() {
        let m = Module::parse("import os\n\n@a\n@b(\n  1)\ndef f(x):\n    '''doc\n    more'''\n    return x  # done\n\n\nz = 3\n");
        let body = m.body().unwrap();
        assert_eq!(m.span(&body[1]), (3, 9));
        assert_eq!(texts(&m.header(&body[1])).concat(), "@a\\n@b(1)\\ndeff(x):");
        let (first, last) = m.span(&body[1]);
        assert_eq!(m.lines(first, last).count(), 7);
    }

    #[test]
    fn statements_bind_what_python_binds() {
        let m = Module::parse(
            "import os.path, json as j\nfrom a.b import (c,\n    d as e)\nfrom .m import *\n\
             X = Y = 1\nA, (B, *C) = f()\nD: int = 3\nCFG['k'] = 2\nN += 1\nobj.attr = 4\n\
             for i, k in z: pass\nwith a as (w, v): pass\nif (m := 2): pass\nL = [q for q in r]\n\
             try: pass\nexcept E as err: pass\ntype T = int\n",
        );
        let bound: Vec<Option<Vec<&str>>> = m.body().unwrap().iter().map(binds).collect();
        let want: Vec<Option<Vec<&str>>> = vec![
            Some(vec!["os", "j"]),
            Some(vec!["c", "e"]),
            None,
            Some(vec!["X", "Y"]),
            Some(vec!["A", "B", "C"]),
            Some(vec!["D"]),
            Some(vec![]),
            Some(vec!["N"]),
            Some(vec![]),
            Some(vec!["i", "k"]),
            Some(vec!["w", "v"]),
            Some(vec!["m"]),
            Some(vec!["L"]),
            Some(vec!["err"]),
            Some(vec!["T"]),
        ];
        assert_eq!(bound, want);
    }
}
