//! A head whose suite does not collect: where it broke (file and line) and how, read from
//! pytest's error text, with sandbox paths made repo-relative.

/// Where and how collection failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Broken {
    /// The repo-relative file, when the error names one.
    pub(crate) file: Option<String>,
    pub(crate) line: Option<u32>,
    /// The error's most telling lines (the exception and the offending source line).
    pub(crate) error: String,
}

impl Broken {
    /// Reads pytest's collection error text.
    pub(crate) fn read(text: &str) -> Broken {
        let mut file = None;
        let mut line = None;
        for l in text.lines() {
            // `--- tests/test_x.py`: the collector that failed (its node id is its file).
            if let Some(nodeid) = l.strip_prefix("--- ") {
                if file.is_none() {
                    file = Some(nodeid.split("::").next().unwrap_or(nodeid).to_string());
                }
                continue;
            }
            // `  File "/…/tree/tests/conftest.py", line 3, in <module>` (a traceback), or
            // `tests/test_x.py:7: in <module>` / `E     File "/…/tree/tests/test_x.py", line 7`.
            if let Some((f, n)) = traceback_location(l).or_else(|| colon_location(l)) {
                file = Some(f);
                line = Some(n);
            }
        }
        // The exception line (`SyntaxError: invalid syntax`, `RuntimeError: no database`), then
        // the offending source line when the report shows one.
        let lines: Vec<&str> = text
            .lines()
            .map(|l| l.trim().trim_start_matches("E ").trim())
            .filter(|l| !l.is_empty())
            .collect();
        let exception = lines.iter().find(|l| is_exception_line(l)).copied();
        let source = lines
            .iter()
            .position(|l| traceback_location(l).is_some())
            .and_then(|i| lines.get(i + 1))
            .filter(|l| !is_exception_line(l) && **l != "^")
            .copied();
        let error = match (exception, source) {
            (Some(e), Some(s)) => format!("{e} (in `{s}`)"),
            (Some(e), None) => e.to_string(),
            (None, _) => lines.first().copied().unwrap_or("").to_string(),
        };
        Broken { file, line, error }
    }
}

/// `SomethingError: text` or `SomethingException: text`.
fn is_exception_line(l: &str) -> bool {
    l.split_once(':').is_some_and(|(name, _)| {
        !name.contains(' ')
            && (name.ends_with("Error") || name.ends_with("Exception") || name.ends_with("Exit"))
    })
}

/// The repo-relative path of a sandbox path (everything up to the sandbox's `tree/` cut off).
fn relative(path: &str) -> String {
    match path.rfind("/tree/") {
        Some(i) => path[i + "/tree/".len()..].to_string(),
        None => path.to_string(),
    }
}

fn traceback_location(l: &str) -> Option<(String, u32)> {
    let rest = l.split("File \"").nth(1)?;
    let (path, after) = rest.split_once("\", line ")?;
    let n = after
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some((relative(path), n))
}

fn colon_location(l: &str) -> Option<(String, u32)> {
    let l = l.trim();
    let (path, rest) = l.split_once(".py:")?;
    if path.contains(' ') {
        return None;
    }
    let n = rest
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some((relative(&format!("{path}.py")), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_syntax_error_names_the_file_and_line() {
        let text = "pytest could not collect 1 file of abc123:\n--- tests/test_x.py\n\
                    /dev/shm/fixgate-sandboxes-0/77-1-x/tree/tests/test_x.py:7: in <module>\n\
                    E     File \"/dev/shm/fixgate-sandboxes-0/77-1-x/tree/tests/test_x.py\", line 7\n\
                    E       def test_broken(:\n\
                    E                       ^\n\
                    E   SyntaxError: invalid syntax\n";
        let b = Broken::read(text);
        assert_eq!(b.file.as_deref(), Some("tests/test_x.py"));
        assert_eq!(b.line, Some(7));
        assert_eq!(
            b.error,
            "SyntaxError: invalid syntax (in `def test_broken(:`)"
        );
    }

    #[test]
    fn a_conftest_that_raises_names_the_conftest() {
        let text = "ImportError while loading conftest '/tmp/s/tree/tests/conftest.py'.\n\
                    tests/conftest.py:2: in <module>\n    raise RuntimeError('no database')\n\
                    E   RuntimeError: no database\n";
        let b = Broken::read(text);
        assert_eq!(b.file.as_deref(), Some("tests/conftest.py"));
        assert_eq!(b.line, Some(2));
        assert!(b.error.contains("RuntimeError: no database"), "{b:?}");
    }
}
