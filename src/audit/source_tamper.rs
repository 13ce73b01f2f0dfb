//! The two source-side moves the base's suite cannot see: code that special-cases a test's input,
//! and an `__eq__` that ignores what it compares with. The base's tests pass on such code; these
//! rules read the patch's source instead, and what they find is a warning, never a block.
//!
//! # The rules
//!
//! - **A literal copied from a test into an `if`.** A condition (what an `if`, `elif` or `case`
//!   line the head adds to a module of the code tests, up to its colon, or a conditional
//!   expression's test) holding a literal of some weight (a string of three characters or more,
//!   a number other than 0, 1 and 2) that the module did not hold before and that a test file
//!   of the suite holds too, whichever quotes it is written with.
//! - **An `__eq__` that ignores its argument.** A method `__eq__` (or `__ne__`) the head adds or
//!   changes whose body never reads its second parameter (`def __eq__(self, other): return True`).

use std::collections::{BTreeMap, BTreeSet};

use crate::python::{self, Kind, Module, Ranged, Tok};

/// One source-side move the patch may have made: a line of a module of the code.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Suspect {
    /// The module of the code (no test file) that the head added or changed.
    pub(crate) path: String,
    /// The line the head added, trimmed (a condition, or an `__eq__`'s `def` line).
    pub(crate) line: String,
    pub(crate) how: Move,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Move {
    /// A condition on `literal` (as the source writes it), which `test_file` holds too.
    SpecialCase { literal: String, test_file: String },
    /// An `__eq__` or `__ne__` whose body never reads its second parameter.
    EqIgnoresArgument,
}

/// The suspects of a patch: `modules` are the code's Python modules the head added or changed
/// (path, base text, head text), `tests` the suite's test files (path, text, the head's when it
/// has the file). A module's condition literals are checked against the tests only when it has
/// some, so that a patch adding no condition reads no test file's tokens.
pub(crate) fn suspects(
    modules: &[(String, Option<String>, String)],
    tests: impl Fn() -> Vec<(String, String)>,
) -> Vec<Suspect> {
    let mut out = Vec::new();
    let mut held: Option<BTreeMap<String, String>> = None;
    for (path, base, head) in modules {
        let candidates = condition_literals(base.as_deref(), head);
        if !candidates.is_empty() {
            let held = held.get_or_insert_with(|| held_literals(&tests()));
            for (literal, line) in candidates {
                if let Some(test_file) = held.get(&value(&literal)) {
                    out.push(Suspect {
                        path: path.clone(),
                        line,
                        how: Move::SpecialCase {
                            literal,
                            test_file: test_file.clone(),
                        },
                    });
                }
            }
        }
        for line in eq_ignoring_argument(base.as_deref(), head) {
            out.push(Suspect {
                path: path.clone(),
                line,
                how: Move::EqIgnoresArgument,
            });
        }
    }
    out
}

/// Each weighty literal's value the test files hold, with the first file (by path) holding it.
fn held_literals(tests: &[(String, String)]) -> BTreeMap<String, String> {
    let mut sorted: Vec<&(String, String)> = tests.iter().collect();
    sorted.sort();
    let mut out = BTreeMap::new();
    for (path, text) in sorted {
        let m = Module::parse(text);
        for t in m.tokens().unwrap_or_default().iter().filter(|t| weighty(t)) {
            out.entry(value(t.text)).or_insert_with(|| path.clone());
        }
    }
    out
}

/// What a literal says, whichever quotes and prefix it is written with: `'a'` and `"a"` alike.
fn value(literal: &str) -> String {
    match literal.ends_with(['"', '\'']) {
        true => literal
            .trim_start_matches(|c: char| c.is_ascii_alphabetic())
            .trim_matches(['"', '\''])
            .to_string(),
        false => literal.to_string(),
    }
}

/// The logical lines of `m`, each with its first and last line.
fn logical_lines<'m>(m: &'m Module) -> Vec<(Vec<Tok<'m>>, u32, u32)> {
    let tokens = m.tokens().unwrap_or_default();
    let lines = tokens.split(|t| t.kind == Kind::Newline);
    let lines = lines.map(|l| {
        l.iter()
            .filter(|t| !matches!(t.kind, Kind::Indent | Kind::Dedent))
    });
    (lines.map(|l| l.copied().collect::<Vec<_>>()))
        .filter_map(|l| {
            let (first, last) = (l.first()?.range.start(), l.last()?.range.end());
            Some((l, m.line(first), m.line(last)))
        })
        .collect()
}

/// The literals of the conditions `head` adds to `base` (`None`: a new file), each with its
/// line, trimmed: candidates, until a test file is found to hold the literal too. A condition
/// is what an `if`, `elif` or `case` tests (up to its colon) and what a conditional
/// expression's `if` tests (up to its `else`); the branches' values are not.
pub(crate) fn condition_literals(base: Option<&str>, head: &str) -> Vec<(String, String)> {
    let base = base.map(Module::parse);
    let before: BTreeSet<String> = (base.iter().flat_map(logical_lines))
        .map(|(l, ..)| line_text(&l))
        .collect();
    // A literal the module already held is the code's own, not one copied from a test.
    let known: BTreeSet<String> = (base.iter().flat_map(|b| b.tokens().unwrap_or_default()))
        .filter(|t| t.kind == Kind::Literal)
        .map(|t| value(t.text))
        .collect();
    let head = Module::parse(head);
    let mut out = Vec::new();
    for (line, first, last) in logical_lines(&head) {
        if before.contains(&line_text(&line)) {
            continue;
        }
        let condition = condition(&line);
        if condition.is_empty() {
            continue;
        }
        let text = head
            .lines(first, last)
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" ");
        for tok in condition
            .into_iter()
            .filter(|tok| weighty(tok) && !known.contains(&value(tok.text)))
        {
            out.push((tok.text.to_owned(), text.clone()));
        }
    }
    out
}

/// The tokens a logical line tests: a statement's condition, or a conditional expression's.
fn condition<'a>(t: &[Tok<'a>]) -> Vec<Tok<'a>> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    // In the statement's condition (up to its colon); in an expression's (up to its `else`).
    let mut statement = matches!(t.first().map(|t| t.text), Some("if" | "elif" | "case"));
    let mut expression = false;
    for (k, tok) in t.iter().enumerate() {
        match (tok.kind, tok.text) {
            (Kind::Op, "(" | "[" | "{") => depth += 1,
            (Kind::Op, ")" | "]" | "}") => depth = depth.saturating_sub(1),
            (Kind::Op, ":") if depth == 0 => statement = false,
            (Kind::Keyword, "if") if k > 0 => expression = true,
            (Kind::Keyword, "else") => expression = false,
            (Kind::Literal, _) if statement || expression => out.push(*tok),
            _ => {}
        }
    }
    out
}

/// A literal that says something of its own: a string of 3 characters or more, a number other
/// than the usual small ones.
fn weighty(t: &Tok) -> bool {
    match (t.kind, t.is_string()) {
        (Kind::Literal, true) => value(t.text).chars().count() >= 3,
        (Kind::Literal, false) => !matches!(t.text, "0" | "1" | "2" | "0.0" | "1.0"),
        _ => false,
    }
}

fn line_text(line: &[Tok]) -> String {
    line.iter().map(|t| t.text).collect::<Vec<_>>().join(" ")
}

/// The `__eq__` and `__ne__` methods of `head` whose body never reads their second parameter,
/// and that `base` does not have as they are (the same tokens): their `def` line, trimmed.
pub(crate) fn eq_ignoring_argument(base: Option<&str>, head: &str) -> Vec<String> {
    let methods = |m: &Module| -> Vec<(String, String, bool)> {
        let body = m.body().unwrap_or_default();
        let defs = python::nested(body)
            .into_iter()
            .filter_map(|s| s.as_function_def_stmt());
        defs.filter(|f| matches!(f.name.as_str(), "__eq__" | "__ne__"))
            .map(|f| {
                let tokens = m.tokens_in(f.range);
                let key = line_text(&tokens);
                let def = tokens
                    .iter()
                    .find(|t| t.is("def"))
                    .map_or(f.start(), |t| t.range.start());
                let line = m.lines(m.line(def), m.line(def)).collect::<String>();
                let params = f.parameters.posonlyargs.iter().chain(&f.parameters.args);
                let other = params.map(|p| p.name().as_str()).nth(1);
                let reads = other.is_none_or(|o| {
                    let body = tokens
                        .iter()
                        .skip_while(|t| t.range.start() < f.body[0].start());
                    body.into_iter().any(|t| t.is_name() && t.text == o)
                });
                (key, line.trim().to_owned(), reads)
            })
            .collect()
    };
    let before: BTreeSet<String> = (base.map(Module::parse).iter().flat_map(methods))
        .map(|(key, ..)| key)
        .collect();
    (methods(&Module::parse(head)).into_iter())
        .filter(|(key, _, reads)| !reads && !before.contains(key))
        .map(|(_, line, _)| line)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_if_on_a_tests_literal_is_a_candidate_and_old_or_small_ones_are_not() {
        let base = "def slug(t):\n    if not t:\n        return ''\n    return t.lower()\n";
        let head = "def slug(t):\n    if not t:\n        return ''\n    if t == 'Hello World':\n        return 'hello-world'\n    x = 'abc' if t else 'def'\n    if len(t) > 1:\n        pass\n    return t\n";
        let found = condition_literals(Some(base), head);
        let literals: Vec<&str> = found.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            literals,
            ["'Hello World'"],
            "a branch's value is no condition"
        );
        assert_eq!(found[0].1, "if t == 'Hello World':");
        assert!(
            condition_literals(Some(head), head).is_empty(),
            "nothing added"
        );
        let reworded = head.replace("if t == 'Hello World':", "if t.strip() == \"Hello World\":");
        assert!(
            condition_literals(Some(head), &reworded).is_empty(),
            "a literal the module held is its own"
        );
    }

    #[test]
    fn a_conditional_expressions_test_and_a_case_pattern_are_conditions() {
        let head = "def f(t):\n    y = 'out' if t == 'the input' else t\n    match t:\n        case \"a case\":\n            return 'z'\n    return y\n";
        let literals: Vec<String> = condition_literals(None, head)
            .into_iter()
            .map(|(l, _)| l)
            .collect();
        assert_eq!(literals, ["'the input'", "\"a case\""]);
    }

    #[test]
    fn a_suspect_is_a_condition_on_what_a_test_holds_whatever_its_quotes() {
        let modules = vec![(
            "src/slug.py".to_string(),
            Some("def slug(t):\n    return t.lower()\n".to_string()),
            "def slug(t):\n    if t == 'Hello World':\n        return 'hello-world'\n    if t == 'nobody writes this':\n        return ''\n    return t.lower()\n".to_string(),
        )];
        let tests = || {
            vec![(
                "tests/test_slug.py".to_string(),
                "def test_slug():\n    assert slug(\"Hello World\") == \"hello-world\"\n"
                    .to_string(),
            )]
        };
        assert_eq!(
            suspects(&modules, tests),
            [Suspect {
                path: "src/slug.py".into(),
                line: "if t == 'Hello World':".into(),
                how: Move::SpecialCase {
                    literal: "'Hello World'".into(),
                    test_file: "tests/test_slug.py".into(),
                },
            }]
        );
        let plain = vec![(
            "src/slug.py".to_string(),
            None,
            "def slug(t):\n    return t.lower()\n".to_string(),
        )];
        let read = std::cell::Cell::new(false);
        let tests = || {
            read.set(true);
            Vec::new()
        };
        assert!(suspects(&plain, tests).is_empty());
        assert!(!read.get(), "no condition added: no test file read");
    }

    #[test]
    fn an_eq_that_never_reads_its_argument_is_found() {
        let base = "class P:\n    def __eq__(self, other):\n        return self.x == other.x\n";
        let head = "class P:\n    def __eq__(self, other):\n        return True\n";
        assert_eq!(
            eq_ignoring_argument(Some(base), head),
            ["def __eq__(self, other):"]
        );
        assert!(eq_ignoring_argument(Some(base), base).is_empty());
        assert!(
            eq_ignoring_argument(None, base).is_empty(),
            "it reads other"
        );
        let typed = "class P:\n    def __eq__(self, o: object) -> bool:\n        return isinstance(self, P)\n";
        assert_eq!(eq_ignoring_argument(None, typed).len(), 1);
    }
}
