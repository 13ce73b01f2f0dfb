//! Whether a function's result depends on its arguments only: its code names nothing but its
//! parameters, its own locals and builtins that compute without side effects. Filling the
//! `lru_cache` of such a function (with values nothing changes in place, which the plugin
//! checks) hands a later test what a call would compute again: it is no state one test leaves
//! another. Under-approximate by design: anything this reading does not follow (a nested
//! function, a lambda, an f-string, a default that names a value, `global`, an import, a
//! generator) makes the function impure, which is what every function was before.

use std::collections::BTreeSet;

use super::{is_name, is_string, Token, KEYWORDS};

/// Builtins that compute from their arguments alone, with no effect outside their result, and
/// the exceptions a function may raise. Not `print`, `open`, `input`, `id`, `globals`...
const PURE_BUILTINS: &[&str] = &[
    "abs",
    "all",
    "any",
    "ascii",
    "bin",
    "bool",
    "bytes",
    "callable",
    "chr",
    "complex",
    "dict",
    "divmod",
    "enumerate",
    "filter",
    "float",
    "format",
    "frozenset",
    "hash",
    "hex",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "list",
    "map",
    "max",
    "min",
    "next",
    "oct",
    "ord",
    "pow",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "slice",
    "sorted",
    "str",
    "sum",
    "tuple",
    "zip",
    "ArithmeticError",
    "AssertionError",
    "Exception",
    "IndexError",
    "KeyError",
    "LookupError",
    "NotImplementedError",
    "OverflowError",
    "RuntimeError",
    "StopIteration",
    "TypeError",
    "ValueError",
    "ZeroDivisionError",
];

/// Statements and expressions this reading does not follow.
const UNFOLLOWED: &[&str] = &[
    "global", "nonlocal", "import", "from", "yield", "await", "async", "lambda", "def", "class",
];

/// What one function's code reads, gathered statement by statement.
#[derive(Debug, Default)]
pub(super) struct Purity {
    /// The names its code reads that are not after a dot (`n`, `len`, not `bit_length`).
    free: BTreeSet<String>,
    /// Its parameters, and the names its statements store to as a whole (`s = ...`,
    /// `for i in ...`, `as e`): locals.
    locals: BTreeSet<String>,
    impure: bool,
}

impl Purity {
    /// A function whose `def` statement (its decorators first) is `tokens`.
    pub(super) fn new(tokens: &[Token]) -> Purity {
        let mut p = Purity::default();
        let Some(def) = tokens.iter().position(|t| t.text == "def") else {
            p.impure = true;
            return p;
        };
        if def > 0 && tokens[def - 1].text == "async" {
            p.impure = true;
        }
        // The parameters: a name at depth 1 after `(`, `,`, `*` or `**`. A default is
        // evaluated once, when the function is defined: one that is not a literal may be
        // shared state (`def f(n, seen=set())`).
        let mut depth = 0usize;
        let mut default = false;
        let mut close = tokens.len();
        for (i, t) in tokens.iter().enumerate().skip(def + 2) {
            match t.text {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        close = i;
                        break;
                    }
                }
                "," if depth == 1 => default = false,
                "=" if depth == 1 => default = true,
                _ if default => {
                    let literal = is_string(t.text)
                        || !is_name(t.text)
                        || matches!(t.text, "None" | "True" | "False");
                    if !literal || t.text.starts_with(['f', 'F']) && is_string(t.text) {
                        p.impure = true;
                    }
                }
                _ if depth == 1 && is_name(t.text) && !is_string(t.text) => {
                    let prev = tokens[i - 1].text;
                    if matches!(prev, "(" | "," | "*") {
                        p.locals.insert(t.text.to_owned());
                    }
                }
                _ => {}
            }
        }
        // `def f(n): return n + LIMIT`: a body on the `def` line, after the colon that ends it
        // (a return annotation's brackets aside).
        let mut depth = 0usize;
        for (i, t) in tokens.iter().enumerate().skip(close + 1) {
            match t.text {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => depth = depth.saturating_sub(1),
                ":" if depth == 0 => {
                    if i + 1 < tokens.len() {
                        p.statement(&tokens[i + 1..]);
                    }
                    break;
                }
                _ => {}
            }
        }
        p
    }

    /// One statement of its body.
    pub(super) fn statement(&mut self, tokens: &[Token]) {
        let mut depth = 0usize;
        let mut after_for = false;
        let mut target_end = None;
        for (i, t) in tokens.iter().enumerate() {
            let prev = i.checked_sub(1).map(|p| tokens[p].text);
            let next = tokens.get(i + 1).map(|n| n.text);
            match t.text {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => depth = depth.saturating_sub(1),
                _ => {}
            }
            if UNFOLLOWED.contains(&t.text) {
                self.impure = true;
            }
            // An f-string's fields are code this reading does not see.
            if is_string(t.text) && t.text.contains('{') && {
                let prefix = t.text.split(['\'', '"']).next().unwrap_or_default();
                prefix.contains(['f', 'F'])
            } {
                self.impure = true;
            }
            let assigns =
                t.text == "=" && !matches!(prev, Some("=" | "<" | ">" | "!")) && next != Some("=");
            if assigns && depth == 0 && target_end.is_none() {
                target_end = Some(i);
            }
            if !is_name(t.text) || is_string(t.text) || KEYWORDS.contains(&t.text) {
                after_for = match t.text {
                    "for" => true,
                    "in" => false,
                    _ => after_for,
                };
                continue;
            }
            if prev == Some(".") {
                continue; // an attribute, of a value this reading follows by its own name
            }
            // A keyword argument's name (`sorted(x, reverse=True)`).
            if depth > 0 && next == Some("=") && tokens.get(i + 2).is_none_or(|n| n.text != "=") {
                continue;
            }
            let whole = !matches!(next, Some("." | "[" | "("));
            // `for i, x in ...` and `except E as e` store to the name as a whole; `(y := f())`
            // too.
            if whole
                && (after_for
                    || prev == Some("as")
                    || next == Some(":") && { tokens.get(i + 2).is_some_and(|n| n.text == "=") })
            {
                self.locals.insert(t.text.to_owned());
            }
            self.free.insert(t.text.to_owned());
        }
        // `s, d = ...`, `x += 1`, `x: int = 1`: the names stored to as a whole left of `=`.
        if let Some(end) = target_end {
            let target = &tokens[..end];
            let annotated = target.iter().position(|t| t.text == ":");
            let target = &target[..annotated.unwrap_or(target.len())];
            for (i, t) in target.iter().enumerate() {
                let prev = i.checked_sub(1).map(|p| target[p].text);
                let next = target.get(i + 1).map(|n| n.text);
                let augmented = next.is_some_and(|n| "+-*/%&|^@<>".contains(n));
                if is_name(t.text)
                    && !is_string(t.text)
                    && !KEYWORDS.contains(&t.text)
                    && prev != Some(".")
                    && (next.is_none() || matches!(next, Some("," | ")")) || augmented)
                {
                    self.locals.insert(t.text.to_owned());
                }
            }
        }
    }

    /// Whether the function `own` reads nothing but its arguments (a call of itself, by its
    /// name, is a call of what this decides; `Names::pure_function` checks that nothing else
    /// binds the name).
    pub(super) fn pure(&self, own: &str) -> bool {
        !self.impure
            && self
                .free
                .iter()
                .all(|n| n == own || self.locals.contains(n) || PURE_BUILTINS.contains(&n.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;

    fn pure(src: &str) -> Vec<(String, bool)> {
        parse(src)
            .defs
            .into_iter()
            .map(|d| (d.key.split('#').next().unwrap().to_owned(), d.pure))
            .collect()
    }

    #[test]
    fn a_function_is_pure_when_it_names_only_its_parameters_locals_and_pure_builtins() {
        let src = "import functools\n\nLIMIT = 10\n\n\n\
                   @functools.lru_cache\ndef _shift_to_odd(n):\n    'Return s, d'\n    \
                   s = ((n - 1) ^ n).bit_length() - 1\n    d = n >> s\n    \
                   assert (1 << s) * d == n and d & 1 and s >= 0\n    return s, d\n\n\n\
                   def loops(n, k=2, *rest, flag=None, **kw):\n    total = 0\n    \
                   for i, x in enumerate(range(n)):\n        total += x * k\n    \
                   try:\n        return sorted([y for y in rest], reverse=True), total\n    \
                   except ValueError as e:\n        raise TypeError(str(e))\n\n\n\
                   def reads_global(n):\n    return n + LIMIT\n\n\n\
                   def shared_default(n, seen=set()):\n    seen.add(n)\n    return len(seen)\n\n\n\
                   def stores_in_a_global(n):\n    CACHE[n] = n\n    return n\n\n\n\
                   def prints(n):\n    print(n)\n    return n\n\n\n\
                   def formats(n):\n    return f'{n}{LIMIT}'\n\n\n\
                   def nested(n):\n    def g():\n        return n\n    return g()\n\n\n\
                   def generator(n):\n    yield n\n\n\n\
                   def rebinds(n):\n    global LIMIT\n    LIMIT = n\n    return n\n\n\n\
                   def walrus(n):\n    if (m := n + 1) > 2:\n        return m\n    return 0\n\n\n\
                   def one_line(n): return n + LIMIT\n\n\n\
                   def one_line_pure(n) -> int: return n + 1\n\n\n\
                   def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n";
        let got = pure(src);
        let of = |name: &str| got.iter().find(|(k, _)| k == name).unwrap().1;
        assert!(of("_shift_to_odd"), "{got:?}");
        assert!(of("loops"), "{got:?}");
        assert!(of("walrus"), "{got:?}");
        assert!(of("one_line_pure"), "{got:?}");
        assert!(of("fib"), "a call of itself: {got:?}");
        for impure in [
            "reads_global",
            "shared_default",
            "stores_in_a_global",
            "prints",
            "formats",
            "nested",
            "generator",
            "rebinds",
            "one_line",
        ] {
            assert!(!of(impure), "{impure}: {got:?}");
        }
    }
}
