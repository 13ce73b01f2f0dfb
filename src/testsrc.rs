//! Test sources: the text of one test function and of what surrounds the tests in a file, to
//! tell whether a patch edited a test.

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

/// Everything of a test file but its test functions: imports, module-level data, helpers,
/// fixtures, classes with their `setUp` and attributes. A change here decides the outcome of
/// every test in the file, so it marks them all as edited. Blank, comment and top-level import
/// lines are left out, so that reformatting or an added import around tests is no edit.
pub fn outside_tests(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let is_test = def_rest(trimmed).is_some_and(|rest| rest.starts_with("test"));
        if is_test {
            // Drop decorators already copied above it, then skip the body.
            while out.ends_with('\n') {
                let last = out[..out.len() - 1].rfind('\n').map_or(0, |p| p + 1);
                if out[last..].trim_start().starts_with('@') {
                    out.truncate(last);
                } else {
                    break;
                }
            }
            i = block_end(&lines, i, indent);
            continue;
        }
        // Imports decide no outcome by themselves (what they bring in is code under test or a
        // helper whose own change shows elsewhere): an added import is no edit of every test.
        let import =
            indent == 0 && (trimmed.starts_with("import ") || trimmed.starts_with("from "));
        if !trimmed.is_empty() && !trimmed.starts_with('#') && !import {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        i += 1;
    }
    out
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
        assert_eq!(
            outside_tests(src),
            "RATE = 0.2\nclass TestP:\n    def setUp(self):\n        self.x = 1\n"
        );
        let imported = format!("import os\n{src}");
        assert_eq!(outside_tests(src), outside_tests(&imported));
        let moved = src.replace("RATE = 0.2", "RATE = 0.25");
        assert_ne!(outside_tests(src), outside_tests(&moved));
        let reformatted = src.replace("assert 2", "assert  2");
        assert_eq!(outside_tests(src), outside_tests(&reformatted));
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
