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
//! - **An `__eq__` that ignores its argument.** A method `__eq__`, `__ne__` or `__contains__` the
//!   head adds or changes whose body never reads its second parameter (`def __eq__(self, other):
//!   return True`), or an `__eq__`, `__ne__`, `__hash__`, `__contains__` or `__bool__` the base
//!   computed and the head makes return a constant.
//! - **An error swallowed for a made-up value.** A `try` the head adds to a module of the code
//!   with a handler that catches everything (a bare `except`, `Exception`, `BaseException`),
//!   never reads the exception, raises nothing, and only returns or assigns constants (`except
//!   Exception: return 0`). A handler for a named error (`except KeyError: return None`) is the
//!   code's own business and no suspect.

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
    /// An `__eq__`, `__ne__` or `__contains__` whose body never reads its second parameter, or
    /// a comparison, hash or truth method the head made constant.
    EqIgnoresArgument,
    /// A `try` whose handler catches everything and returns or assigns a constant instead.
    SwallowedError,
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
        for line in swallowed_errors(base.as_deref(), head) {
            out.push(Suspect {
                path: path.clone(),
                line,
                how: Move::SwallowedError,
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

/// The `__eq__`, `__ne__` and `__contains__` methods of `head` whose body never reads their
/// second parameter, and that `base` does not have as they are (the same tokens); and the
/// comparison, hash and truth methods that return a constant at head where the base's of the
/// same name did not: their `def` line, trimmed.
pub(crate) fn eq_ignoring_argument(base: Option<&str>, head: &str) -> Vec<String> {
    const COMPARES: [&str; 3] = ["__eq__", "__ne__", "__contains__"];
    const CONSTANT: [&str; 5] = ["__eq__", "__ne__", "__hash__", "__contains__", "__bool__"];
    let methods = |m: &Module| -> Vec<Method> {
        let body = m.body().unwrap_or_default();
        let defs = python::nested(body)
            .into_iter()
            .filter_map(|s| s.as_function_def_stmt());
        defs.filter(|f| CONSTANT.contains(&f.name.as_str()))
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
                let reads = !COMPARES.contains(&f.name.as_str())
                    || other.is_none_or(|o| {
                        let body = tokens
                            .iter()
                            .skip_while(|t| t.range.start() < f.body[0].start());
                        body.into_iter().any(|t| t.is_name() && t.text == o)
                    });
                // Its name and whether it returns a constant (what its class says).
                let constant = match f.body.as_slice() {
                    [python::Stmt::Return(r)] => r.value.as_deref().is_none_or(constant),
                    _ => false,
                };
                let owner = (f.name.to_string(), constant);
                (key, line.trim().to_owned(), reads, Some(owner))
            })
            .collect()
    };
    let base_methods = base
        .map(Module::parse)
        .iter()
        .flat_map(methods)
        .collect::<Vec<_>>();
    let before: BTreeSet<String> = base_methods.iter().map(|(key, ..)| key.clone()).collect();
    // The names the base computes (some method of the name that returns no constant).
    let computed: BTreeSet<String> = (base_methods.iter())
        .filter_map(|(.., owner)| owner.as_ref().filter(|(_, c)| !c).map(|(n, _)| n.clone()))
        .collect();
    (methods(&Module::parse(head)).into_iter())
        .filter(|(key, ..)| !before.contains(key))
        .filter(|(_, _, reads, owner)| {
            let made_constant = owner
                .as_ref()
                .is_some_and(|(name, c)| *c && computed.contains(name));
            !reads || made_constant
        })
        .map(|(_, line, ..)| line)
        .collect()
}

/// A comparison, hash or truth method: its tokens (the key of its text), its `def` line, whether
/// it reads its second parameter (or has none to read), and its name with whether it returns a
/// constant.
type Method = (String, String, bool, Option<(String, bool)>);

/// Whether an expression is a constant: a literal, `None`, `True`, `False`, `...`, a negated
/// number, or an empty or constant tuple, list, set or dict.
fn constant(e: &python::ast::Expr) -> bool {
    use python::ast::Expr;
    match e {
        Expr::StringLiteral(_)
        | Expr::BytesLiteral(_)
        | Expr::NumberLiteral(_)
        | Expr::BooleanLiteral(_)
        | Expr::NoneLiteral(_)
        | Expr::EllipsisLiteral(_) => true,
        Expr::UnaryOp(u) => matches!(*u.operand, Expr::NumberLiteral(_)),
        Expr::Tuple(t) => t.elts.iter().all(constant),
        Expr::List(l) => l.elts.iter().all(constant),
        Expr::Set(s) => s.elts.iter().all(constant),
        Expr::Dict(d) => d.is_empty(),
        _ => false,
    }
}

/// The `try` statements `head` adds (no `try` of `base` has the same tokens) with a handler that
/// catches everything, never reads the exception, raises nothing and only returns or assigns
/// constants (or passes): that handler's `except` line, trimmed.
pub(crate) fn swallowed_errors(base: Option<&str>, head: &str) -> Vec<String> {
    use python::ast::{ExceptHandler, Expr};
    let tries = |m: &Module| -> Vec<String> {
        let body = m.body().unwrap_or_default();
        (python::nested(body).into_iter())
            .filter_map(|s| s.as_try_stmt())
            .map(|t| line_text(&m.tokens_in(t.range)))
            .collect()
    };
    let before: BTreeSet<String> = base.map(Module::parse).iter().flat_map(tries).collect();
    let head = Module::parse(head);
    let body = head.body().unwrap_or_default();
    let mut out = Vec::new();
    for t in python::nested(body)
        .into_iter()
        .filter_map(|s| s.as_try_stmt())
    {
        if before.contains(&line_text(&head.tokens_in(t.range))) {
            continue;
        }
        for ExceptHandler::ExceptHandler(h) in &t.handlers {
            let everything = match h.type_.as_deref() {
                None => true,
                Some(Expr::Name(n)) => matches!(n.id.as_str(), "Exception" | "BaseException"),
                Some(_) => false,
            };
            let reads_it = h.name.as_ref().is_some_and(|name| {
                let start = h.body.first().map_or(h.range.end(), |s| s.start());
                (head.tokens_in(h.range).iter())
                    .skip_while(|tok| tok.range.start() < start)
                    .any(|tok| tok.is_name() && tok.text == name.as_str())
            });
            let made_up = h.body.iter().all(|s| match s {
                python::Stmt::Pass(_) => true,
                python::Stmt::Return(r) => r.value.as_deref().is_none_or(constant),
                python::Stmt::Assign(a) => constant(&a.value),
                _ => false,
            }) && h.body.iter().any(|s| !matches!(s, python::Stmt::Pass(_)));
            if everything && !reads_it && made_up {
                let (first, _) = head.span(h);
                out.push(
                    head.lines(first, first)
                        .collect::<String>()
                        .trim()
                        .to_owned(),
                );
            }
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
        // __contains__ compares too; a hash or truth the base computed, made constant.
        let contains = "class S:\n    def __contains__(self, item):\n        return True\n";
        assert_eq!(eq_ignoring_argument(None, contains).len(), 1);
        let hashed = "class P:\n    def __hash__(self):\n        return hash(self.x)\n\n    def __bool__(self):\n        return bool(self.x)\n";
        let constant = "class P:\n    def __hash__(self):\n        return 0\n\n    def __bool__(self):\n        return True\n";
        assert_eq!(
            eq_ignoring_argument(Some(hashed), constant),
            ["def __hash__(self):", "def __bool__(self):"]
        );
        // A new class whose truth is constant, or an __eq__ that compares fields: the code's own.
        assert!(eq_ignoring_argument(None, constant).is_empty());
        let fields = "class P:\n    def __eq__(self, other):\n        return (self.x, self.y) == (other.x, other.y)\n";
        assert!(eq_ignoring_argument(Some(base), fields).is_empty());
    }

    #[test]
    fn a_try_that_swallows_every_error_for_a_constant_is_found() {
        let base = "def total(xs):\n    return sum(xs) / len(xs)\n";
        let head = "def total(xs):\n    try:\n        return sum(xs) / len(xs)\n    except Exception:\n        return 0\n";
        assert_eq!(swallowed_errors(Some(base), head), ["except Exception:"]);
        assert!(
            swallowed_errors(Some(head), head).is_empty(),
            "the base has it"
        );
        for (handler, found) in [
            ("except:\n        return 0.0", true),
            (
                "except BaseException as e:\n        result = None\n        return result",
                false,
            ),
            (
                "except BaseException:\n        x = -1\n        return -1",
                true,
            ),
            // A named error is the code's business; reading, raising or logging it is no swallow.
            ("except ZeroDivisionError:\n        return 0", false),
            ("except Exception as e:\n        return str(e)", false),
            (
                "except Exception as e:\n        raise ValueError('bad') from e",
                false,
            ),
            (
                "except Exception:\n        log.warning('no total')\n        return 0",
                false,
            ),
            ("except Exception:\n        pass", false),
        ] {
            let head = format!(
                "def total(xs):\n    try:\n        return sum(xs) / len(xs)\n    {handler}\n"
            );
            assert_eq!(
                !swallowed_errors(Some(base), &head).is_empty(),
                found,
                "{handler}"
            );
        }
    }
}
