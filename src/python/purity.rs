//! Whether a function's result depends on its arguments only: its code names nothing but its
//! parameters, its own locals and builtins that compute without side effects. Filling the
//! `lru_cache` of such a function (with values nothing changes in place, which the plugin
//! checks) hands a later test what a call would compute again: it is no state one test leaves
//! another. Under-approximate by design: anything this reading does not follow (a nested
//! function, a lambda, an f-string, a default that names a value, `global`, an import, a
//! generator, `await`) makes the function impure, which is what every function was before.

use std::collections::BTreeSet;

use ruff_python_ast::visitor::{walk_expr, walk_stmt, Visitor};
use ruff_python_ast::{self as ast, Expr, Stmt};

/// Builtins that compute from their arguments alone, with no effect outside their result, and
/// the exceptions a function may raise. Not `print`, `open`, `input`, `id`, `globals`, nor
/// `format` (its `n` type reads the locale, a process setting).
const PURE_BUILTINS: &str = "abs all any ascii bin bool bytes callable chr complex dict divmod \
    enumerate filter float frozenset hash hex int isinstance issubclass iter len list map max \
    min next oct ord pow range repr reversed round set slice sorted str sum tuple zip \
    ArithmeticError AssertionError Exception IndexError KeyError LookupError \
    NotImplementedError OverflowError RuntimeError StopIteration TypeError ValueError \
    ZeroDivisionError";

/// Whether `name` is one of [`PURE_BUILTINS`]: a module that binds one calls its own.
pub(crate) fn is_pure_builtin(name: &str) -> bool {
    PURE_BUILTINS.split_whitespace().any(|b| b == name)
}

/// Whether the module-level function `f` reads nothing but its arguments (a call of itself is
/// no such function: its recursion's depth differs with what the cache holds).
pub(crate) fn pure(f: &ast::StmtFunctionDef) -> bool {
    let params = &f.parameters;
    let defaults = (params
        .posonlyargs
        .iter()
        .chain(&params.args)
        .chain(&params.kwonlyargs))
    .filter_map(|p| p.default.as_deref());
    let mut reads = Reads::default();
    reads
        .locals
        .extend(params.iter().map(|p| p.name().as_str()));
    reads.visit_body(&f.body);
    !f.is_async
        && f.decorator_list
            .iter()
            .all(|d| cache_decorator(&d.expression))
        && defaults.into_iter().all(literal)
        && !reads.impure
        && (reads.free.iter()).all(|n| reads.locals.contains(n) || is_pure_builtin(n))
}

/// `functools.lru_cache` or `functools.cache`, called with literal arguments or not at all (any
/// other decorator's code runs around every call).
fn cache_decorator(expr: &Expr) -> bool {
    let named = |e: &Expr| match e {
        Expr::Name(n) => matches!(n.id.as_str(), "lru_cache" | "cache"),
        Expr::Attribute(a) => {
            matches!(a.attr.as_str(), "lru_cache" | "cache")
                && matches!(&*a.value, Expr::Name(n) if n.id.as_str() == "functools")
        }
        _ => false,
    };
    let constant = |e: &Expr| {
        matches!(
            e,
            Expr::NoneLiteral(_) | Expr::BooleanLiteral(_) | Expr::NumberLiteral(_)
        )
    };
    match expr {
        Expr::Call(call) => {
            named(&call.func)
                && call.arguments.args.iter().all(constant)
                && (call.arguments.keywords.iter()).all(|k| {
                    constant(&k.value)
                        && k.arg
                            .as_ref()
                            .is_some_and(|a| matches!(a.as_str(), "maxsize" | "typed"))
                })
        }
        e => named(e),
    }
}

/// A default evaluated once, when the function is defined, that holds no shared state: a
/// number, a plain string, `None`, `True`, `False`, `...` (`def f(n, seen=[])` shares its list).
fn literal(expr: &Expr) -> bool {
    match expr {
        Expr::UnaryOp(u) => literal(&u.operand),
        e => matches!(
            e,
            Expr::NumberLiteral(_)
                | Expr::StringLiteral(_)
                | Expr::BytesLiteral(_)
                | Expr::NoneLiteral(_)
                | Expr::BooleanLiteral(_)
                | Expr::EllipsisLiteral(_)
        ),
    }
}

/// What one function's body reads.
#[derive(Default)]
struct Reads<'a> {
    /// The names its code reads (not an attribute's, nor a comprehension's own variable in it).
    free: BTreeSet<&'a str>,
    /// Its parameters and the names it stores to as a whole: locals.
    locals: BTreeSet<&'a str>,
    /// The variables of the comprehensions around the expression being read.
    hidden: Vec<Vec<&'a str>>,
    impure: bool,
}

impl<'a> Visitor<'a> for Reads<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::FunctionDef(_)
            | Stmt::ClassDef(_)
            | Stmt::Global(_)
            | Stmt::Nonlocal(_)
            | Stmt::Import(_)
            | Stmt::ImportFrom(_) => self.impure = true,
            Stmt::Try(t) => self.locals.extend(t.handlers.iter().filter_map(|h| {
                let ast::ExceptHandler::ExceptHandler(h) = h;
                h.name.as_ref().map(|n| n.as_str())
            })),
            _ => {}
        }
        walk_stmt(self, stmt);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        let generators = match expr {
            Expr::Name(n) => {
                let name = n.id.as_str();
                if !self.hidden.iter().flatten().any(|h| *h == name) {
                    match n.ctx.is_load() {
                        true => self.free.insert(name),
                        false => self.locals.insert(name),
                    };
                }
                return;
            }
            // Beyond a value (`__globals__`, `__class__.__subclasses__()`), or a cache's own
            // state (`cache_info()`).
            Expr::Attribute(a) => {
                let attr = a.attr.as_str();
                self.impure |= attr.starts_with("__") || attr.starts_with("cache_");
                None
            }
            Expr::Lambda(_)
            | Expr::Yield(_)
            | Expr::YieldFrom(_)
            | Expr::Await(_)
            | Expr::FString(_)
            | Expr::TString(_) => {
                self.impure = true;
                None
            }
            Expr::ListComp(c) => Some(&c.generators),
            Expr::SetComp(c) => Some(&c.generators),
            Expr::DictComp(c) => Some(&c.generators),
            Expr::Generator(c) => Some(&c.generators),
            _ => None,
        };
        let hides = generators.map(|g| {
            let names = g.iter().flat_map(|c| super::stores(&c.target)).collect();
            self.hidden.push(names);
        });
        walk_expr(self, expr);
        if hides.is_some() {
            self.hidden.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::audit::pysrc::parse;

    fn pure(src: &str) -> Vec<(String, bool)> {
        (parse(src).defs.into_iter())
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
        // An annotated global binds its own name, not its annotation's (`int` stays the builtin).
        assert!(pure(&format!("LIMIT: int = 3\n\n\n{src}"))[0].1);
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
                   def except_name(n):\n    try:\n        return int(n)\n    except ValueError: n = LIMIT\n    return n\n\n\n\
                   def unpacked(n):\n    (a, b) = divmod(n, 2)\n    return a + b\n\n\n\
                   async def waits(n):\n    return n\n";
        let got = pure(src);
        let of = |name: &str| got.iter().find(|(k, _)| k == name).unwrap().1;
        for pure in [
            "_shift_to_odd",
            "loops",
            "walrus",
            "one_line_pure",
            "comprehension",
            "cached_literal",
            "chained",
            "unpacked",
        ] {
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
            "waits",
        ] {
            assert!(!of(impure), "{impure}: {got:?}");
        }
    }
}
