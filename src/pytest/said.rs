//! What pytest said, in its own words, for fixgate's error messages: why it stopped before
//! running anything, the end of its output, where a collection error broke, how its process
//! ended, and the error for files it could not collect.

use std::path::Path;

use crate::error::Error;
use crate::snapshot::Snapshot;

/// A file pytest could not collect: its node id and pytest's message with where it broke.
pub(crate) type CollectFailure = (String, String);

/// A collection error's message, with the lines of pytest's report that say where it broke
/// (a traceback's `File "…", line N` or a `path.py:N:` line, and the offending source line).
pub(crate) fn with_location(message: String, longrepr: &str) -> String {
    let lines: Vec<&str> = longrepr.lines().collect();
    let located = lines.iter().rposition(|l| {
        l.contains("\", line ")
            || l.trim_start()
                .split_once(".py:")
                .is_some_and(|(p, _)| !p.contains(' '))
    });
    match located {
        Some(i) => {
            let end = (i + 3).min(lines.len());
            let context = lines[i..end].join("\n");
            format!("{message}\n{context}")
        }
        None => message,
    }
}

/// The error for test files pytest could not collect, with pytest's own messages.
pub(crate) fn collect_error(snapshot: &Snapshot, errors: &[CollectFailure]) -> Error {
    let mut msg = format!(
        "pytest could not collect {} file{} of {}:\n",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" },
        snapshot.rev_label()
    );
    for (nodeid, message) in errors {
        msg.push_str(&format!("--- {nodeid}\n{}\n", message.trim_end()));
    }
    msg.push_str("fix the test files so that `python -m pytest --collect-only` succeeds");
    Error::NotCollected(msg)
}

/// How the interpreter ended during a test, for the test's message.
pub(crate) fn describe_exit(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("the interpreter exited with status {c} during the test"),
        (None, Some(s)) => format!("the interpreter died of signal {s} during the test"),
        _ => "the interpreter died during the test".into(),
    }
}

/// pytest's own account of why it stopped before running anything, from its output: argparse's
/// `error:` line (an option the configuration passes that pytest does not know), an `ERROR:`
/// line (a `pytest.UsageError`), the exception of an `INTERNALERROR>` traceback, or the last
/// `E   ` line of a report (a conftest that does not import). Paths lose the sandbox's tree.
pub(crate) fn pytest_said(log: &str, tree: Option<&Path>) -> Option<String> {
    let lines: Vec<&str> = log.lines().map(str::trim_end).collect();
    let argparse = lines
        .iter()
        .find_map(|l| l.split_once(": error: ").map(|(_, m)| m));
    let usage = || {
        lines
            .iter()
            .find_map(|l| l.strip_prefix("ERROR: "))
            .filter(|m| !m.starts_with("usage:"))
    };
    let internal = || {
        lines
            .iter()
            .rev()
            .filter_map(|l| l.strip_prefix("INTERNALERROR> "))
            .find(|l| !l.starts_with(' '))
    };
    let reported = || {
        lines
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix("E   "))
            .map(str::trim)
    };
    let said = argparse
        .or_else(usage)
        .or_else(internal)
        .or_else(reported)?;
    Some(match tree {
        Some(tree) => said.replace(&format!("{}/", tree.display()), ""),
        None => said.to_owned(),
    })
}

/// The last lines of pytest's own output, for error messages.
pub(crate) fn log_tail(log: &Path) -> String {
    let text = std::fs::read(log).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(25)..];
    if tail.is_empty() {
        return String::new();
    }
    format!("pytest said:\n{}", tail.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collection_that_stops_early_is_told_in_pytests_own_words() {
        let tree = Path::new("/s/1/tree");
        let argparse = "ERROR: usage: python -m pytest [options] [file_or_dir] [...]\n\
                        python -m pytest: error: unrecognized arguments: --frobnicate\n  \
                        inifile: /s/1/tree/pytest.ini\n  rootdir: /s/1/tree\n";
        assert_eq!(
            pytest_said(argparse, Some(tree)).as_deref(),
            Some("unrecognized arguments: --frobnicate")
        );
        let usage = "ERROR: no database at /s/1/tree/db.sqlite\n";
        assert_eq!(
            pytest_said(usage, Some(tree)).as_deref(),
            Some("no database at db.sqlite")
        );
        let internal = "INTERNALERROR> Traceback (most recent call last):\n\
                        INTERNALERROR>   File \"/s/1/tree/tests/conftest.py\", line 2, in x\n\
                        INTERNALERROR>     raise RuntimeError(\"boom\")\n\
                        INTERNALERROR> RuntimeError: boom\n";
        assert_eq!(
            pytest_said(internal, None).as_deref(),
            Some("RuntimeError: boom")
        );
        let conftest = "ImportError while loading conftest '/s/1/tree/tests/conftest.py'.\n\
                        tests/conftest.py:1: in <module>\n    raise RuntimeError('x')\n\
                        E   RuntimeError: x\n";
        assert_eq!(
            pytest_said(conftest, None).as_deref(),
            Some("RuntimeError: x")
        );
        assert_eq!(pytest_said("no tests ran in 0.01s\n", None), None);
    }

    #[test]
    fn a_collection_error_keeps_the_lines_that_say_where_it_broke() {
        let traceback =
            "Traceback (most recent call last):\n  File \"/s/tree/a.py\", line 1, in x\n    \
                         import nope\nModuleNotFoundError: No module named 'nope'\nlast";
        assert_eq!(
            with_location("ModuleNotFoundError".into(), traceback),
            "ModuleNotFoundError\n  File \"/s/tree/a.py\", line 1, in x\n    import nope\n\
             ModuleNotFoundError: No module named 'nope'"
        );
        let report = "tests/test_a.py:3: in <module>\n    raise ValueError('x')\nE   ValueError: x";
        assert_eq!(
            with_location("ValueError: x".into(), report),
            format!("ValueError: x\n{report}")
        );
        // A line that merely mentions a file in prose is no location.
        assert_eq!(
            with_location("boom".into(), "see the docs at some page.py: here"),
            "boom"
        );
        assert_eq!(with_location("boom".into(), ""), "boom");
    }

    #[test]
    fn files_that_did_not_collect_are_one_error_naming_each_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = crate::snapshot::Repo::open(Some(dir.path()), None)
            .and_then(|r| r.snapshot(None))
            .unwrap();
        let one = collect_error(&snapshot, &[("tests/test_a.py".into(), "E  boom\n".into())]);
        let text = one.to_string();
        assert!(text.contains("could not collect 1 file of"), "{text}");
        assert!(
            text.contains("--- tests/test_a.py\nE  boom\nfix the test files"),
            "{text}"
        );
        let two = collect_error(
            &snapshot,
            &[("a".into(), "x".into()), ("b".into(), "y".into())],
        );
        assert!(
            two.to_string().contains("could not collect 2 files"),
            "{two}"
        );
        assert!(matches!(two, Error::NotCollected(_)));
    }

    #[test]
    fn how_the_interpreter_ended_and_the_end_of_its_output() {
        use std::os::unix::process::ExitStatusExt;
        let code = std::process::ExitStatus::from_raw(3 << 8);
        assert_eq!(
            describe_exit(&code),
            "the interpreter exited with status 3 during the test"
        );
        let signal = std::process::ExitStatus::from_raw(libc::SIGSEGV);
        assert_eq!(
            describe_exit(&signal),
            "the interpreter died of signal 11 during the test"
        );
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("pytest.log");
        assert_eq!(log_tail(&log), "", "no output, nothing said");
        let lines: Vec<String> = (0..30).map(|i| format!("line {i}")).collect();
        std::fs::write(&log, lines.join("\n")).unwrap();
        let tail = log_tail(&log);
        assert!(tail.starts_with("pytest said:\nline 5\n"), "{tail}");
        assert!(tail.ends_with("line 29"), "{tail}");
    }
}
