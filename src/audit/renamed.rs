//! Renamed tests: a test the patch renamed shows up as a base test gone at head and a head test
//! new at head. This pairs them by their bodies, so that the renamed test is replayed with the
//! base's test code like an edited one, and a rename cannot hide a moved expected value.
//!
//! # The rule
//!
//! Both functions are read as Python tokens: whitespace, line breaks inside brackets and
//! comments are dropped, and the name in the `def` line is ignored. Two bodies are
//!
//! - [`Likeness::Same`] when the tokens are equal (a rename, maybe reformatted or recommented;
//!   a trailing comma before a closing bracket is formatting too);
//! - [`Likeness::AssertLiterals`] when the tokens are equal but for expected values: literals
//!   (numbers and strings, with a unary minus) in an assertion statement (one holding `assert`,
//!   or a call whose name starts with `assert`, as `self.assertEqual`) that are an operand of a
//!   comparison (`== 8.0`, `0 <`, `in "ab"`) or a direct argument of an `assert…` or `approx`
//!   call. That is the renamed test that also changed what it expects. A literal changed
//!   anywhere else (the input `total(5)` of `assert total(5) == 8.0`, say) makes another test.
//!
//! A head test new by name is paired with a base test of the same file gone at head when that
//! base test is its only one at the closest likeness, and it is that base test's only one at the
//! same likeness. Anything else (two gone tests with the same body, two new tests copied from one
//! gone test, a body that differs elsewhere) is no pairing: a genuinely new test is never
//! replayed against a test it does not replace.

use crate::python::{Kind, Module, Tok};

/// How alike two test functions are once their names are set aside. `Same` is closer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Likeness {
    /// The same tokens.
    Same,
    /// The same tokens but for literal values in assertion statements.
    AssertLiterals,
}

/// How alike the sources of two test functions (as [`crate::testsrc::function_source`] gives
/// them) are; `None` when they differ beyond literals in assertions, or nest too deep to read.
pub(crate) fn likeness(base: &str, head: &str) -> Option<Likeness> {
    let (b, h) = (Module::parse(base), Module::parse(head));
    let (b, h) = (normalised(b.tokens()?), normalised(h.tokens()?));
    let same = |x: &Tok, y: &Tok| x.kind == y.kind && x.text == y.text;
    if b.len() == h.len() && b.iter().zip(&h).all(|(x, y)| same(x, y)) {
        return Some(Likeness::Same);
    }
    if b.len() != h.len() {
        return None;
    }
    let (bs, hs) = (expected_values(&b), expected_values(&h));
    let close = b.iter().zip(&h).enumerate().all(|(i, (x, y))| {
        same(x, y) || (x.kind == Kind::Literal && y.kind == Kind::Literal && bs[i] && hs[i])
    });
    close.then_some(Likeness::AssertLiterals)
}

/// Whether a test's head source is its base source with the name `old` replaced by one other
/// name wherever it occurs, and nothing else changed (its own name set aside): the head's test
/// makes the base's demand of what the head calls the function now. Sources that do not parse
/// do not follow.
pub(crate) fn follows_rename(base: &str, head: &str, old: &str) -> bool {
    let (b, h) = (Module::parse(base), Module::parse(head));
    let (Some(b), Some(h)) = (b.tokens(), h.tokens()) else {
        return false;
    };
    let (b, h) = (normalised(b), normalised(h));
    if b.len() != h.len() {
        return false;
    }
    let mut new: Option<&str> = None;
    for (x, y) in b.iter().zip(&h) {
        if x.kind != y.kind {
            return false;
        }
        if x.kind == Kind::Name && x.text == old {
            match new {
                None if y.text != old => new = Some(y.text),
                Some(n) if n == y.text => {}
                _ => return false,
            }
        } else if x.text != y.text {
            return false;
        }
    }
    new.is_some()
}

/// Pairs new head tests with gone base tests of one file by the rule of the module
/// documentation. `gone` and `new` are (function name, source); returns (new name, gone name).
pub(crate) fn pair<'a>(
    gone: &'a [(String, String)],
    new: &'a [(String, String)],
) -> Vec<(&'a str, &'a str)> {
    let table: Vec<Vec<Option<Likeness>>> = new
        .iter()
        .map(|(_, h)| gone.iter().map(|(_, b)| likeness(b, h)).collect())
        .collect();
    let mut out = Vec::new();
    for (n, row) in table.iter().enumerate() {
        let Some(best) = row.iter().flatten().min().copied() else {
            continue;
        };
        let at_best: Vec<usize> = (0..gone.len()).filter(|&g| row[g] == Some(best)).collect();
        let [g] = at_best[..] else { continue };
        // The gone test's own closest new tests must be this one alone.
        let Some(g_best) = table.iter().filter_map(|r| r[g]).min() else {
            continue;
        };
        let rivals = table.iter().filter(|r| r[g] == Some(g_best)).count();
        if g_best == best && rivals == 1 {
            out.push((new[n].0.as_str(), gone[g].0.as_str()));
        }
    }
    out
}

/// The node id the base had for a renamed test: `file::Class::new_name[p]` with the old name,
/// `file::Class::old_name[p]`.
pub(crate) fn renamed_nodeid(head_id: &str, new_name: &str, old_name: &str) -> Option<String> {
    let (prefix, last) = head_id.rsplit_once("::")?;
    let params = last.strip_prefix(new_name)?;
    (params.is_empty() || params.starts_with('[')).then(|| format!("{prefix}::{old_name}{params}"))
}

/// For each token, whether it is an expected value: a literal of an assertion statement that is
/// an operand of a comparison or a direct argument of an `assert…` or `approx` call.
fn expected_values(tokens: &[Tok]) -> Vec<bool> {
    const COMPARISONS: [&str; 8] = ["==", "!=", "<", ">", "<=", ">=", "in", "is"];
    let text = |i: Option<usize>| i.and_then(|i| tokens.get(i)).map_or("", |t| t.text);
    // The call each token sits directly inside, by name ("" outside any call).
    let mut inside: Vec<&str> = Vec::with_capacity(tokens.len());
    let mut stack: Vec<&str> = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        match t.text {
            "(" | "[" | "{" if t.kind == Kind::Op => {
                inside.push(stack.last().copied().unwrap_or(""));
                let call = i
                    .checked_sub(1)
                    .map(|p| &tokens[p])
                    .filter(|p| t.text == "(" && p.kind == Kind::Name);
                stack.push(call.map_or("", |p| p.text));
            }
            ")" | "]" | "}" if t.kind == Kind::Op => {
                stack.pop();
                inside.push(stack.last().copied().unwrap_or(""));
            }
            _ if t.kind == Kind::Newline => {
                stack.clear();
                inside.push("");
            }
            _ => inside.push(stack.last().copied().unwrap_or("")),
        }
    }
    let mut out = vec![false; tokens.len()];
    let mut start = 0;
    for i in 0..=tokens.len() {
        if i < tokens.len() && tokens[i].kind != Kind::Newline {
            continue;
        }
        let asserts = (tokens[start..i].iter())
            .any(|t| matches!(t.kind, Kind::Name | Kind::Keyword) && t.text.starts_with("assert"));
        for j in (start..i).filter(|&j| asserts && tokens[j].kind == Kind::Literal) {
            // A unary minus belongs to the literal.
            let before = match text(j.checked_sub(1)) {
                "-" => j.checked_sub(2),
                _ => j.checked_sub(1),
            };
            let (prev, next) = (text(before), text(Some(j + 1)));
            let compared = COMPARISONS.contains(&prev) || COMPARISONS.contains(&next);
            let call = inside[j];
            let argument = (call.starts_with("assert") || call == "approx")
                && matches!(prev, "(" | ",")
                && matches!(next, ")" | ",");
            out[j] = compared || argument;
        }
        start = i + 1;
    }
    out
}

/// The tokens of a function with the name after its first `def` replaced by one placeholder,
/// and without trailing commas before a closing bracket (formatters add and remove them; the
/// one of a one-element tuple, `(x,)`, goes too, a difference this rule accepts), nor the
/// blocks' indents (a method and a function read alike).
fn normalised(tokens: Vec<Tok>) -> Vec<Tok> {
    let closing = |t: Option<&Tok>| t.is_some_and(|t| t.is(")") || t.is("]") || t.is("}"));
    let mut out: Vec<Tok> = Vec::with_capacity(tokens.len());
    let mut renamed = false;
    for (i, t) in tokens.iter().enumerate() {
        match t.kind {
            Kind::Indent | Kind::Dedent => continue,
            _ if t.is(",") && closing(tokens.get(i + 1)) => continue,
            Kind::Name if !renamed && out.last().is_some_and(|p| p.is("def")) => {
                renamed = true;
                out.push(Tok {
                    text: "<test>",
                    ..*t
                });
            }
            _ => out.push(*t),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tests(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect()
    }

    #[test]
    fn a_renamed_and_reformatted_test_is_the_same() {
        let base = "def test_total():\n    assert round(total(5), 1) == 8.0\n";
        let head = "def test_total_price():\n    # the price of five\n    assert round(\n        total( 5 ),\n        1,\n    ) == 8.0\n";
        assert_eq!(likeness(base, head), Some(Likeness::Same));
        let decorated = format!("@pytest.mark.slow\n{head}");
        assert_eq!(likeness(base, &decorated), None);
    }

    #[test]
    fn a_test_that_follows_a_renamed_function_is_the_same_but_renamed() {
        let base = "def test_titles(text, expected):\n    assert parse_title(text) == expected\n";
        let head = "def test_titles(text, expected):\n    assert title_of( text ) == expected\n";
        assert!(follows_rename(base, head, "parse_title"));
        // Weakened beside the rename, another name renamed, two new names, nothing renamed, or
        // a source that does not parse: no.
        let weak = "def test_titles(text, expected):\n    assert title_of(text)\n";
        assert!(!follows_rename(base, weak, "parse_title"));
        assert!(!follows_rename(base, head, "expected"));
        let two = "def test_t():\n    assert a(1) == a(2)\n";
        assert!(!follows_rename(
            two,
            "def test_t():\n    assert b(1) == c(2)\n",
            "a"
        ));
        assert!(!follows_rename(base, base, "parse_title"));
        assert!(!follows_rename(base, "def test_titles(:\n", "parse_title"));
    }

    #[test]
    fn a_moved_expected_value_is_close_only_in_an_assertion() {
        let base = "def test_total():\n    x = total(5)\n    assert round(x, 1) == 8.0\n";
        let moved = "def test_total_price():\n    x = total(5)\n    assert round(x, 1) == 7.2\n";
        assert_eq!(likeness(base, moved), Some(Likeness::AssertLiterals));
        let unittest = "def test_t(self):\n    self.assertEqual(f('a'), 'b')\n";
        let moved = "def test_u(self):\n    self.assertEqual(f('a'), 'c')\n";
        assert_eq!(likeness(unittest, moved), Some(Likeness::AssertLiterals));
        let approx = "def test_t():\n    assert f() == pytest.approx(-8.0, rel=1e-3)\n";
        let moved = "def test_u():\n    assert f() == pytest.approx(-7.2, rel=1e-3)\n";
        assert_eq!(likeness(approx, moved), Some(Likeness::AssertLiterals));
        // The input of the code under test is no expected value, even in an assert line.
        let zero = "def test_zero():\n    assert total(0) == 0\n";
        assert_eq!(
            likeness("def test_t():\n    assert total(5) == 8.0\n", zero),
            None
        );
        // A literal changed outside an assertion is another test.
        let other_input =
            "def test_total_price():\n    x = total(6)\n    assert round(x, 1) == 8.0\n";
        assert_eq!(likeness(base, other_input), None);
        let other_call =
            "def test_total_price():\n    x = total(5)\n    assert round(x, 2) == 8.0 + 0\n";
        assert_eq!(likeness(base, other_call), None);
    }

    #[test]
    fn a_rename_pairs_and_a_new_test_does_not() {
        let gone = tests(&[(
            "test_total",
            "def test_total():\n    assert total(5) == 8.0\n",
        )]);
        let new = tests(&[
            (
                "test_total_price",
                "def test_total_price():\n    assert total(5) == 7.2\n",
            ),
            ("test_zero", "def test_zero():\n    assert total(0) == 0\n"),
        ]);
        assert_eq!(pair(&gone, &new), [("test_total_price", "test_total")]);
        // A genuinely new test, with nothing gone, pairs with nothing.
        assert!(pair(&[], &new[1..]).is_empty());
        let unlike = tests(&[("test_new", "def test_new():\n    assert price(5) > 0\n")]);
        assert!(pair(&gone, &unlike).is_empty());
    }

    #[test]
    fn ambiguous_matches_pair_nothing() {
        let body = |n: &str| format!("def {n}():\n    assert total(5) == 8.0\n");
        // Two gone tests with the same body: which one was renamed is a guess.
        let gone = tests(&[("test_a", &body("test_a")), ("test_b", &body("test_b"))]);
        let new = tests(&[("test_c", &body("test_c"))]);
        assert!(pair(&gone, &new).is_empty());
        // One gone test copied into two new ones.
        let gone = tests(&[("test_a", &body("test_a"))]);
        let new = tests(&[("test_c", &body("test_c")), ("test_d", &body("test_d"))]);
        assert!(pair(&gone, &new).is_empty());
        // The same body beats a close one: test_c is test_a renamed, test_d is test_b's.
        let gone = tests(&[
            ("test_a", &body("test_a")),
            ("test_b", "def test_b():\n    assert total(5) == 9.0\n"),
        ]);
        let new = tests(&[
            ("test_c", &body("test_c")),
            ("test_d", "def test_d():\n    assert total(5) == 9.0\n"),
        ]);
        assert_eq!(
            pair(&gone, &new),
            [("test_c", "test_a"), ("test_d", "test_b")]
        );
    }

    #[test]
    fn the_base_node_id_keeps_class_and_parameters() {
        assert_eq!(
            renamed_nodeid("t.py::C::test_new[1-2]", "test_new", "test_old").as_deref(),
            Some("t.py::C::test_old[1-2]")
        );
        assert_eq!(
            renamed_nodeid("t.py::test_new", "test_new", "test_old").as_deref(),
            Some("t.py::test_old")
        );
        assert_eq!(renamed_nodeid("t.py::test_newer", "test_new", "x"), None);
    }
}
