//! Editing Python source as lines: finding a test's `def`, adding `import pytest`, inserting
//! lines. Enough for the markers `fixgate init` places; a `def` it cannot find is left to the user.

pub(super) fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The line index of `def name(` for a function path (`["TestC", "test_x"]`), with its
/// indentation; a class narrows the search to the lines indented below it.
pub(super) fn find_def(text: &str, path: &[String]) -> Option<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let (mut from, mut to, mut min_indent) = (0, lines.len(), 0);
    for (i, name) in path.iter().enumerate() {
        let last = i + 1 == path.len();
        let found = (from..to).find(|&n| {
            let l = lines[n];
            let ind = indent_of(l);
            if ind < min_indent || (i == 0 && ind != 0) {
                return false;
            }
            let t = l.trim_start();
            if last {
                let t = t.strip_prefix("async ").unwrap_or(t);
                t.strip_prefix("def ")
                    .and_then(|r| r.strip_prefix(name.as_str()))
                    .is_some_and(|r| r.trim_start().starts_with('('))
            } else {
                t.strip_prefix("class ")
                    .and_then(|r| r.strip_prefix(name.as_str()))
                    .is_some_and(|r| r.starts_with([':', '(', ' ']))
            }
        })?;
        let ind = indent_of(lines[found]);
        if last {
            return Some((found, lines[found][..ind].to_owned()));
        }
        // The class body: the following lines indented deeper (blank lines included).
        from = found + 1;
        to = (from..lines.len())
            .find(|&n| !lines[n].trim().is_empty() && indent_of(lines[n]) <= ind)
            .unwrap_or(lines.len());
        min_indent = ind + 1;
    }
    None
}

/// Adds `import pytest` when the module does not import it: before its first import, after a
/// docstring and `from __future__` lines.
pub(super) fn ensure_import_pytest(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.iter().any(|l| {
        l.starts_with("import pytest")
            && l["import pytest".len()..]
                .chars()
                .next()
                .is_none_or(|c| c.is_whitespace() || c == ',' || c == '#')
    }) {
        return text.to_owned();
    }
    let mut at = 0;
    let mut i = 0;
    // A leading docstring.
    while i < lines.len() && (lines[i].trim().is_empty() || lines[i].starts_with('#')) {
        i += 1;
    }
    if let Some(first) = lines.get(i) {
        let t = first.trim_start();
        if let Some(q) = ["\"\"\"", "'''"].into_iter().find(|q| t.starts_with(q)) {
            let rest = &t[3..];
            let mut end = i;
            if !rest.contains(q) {
                end = (i + 1..lines.len())
                    .find(|&n| lines[n].contains(q))
                    .unwrap_or(i);
            }
            at = end + 1;
        }
    }
    let first_import = (at..lines.len()).find(|&n| {
        let l = lines[n];
        (l.starts_with("import ") || l.starts_with("from ")) && !l.starts_with("from __future__")
    });
    let after_future = (at..lines.len())
        .filter(|&n| lines[n].starts_with("from __future__"))
        .max()
        .map(|n| n + 1);
    let at = first_import.or(after_future).unwrap_or(at);
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

    #[test]
    fn adds_import_pytest_after_the_docstring_once() {
        let src = "\"\"\"Doc.\"\"\"\nfrom __future__ import annotations\nimport os\n";
        let out = ensure_import_pytest(src);
        assert_eq!(
            out,
            "\"\"\"Doc.\"\"\"\nfrom __future__ import annotations\nimport pytest\nimport os\n"
        );
        assert_eq!(ensure_import_pytest(&out), out);
    }
}
