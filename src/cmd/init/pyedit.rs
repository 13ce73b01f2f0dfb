//! Editing Python source as lines, where the source model (`crate::python`) finds them: a
//! test's `def`, where `import pytest` goes. Enough for the markers `fixgate init` places; a
//! `def` it cannot find (or a file that does not parse) is left to the user.

use crate::python::{Module, Ranged, Stmt};

pub(super) fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The line index (0-based) of the `def` of a function path (`["TestC", "test_x"]`: a method
/// of a class at module level), with its indentation.
pub(super) fn find_def(text: &str, path: &[String]) -> Option<(usize, String)> {
    let m = Module::parse(text);
    let (last, classes) = path.split_last()?;
    let mut body = m.body()?;
    for class in classes {
        body = body.iter().find_map(|s| match s {
            Stmt::ClassDef(c) if c.name.as_str() == class => Some(&c.body[..]),
            _ => None,
        })?;
    }
    let def =
        (body.iter()).find_map(|s| s.as_function_def_stmt().filter(|f| f.name.as_str() == last))?;
    let tokens = m.tokens_in(def.range);
    let keyword = tokens.iter().find(|t| t.is("def") || t.is("async"))?;
    let line = m.line(keyword.range.start());
    let text = m.lines(line, line).next().unwrap_or_default();
    Some((line as usize - 1, text[..indent_of(text)].to_owned()))
}

/// Adds `import pytest` when the module does not import it: before its first import, after a
/// docstring and `from __future__` imports.
pub(super) fn ensure_import_pytest(text: &str) -> String {
    let m = Module::parse(text);
    let body = m.body().unwrap_or_default();
    let pytest = |s: &Stmt| {
        s.as_import_stmt().is_some_and(|i| {
            i.names
                .iter()
                .any(|a| &a.name == "pytest" && a.asname.is_none())
        })
    };
    if body.iter().any(pytest) {
        return text.to_owned();
    }
    let future = |s: &&Stmt| {
        (s.as_import_from_stmt().and_then(|i| i.module.as_ref())).is_some_and(|m| m == "__future__")
    };
    let import = |s: &&Stmt| (s.is_import_stmt() || s.is_import_from_stmt()) && !future(s);
    let after = |s: &Stmt| m.line(s.end()) as usize;
    let docstring = body
        .first()
        .filter(|s| ruff_python_ast::helpers::is_docstring_stmt(s));
    let at = (body
        .iter()
        .find(import)
        .map(|s| m.line(s.start()) as usize - 1))
    .or(body.iter().filter(future).last().map(after))
    .or(docstring.map(after))
    .unwrap_or(0);
    insert_lines(text, at, &["import pytest".to_owned()])
}

/// `text` with `new` inserted before line `at` (0-based; past the end appends).
pub(super) fn insert_lines(text: &str, at: usize, new: &[String]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let at = at.min(lines.len());
    for (k, l) in new.iter().enumerate() {
        lines.insert(at + k, l.clone());
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_functions_and_methods_and_skips_lookalikes() {
        let src = "import os\n\ndef test_ab():\n    pass\n\ndef test_a():\n    pass\n\n\
                   class TestC:\n    def test_a(self):\n        pass\n";
        assert_eq!(find_def(src, &["test_a".into()]), Some((5, String::new())));
        assert_eq!(
            find_def(src, &["TestC".into(), "test_a".into()]),
            Some((9, "    ".into()))
        );
        assert_eq!(find_def(src, &["test_z".into()]), None);
    }

    /// The line scanner took a `def` inside a multi-line string for the test's.
    #[test]
    fn a_def_in_a_string_is_no_def_and_a_decorated_one_is_found_at_its_def_line() {
        let src = "X = '''\ndef test_a():\n'''\n\n@pytest.mark.slow\ndef test_a():\n    pass\n";
        assert_eq!(find_def(src, &["test_a".into()]), Some((5, String::new())));
        assert_eq!(find_def("def test_a(:\n", &["test_a".into()]), None);
    }

    #[test]
    fn adds_import_pytest_after_the_docstring_once() {
        let src = "\"\"\"Doc.\"\"\"\nfrom __future__ import annotations\nimport os\n";
        let out = ensure_import_pytest(src);
        assert_eq!(
            out,
            "\"\"\"Doc.\"\"\"\nfrom __future__ import annotations\nimport pytest\nimport os\n"
        );
        assert_eq!(ensure_import_pytest(&out), out);
        // A line of a string is no import, and an aliased import binds no `pytest`.
        let src = "\"\"\"Doc.\n\nimport pytest\n\"\"\"\nimport pytest as pt\n";
        assert_eq!(
            ensure_import_pytest(src),
            "\"\"\"Doc.\n\nimport pytest\n\"\"\"\nimport pytest\nimport pytest as pt\n"
        );
    }
}
