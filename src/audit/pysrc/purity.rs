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
/// the exceptions a function may raise. Not `print`, `open`, `input`, `id`, `globals`, nor
/// `format` (its `n` type reads the locale, a process setting)...
pub(super) const PURE_BUILTINS: &[&str] = &[
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

/// The decorators a pure function may have: `functools.lru_cache` or `functools.cache`, with
/// literal arguments (any other decorator's code runs around every call).
const DECORATOR: &[&str] = &[
    "@",
    "functools",
    ".",
    "lru_cache",
    "cache",
    "(",
    ")",
    "maxsize",
    "typed",
    "=",
    ",",
    "None",
    "True",
    "False",
];

/// Attributes that reach beyond a value (`__globals__`, `__class__.__subclasses__()`) or read a
/// cache's own state (`cache_info()`).
fn unfollowed_attribute(name: &str) -> bool {
    name.starts_with("__") || name.starts_with("cache_")
}

/// What one function's code reads, gathered statement by statement.
#[derive(Debug, Default)]
pub(super) struct Purity {
    /// The names its code reads that are not after a dot (`n`, `len`, not `bit_length`), but
    /// a comprehension's own variables inside it.
    free: BTreeSet<String>,
    /// Its parameters, and the names its statements store to as a whole (`s = ...`,
    /// `for i in ...`, `as e`, `(m := ...)`): locals.
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
        let decorators = &tokens[..def];
        if !decorators.iter().all(|t| {
            DECORATOR.contains(&t.text) || t.text.starts_with(|c: char| c.is_ascii_digit())
        }) {
            p.impure = true; // `async def`, or a decorator whose code runs around the calls
        }
        // The parameters: a name at depth 1 after `(`, `,`, `*` or `**`. A default is
        // evaluated once, when the function is defined: anything but a number, a string or
        // `None`/`True`/`False` may be shared state (`def f(n, seen=[])`).
        let mut depth = 0usize;
        let mut default = false;
        let mut close = tokens.len();
        for (i, t) in tokens.iter().enumerate().skip(def + 2) {
            let literal = match is_string(t.text) {
                true => !is_fstring(t.text),
                false => {
                    !is_name(t.text) && !is_bracket(t.text)
                        || matches!(t.text, "None" | "True" | "False")
                }
            };
            if default && depth == 1 && !matches!(t.text, "," | ")") && !literal {
                p.impure = true;
            }
            match t.text {
                "(" | "[" | "{" => {
                    depth += 1;
                    if default {
                        p.impure = true;
                    }
                }
                ")" | "]" | "}" => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        close = i;
                        break;
                    }
                }
                "," if depth == 1 => default = false,
                "=" if depth == 1 => default = true,
                _ if !default && depth == 1 && is_name(t.text) && !is_string(t.text) => {
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
        // Each bracket of the statement, whether it is a comprehension, and the names its own
        // `for ... in` binds (visible inside it only); each token's enclosing brackets.
        let mut comprehension: Vec<BTreeSet<&str>> = Vec::new();
        let mut is_comprehension: Vec<bool> = Vec::new();
        let mut stack: Vec<usize> = Vec::new();
        let mut within: Vec<Vec<usize>> = Vec::with_capacity(tokens.len());
        let mut binding: Option<Option<usize>> = None; // after a `for`, in which bracket
        for t in tokens {
            match t.text {
                "(" | "[" | "{" => {
                    comprehension.push(BTreeSet::new());
                    is_comprehension.push(false);
                    stack.push(comprehension.len() - 1);
                }
                ")" | "]" | "}" => {
                    stack.pop();
                }
                _ => {}
            }
            within.push(stack.clone());
            let here = stack.last().copied();
            match t.text {
                "for" => {
                    binding = Some(here);
                    if let Some(b) = here {
                        is_comprehension[b] = true;
                    }
                }
                "in" if binding == Some(here) => binding = None,
                _ => {}
            }
            if let (Some(Some(b)), true) = (binding, is_name(t.text) && !is_string(t.text)) {
                if binding == Some(here) && !KEYWORDS.contains(&t.text) {
                    comprehension[b].insert(t.text);
                }
            }
        }
        let compound = tokens.first().is_some_and(|t| KEYWORDS.contains(&t.text));
        let mut binding_for = false;
        for (i, t) in tokens.iter().enumerate() {
            let prev = i.checked_sub(1).map(|p| tokens[p].text);
            let next = tokens.get(i + 1).map(|n| n.text);
            if UNFOLLOWED.contains(&t.text) || is_fstring(t.text) {
                self.impure = true;
            }
            let depth = within[i].len();
            if depth == 0 {
                binding_for = match t.text {
                    "for" => true,
                    "in" => false,
                    _ => binding_for,
                };
            }
            if !is_name(t.text) || is_string(t.text) || KEYWORDS.contains(&t.text) {
                continue;
            }
            if prev == Some(".") {
                if unfollowed_attribute(t.text) {
                    self.impure = true;
                }
                continue; // an attribute, of a value this reading follows by its own name
            }
            // A keyword argument's name (`sorted(x, reverse=True)`).
            if depth > 0 && next == Some("=") && tokens.get(i + 2).is_none_or(|n| n.text != "=") {
                continue;
            }
            // A comprehension's variable, inside it.
            if within[i]
                .iter()
                .any(|&b| is_comprehension[b] && comprehension[b].contains(t.text))
            {
                continue;
            }
            let whole = !matches!(next, Some("." | "[" | "("));
            let walrus = next == Some(":") && tokens.get(i + 2).is_some_and(|n| n.text == "=");
            // `for i, x in ...` and `except E as e` store to the name as a whole; `(y := f())`
            // too, wherever it is.
            if walrus || whole && depth == 0 && (binding_for || prev == Some("as")) {
                self.locals.insert(t.text.to_owned());
            }
            self.free.insert(t.text.to_owned());
        }
        if !compound {
            self.targets(tokens, &within);
        }
    }

    /// The names a simple statement stores to as a whole: `s, d = ...`, `a = b = ...`,
    /// `x += 1`, `x: int = 1`; not a subscript's or an attribute's (`out[i] = n`).
    fn targets(&mut self, tokens: &[Token], within: &[Vec<usize>]) {
        let assigns: Vec<usize> = (0..tokens.len())
            .filter(|&i| {
                let prev = i.checked_sub(1).map(|p| tokens[p].text);
                let next = tokens.get(i + 1).map(|n| n.text);
                tokens[i].text == "="
                    && within[i].is_empty()
                    && !matches!(prev, Some("=" | "<" | ">" | "!"))
                    && next != Some("=")
            })
            .collect();
        let mut start = 0;
        for &end in &assigns {
            let mut target = &tokens[start..end];
            if let Some(colon) =
                (start..end).find(|&k| tokens[k].text == ":" && within[k].is_empty())
            {
                target = &tokens[start..colon.min(start + 1)]; // `x: int = 1`
            }
            for (k, t) in target.iter().enumerate() {
                let at = start + k;
                let prev = k.checked_sub(1).map(|p| target[p].text);
                let next = target.get(k + 1).map(|n| n.text);
                // `x += 1`: the operator just before the `=`.
                let augmented = at + 2 == end && next.is_some_and(|n| "+-*/%&|^@".contains(n));
                if is_name(t.text)
                    && !is_string(t.text)
                    && !KEYWORDS.contains(&t.text)
                    && within[at].is_empty()
                    && prev != Some(".")
                    && (next.is_none() || next == Some(",") || augmented)
                {
                    self.locals.insert(t.text.to_owned());
                }
            }
            start = end + 1;
        }
    }

    /// Whether the function reads nothing but its arguments (a call of itself is no such
    /// function: its recursion's depth differs with what the cache holds).
    pub(super) fn pure(&self) -> bool {
        !self.impure
            && (self.free.iter())
                .all(|n| self.locals.contains(n) || PURE_BUILTINS.contains(&n.as_str()))
    }
}

fn is_bracket(text: &str) -> bool {
    matches!(text, "(" | "[" | "{" | ")" | "]" | "}")
}

/// An f-string's fields are code this reading does not see.
fn is_fstring(text: &str) -> bool {
    is_string(text)
        && text
            .split(['\'', '"'])
            .next()
            .is_some_and(|prefix| prefix.contains(['f', 'F']))
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
    fn a_module_that_binds_a_builtins_name_has_no_pure_function() {
        let src = "def f(n):\n    return len(n)\n";
        assert_eq!(pure(src), [("f".to_owned(), true)]);
        // A method's name is its class's, not the module's.
        let method = "class C:\n    def max(self):\n        return 0\n\n\n";
        assert!(pure(&format!("{method}{src}")).contains(&("f".to_owned(), true)));
        for shadow in [
            "def len(x):\n    return 0\n",
            "from m import sorted\n",
            "len = max\n",
            "from m import *\n",
        ] {
            let got = pure(&format!("{shadow}\n\n{src}"));
            assert!(got.iter().all(|(_, p)| !p), "{shadow}: {got:?}");
        }
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
                   def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\n\n\
                   def list_default(n, seen=[]):\n    seen.append(n)\n    return len(seen)\n\n\n\
                   def dict_default(n, seen={}):\n    return n\n\n\n\
                   def clamp(n):\n    if n > LIMIT: n = LIMIT\n    return n\n\n\n\
                   def put(n):\n    out = [0, 0, 0]\n    out[BASE - 1] = n\n    return tuple(out)\n\n\n\
                   def leaks_comprehension(n):\n    xs = [S for S in range(n)]\n    return S\n\n\n\
                   def comprehension(n):\n    return sum(x * x for x in range(n)), [y for y in range(n)]\n\n\n\
                   @scaled\ndef decorated(n):\n    return n\n\n\n\
                   @functools.lru_cache(maxsize=128, typed=True)\ndef cached_literal(n):\n    return n\n\n\n\
                   def dunder(n):\n    return n.__class__.__subclasses__()\n\n\n\
                   def cache_state(n):\n    return n + cache_state.cache_info().currsize\n\n\n\
                   def chained(n):\n    a = b = n\n    a += 1\n    s: int = 2\n    return a + b + s\n\n\n\
                   def except_name(n):\n    try:\n        return int(n)\n    except ValueError: n = LIMIT\n    return n\n";
        let got = pure(src);
        let of = |name: &str| got.iter().find(|(k, _)| k == name).unwrap().1;
        assert!(of("_shift_to_odd"), "{got:?}");
        assert!(of("loops"), "{got:?}");
        assert!(of("walrus"), "{got:?}");
        assert!(of("one_line_pure"), "{got:?}");
        for pure in ["comprehension", "cached_literal", "chained"] {
            assert!(of(pure), "{pure}: {got:?}");
        }
        assert!(!of("fib"), "a call of itself: {got:?}");
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
            "list_default",
            "dict_default",
            "clamp",
            "put",
            "leaks_comprehension",
            "decorated",
            "dunder",
            "cache_state",
            "except_name",
        ] {
            assert!(!of(impure), "{impure}: {got:?}");
        }
    }
}
