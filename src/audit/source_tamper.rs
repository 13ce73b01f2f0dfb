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

use crate::testsrc::tokens::{self, Kind, Token};

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
        for t in tokens::flat(text).iter().filter(|t| weighty(t)) {
            out.entry(value(&t.text)).or_insert_with(|| path.clone());
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

/// The literals of the conditions `head` adds to `base` (`None`: a new file), each with its
/// line, trimmed: candidates, until a test file is found to hold the literal too. A condition
/// is what an `if`, `elif` or `case` tests (up to its colon) and what a conditional
/// expression's `if` tests (up to its `else`); the branches' values are not.
pub(crate) fn condition_literals(base: Option<&str>, head: &str) -> Vec<(String, String)> {
    let before: BTreeSet<String> = base
        .map(|b| tokens::lines(b).iter().map(line_text).collect())
        .unwrap_or_default();
    // A literal the module already held is the code's own, not one copied from a test.
    let known: BTreeSet<String> = base
        .map(|b| {
            tokens::flat(b)
                .iter()
                .filter(|t| t.kind == Kind::Literal)
                .map(|t| value(&t.text))
                .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    for line in tokens::lines(head) {
        if before.contains(&line_text(&line)) {
            continue;
        }
        let condition = condition(&line.tokens);
        if condition.is_empty() {
            continue;
        }
        let text = head
            .lines()
            .skip(line.first)
            .take(line.last - line.first + 1)
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" ");
        for tok in condition
            .into_iter()
            .filter(|tok| weighty(tok) && !known.contains(&value(&tok.text)))
        {
            out.push((tok.text.clone(), text.clone()));
        }
    }
    out
}

/// The tokens a logical line tests: a statement's condition, or a conditional expression's.
fn condition(t: &[Token]) -> Vec<&Token> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    // In the statement's condition (up to its colon); in an expression's (up to its `else`).
    let mut statement = matches!(
        t.first().map(|t| t.text.as_str()),
        Some("if" | "elif" | "case")
    );
    let mut expression = false;
    for (k, tok) in t.iter().enumerate() {
        match (tok.kind, tok.text.as_str()) {
            (Kind::Op, "(" | "[" | "{") => depth += 1,
            (Kind::Op, ")" | "]" | "}") => depth = depth.saturating_sub(1),
            (Kind::Op, ":") if depth == 0 => statement = false,
            (Kind::Name, "if") if k > 0 => expression = true,
            (Kind::Name, "else") => expression = false,
            (Kind::Literal, _) if statement || expression => out.push(tok),
            _ => {}
        }
    }
    out
}

/// A literal that says something of its own: a string of 3 characters or more, a number other
/// than the usual small ones.
fn weighty(t: &Token) -> bool {
    if t.kind != Kind::Literal {
        return false;
    }
    let quoted = t.text.ends_with(['"', '\'']);
    match quoted {
        true => {
            let inner = t.text.trim_start_matches(|c: char| c.is_ascii_alphabetic());
            inner.trim_matches(['"', '\'']).chars().count() >= 3
        }
        false => !matches!(t.text.as_str(), "0" | "1" | "2" | "0.0" | "1.0"),
    }
}

fn line_text(line: &tokens::Line) -> String {
    line.tokens
        .iter()
        .map(|t| t.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `__eq__` and `__ne__` methods of `head` whose body never reads their second parameter,
/// and that `base` does not have as they are: their first line, trimmed.
pub(crate) fn eq_ignoring_argument(base: Option<&str>, head: &str) -> Vec<String> {
    let before: BTreeSet<String> = base
        .map(eq_methods)
        .unwrap_or_default()
        .into_iter()
        .collect();
    eq_methods(head)
        .into_iter()
        .filter(|m| !before.contains(m))
        .filter_map(|m| {
            let (header, body) = m.split_once('\n')?;
            let params: Vec<&str> = header
                .split_once('(')?
                .1
                .split(')')
                .next()?
                .split(',')
                .map(|p| p.trim().split([':', '=']).next().unwrap_or("").trim())
                .collect();
            let other = params.get(1).filter(|p| !p.is_empty())?;
            let reads = tokens::flat(body)
                .iter()
                .any(|t| t.kind == Kind::Name && t.text == *other);
            (!reads).then(|| header.trim().to_string())
        })
        .collect()
}

/// The source of each `def __eq__` / `def __ne__` of a text: its `def` line, then its body.
fn eq_methods(text: &str) -> Vec<String> {
    ["__eq__", "__ne__"]
        .iter()
        .filter_map(|name| crate::testsrc::function_source(text, name))
        .flat_map(|s| split_defs(&s))
        .collect()
}

/// The definitions of `function_source`'s text (it joins every definition of a name).
fn split_defs(source: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in source.lines() {
        let t = line.trim_start();
        if t.starts_with("def ") || t.starts_with("async def ") {
            out.push(String::new());
        }
        if let Some(last) = out.last_mut() {
            last.push_str(line);
            last.push('\n');
        }
    }
    out
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
