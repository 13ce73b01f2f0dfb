//! Registering fixgate's markers in the pytest configuration: the file pytest takes its options
//! from at the repository's root (as [`crate::pytest::ini::locate`] finds it), and the ini and
//! TOML forms of its `markers` setting.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::cmd::init::edits::Edits;
use crate::cmd::init::pyedit::{indent_of, insert_lines};
use crate::cmd::init::toml_file;
use crate::error::{Error, Result};
use crate::pytest::ini::{self, ConfigFile, Section};

/// The marker lines, as the plugin registers them, so plain pytest with `--strict-markers`
/// accepts the markers fixgate asks for.
const MARKERS: [(&str, &str); 2] = [
    (
        "writes",
        "writes(*groups): the fixture groups this test may change (fixgate lease).",
    ),
    (
        "serial",
        "serial: keep this test in collection order; fixgate never shuffles it.",
    ),
];

/// Registers `writes` and `serial` in the pytest configuration when it does not yet: in the
/// file pytest reads, else a new `pytest.ini`. Returns the file changed.
pub(super) fn propose_registration(edits: &mut Edits) -> Result<Option<String>> {
    let unreadable = RefCell::new(None);
    let located = ini::locate("", |path| {
        edits.text(path).unwrap_or_else(|e| {
            unreadable.borrow_mut().get_or_insert(e);
            None
        })
    });
    if let Some(e) = unreadable.into_inner() {
        return Err(e);
    }
    let (file, section) = match located.file {
        Some(ConfigFile { path, section, .. }) => (path, section),
        None => ("pytest.ini".to_owned(), Section::Ini("pytest")),
    };
    let text = edits.text(&file)?.unwrap_or_default();
    let new = match section {
        Section::Ini(section) => register_ini(&text, section),
        Section::Toml(keys) => register_toml(&file, &text, keys)?,
    };
    if new == text {
        return Ok(None);
    }
    edits.set(&file, new)?;
    Ok(Some(file))
}

/// The marker name of a registration line (`writes(*groups): ...` → `writes`).
fn marker_name(entry: &str) -> &str {
    let e = entry.trim().trim_matches(['"', '\'', ',']);
    let end = e.find([':', '(']).unwrap_or(e.len());
    e[..end].trim()
}

/// The markers in `keys`' table of the TOML `text` of `file`, added to its `markers` array.
fn register_toml(file: &str, text: &str, keys: &[&str]) -> Result<String> {
    let mut doc = toml_file::parse(file, text)?;
    let table = toml_file::table(file, &mut doc, keys)?;
    let Some(markers) = toml_file::array(table, "markers") else {
        return Err(Error::Usage(format!(
            "failed to register the markers in {file}: its [{}] markers is not an array; add \
             \"{}\" and \"{}\" to it by hand",
            keys.join("."),
            MARKERS[0].1,
            MARKERS[1].1
        )));
    };
    let present: BTreeSet<&str> = markers
        .iter()
        .filter_map(|v| v.as_str())
        .map(marker_name)
        .collect();
    let missing: Vec<&str> = MARKERS
        .iter()
        .filter(|(name, _)| !present.contains(name))
        .map(|(_, line)| *line)
        .collect();
    if missing.is_empty() {
        return Ok(text.to_owned());
    }
    toml_file::push_strings(markers, &missing);
    Ok(doc.to_string())
}

/// The 0-based index of the line that is exactly `[section]` (comments aside).
fn header_line(text: &str, section: &str) -> Option<usize> {
    let header = format!("[{section}]");
    text.lines().position(|l| {
        let l = l.split(['#', ';']).next().unwrap_or(l).trim();
        l == header
    })
}

/// The markers in the ini `text`'s `[section]`, added to its `markers` option (continuation
/// lines, one marker a line).
fn register_ini(text: &str, section: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let Some(head) = header_line(text, section) else {
        let mut out = text.to_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        if !out.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(out, "[{section}]\nmarkers =");
        for (_, line) in MARKERS {
            let _ = writeln!(out, "    {line}");
        }
        return out;
    };
    let end = (head + 1..lines.len())
        .find(|&n| lines[n].trim_start().starts_with('['))
        .unwrap_or(lines.len());
    let key = (head + 1..end).find(|&n| {
        let l = lines[n];
        indent_of(l) == 0
            && l.strip_prefix("markers")
                .is_some_and(|r| r.trim_start().starts_with(['=', ':']))
    });
    let Some(k) = key else {
        let mut new = vec!["markers =".to_owned()];
        new.extend(MARKERS.iter().map(|(_, l)| format!("    {l}")));
        return insert_lines(text, head + 1, &new);
    };
    let first = lines[k]
        .split_once(['=', ':'])
        .map_or("", |(_, v)| v.trim());
    let mut present: BTreeSet<&str> = BTreeSet::new();
    if !first.is_empty() {
        present.insert(marker_name(first));
    }
    let mut last = k;
    for (n, l) in lines.iter().enumerate().take(end).skip(k + 1) {
        if l.trim().is_empty() || indent_of(l) == 0 {
            break;
        }
        present.insert(marker_name(l));
        last = n;
    }
    let missing: Vec<String> = MARKERS
        .iter()
        .filter(|(name, _)| !present.contains(name))
        .map(|(_, l)| format!("    {l}"))
        .collect();
    match missing.is_empty() {
        true => text.to_owned(),
        false => insert_lines(text, last + 1, &missing),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PYPROJECT_KEYS: &[&str] = &["tool", "pytest", "ini_options"];

    #[test]
    fn registers_markers_in_an_ini_section_once() {
        let ini = "[pytest]\naddopts = -q\nmarkers =\n    slow: slow tests\n";
        let once = register_ini(ini, "pytest");
        assert_eq!(
            once,
            "[pytest]\naddopts = -q\nmarkers =\n    slow: slow tests\n    \
             writes(*groups): the fixture groups this test may change (fixgate lease).\n    \
             serial: keep this test in collection order; fixgate never shuffles it.\n"
        );
        assert_eq!(register_ini(&once, "pytest"), once);
        let cfg = "[metadata]\nname = x\n";
        let added = register_ini(cfg, "tool:pytest");
        assert!(added.starts_with("[metadata]\nname = x\n\n[tool:pytest]\nmarkers =\n    writes"));
    }

    #[test]
    fn registers_markers_in_a_one_line_array_and_keeps_comments_and_layout() {
        let py = "# the project\n[project]\nname = \"x\"  # its name\n\n\
                  [tool.pytest.ini_options]\n# markers we use\nmarkers = [\"slow: s\"]  # keep\n\
                  addopts = \"-q\"\n\n[tool.other]\nkey = 1\n";
        let once = register_toml("pyproject.toml", py, PYPROJECT_KEYS).unwrap();
        assert_eq!(
            once,
            "# the project\n[project]\nname = \"x\"  # its name\n\n\
             [tool.pytest.ini_options]\n# markers we use\nmarkers = [\"slow: s\", \
             \"writes(*groups): the fixture groups this test may change (fixgate lease).\", \
             \"serial: keep this test in collection order; fixgate never shuffles it.\"]  # keep\n\
             addopts = \"-q\"\n\n[tool.other]\nkey = 1\n"
        );
        assert_eq!(
            register_toml("pyproject.toml", &once, PYPROJECT_KEYS).unwrap(),
            once
        );
    }

    #[test]
    fn registers_markers_in_a_multi_line_array_one_a_line() {
        let multi = "[tool.pytest.ini_options]\nmarkers = [\n  \"slow: s\",  # slow ones\n  \
                     \"db: d\"\n]\n";
        let once = register_toml("pyproject.toml", multi, PYPROJECT_KEYS).unwrap();
        assert_eq!(
            once,
            "[tool.pytest.ini_options]\nmarkers = [\n  \"slow: s\",  # slow ones\n  \"db: d\",\n  \
             \"writes(*groups): the fixture groups this test may change (fixgate lease).\",\n  \
             \"serial: keep this test in collection order; fixgate never shuffles it.\",\n]\n"
        );
        assert!(once.parse::<toml::Table>().is_ok(), "{once}");
    }

    #[test]
    fn a_missing_table_is_added_at_the_end_with_its_own_header() {
        let py = "[project]\nname = \"x\"\n\n[tool.fixgate]\nseeds = 4\n";
        assert_eq!(
            register_toml("pyproject.toml", py, PYPROJECT_KEYS).unwrap(),
            "[project]\nname = \"x\"\n\n[tool.fixgate]\nseeds = 4\n\n\
             [tool.pytest.ini_options]\nmarkers = [\n    \
             \"writes(*groups): the fixture groups this test may change (fixgate lease).\",\n    \
             \"serial: keep this test in collection order; fixgate never shuffles it.\",\n]\n"
        );
        // pytest.toml's own table.
        assert_eq!(
            register_toml("pytest.toml", "", &["pytest"]).unwrap(),
            "[pytest]\nmarkers = [\n    \
             \"writes(*groups): the fixture groups this test may change (fixgate lease).\",\n    \
             \"serial: keep this test in collection order; fixgate never shuffles it.\",\n]\n"
        );
    }

    #[test]
    fn what_cannot_be_edited_is_said_with_the_fix() {
        let broken = register_toml("pyproject.toml", "[project\nname = 1\n", PYPROJECT_KEYS)
            .unwrap_err()
            .to_string();
        assert!(
            broken.contains("failed to read pyproject.toml") && broken.contains("line 1"),
            "{broken}"
        );
        let not_array = "[tool.pytest.ini_options]\nmarkers = \"slow: s\"\n";
        let e = register_toml("pyproject.toml", not_array, PYPROJECT_KEYS)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[tool.pytest.ini_options] markers is not an array")
                && e.contains("by hand"),
            "{e}"
        );
        let not_table = "[tool]\npytest = 3\n";
        let e = register_toml("pyproject.toml", not_table, PYPROJECT_KEYS)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`tool.pytest` is not a table"), "{e}");
    }
}
