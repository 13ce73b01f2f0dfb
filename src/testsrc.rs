//! Test sources: the text of one test function and of what surrounds the tests in a file, to
//! tell whether a patch edited a test.

use std::collections::{BTreeMap, HashSet};

/// The file and function a node id names: `tests/test_x.py::TestC::test_f[1-2]` →
/// (`tests/test_x.py`, `test_f`).
pub fn split_nodeid(nodeid: &str) -> (&str, &str) {
    let (file, rest) = nodeid.split_once("::").unwrap_or((nodeid, ""));
    let func = rest.rsplit("::").next().unwrap_or("");
    let func = func.split('[').next().unwrap_or(func);
    (file, func)
}

/// The source of function `name` in Python `text`: its decorators, `def` line and indented body.
/// `None` when the file has no such function. Every definition of the name is included, so a
/// redefinition is part of the text too.
pub fn function_source(text: &str, name: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let is_target = def_rest(trimmed).is_some_and(|rest| {
            rest.strip_prefix(name)
                .is_some_and(|after| after.trim_start().starts_with('('))
        });
        if !is_target {
            i += 1;
            continue;
        }
        // Decorators directly above belong to the test (a new skip marker is an edit).
        let mut start = i;
        while start > 0 && lines[start - 1].trim_start().starts_with('@') {
            start -= 1;
        }
        let mut end = block_end(&lines, i, indent);
        let next = end;
        while end > i + 1 && lines[end - 1].trim().is_empty() {
            end -= 1;
        }
        for l in &lines[start..end] {
            out.push_str(l.trim_end());
            out.push('\n');
        }
        i = next;
    }
    (!out.is_empty()).then_some(out)
}

/// What follows `def ` (or `async def `) on a trimmed line that defines a function.
fn def_rest(trimmed: &str) -> Option<&str> {
    trimmed
        .strip_prefix("async def ")
        .or_else(|| trimmed.strip_prefix("def "))
}

/// The line after the block that starts at `start` (a `def` indented by `indent`): the first
/// later line indented no deeper that is not blank, a comment or a closing parenthesis.
fn block_end(lines: &[&str], start: usize, indent: usize) -> usize {
    let mut end = start + 1;
    while end < lines.len() {
        let l = lines[end];
        let t = l.trim_start();
        if !t.is_empty()
            && (l.len() - t.len()) <= indent
            && !t.starts_with('#')
            && !t.starts_with(')')
        {
            break;
        }
        end += 1;
    }
    end
}

/// The names pytest collected as tests in a file: its test functions and the classes that hold
/// them, as its node ids give them. Read from the collection, they follow the suite's own
/// `python_functions`, `python_classes` and `python_files` (a `check_*` function, a `Suite*`
/// class) rather than a guess at pytest's defaults.
#[derive(Debug, Default)]
pub struct TestNames<'a> {
    functions: HashSet<&'a str>,
    classes: HashSet<&'a str>,
}

impl<'a> TestNames<'a> {
    /// The names of `file`'s tests among `nodeids` (both sides' collections, so that a test the
    /// patch removed or added is a test on either side).
    pub fn of(file: &str, nodeids: impl IntoIterator<Item = &'a str>) -> TestNames<'a> {
        let mut names = TestNames::default();
        for id in nodeids {
            let Some(rest) = id.strip_prefix(file).and_then(|r| r.strip_prefix("::")) else {
                continue;
            };
            let rest = rest.split('[').next().unwrap_or(rest);
            let mut parts: Vec<&str> = rest.split("::").collect();
            if let Some(function) = parts.pop() {
                names.functions.insert(function);
            }
            names.classes.extend(parts);
        }
        names
    }
}

/// The first class of a node id's path inside its file: `t.py::TestC::TestD::test_f` → `TestC`.
pub fn outer_class(nodeid: &str) -> Option<&str> {
    let rest = nodeid.split_once("::")?.1;
    let rest = rest.split('[').next().unwrap_or(rest);
    let (class, _) = rest.split_once("::")?;
    Some(class)
}

/// What surrounds the tests of a file, by scope: the module's (a change decides every test of the
/// file) and each top-level test class's own (its `setUp`, attributes, decorators and header: a
/// change decides that class's tests only).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Around {
    pub module: String,
    pub classes: BTreeMap<String, String>,
}

impl Around {
    /// What surrounds the test `nodeid`: the module's text and its class's.
    pub fn of_test(&self, nodeid: &str) -> String {
        let class = outer_class(nodeid).and_then(|c| self.classes.get(c));
        format!("{}{}", self.module, class.map_or("", String::as_str))
    }
}

/// Everything of a test file but its test functions: imports, module-level data, helpers,
/// fixtures, and the test classes' own lines (their `setUp` and attributes) apart. A change
/// around the tests decides the outcome of every test in its scope, so it marks them all as
/// edited. Blank, comment and top-level import lines are left out, so that reformatting or an
/// added import around tests is no edit; a new test function or test class is no change of
/// what surrounds the others.
pub fn outside_tests(text: &str, names: &TestNames) -> Around {
    let lines: Vec<&str> = text.lines().collect();
    let mut around = Around::default();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let class = (indent == 0)
            .then(|| class_name(trimmed))
            .flatten()
            .filter(|c| names.classes.contains(c));
        if let Some(class) = class {
            // The class's decorators are its own.
            let mut own = take_decorators(&mut around.module);
            let end = block_end(&lines, i, indent);
            own.push_str(&outside_functions(&lines[i..end], names));
            around.classes.insert(class.to_owned(), own);
            i = end;
            continue;
        }
        let end = if def_name(trimmed).is_some_and(|f| names.functions.contains(f)) {
            take_decorators(&mut around.module);
            block_end(&lines, i, indent)
        } else {
            keep(&mut around.module, line, indent);
            i + 1
        };
        i = end;
    }
    around
}

/// The lines of a test class's block but its test functions.
fn outside_functions(lines: &[&str], names: &TestNames) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if i > 0 && def_name(trimmed).is_some_and(|f| names.functions.contains(f)) {
            take_decorators(&mut out);
            i = block_end(lines, i, indent);
        } else {
            keep(&mut out, line, indent);
            i += 1;
        }
    }
    out
}

/// Appends a line that decides outcomes: not blank, a comment or a top-level import (what an
/// import brings in is code under test or a helper whose own change shows elsewhere).
fn keep(out: &mut String, line: &str, indent: usize) {
    let trimmed = line.trim_start();
    let import = indent == 0 && (trimmed.starts_with("import ") || trimmed.starts_with("from "));
    if !trimmed.is_empty() && !trimmed.starts_with('#') && !import {
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// Removes the decorator lines at the end of `out` (copied before the `def` or `class` they
/// belong to was seen) and returns them.
fn take_decorators(out: &mut String) -> String {
    let mut cut = out.len();
    while cut > 0 {
        let last = out[..cut - 1].rfind('\n').map_or(0, |p| p + 1);
        if out[last..cut].trim_start().starts_with('@') {
            cut = last;
        } else {
            break;
        }
    }
    out.split_off(cut)
}

/// The name a trimmed `def` (or `async def`) line defines.
fn def_name(trimmed: &str) -> Option<&str> {
    let rest = def_rest(trimmed)?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

/// The name a trimmed `class` line defines.
fn class_name(trimmed: &str) -> Option<&str> {
    let rest = trimmed.strip_prefix("class ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

/// The lines of `base` that `head` lacks and the lines of `head` that `base` lacks, trimmed:
/// the edited lines of a test, as the report shows them.
pub fn changed_lines(base: &str, head: &str) -> (Vec<String>, Vec<String>) {
    let trim = |t: &str| -> Vec<String> {
        t.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    };
    let (b, h) = (trim(base), trim(head));
    (
        b.iter().filter(|l| !h.contains(l)).cloned().collect(),
        h.iter().filter(|l| !b.contains(l)).cloned().collect(),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn outside_tests_keeps_module_data_and_setup_and_drops_tests_with_decorators() {
        let src = "import json\nRATE = 0.2\n\nclass TestP:\n    def setUp(self):\n        self.x = 1\n\n    @pytest.mark.skip\n    def test_a(self):\n        assert 1\n\n# note\ndef test_b():\n    assert 2\n";
        let ids = ["t.py::TestP::test_a", "t.py::test_b"];
        let names = TestNames::of("t.py", ids);
        let around = outside_tests(src, &names);
        assert_eq!(around.module, "RATE = 0.2\n");
        assert_eq!(
            around.of_test("t.py::TestP::test_a"),
            "RATE = 0.2\nclass TestP:\n    def setUp(self):\n        self.x = 1\n"
        );
        let imported = format!("import os\n{src}");
        assert_eq!(around, outside_tests(&imported, &names));
        let moved = src.replace("RATE = 0.2", "RATE = 0.25");
        assert_ne!(around, outside_tests(&moved, &names));
        let reformatted = src.replace("assert 2", "assert  2");
        assert_eq!(around, outside_tests(&reformatted, &names));
    }

    #[test]
    fn a_new_check_function_or_test_class_is_no_change_around_the_other_tests() {
        // python_functions = check_*: the collection names the tests, not a `test` prefix.
        let base = "RATE = 2\n\n\ndef check_a():\n    assert RATE == 2\n";
        let head = format!(
            "{base}\n\ndef check_b():\n    assert RATE > 1\n\n\n@pytest.mark.usefixtures('db')\n\
             class TestNew:\n    LIMIT = 3\n\n    def check_c(self):\n        assert RATE < self.LIMIT\n"
        );
        let ids = ["t.py::check_a", "t.py::check_b", "t.py::TestNew::check_c"];
        let names = TestNames::of("t.py", ids);
        let (b, h) = (outside_tests(base, &names), outside_tests(&head, &names));
        assert_eq!(b.module, h.module);
        assert_eq!(b.of_test("t.py::check_a"), h.of_test("t.py::check_a"));
        // The new class's own lines are its tests' surroundings, with its decorator.
        assert_eq!(
            h.classes["TestNew"],
            "@pytest.mark.usefixtures('db')\nclass TestNew:\n    LIMIT = 3\n"
        );
        // A helper that is no test stays module data, whatever its name.
        let helper = head.replace("def check_b", "def test_helper_not_collected");
        assert_ne!(outside_tests(&helper, &names).module, b.module);
    }

    #[test]
    fn changed_lines_are_each_sides_own() {
        let (b, h) = changed_lines(
            "def t():\n    assert f() == 8.0\n",
            "def t():\n    assert f() == 7.2\n",
        );
        assert_eq!(b, ["assert f() == 8.0"]);
        assert_eq!(h, ["assert f() == 7.2"]);
    }

    use super::*;

    #[test]
    fn splits_node_ids() {
        assert_eq!(split_nodeid("tests/t.py::test_a"), ("tests/t.py", "test_a"));
        assert_eq!(
            split_nodeid("tests/t.py::C::test_b[x-1]"),
            ("tests/t.py", "test_b")
        );
    }

    #[test]
    fn finds_a_function_with_decorators_and_body_only() {
        let src = "import x\n\n@pytest.mark.skip\ndef test_a():\n    assert 1\n\n    assert 2\n\ndef test_ab():\n    pass\n";
        assert_eq!(
            function_source(src, "test_a").unwrap(),
            "@pytest.mark.skip\ndef test_a():\n    assert 1\n\n    assert 2\n"
        );
        assert_eq!(
            function_source(src, "test_ab").unwrap(),
            "def test_ab():\n    pass\n"
        );
        assert!(function_source(src, "test_c").is_none());
    }

    #[test]
    fn methods_in_classes_end_at_the_next_method() {
        let src = "class TestC:\n    def test_m(self):\n        assert 1\n    def test_n(self):\n        pass\n";
        assert_eq!(
            function_source(src, "test_m").unwrap(),
            "    def test_m(self):\n        assert 1\n"
        );
    }
}
