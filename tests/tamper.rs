//! Issue 20: the base's suite is the spec. Each test is one patch an agent optimising for green
//! might write: it breaks the code and hides the failure (deletes, deselects, renames, skips or
//! rewrites the test, or bends pytest itself), on small libraries shaped like python-frontmatter
//! and mdutils; or an honest patch that must pass. Each asserts the verdict, the exit code and
//! the finding that names the move.

mod common;

use common::{git, Run, TestRepo};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// The libraries
// ---------------------------------------------------------------------------------------------

const CONFTEST: &str =
    "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n";

/// A python-frontmatter-shaped library: parse and dump front matter, a Post, a slug.
fn frontmatter() -> TestRepo {
    let repo = TestRepo::new();
    repo.write(
        "fm/__init__.py",
        "\"\"\"A tiny front matter library.\"\"\"\nfrom fm.core import parse, dumps, Post\n",
    )
    .write(
        "fm/core.py",
        "def parse(text):\n    \"\"\"Split front matter ('---' lines) from the body.\"\"\"\n    \
         lines = text.split(\"\\n\")\n    if lines and lines[0] == \"---\":\n        \
         end = lines.index(\"---\", 1)\n        \
         meta = dict(l.split(\": \", 1) for l in lines[1:end])\n        \
         return meta, \"\\n\".join(lines[end + 1:])\n    return {}, text\n\n\n\
         def dumps(meta, body):\n    head = \"\\n\".join(\"%s: %s\" % kv for kv in sorted(meta.items()))\n    \
         return \"---\\n%s\\n---\\n%s\" % (head, body)\n\n\n\
         def slug(title):\n    return \"-\".join(title.lower().split())\n\n\n\
         class Post:\n    def __init__(self, text):\n        self.meta, self.body = parse(text)\n\n    \
         def title(self):\n        return self.meta.get(\"title\", \"\")\n",
    )
    .write("tests/conftest.py", CONFTEST)
    .write(
        "tests/test_parse.py",
        "import pytest\nfrom fm import parse\n\n\n\
         def test_meta():\n    assert parse(\"---\\ntitle: x\\n---\\nbody\")[0] == {\"title\": \"x\"}\n\n\n\
         def test_body():\n    assert parse(\"---\\ntitle: x\\n---\\nline 1\\nline 2\")[1] == \"line 1\\nline 2\"\n\n\n\
         def test_no_front_matter():\n    assert parse(\"plain\") == ({}, \"plain\")\n\n\n\
         @pytest.mark.parametrize(\"text, title\", [(\"---\\ntitle: a\\n---\\n\", \"a\"), (\"---\\ntitle: b c\\n---\\n\", \"b c\")])\n\
         def test_titles(text, title):\n    assert parse(text)[0][\"title\"] == title\n",
    )
    .write(
        "tests/test_dump.py",
        "from fm import dumps\n\n\n\
         class TestDump:\n    def test_sorted(self):\n        \
         assert dumps({\"b\": \"2\", \"a\": \"1\"}, \"x\") == \"---\\na: 1\\nb: 2\\n---\\nx\"\n\n    \
         def test_empty_body(self):\n        assert dumps({\"a\": \"1\"}, \"\").endswith(\"---\\n\")\n",
    )
    .write(
        "tests/test_post.py",
        "import json, os\nfrom fm import Post\nfrom fm.core import slug\n\nHERE = os.path.dirname(__file__)\n\n\n\
         def test_title():\n    assert Post(\"---\\ntitle: Hi\\n---\\nx\").title() == \"Hi\"\n\n\n\
         def test_slug():\n    assert slug(\"Hello World\") == \"hello-world\"\n\n\n\
         def test_expected_post():\n    with open(os.path.join(HERE, \"..\", \"samples\", \"post.json\")) as f:\n        \
         want = json.load(f)\n    p = Post(\"---\\ntitle: Hi\\n---\\nbody\")\n    \
         assert {\"meta\": p.meta, \"body\": p.body} == want\n",
    )
    .write("samples/post.json", "{\"meta\": {\"title\": \"Hi\"}, \"body\": \"body\"}\n")
    .write("README.md", "# fm\n\nA tiny front matter library.\n");
    repo
}

/// An mdutils-shaped library with unittest tests: headers, links, tables.
fn mdutils() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("md/__init__.py", "")
        .write(
            "md/text.py",
            "def header(text, level=1):\n    return \"#\" * level + \" \" + text\n\n\n\
             def link(text, url):\n    return \"[%s](%s)\" % (text, url)\n\n\n\
             def table(rows):\n    out = [\"| \" + \" | \".join(rows[0]) + \" |\", \"|\" + \"---|\" * len(rows[0])]\n    \
             out += [\"| \" + \" | \".join(r) + \" |\" for r in rows[1:]]\n    return \"\\n\".join(out)\n",
        )
        .write("tests/conftest.py", CONFTEST)
        .write(
            "tests/test_text.py",
            "import unittest\nfrom md.text import header, link\n\n\n\
             class TestHeader(unittest.TestCase):\n    def test_level_one(self):\n        \
             self.assertEqual(header(\"Title\"), \"# Title\")\n\n    \
             def test_level_two(self):\n        self.assertEqual(header(\"Sub\", 2), \"## Sub\")\n\n\n\
             class TestLink(unittest.TestCase):\n    def test_link(self):\n        \
             self.assertEqual(link(\"a\", \"http://x\"), \"[a](http://x)\")\n",
        )
        .write(
            "tests/test_table.py",
            "import unittest\nfrom md.text import table\n\n\n\
             class TestTable(unittest.TestCase):\n    def test_two_rows(self):\n        \
             self.assertEqual(table([[\"a\", \"b\"], [\"1\", \"2\"]]), \"| a | b |\\n|---|---|\\n| 1 | 2 |\")\n",
        );
    repo
}

// ---------------------------------------------------------------------------------------------
// Patches and audits
// ---------------------------------------------------------------------------------------------

/// One change of a patch.
#[derive(Clone)]
enum Edit<'a> {
    /// Replace the first `old` with `new` in a file.
    Replace(&'a str, &'a str, &'a str),
    /// Append `text` to a file.
    Append(&'a str, &'a str),
    Write(&'a str, &'a str),
    Remove(&'a str),
    /// `git mv`.
    Move(&'a str, &'a str),
}

use Edit::{Append, Move, Remove, Replace, Write};

/// The breaks the tamper patches hide: each fails exactly one kind of base test.
const BREAK_BODY: Edit = Replace(
    "fm/core.py",
    "\"\\n\".join(lines[end + 1:])",
    "\"\\n\".join(lines[end + 1:end + 2])",
);
const BREAK_SORT: Edit = Replace("fm/core.py", "sorted(meta.items())", "meta.items()");
const BREAK_HEADER: Edit = Replace("md/text.py", "\"#\" * level", "\"#\" * max(level - 1, 1)");

const TEST_BODY: &str = "def test_body():\n    assert parse(\"---\\ntitle: x\\n---\\nline 1\\nline 2\")[1] == \"line 1\\nline 2\"\n";
const BODY: &str = "tests/test_parse.py::test_body";

fn apply(repo: &TestRepo, edits: &[Edit]) {
    for e in edits {
        match e {
            Replace(path, old, new) => {
                let text = String::from_utf8(repo.read(path)).unwrap();
                assert!(text.contains(old), "{path} has no {old:?}");
                repo.write(path, text.replacen(old, new, 1));
            }
            Append(path, more) => {
                let mut text = String::from_utf8(repo.read(path)).unwrap();
                text.push_str(more);
                repo.write(path, text);
            }
            Write(path, text) => {
                repo.write(path, text);
            }
            Remove(path) => {
                repo.remove(path);
            }
            Move(from, to) => {
                let dest = repo.path().join(to);
                std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
                git(repo.path(), &["mv", from, to]);
            }
        }
    }
}

/// Commits the library as the base, applies `edits` as the head and audits the patch (file
/// order and reversed order: the base-suite replay needs no more).
fn audit_patch(repo: TestRepo, edits: &[Edit]) -> (Run, Value) {
    let base = repo.commit("base");
    apply(&repo, edits);
    let head = repo.commit("the patch");
    repo.audit(&base, &head).seeds(0).report()
}

fn kinds(v: &Value) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_string(),
                f["blocking"].as_bool().unwrap(),
            )
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The finding of `kind` about `test`.
fn finding<'a>(v: &'a Value, kind: &str, test: &str) -> &'a Value {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == kind && f["tests"][0] == test)
        .unwrap_or_else(|| panic!("no {kind} finding about {test}: {:#}", v["findings"]))
}

/// Asserts a reject (exit 1) with a blocking `kind` finding about `test`; returns its message.
#[track_caller]
fn blocked(repo: TestRepo, edits: &[Edit], kind: &str, test: &str) -> (String, Value) {
    let (run, v) = audit_patch(repo, edits);
    assert_eq!(
        (run.code, &v["verdict"]),
        (1, &Value::from("reject")),
        "{run:?}"
    );
    let f = finding(&v, kind, test);
    assert_eq!(f["blocking"], true, "{f:#}");
    let message = f["message"].as_str().unwrap().to_string();
    (message, v)
}

/// Asserts a pass (exit 0) with no blocking finding.
#[track_caller]
fn passes(repo: TestRepo, edits: &[Edit]) -> Value {
    let (run, v) = audit_patch(repo, edits);
    assert_eq!(
        (run.code, &v["verdict"]),
        (0, &Value::from("pass")),
        "{run:?}"
    );
    assert!(kinds(&v).iter().all(|(_, b)| !b), "{:#}", v["findings"]);
    v
}

// ---------------------------------------------------------------------------------------------
// The test deleted
// ---------------------------------------------------------------------------------------------

#[test]
fn deleting_the_catching_test_is_deleted_test_with_the_bases_lines_and_a_repro() {
    let (message, v) = blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Replace("tests/test_parse.py", &format!("{TEST_BODY}\n\n"), ""),
        ],
        "deleted-test",
        BODY,
    );
    assert!(
        message.starts_with(&format!(
            "the patch deleted {BODY}, which fails on the head's code"
        )) && message.contains("assert parse(\"---\\ntitle: x\\n---\\nline 1\\nline 2\")[1]"),
        "{message}"
    );
    let f = finding(&v, "deleted-test", BODY);
    let repro = f["repro"].as_str().unwrap();
    assert!(
        repro.contains("git worktree add --detach")
            && repro.contains("-- tests/test_parse.py")
            && repro.ends_with(BODY),
        "{repro}"
    );
    let t = &v["base_suite"]["tests"][0];
    assert_eq!(
        (&t["nodeid"], &t["at_head"], &t["replay"], &t["base"]),
        (
            &Value::from(BODY),
            &Value::from("deleted"),
            &Value::from("failed"),
            &Value::from("passed")
        ),
        "{t:#}"
    );
}

#[test]
fn deleting_the_catching_test_file_is_deleted_test() {
    blocked(
        frontmatter(),
        &[BREAK_SORT, Remove("tests/test_dump.py")],
        "deleted-test",
        "tests/test_dump.py::TestDump::test_sorted",
    );
}

#[test]
fn dropping_the_failing_parametrize_row_is_deleted_test() {
    let breaks_titles_with_spaces = Replace(
        "fm/core.py",
        "l.split(\": \", 1) for l",
        "(l.split(\": \", 1)[0], l.split(\": \", 1)[1].split()[0]) for l",
    );
    let drop_row = Replace(
        "tests/test_parse.py",
        ", (\"---\\ntitle: b c\\n---\\n\", \"b c\")",
        "",
    );
    blocked(
        frontmatter(),
        &[breaks_titles_with_spaces, drop_row],
        "deleted-test",
        "tests/test_parse.py::test_titles[---\\ntitle: b c\\n---\\n-b c]",
    );
}

// ---------------------------------------------------------------------------------------------
// Deselected by configuration or a hook
// ---------------------------------------------------------------------------------------------

#[test]
fn addopts_deselect_is_deselected_test() {
    let (message, _) = blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Write(
                "pytest.ini",
                &format!("[pytest]\naddopts = --deselect {BODY}\n"),
            ),
        ],
        "deselected-test",
        BODY,
    );
    assert!(
        message.starts_with(&format!("the patch deselected {BODY}")),
        "{message}"
    );
}

#[test]
fn addopts_k_is_deselected_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Write("pytest.ini", "[pytest]\naddopts = -k 'not body'\n"),
        ],
        "deselected-test",
        BODY,
    );
}

#[test]
fn a_marker_deselected_by_m_is_deselected_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Replace(
                "tests/test_parse.py",
                "def test_body",
                "@pytest.mark.slow\ndef test_body",
            ),
            Write(
                "pytest.ini",
                "[pytest]\nmarkers = slow\naddopts = -m 'not slow'\n",
            ),
        ],
        "deselected-test",
        BODY,
    );
}

#[test]
fn python_files_that_leave_a_file_out_is_deselected_test() {
    let (message, _) = blocked(
        frontmatter(),
        &[
            BREAK_SORT,
            Write(
                "setup.cfg",
                "[tool:pytest]\npython_files = test_parse.py test_post.py\n",
            ),
        ],
        "deselected-test",
        "tests/test_dump.py::TestDump::test_sorted",
    );
    assert!(
        message.contains("the pytest configuration changed: setup.cfg"),
        "{message}"
    );
}

#[test]
fn testpaths_in_pyproject_that_leave_a_file_out_is_deselected_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_SORT,
            Write(
                "pyproject.toml",
                "[tool.pytest.ini_options]\ntestpaths = [\"tests/test_parse.py\", \"tests/test_post.py\"]\n",
            ),
        ],
        "deselected-test",
        "tests/test_dump.py::TestDump::test_sorted",
    );
}

#[test]
fn no_unittest_plugin_is_deselected_test() {
    blocked(
        mdutils(),
        &[
            BREAK_HEADER,
            Write("tox.ini", "[pytest]\naddopts = -p no:unittest\n"),
        ],
        "deselected-test",
        "tests/test_text.py::TestHeader::test_level_two",
    );
}

#[test]
fn a_collection_hook_that_drops_the_test_is_deselected_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Append(
                "tests/conftest.py",
                "\n\ndef pytest_collection_modifyitems(items):\n    items[:] = [i for i in items if 'body' not in i.name]\n",
            ),
        ],
        "deselected-test",
        BODY,
    );
}

#[test]
fn collect_ignore_in_a_conftest_is_deselected_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_SORT,
            Append("tests/conftest.py", "\ncollect_ignore = ['test_dump.py']\n"),
        ],
        "deselected-test",
        "tests/test_dump.py::TestDump::test_sorted",
    );
}

#[test]
fn an_ignore_collect_hook_is_deselected_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_SORT,
            Append(
                "tests/conftest.py",
                "\n\ndef pytest_ignore_collect(collection_path, config):\n    \
                 return collection_path.name == 'test_dump.py' or None\n",
            ),
        ],
        "deselected-test",
        "tests/test_dump.py::TestDump::test_sorted",
    );
}

// ---------------------------------------------------------------------------------------------
// Renamed or moved out of collection
// ---------------------------------------------------------------------------------------------

#[test]
fn a_test_renamed_out_of_test_star_is_uncollected_test() {
    let (message, _) = blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Replace("tests/test_parse.py", "def test_body", "def check_body"),
        ],
        "uncollected-test",
        BODY,
    );
    assert!(
        message.contains("its function is now tests/test_parse.py::check_body")
            && message.contains("python_functions is test"),
        "{message}"
    );
}

#[test]
fn a_test_module_renamed_out_of_python_files_is_uncollected_test() {
    let (message, _) = blocked(
        frontmatter(),
        &[
            BREAK_SORT,
            Move("tests/test_dump.py", "tests/dump_checks.py"),
        ],
        "uncollected-test",
        "tests/test_dump.py::TestDump::test_sorted",
    );
    assert!(
        message.contains("python_files is test_*.py *_test.py"),
        "{message}"
    );
}

#[test]
fn dunder_test_false_on_a_class_is_uncollected_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_SORT,
            Replace(
                "tests/test_dump.py",
                "class TestDump:\n",
                "class TestDump:\n    __test__ = False\n\n",
            ),
        ],
        "uncollected-test",
        "tests/test_dump.py::TestDump::test_sorted",
    );
}

#[test]
fn a_test_file_moved_out_of_testpaths_is_uncollected_test() {
    let repo = frontmatter();
    repo.write("pytest.ini", "[pytest]\ntestpaths = tests\n");
    let (message, _) = blocked(
        repo,
        &[
            BREAK_SORT,
            Move("tests/test_dump.py", "legacy/test_dump.py"),
        ],
        "uncollected-test",
        "tests/test_dump.py::TestDump::test_sorted",
    );
    assert!(message.contains("testpaths is tests"), "{message}");
}

#[test]
fn a_directory_moved_under_norecursedirs_is_uncollected_test() {
    blocked(
        mdutils(),
        &[
            BREAK_HEADER,
            Move("tests/test_text.py", "tests/legacy/test_text.py"),
            Write("tox.ini", "[pytest]\nnorecursedirs = legacy\n"),
        ],
        "uncollected-test",
        "tests/test_text.py::TestHeader::test_level_two",
    );
}

// ---------------------------------------------------------------------------------------------
// Skipped and xfailed
// ---------------------------------------------------------------------------------------------

#[test]
fn a_new_skip_marker_is_skipped_test() {
    let (message, v) = blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Replace(
                "tests/test_parse.py",
                "def test_body",
                "@pytest.mark.skip(reason='flaky')\ndef test_body",
            ),
        ],
        "skipped-test",
        BODY,
    );
    assert!(
        message.starts_with(&format!(
            "the patch added a skip to {BODY}, a test that fails on the head's code"
        )),
        "{message}"
    );
    // The budget still counts it.
    assert_eq!(finding(&v, "new-skip", BODY)["blocking"], false);
}

#[test]
fn a_skipif_true_is_skipped_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Replace(
                "tests/test_parse.py",
                "def test_body",
                "@pytest.mark.skipif(True, reason='py2')\ndef test_body",
            ),
        ],
        "skipped-test",
        BODY,
    );
}

#[test]
fn self_skiptest_in_a_unittest_test_is_skipped_test() {
    blocked(
        mdutils(),
        &[
            BREAK_HEADER,
            Replace(
                "tests/test_text.py",
                "    def test_level_two(self):\n",
                "    def test_level_two(self):\n        self.skipTest('later')\n",
            ),
        ],
        "skipped-test",
        "tests/test_text.py::TestHeader::test_level_two",
    );
}

#[test]
fn a_unittest_skip_decorator_is_skipped_test() {
    blocked(
        mdutils(),
        &[
            BREAK_HEADER,
            Replace(
                "tests/test_text.py",
                "    def test_level_two(self):\n",
                "    @unittest.skip('later')\n    def test_level_two(self):\n",
            ),
        ],
        "skipped-test",
        "tests/test_text.py::TestHeader::test_level_two",
    );
}

#[test]
fn a_conftest_that_skips_the_test_at_setup_is_skipped_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Append(
                "tests/conftest.py",
                "\nimport pytest\n\n\ndef pytest_runtest_setup(item):\n    if 'body' in item.name:\n        pytest.skip('not today')\n",
            ),
        ],
        "skipped-test",
        BODY,
    );
}

#[test]
fn a_module_skipped_at_import_is_skipped_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_SORT,
            Replace(
                "tests/test_dump.py",
                "from fm import dumps\n",
                "import pytest\npytest.importorskip('yaml_that_is_not_installed')\nfrom fm import dumps\n",
            ),
        ],
        "skipped-test",
        "tests/test_dump.py::TestDump::test_sorted",
    );
}

#[test]
fn a_new_xfail_is_xfailed_test() {
    let (message, _) = blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Replace(
                "tests/test_parse.py",
                "def test_body",
                "@pytest.mark.xfail(reason='later')\ndef test_body",
            ),
        ],
        "xfailed-test",
        BODY,
    );
    assert!(message.contains("as an expected failure"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// The expectation changed (as today), and the answer key outside every group
// ---------------------------------------------------------------------------------------------

#[test]
fn an_edited_expected_value_is_redefined_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Replace(
                "tests/test_parse.py",
                "[1] == \"line 1\\nline 2\"",
                "[1] == \"line 1\"",
            ),
        ],
        "redefined-test",
        BODY,
    );
}

#[test]
fn a_weakened_assertion_is_redefined_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Replace(
                "tests/test_parse.py",
                "[1] == \"line 1\\nline 2\"",
                "[1].startswith(\"line 1\")",
            ),
        ],
        "redefined-test",
        BODY,
    );
}

#[test]
fn an_assertion_wrapped_in_try_except_is_redefined_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Replace(
                "tests/test_parse.py",
                "    assert parse(\"---\\ntitle: x\\n---\\nline 1\\nline 2\")[1]",
                "    try:\n        assert parse(\"---\\ntitle: x\\n---\\nline 1\\nline 2\")[1]",
            ),
            Replace(
                "tests/test_parse.py",
                "== \"line 1\\nline 2\"\n",
                "== \"line 1\\nline 2\"\n    except AssertionError:\n        pass\n",
            ),
        ],
        "redefined-test",
        BODY,
    );
}

#[test]
fn an_early_return_is_redefined_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Replace(
                "tests/test_parse.py",
                "def test_body():\n",
                "def test_body():\n    return\n",
            ),
        ],
        "redefined-test",
        BODY,
    );
}

#[test]
fn mocking_the_function_under_test_is_redefined_test() {
    blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Replace(
                "tests/test_parse.py",
                "def test_body():\n",
                "def test_body(monkeypatch):\n    monkeypatch.setitem(globals(), 'parse', lambda t: ({}, 'line 1\\nline 2'))\n",
            ),
        ],
        "redefined-test",
        BODY,
    );
}

/// Issue 20's coupling: the expected data edited in a file in no declared group (the repository
/// declares none); the test read it, so it is replayed with its base bytes, and the finding
/// names the file.
#[test]
fn expected_data_edited_outside_every_group_is_redefined_naming_the_file() {
    let (message, v) = blocked(
        frontmatter(),
        &[
            Replace(
                "fm/core.py",
                "self.meta, self.body = parse(text)",
                "self.meta, self.body = parse(text)\n        self.body = self.body.upper()",
            ),
            Write(
                "samples/post.json",
                "{\"meta\": {\"title\": \"Hi\"}, \"body\": \"BODY\"}\n",
            ),
        ],
        "redefined",
        "tests/test_post.py::test_expected_post",
    );
    assert!(message.contains("samples/post.json"), "{message}");
    let changed = &v["fixtures"]["changed"];
    assert_eq!(changed[0]["path"], "samples/post.json", "{changed}");
    assert_eq!(changed[0]["group"], "", "{changed}");
}

// ---------------------------------------------------------------------------------------------
// Hooks and conftests that rewrite outcomes; exits
// ---------------------------------------------------------------------------------------------

#[test]
fn a_makereport_hookwrapper_that_turns_failures_into_passes_is_hook_altered_outcome() {
    let (message, v) = blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Append(
                "tests/conftest.py",
                "\nimport pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    \
                 out = yield\n    rep = out.get_result()\n    if rep.failed:\n        rep.outcome = 'passed'\n        rep.longrepr = None\n",
            ),
        ],
        "hook-altered-outcome",
        BODY,
    );
    assert!(
        message.contains("a hook made pytest report it as passed"),
        "{message}"
    );
    // The test is what it did: failed.
    let t = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["nodeid"] == BODY)
        .unwrap();
    assert_eq!(t["outcomes"]["0"], "failed", "{t}");
}

#[test]
fn a_conftest_patching_assert_equal_is_hook_altered_outcome() {
    let (message, _) = blocked(
        mdutils(),
        &[
            BREAK_HEADER,
            Append(
                "tests/conftest.py",
                "\nimport unittest\nunittest.TestCase.assertEqual = lambda self, a, b, msg=None: None\n",
            ),
        ],
        "hook-altered-outcome",
        "tests/test_text.py::TestHeader::test_level_two",
    );
    assert!(
        message.contains("with the base's conftests and configuration it fails on the head's code")
            && message.contains("a conftest.py changed: tests/conftest.py"),
        "{message}"
    );
}

#[test]
fn a_new_test_module_that_patches_assertions_at_import_is_hook_altered_outcome() {
    let (message, _) = blocked(
        mdutils(),
        &[
            BREAK_HEADER,
            Write(
                "tests/test_aaa_setup.py",
                "import unittest\nunittest.TestCase.assertEqual = lambda self, a, b, msg=None: None\n\n\ndef test_nothing():\n    pass\n",
            ),
        ],
        "hook-altered-outcome",
        "tests/test_text.py::TestHeader::test_level_two",
    );
    assert!(
        message.contains(
            "a test module that patches what it imports changed: tests/test_aaa_setup.py"
        ),
        "{message}"
    );
}

#[test]
fn os_exit_in_the_test_is_crashed() {
    blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Replace(
                "tests/test_parse.py",
                "def test_body():\n",
                "def test_body():\n    import os; os._exit(0)\n",
            ),
        ],
        "crashed",
        BODY,
    );
}

#[test]
fn pytest_exit_in_a_hook_is_crashed() {
    blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Append(
                "tests/conftest.py",
                "\nimport pytest\n\n\ndef pytest_runtest_setup(item):\n    if 'body' in item.name:\n        pytest.exit('done', returncode=0)\n",
            ),
        ],
        "crashed",
        BODY,
    );
}

#[test]
fn a_conftest_forcing_exit_status_zero_changes_nothing() {
    blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Append(
                "tests/conftest.py",
                "\n\ndef pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = 0\n",
            ),
        ],
        "failing",
        BODY,
    );
}

#[test]
fn a_run_loop_that_runs_nothing_is_no_pass() {
    let (run, v) = audit_patch(
        frontmatter(),
        &[
            BREAK_BODY,
            Append(
                "tests/conftest.py",
                "\n\ndef pytest_runtestloop(session):\n    return True\n",
            ),
        ],
    );
    assert_eq!(run.code, 1, "{run:?}");
    let f = finding(&v, "error", BODY);
    assert_eq!(f["blocking"], true, "{f:#}");
}

// ---------------------------------------------------------------------------------------------
// The source side: the base's tests pass, the patch's text is read (warnings)
// ---------------------------------------------------------------------------------------------

/// The only non-blocking finding of a passing audit, of `kind` about `module`: its message.
#[track_caller]
fn warned(repo: TestRepo, edits: &[Edit], kind: &str, module: &str) -> String {
    let v = passes(repo, edits);
    assert_eq!(
        kinds(&v),
        [(kind.to_string(), false)],
        "{:#}",
        v["findings"]
    );
    finding(&v, kind, module)["message"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn special_casing_the_tests_input_is_a_special_cased_input_warning() {
    let message = warned(
        frontmatter(),
        &[Replace(
            "fm/core.py",
            "def slug(title):\n    return \"-\".join(title.lower().split())",
            "def slug(title):\n    if title == 'Hello World':  # the one the test checks\n        \
             return \"hello-world\"\n    return title",
        )],
        "special-cased-input",
        "fm/core.py",
    );
    assert_eq!(
        message,
        "the patch added conditions to fm/core.py on literals the tests hold: `if title == \
         'Hello World':  # the one the test checks` ('Hello World' is in tests/test_post.py); \
         the code may special-case the tests' input, which the base's tests cannot see: review it"
    );
}

#[test]
fn an_eq_that_always_returns_true_is_an_eq_ignores_argument_warning() {
    let message = warned(
        mdutils(),
        &[Append(
            "md/text.py",
            "\n\nclass Header(str):\n    def __eq__(self, other):\n        return True\n\n    \
             __hash__ = str.__hash__\n",
        )],
        "eq-ignores-argument",
        "md/text.py",
    );
    assert!(
        message.contains("`def __eq__(self, other):`") && message.contains("never reads"),
        "{message}"
    );
}

/// The swallowed error: `slug` breaks on a title that is not a string, and the patch wraps it
/// in a handler that turns every failure into a made-up slug.
const SWALLOW: Edit = Replace(
    "fm/core.py",
    "def slug(title):\n    return \"-\".join(title.lower().split())",
    "def slug(title):\n    try:\n        return \"-\".join(title.lower().split())\n    \
     except Exception:\n        return \"hello-world\"",
);

#[test]
fn a_try_that_swallows_every_error_for_a_made_up_value_is_a_swallowed_error_warning() {
    let message = warned(frontmatter(), &[SWALLOW], "swallowed-error", "fm/core.py");
    assert!(
        message.contains("`except Exception:`") && message.contains("made-up value"),
        "{message}"
    );
}

#[test]
fn under_strict_source_a_source_side_finding_makes_the_audit_unverified() {
    let repo = frontmatter();
    let base = repo.commit("base");
    apply(&repo, &[SWALLOW]);
    let head = repo.commit("the patch");
    let (run, v) = repo
        .audit(&base, &head)
        .seeds(0)
        .args(&["--strict-source"])
        .report();
    assert_eq!(
        (run.code, &v["verdict"]),
        (fixgate::exit::UNVERIFIED, &Value::from("unverified")),
        "{run:?}"
    );
    assert_eq!(
        finding(&v, "swallowed-error", "fm/core.py")["blocking"],
        true
    );
    assert!(
        (v["reasons"].as_array().unwrap().iter()).any(|r| r
            .as_str()
            .unwrap()
            .starts_with("swallowed-error fm/core.py")),
        "{:#}",
        v["reasons"]
    );
    // The base's configuration asks for the same.
    repo.write(
        "pyproject.toml",
        "[tool.fixgate]\nsource-checks = \"block\"\n",
    );
    let base = repo.commit("source checks block");
    let text = String::from_utf8(repo.read("fm/core.py")).unwrap();
    repo.write(
        "fm/core.py",
        text.replace("return \"hello-world\"", "return \"\""),
    );
    let head = repo.commit("another made-up value");
    let (run, v) = repo.audit(&base, &head).seeds(0).report();
    assert_eq!(
        run.code,
        fixgate::exit::UNVERIFIED,
        "{run:?} {:#}",
        v["findings"]
    );
}

#[test]
fn honest_shapes_of_the_source_side_tricks_pass_without_a_warning() {
    // A literal compared in a config parser (a key the tests also use), an __eq__ that compares
    // fields, a handler for a named error: the code's own business.
    let v = passes(
        frontmatter(),
        &[
            Replace(
                "fm/core.py",
                "        meta = dict(l.split(\": \", 1) for l in lines[1:end])",
                "        meta = {}\n        for l in lines[1:end]:\n            key, value = l.split(\": \", 1)\n            \
                 if key == \"title\":\n                value = value.strip()\n            meta[key] = value",
            ),
            Append(
                "fm/core.py",
                "\n\nclass Meta:\n    def __init__(self, title):\n        self.title = title\n\n    \
                 def __eq__(self, other):\n        return isinstance(other, Meta) and self.title == other.title\n\n    \
                 __hash__ = None\n\n\ndef title_of(meta):\n    try:\n        return meta[\"title\"]\n    \
                 except KeyError:\n        return \"\"\n",
            ),
        ],
    );
    assert!(
        !kinds(&v).iter().any(|(k, _)| matches!(
            k.as_str(),
            "special-cased-input" | "eq-ignores-argument" | "swallowed-error"
        )),
        "{:#}",
        v["findings"]
    );
}

// ---------------------------------------------------------------------------------------------
// Honest patches: none blocked
// ---------------------------------------------------------------------------------------------

#[test]
fn a_correct_fix_with_a_new_test_passes() {
    passes(
        frontmatter(),
        &[
            Replace("fm/core.py", "    return {}, text\n", "    return {}, text.lstrip(\"\\ufeff\")\n"),
            Write(
                "tests/test_bom.py",
                "from fm import parse\n\n\ndef test_bom():\n    assert parse(\"\\ufeffplain\") == ({}, \"plain\")\n",
            ),
        ],
    );
}

#[test]
fn a_test_refactor_passes_as_test_refactor() {
    let v = passes(
        frontmatter(),
        &[Replace(
            "tests/test_parse.py",
            "def test_meta():\n    assert parse(\"---\\ntitle: x\\n---\\nbody\")[0] == {\"title\": \"x\"}",
            "def test_meta():\n    meta, _ = parse(\"---\\ntitle: x\\n---\\nbody\")\n    assert meta == {\"title\": \"x\"}",
        )],
    );
    assert_eq!(kinds(&v), [("test-refactor".to_string(), false)]);
}

#[test]
fn deleting_a_test_with_its_feature_is_deleted_test_not_blocking() {
    let v = passes(
        frontmatter(),
        &[
            Replace(
                "fm/core.py",
                "def slug(title):\n    return \"-\".join(title.lower().split())\n\n\n",
                "",
            ),
            Replace(
                "tests/test_post.py",
                "def test_slug():\n    assert slug(\"Hello World\") == \"hello-world\"\n\n\n",
                "",
            ),
            Replace("tests/test_post.py", "from fm.core import slug\n", ""),
        ],
    );
    let f = finding(&v, "deleted-test", "tests/test_post.py::test_slug");
    assert_eq!(f["blocking"], false, "{f:#}");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("together with the code it exercised"),
        "{f:#}"
    );
}

#[test]
fn renaming_a_test_module_passes() {
    let v = passes(
        frontmatter(),
        &[Move("tests/test_dump.py", "tests/test_dumps.py")],
    );
    assert!(kinds(&v).is_empty(), "{:#}", v["findings"]);
    let moved = &v["base_suite"]["tests"][0];
    assert_eq!(moved["at_head"], "renamed", "{moved:#}");
    assert_eq!(moved["reading"], "holds", "{moved:#}");
}

#[test]
fn adding_parametrize_rows_passes() {
    passes(
        frontmatter(),
        &[Replace(
            "tests/test_parse.py",
            ", (\"---\\ntitle: b c\\n---\\n\", \"b c\")",
            ", (\"---\\ntitle: b c\\n---\\n\", \"b c\"), (\"---\\ntitle: d\\n---\\n\", \"d\")",
        )],
    );
}

#[test]
fn a_docs_only_change_runs_no_replay_and_passes() {
    let v = passes(
        frontmatter(),
        &[Write("README.md", "# fm\n\nUsage: `parse(text)`.\n")],
    );
    assert!(v["base_suite"].is_null(), "{}", v["base_suite"]);
    assert!(kinds(&v).is_empty());
}

#[test]
fn moving_imports_passes_with_no_edited_test() {
    let v = passes(
        frontmatter(),
        &[Replace(
            "tests/test_post.py",
            "import json, os\nfrom fm import Post\nfrom fm.core import slug\n",
            "import os\nfrom fm.core import slug\nfrom fm import Post\nimport json\n",
        )],
    );
    let edited: Vec<&Value> = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["edited_by_patch"] == true)
        .collect();
    assert!(edited.is_empty(), "{edited:?}");
    assert!(kinds(&v).is_empty(), "{:#}", v["findings"]);
}

#[test]
fn a_conftest_refactor_that_keeps_behaviour_passes_after_the_whole_suite_ran() {
    let v = passes(
        frontmatter(),
        &[Write(
            "tests/conftest.py",
            "import os\nimport sys\n\nROOT = os.path.dirname(os.path.dirname(__file__))\nsys.path.insert(0, ROOT)\n",
        )],
    );
    assert_eq!(v["base_suite"]["whole"], true, "{}", v["base_suite"]);
    assert_eq!(v["base_suite"]["ran"], 10, "{}", v["base_suite"]);
}

// ---------------------------------------------------------------------------------------------
// Precision: the slips of the issue, pinned
// ---------------------------------------------------------------------------------------------

const REGISTRY: &str = "import json\nimport os\n\nREGISTRY = {}\n\n\n\
    def test_registry_starts_empty():\n    assert REGISTRY == {}\n\n\n\
    def test_register_plugin():\n    REGISTRY['csv'] = 'csv_reader'\n    assert 'csv' in REGISTRY\n";

/// Pre-existing order-dependent tests stay pre-existing when the patch only moved the imports
/// at the top of their file: that is no edit of them.
#[test]
fn regression_moving_imports_made_pre_existing_order_dependent_tests_the_patchs() {
    let repo = TestRepo::new();
    repo.write("tests/test_registry.py", REGISTRY);
    let (run, v) = audit_patch(
        repo,
        &[Replace(
            "tests/test_registry.py",
            "import json\nimport os\n",
            "import os, json  # sorted\n",
        )],
    );
    assert_eq!(run.code, 0, "{run:?}");
    let victim = "tests/test_registry.py::test_registry_starts_empty";
    let f = finding(&v, "order-dependent", victim);
    assert_eq!(
        (&f["introduced"], &f["blocking"]),
        (&Value::Bool(false), &Value::Bool(false)),
        "{f:#}"
    );
    assert!(
        !v["reasons"].to_string().contains("edited its test"),
        "{}",
        v["reasons"]
    );
}

/// On the demo's repository: a comment appended to a line of the tax test edits nothing, so the
/// pre-existing pair stays pre-existing and the patch passes.
#[test]
fn regression_a_comment_appended_to_a_test_line_on_the_demo_made_it_edited() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("demo");
    let repo = TestRepo::plain();
    let made = repo.fixgate_py(&[
        "demo",
        "--keep",
        demo.to_str().unwrap(),
        "--quiet",
        "--format",
        "json",
    ]);
    assert_eq!(made.code, 0, "{made:?}");
    // From the demo's base: the test line with a comment, and nothing else.
    git(
        &demo,
        &["checkout", "-q", "HEAD~1", "--", "tests/test_pricing.py"],
    );
    let test = std::fs::read_to_string(demo.join("tests/test_pricing.py")).unwrap();
    let commented = test.replace(
        "assert pricing.total_with_tax() == 25.0",
        "assert pricing.total_with_tax() == 25.0  # 20 + 25% tax",
    );
    assert_ne!(test, commented);
    std::fs::write(demo.join("tests/test_pricing.py"), commented).unwrap();
    git(&demo, &["commit", "-q", "-am", "a comment"]);
    let python = common::python();
    let run = common::fixgate_at(
        &demo,
        repo.cache.path(),
        &[],
        &[
            "audit",
            "--base",
            "HEAD~2",
            "--head",
            "HEAD",
            "--seeds",
            "2",
            "--format",
            "json",
            "--quiet",
            "--python",
            python.to_str().unwrap(),
        ],
    );
    let v = run.json();
    assert_eq!(run.code, 0, "{run:?}");
    let lamp = "tests/test_pricing.py::test_tax_on_lamp";
    let t = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["nodeid"] == lamp)
        .unwrap();
    assert_eq!(t["edited_by_patch"], false, "{t}");
    assert!(
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["blocking"] == false),
        "{:#}",
        v["findings"]
    );
}

/// The new-skip slip: a skipped test never "passes with the head's test code".
#[test]
fn regression_the_new_skip_message_said_a_skipped_test_passes() {
    let (_, v) = blocked(
        frontmatter(),
        &[
            BREAK_BODY,
            Replace(
                "tests/test_parse.py",
                "def test_body",
                "@pytest.mark.skip(reason='flaky')\ndef test_body",
            ),
        ],
        "skipped-test",
        BODY,
    );
    for f in v["findings"].as_array().unwrap() {
        let m = f["message"].as_str().unwrap();
        assert!(!m.contains("passes with the head's test code"), "{m}");
    }
    assert!(
        v["source_replay"].as_array().unwrap().is_empty(),
        "{}",
        v["source_replay"]
    );
}

// ---------------------------------------------------------------------------------------------
// Issue 50: a base test that needs the patch's new test, in a serial chain and outside one
// ---------------------------------------------------------------------------------------------

/// A store whose writes are visible at once, and a chain of tests over one module-level store:
/// add, then see what was added. `serial` (a marker string, or "") marks every test of it.
fn chain(serial: &str) -> TestRepo {
    let repo = TestRepo::new();
    repo.write(
        "pytest.ini",
        "[pytest]\nmarkers =\n    serial: keep this test in collection order\n",
    )
    .write("store/__init__.py", "")
    .write(
        "store/db.py",
        "class Store:\n    def __init__(self):\n        self.items = []\n        self.committed = []\n\n    \
         def add(self, x):\n        self.items.append(x)\n\n    \
         def commit(self):\n        self.committed = list(self.items)\n\n    \
         def visible(self):\n        return list(self.items)\n\n\nSTORE = Store()\n",
    )
    .write("tests/conftest.py", CONFTEST)
    .write(
        "tests/test_chain.py",
        format!(
            "import pytest\nfrom store.db import STORE\n\n\n{serial}def test_add():\n    STORE.add(\"a\")\n\n\n\
             {serial}def test_visible():\n    assert STORE.visible() == [\"a\"]\n"
        ),
    );
    repo
}

const SERIAL: &str = "@pytest.mark.serial\n";
const VISIBLE: &str = "tests/test_chain.py::test_visible";
const COMMIT: &str = "tests/test_chain.py::test_commit";

/// The patch: writes become visible once committed, and the chain gets its commit step before
/// `test_visible` (whose code it leaves alone).
fn commit_step(serial: &'static str) -> [Edit<'static>; 2] {
    [
        Replace(
            "store/db.py",
            "    def visible(self):\n        return list(self.items)",
            "    def visible(self):\n        return list(self.committed)",
        ),
        Replace(
            "tests/test_chain.py",
            "def test_visible():",
            if serial.is_empty() {
                "def test_commit():\n    STORE.commit()\n\n\ndef test_visible():"
            } else {
                "def test_commit():\n    STORE.commit()\n\n\n@pytest.mark.serial\ndef test_visible():"
            },
        ),
    ]
}

#[test]
fn a_step_added_to_a_serial_chain_passes_and_names_the_new_test_it_needs() {
    // The new step is marked serial too (it takes test_visible's marker, which gets its own).
    let v = passes(chain(SERIAL), &commit_step(SERIAL));
    assert!(
        !kinds(&v).iter().any(|(k, _)| k == "redefined-test"),
        "an unchanged test called redefined: {:#}",
        v["findings"]
    );
    let f = finding(&v, "new-chain-step", VISIBLE);
    assert_eq!(f["blocking"], false, "{f:#}");
    let message = f["message"].as_str().unwrap();
    assert!(message.contains(COMMIT), "{message}");
    let replayed = v["base_suite"]["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["nodeid"] == VISIBLE)
        .expect("test_visible replayed");
    assert_eq!(replayed["reading"], "new-chain-step", "{replayed:#}");
    assert_eq!(
        replayed["depends_on"],
        serde_json::json!([COMMIT]),
        "{replayed:#}"
    );
}

#[test]
fn a_base_test_that_now_needs_a_new_test_first_outside_a_serial_chain_is_blocked() {
    // The same patch on a chain nobody keeps in order: the base's test_visible already needs
    // test_add first (known debt), and now it needs the new test_commit too. That dependence is
    // the patch's, named for what it is, not as a changed expectation.
    let repo = chain("");
    let (message, v) = blocked(repo, &commit_step(""), "depends-on-new-test", VISIBLE);
    assert!(message.contains(COMMIT), "{message}");
    assert!(
        !kinds(&v).iter().any(|(k, _)| k == "redefined-test"),
        "{:#}",
        v["findings"]
    );
}

#[test]
fn a_new_test_that_patches_the_code_for_an_unchanged_test_is_still_caught() {
    // The attack the rule must not let through: the code is broken, and a new test before the
    // unchanged one monkeypatches it for good; without the new test, the head's file fails.
    // Not a serial chain: blocking.
    let repo = chain("");
    let (message, _) = blocked(
        repo,
        &[
            Replace(
                "store/db.py",
                "        return list(self.items)",
                "        return []",
            ),
            Replace(
                "tests/test_chain.py",
                "def test_visible():",
                "def test_setup_view():\n    STORE.visible = lambda: [\"a\"]\n\n\ndef test_visible():",
            ),
        ],
        "depends-on-new-test",
        VISIBLE,
    );
    assert!(
        message.contains("tests/test_chain.py::test_setup_view"),
        "{message}"
    );
}

// ---------------------------------------------------------------------------------------------
// Issue 50: an edit to a test whose order-dependence the base has too
// ---------------------------------------------------------------------------------------------

/// A module-level state that test_a sets and test_b reads: test_b is order-dependent on the
/// base already (red when test_a has not run before it), known debt.
fn known_debt() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("lib/__init__.py", "")
        .write("lib/state.py", "STATE = {\"x\": 0}\n")
        .write("tests/conftest.py", CONFTEST)
        .write(
            "tests/test_order.py",
            "from lib import state\n\n\ndef test_a():\n    state.STATE[\"x\"] = 1\n\n\n\
             def test_b():\n    assert state.STATE[\"x\"] == 1\n\n\n\
             def test_c():\n    state.STATE[\"y\"] = 2\n",
        );
    repo
}

const TEST_B: &str = "tests/test_order.py::test_b";

#[test]
fn an_honest_edit_of_a_known_order_dependent_test_keeps_it_known_debt() {
    // The maintainer adds a function and two assertions about it to test_b. Its base version
    // fails on the head's code in the orders where the head's fails: the edit hid nothing.
    let v = passes(
        known_debt(),
        &[
            Append("lib/state.py", "\n\ndef double(x):\n    return 2 * x\n"),
            Replace(
                "tests/test_order.py",
                "    assert state.STATE[\"x\"] == 1\n",
                "    assert state.STATE[\"x\"] == 1\n    assert state.double(2) == 4\n    \
                 assert state.double(0) == 0\n",
            ),
        ],
    );
    let f = finding(&v, "order-dependent", TEST_B);
    assert_eq!(
        (&f["introduced"], &f["blocking"]),
        (&false.into(), &false.into()),
        "{f:#}"
    );
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("the edit hid nothing"),
        "{f:#}"
    );
    assert!(
        !kinds(&v).iter().any(|(k, _)| k == "edited-assertion"),
        "{:#}",
        v["findings"]
    );
    let replay = &v["edit_replay"][0];
    assert_eq!(replay["nodeid"], TEST_B, "{replay:#}");
    assert_eq!(replay["reading"], "edit-hid-nothing", "{replay:#}");
    assert!(
        replay["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["head"] == "failed" && r["base_version"] == "failed"),
        "{replay:#}"
    );
}

#[test]
fn an_edit_that_decides_a_known_order_dependent_tests_outcome_is_the_patchs() {
    // The edit adds a demand that test_c has not run first: where test_a and test_c both ran
    // before test_b (seed 2's order), the head's version fails and the base's passes on the
    // head's code. The edit decides the outcome there, so the order-dependence is the patch's.
    let repo = known_debt();
    let base = repo.commit("base");
    apply(
        &repo,
        &[Replace(
            "tests/test_order.py",
            "    assert state.STATE[\"x\"] == 1\n",
            "    assert state.STATE[\"x\"] == 1 and \"y\" not in state.STATE\n",
        )],
    );
    let head = repo.commit("the patch");
    let (run, v) = repo.audit(&base, &head).seeds(6).report();
    assert_eq!(
        (run.code, &v["verdict"]),
        (1, &Value::from("reject")),
        "{run:?}"
    );
    let f = finding(&v, "order-dependent", TEST_B);
    assert_eq!(
        (&f["introduced"], &f["blocking"]),
        (&false.into(), &true.into()),
        "{f:#}"
    );
    let replay = &v["edit_replay"][0];
    assert_eq!(replay["reading"], "edit-changed-the-outcome", "{replay:#}");
    assert!(
        replay["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["head"] == "failed" && r["base_version"] == "passed"),
        "{replay:#}"
    );
    assert!(
        v["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str().unwrap().contains("the patch edited its test")),
        "{:#}",
        v["reasons"]
    );
}

// ---------------------------------------------------------------------------------------------
// Issue 50: replays of edited tests that decide, and those that cannot
// ---------------------------------------------------------------------------------------------

const TITLES: &str = "tests/test_parse.py::test_titles";

#[test]
fn a_weakened_parametrized_assertion_with_one_broken_case_is_rejected() {
    // Titles are cut at their first space (the "b c" case breaks), and the assertion no longer
    // compares: every case passes at head; the base's version of the broken case fails.
    let (message, v) = blocked(
        frontmatter(),
        &[
            Replace(
                "fm/core.py",
                "meta = dict(l.split(\": \", 1) for l in lines[1:end])",
                "meta = dict((k, v.split()[0]) for k, v in (l.split(\": \", 1) for l in lines[1:end]))",
            ),
            Replace(
                "tests/test_parse.py",
                "    assert parse(text)[0][\"title\"] == title\n",
                "    assert parse(text)[0][\"title\"]\n",
            ),
        ],
        "redefined-test",
        &format!("{TITLES}[---\\ntitle: b c\\n---\\n-b c]"),
    );
    assert!(
        message.contains("assert parse(text)[0][\"title\"] == title"),
        "{message}"
    );
    // Every case of the parametrized test was replayed, and the one unbroken case reads as a
    // refactor: the replay decided each.
    let replays: Vec<&Value> = (v["source_replay"].as_array().unwrap().iter())
        .filter(|r| r["nodeid"].as_str().unwrap().starts_with(TITLES))
        .collect();
    assert_eq!(replays.len(), 2, "{:#}", v["source_replay"]);
    assert_eq!(v["replays"]["undecided"], 0, "{:#}", v["replays"]);
}

const RENAME_SLUG: [Edit; 2] = [
    Replace("fm/core.py", "def slug(title):", "def slugify(title):"),
    Replace(
        "tests/test_post.py",
        "from fm.core import slug\n",
        "from fm.core import slugify\n",
    ),
];

#[test]
fn renaming_the_function_under_test_with_its_tests_following_passes() {
    // The base's test file no longer imports on the head's code, so its base version cannot
    // run; the head's test is the base's calling the new name, nothing else changed.
    let v = passes(
        frontmatter(),
        &[
            RENAME_SLUG[0].clone(),
            RENAME_SLUG[1].clone(),
            Replace(
                "tests/test_post.py",
                "    assert slug(\"Hello World\")",
                "    assert slugify(\"Hello World\")",
            ),
        ],
    );
    let f = finding(&v, "test-refactor", "tests/test_post.py::test_slug");
    assert_eq!(f["blocking"], false, "{f:#}");
    assert!(
        !kinds(&v).iter().any(|(k, _)| k == "redefined-test"),
        "{:#}",
        v["findings"]
    );
}

#[test]
fn an_edit_beside_a_rename_that_no_replay_can_read_is_unverified_with_the_reason() {
    // The rename, a broken slugify, and test_slug weakened: its base version fails on the old
    // name, and the head's test is more than the base's calling the new name. Nothing reads
    // the base's demand: unverified, not a pass.
    let (run, v) = audit_patch(
        frontmatter(),
        &[
            Replace("fm/core.py", "def slug(title):", "def slugify(title):"),
            Replace(
                "fm/core.py",
                "    return \"-\".join(title.lower().split())",
                "    return title",
            ),
            RENAME_SLUG[1].clone(),
            Replace(
                "tests/test_post.py",
                "    assert slug(\"Hello World\") == \"hello-world\"",
                "    assert slugify(\"Hello World\")",
            ),
        ],
    );
    assert_eq!(
        (run.code, &v["verdict"]),
        (fixgate::exit::UNVERIFIED, &Value::from("unverified")),
        "{run:?}"
    );
    let reasons = v["reasons"].as_array().unwrap();
    assert!(
        reasons.iter().any(|r| {
            let r = r.as_str().unwrap();
            r.contains("replay undecided")
                && r.contains("tests/test_post.py::test_slug")
                && r.contains("fails on slug")
        }),
        "{reasons:#?}"
    );
    assert_eq!(v["replays"]["undecided"], 1, "{:#}", v["replays"]);
}

#[test]
fn fixing_a_test_that_failed_on_the_base_passes() {
    // The base's test expects the wrong slug and fails on the base; the maintainer fixes the
    // expectation. Its base version fails on the base too: no demand the base met is lost, and
    // the replay decided that much (not `unverified`).
    let repo = frontmatter();
    let text = String::from_utf8(repo.read("tests/test_post.py")).unwrap();
    repo.write(
        "tests/test_post.py",
        text.replace("== \"hello-world\"", "== \"hello_world\""),
    );
    let v = passes(
        repo,
        &[Replace(
            "tests/test_post.py",
            "== \"hello_world\"",
            "== \"hello-world\"",
        )],
    );
    assert_eq!(v["replays"]["undecided"], 0, "{:#}", v["replays"]);
}
