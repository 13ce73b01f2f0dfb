//! The outline of a Python source: its statements, block by block, and the names each binds, as
//! far as telling what a test's definition is made of needs (see `crate::testsrc`).

use super::tokens::{Kind, Line, Token};

/// One statement, its decorators included: `lines[start..end]` of the file's logical lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stmt {
    pub(crate) start: usize,
    /// The line of its `def`, `class` or first token (after the decorators).
    pub(crate) header: usize,
    pub(crate) end: usize,
    pub(crate) kind: StmtKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StmtKind {
    /// `def name` or `async def name`.
    Def(String),
    /// `class name`, with the statements of its body.
    Class(String, Vec<Stmt>),
    /// Each name an import binds, with what it resolves to (`from a import b as c`: `c` is
    /// `a.b`; `import a.b`: `a` is the module `a`, with `a.b` loaded).
    Import(Vec<(String, String)>),
    /// `from m import *`: binds what `m` has, unknown here.
    StarImport,
    /// An assignment: the names it binds (`X = …`, `A, B = …`, `X: int = …`) and those whose
    /// value it changes in place (`X[k] = …`, `X.a = …`, `X += …`).
    Assign {
        binds: Vec<String>,
        mutates: Vec<String>,
    },
    /// `if __name__ == "__main__":`, which never runs under pytest.
    MainGuard,
    /// A string on its own: a docstring, or no effect.
    Docstring,
    /// Anything else: a call, a compound statement, `del`: done when the module (or class)
    /// body runs.
    Other,
}

impl Stmt {
    /// The name a `def` or `class` binds.
    pub(crate) fn defined_name(&self) -> Option<&str> {
        match &self.kind {
            StmtKind::Def(n) | StmtKind::Class(n, _) => Some(n),
            _ => None,
        }
    }

    /// Every name this statement binds.
    pub(crate) fn binds(&self) -> Vec<&str> {
        match &self.kind {
            StmtKind::Def(n) | StmtKind::Class(n, _) => vec![n.as_str()],
            StmtKind::Import(names) => names.iter().map(|(n, _)| n.as_str()).collect(),
            StmtKind::Assign { binds, mutates } => {
                binds.iter().chain(mutates).map(String::as_str).collect()
            }
            _ => Vec::new(),
        }
    }
}

/// The top-level statements of a file's logical lines.
pub(crate) fn outline(lines: &[Line]) -> Vec<Stmt> {
    block(lines, 0, lines.len())
}

/// The statements of `lines[start..end]`, a block whose first line sets its indentation.
fn block(lines: &[Line], start: usize, end: usize) -> Vec<Stmt> {
    let Some(first) = lines.get(start) else {
        return Vec::new();
    };
    let indent = first.indent;
    let mut out = Vec::new();
    let mut i = start;
    while i < end {
        let s = i;
        // Decorators belong to the def or class below them.
        while i + 1 < end && lines[i].starts_with("@") && lines[i + 1].indent == indent {
            i += 1;
        }
        let header = i;
        let mut next = header + 1;
        while next < end && lines[next].indent > indent {
            next += 1;
        }
        let kind = kind_of(lines, header, next);
        out.push(Stmt {
            start: s,
            header,
            end: next,
            kind,
        });
        i = next;
    }
    out
}

fn kind_of(lines: &[Line], header: usize, end: usize) -> StmtKind {
    let t = &lines[header].tokens;
    let text = |k: usize| t.get(k).map_or("", |t| t.text.as_str());
    let def_at = match (text(0), text(1)) {
        ("def", _) => Some(1),
        ("async", "def") => Some(2),
        _ => None,
    };
    if let Some(k) = def_at {
        return StmtKind::Def(text(k).to_string());
    }
    match text(0) {
        "class" => StmtKind::Class(text(1).to_string(), block(lines, header + 1, end)),
        "import" => StmtKind::Import(imports(&t[1..])),
        "from" => from_import(t),
        "if" if is_main_guard(t) => StmtKind::MainGuard,
        _ if t.len() == 1 && t[0].kind == Kind::Literal && is_string(&t[0].text) => {
            StmtKind::Docstring
        }
        _ => assignment(t).unwrap_or(StmtKind::Other),
    }
}

fn is_string(text: &str) -> bool {
    text.ends_with(['"', '\''])
}

/// `import a.b as c, d`: (c, a.b) and (d, d); a dotted import without `as` binds its first
/// part, resolving to the whole dotted name (what it loads is part of what the name gives).
fn imports(t: &[Token]) -> Vec<(String, String)> {
    split_top(t, ",")
        .into_iter()
        .filter_map(|alias| {
            let (dotted, bound) = dotted_alias(alias)?;
            let name = bound.unwrap_or_else(|| dotted.split('.').next().unwrap_or("").to_string());
            Some((name, dotted))
        })
        .collect()
}

/// `from m import a as b, c` (brackets allowed) and `from . import x`.
fn from_import(t: &[Token]) -> StmtKind {
    let Some(at) = t
        .iter()
        .position(|t| t.kind == Kind::Name && t.text == "import")
    else {
        return StmtKind::Other;
    };
    let module: String = t[1..at].iter().map(|t| t.text.as_str()).collect();
    let names: Vec<&Token> = t[at + 1..]
        .iter()
        .filter(|t| !matches!(t.text.as_str(), "(" | ")"))
        .collect();
    if names.len() == 1 && names[0].text == "*" {
        return StmtKind::StarImport;
    }
    let names: Vec<Token> = names.into_iter().cloned().collect();
    let binds = split_top(&names, ",")
        .into_iter()
        .filter_map(|alias| {
            let (name, bound) = dotted_alias(alias)?;
            let bound = bound.unwrap_or_else(|| name.clone());
            Some((bound, format!("{module}.{name}")))
        })
        .collect();
    StmtKind::Import(binds)
}

/// `a.b.c as d` → ("a.b.c", Some("d")); `a.b` → ("a.b", None).
fn dotted_alias(t: &[Token]) -> Option<(String, Option<String>)> {
    let as_at = t.iter().position(|t| t.text == "as");
    let dotted: String = t[..as_at.unwrap_or(t.len())]
        .iter()
        .map(|t| t.text.as_str())
        .collect();
    if dotted.is_empty() {
        return None;
    }
    let bound = as_at.and_then(|k| t.get(k + 1)).map(|t| t.text.clone());
    Some((dotted, bound))
}

fn is_main_guard(t: &[Token]) -> bool {
    let texts: Vec<&str> = t.iter().map(|t| t.text.as_str()).collect();
    let main = |s: &str| s == "\"__main__\"" || s == "'__main__'";
    matches!(texts.as_slice(), ["if", "__name__", "==", m, ":"] if main(m))
        || matches!(texts.as_slice(), ["if", m, "==", "__name__", ":"] if main(m))
}

/// An assignment statement's kind, `None` when the line is not one.
fn assignment(t: &[Token]) -> Option<StmtKind> {
    const AUGMENTED: [&str; 13] = [
        "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@=", "**=", "//=", ">>=", "<<=",
    ];
    if t.first().is_none_or(|t| t.kind != Kind::Name) || is_keyword(&t[0].text) {
        return None;
    }
    let depth0 = top_level(t);
    if let Some(k) = (0..t.len()).find(|&k| depth0[k] && AUGMENTED.contains(&t[k].text.as_str())) {
        return Some(StmtKind::Assign {
            binds: Vec::new(),
            mutates: target_names(&t[..k]).into_iter().map(|(n, _)| n).collect(),
        });
    }
    // `X: int = 3` or `X: int`: the target is before the colon.
    if t.len() >= 2 && t[1].text == ":" {
        return Some(StmtKind::Assign {
            binds: vec![t[0].text.clone()],
            mutates: Vec::new(),
        });
    }
    let eqs: Vec<usize> = (0..t.len())
        .filter(|&k| depth0[k] && t[k].text == "=")
        .collect();
    let last = *eqs.last()?;
    let (mut binds, mut mutates) = (Vec::new(), Vec::new());
    let mut from = 0;
    for &e in &eqs {
        if e > last {
            break;
        }
        for (name, plain) in target_names(&t[from..e]) {
            if plain {
                binds.push(name);
            } else {
                mutates.push(name);
            }
        }
        from = e + 1;
    }
    Some(StmtKind::Assign { binds, mutates })
}

/// The names of assignment targets, each with whether it is bound (`x`, `(a, b)`, `*rest`) or
/// changed in place (`x[0]`, `x.attr`).
fn target_names(t: &[Token]) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    // For each open bracket: whether it groups targets (`(a, b)`) rather than follows one
    // (`x[0]`, `f(…)`), inside which no name is a target.
    let mut groups: Vec<bool> = Vec::new();
    for (k, tok) in t.iter().enumerate() {
        let prev = k.checked_sub(1).map(|p| t[p].text.as_str());
        let starts = prev.is_none_or(|p| matches!(p, "," | "(" | "[" | "*"));
        match tok.text.as_str() {
            "(" | "[" | "{" => groups.push(starts && groups.iter().all(|g| *g)),
            ")" | "]" | "}" => {
                groups.pop();
            }
            _ if tok.kind == Kind::Name
                && starts
                && groups.iter().all(|g| *g)
                && !is_keyword(&tok.text) =>
            {
                let plain = t
                    .get(k + 1)
                    .is_none_or(|n| matches!(n.text.as_str(), "," | ")" | "]"));
                out.push((tok.text.clone(), plain));
            }
            _ => {}
        }
    }
    out
}

/// For each token, whether it is outside every bracket.
fn top_level(t: &[Token]) -> Vec<bool> {
    let mut depth = 0usize;
    t.iter()
        .map(|tok| match tok.text.as_str() {
            "(" | "[" | "{" => {
                depth += 1;
                false
            }
            ")" | "]" | "}" => {
                depth = depth.saturating_sub(1);
                false
            }
            _ => depth == 0,
        })
        .collect()
}

/// The slices of `t` between top-level `sep` tokens.
fn split_top<'a>(t: &'a [Token], sep: &str) -> Vec<&'a [Token]> {
    let depth0 = top_level(t);
    let mut out = Vec::new();
    let mut from = 0;
    for k in 0..t.len() {
        if depth0[k] && t[k].text == sep {
            out.push(&t[from..k]);
            from = k + 1;
        }
    }
    out.push(&t[from..]);
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

pub(crate) fn is_keyword(word: &str) -> bool {
    matches!(
        word,
        "False"
            | "None"
            | "True"
            | "and"
            | "as"
            | "assert"
            | "async"
            | "await"
            | "break"
            | "class"
            | "continue"
            | "def"
            | "del"
            | "elif"
            | "else"
            | "except"
            | "finally"
            | "for"
            | "from"
            | "global"
            | "if"
            | "import"
            | "in"
            | "is"
            | "lambda"
            | "nonlocal"
            | "not"
            | "or"
            | "pass"
            | "raise"
            | "return"
            | "try"
            | "while"
            | "with"
            | "yield"
    )
}

#[cfg(test)]
mod tests {
    use super::super::tokens::lines;
    use super::*;

    fn kinds(src: &str) -> Vec<StmtKind> {
        outline(&lines(src)).into_iter().map(|s| s.kind).collect()
    }

    fn names(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn statements_bind_what_python_binds() {
        let src = "\"\"\"Doc.\"\"\"\nimport os.path, json as j\nfrom a.b import (c,\n    d as e)\nfrom .m import *\n\
                   X = Y = 1\nA, (B, *C) = f()\nD: int = 3\nCFG['k'] = 2\nN += 1\nobj.attr = 4\n\
                   sys.path.insert(0, X)\nif __name__ == '__main__':\n    main()\n";
        assert_eq!(
            kinds(src),
            [
                StmtKind::Docstring,
                StmtKind::Import(names(&[("os", "os.path"), ("j", "json")])),
                StmtKind::Import(names(&[("c", "a.b.c"), ("e", "a.b.d")])),
                StmtKind::StarImport,
                StmtKind::Assign {
                    binds: vec!["X".into(), "Y".into()],
                    mutates: vec![]
                },
                StmtKind::Assign {
                    binds: vec!["A".into(), "B".into(), "C".into()],
                    mutates: vec![]
                },
                StmtKind::Assign {
                    binds: vec!["D".into()],
                    mutates: vec![]
                },
                StmtKind::Assign {
                    binds: vec![],
                    mutates: vec!["CFG".into()]
                },
                StmtKind::Assign {
                    binds: vec![],
                    mutates: vec!["N".into()]
                },
                StmtKind::Assign {
                    binds: vec![],
                    mutates: vec!["obj".into()]
                },
                StmtKind::Other,
                StmtKind::MainGuard,
            ]
        );
    }

    #[test]
    fn blocks_nest_and_decorators_stay_with_their_def() {
        let src = "@pytest.mark.slow\n@pytest.mark.parametrize('x', [1,\n    2])\ndef test_a(x):\n    if x:\n        pass\n\n\
                   class TestC(Base):\n    attr = 1\n\n    @pytest.fixture(autouse=True)\n    def setup(self):\n        pass\n\n    async def test_m(self):\n        pass\n";
        let stmts = outline(&lines(src));
        assert_eq!(stmts.len(), 2);
        assert_eq!((stmts[0].start, stmts[0].header, stmts[0].end), (0, 2, 5));
        assert_eq!(stmts[0].kind, StmtKind::Def("test_a".into()));
        let StmtKind::Class(name, body) = &stmts[1].kind else {
            panic!("{stmts:?}")
        };
        assert_eq!(name, "TestC");
        let body: Vec<Option<&str>> = body.iter().map(|s| s.defined_name()).collect();
        assert_eq!(body, [None, Some("setup"), Some("test_m")]);
    }
}
