//! Registering fixgate's markers in the pytest configuration: which file pytest reads (its own
//! order of precedence), and the ini and pyproject forms of the `markers` setting.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::cmd::init::edits::Edits;
use crate::cmd::init::pyedit::{indent_of, insert_lines};
use crate::config::PYPROJECT_FILE;
use crate::error::{Error, Result};

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

/// The 0-based index of the line that is exactly `header` (a TOML or ini section header).
pub(super) fn header_line(text: &str, header: &str) -> Option<usize> {
    text.lines().position(|l| {
        let l = l.split('#').next().unwrap_or(l).trim();
        l == header
    })
}

/// Where pytest reads its configuration, in pytest's own order of precedence.
enum PytestConfig {
    Ini {
        file: &'static str,
        section: &'static str,
    },
    Pyproject,
}

fn pytest_config(edits: &Edits) -> Result<(PytestConfig, Option<String>)> {
    if let Some(t) = edits.text("pytest.ini")? {
        return Ok((
            PytestConfig::Ini {
                file: "pytest.ini",
                section: "[pytest]",
            },
            Some(t),
        ));
    }
    let pyproject = edits.text(PYPROJECT_FILE)?;
    if let Some(t) = &pyproject {
        if header_line(t, "[tool.pytest.ini_options]").is_some() {
            return Ok((PytestConfig::Pyproject, pyproject));
        }
    }
    for (file, section) in [("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]")] {
        if let Some(t) = edits.text(file)? {
            if header_line(&t, section).is_some() {
                return Ok((PytestConfig::Ini { file, section }, Some(t)));
            }
        }
    }
    // No pytest configuration yet: pyproject.toml when the project has one (adding the
    // section there changes nothing else), a new pytest.ini otherwise.
    if pyproject.is_some() {
        return Ok((PytestConfig::Pyproject, pyproject));
    }
    Ok((
        PytestConfig::Ini {
            file: "pytest.ini",
            section: "[pytest]",
        },
        None,
    ))
}

/// Registers `writes` and `serial` in the pytest configuration when it does not yet.
pub(super) fn propose_registration(edits: &mut Edits) -> Result<Option<String>> {
    let (kind, text) = pytest_config(edits)?;
    match kind {
        PytestConfig::Ini { file, section } => {
            let text = text.unwrap_or_default();
            let new = register_ini(&text, section);
            if new == text {
                return Ok(None);
            }
            edits.set(file, new)?;
            Ok(Some(file.to_owned()))
        }
        PytestConfig::Pyproject => {
            let text = text.unwrap_or_default();
            let new = register_pyproject(&text)?;
            if new == text {
                return Ok(None);
            }
            edits.set(PYPROJECT_FILE, new)?;
            Ok(Some(PYPROJECT_FILE.to_owned()))
        }
    }
}

/// The marker name of a registration line (`writes(*groups): ...` → `writes`).
fn marker_name(entry: &str) -> &str {
    let e = entry.trim().trim_matches(['"', '\'', ',']);
    let end = e.find([':', '(']).unwrap_or(e.len());
    e[..end].trim()
}

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
        out.push_str(section);
        out.push_str("\nmarkers =\n");
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
    match key {
        None => {
            let mut new = vec!["markers =".to_owned()];
            new.extend(MARKERS.iter().map(|(_, l)| format!("    {l}")));
            insert_lines(text, head + 1, &new)
        }
        Some(k) => {
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
            if missing.is_empty() {
                text.to_owned()
            } else {
                insert_lines(text, last + 1, &missing)
            }
        }
    }
}

fn register_pyproject(text: &str) -> Result<String> {
    let present: BTreeSet<String> = match text.parse::<toml::Table>() {
        Ok(doc) => doc
            .get("tool")
            .and_then(|t| t.get("pytest"))
            .and_then(|t| t.get("ini_options"))
            .and_then(|t| t.get("markers"))
            .and_then(|m| m.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str())
                    .map(|s| marker_name(s).to_owned())
                    .collect()
            })
            .unwrap_or_default(),
        Err(e) => {
            return Err(Error::Usage(format!(
                "failed to read pyproject.toml: {}; fix it, then run `fixgate init` again",
                e.message()
            )))
        }
    };
    let missing: Vec<&str> = MARKERS
        .iter()
        .filter(|(name, _)| !present.contains(*name))
        .map(|(_, l)| *l)
        .collect();
    if missing.is_empty() {
        return Ok(text.to_owned());
    }
    let entries: Vec<String> = missing.iter().map(|l| format!("    {l:?},")).collect();
    let lines: Vec<&str> = text.lines().collect();
    let Some(head) = header_line(text, "[tool.pytest.ini_options]") else {
        let mut out = text.to_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("[tool.pytest.ini_options]\nmarkers = [\n");
        for e in &entries {
            let _ = writeln!(out, "{e}");
        }
        out.push_str("]\n");
        return Ok(out);
    };
    let end = (head + 1..lines.len())
        .find(|&n| lines[n].trim_start().starts_with('['))
        .unwrap_or(lines.len());
    let key = (head + 1..end).find(|&n| {
        lines[n]
            .strip_prefix("markers")
            .is_some_and(|r| r.trim_start().starts_with('='))
    });
    let Some(k) = key else {
        let mut new = vec!["markers = [".to_owned()];
        new.extend(entries);
        new.push("]".to_owned());
        return Ok(insert_lines(text, head + 1, &new));
    };
    // The array's closing bracket: on the key's line (one-line array) or the first line after
    // it that is only `]`.
    let value = lines[k].split_once('=').map_or("", |(_, v)| v.trim());
    if value.starts_with('[') && value.trim_end().ends_with(']') {
        let inner = value[1..value.len() - 1].trim().trim_end_matches(',');
        let mut items: Vec<String> = if inner.is_empty() {
            Vec::new()
        } else {
            vec![inner.to_owned()]
        };
        items.extend(missing.iter().map(|l| format!("{l:?}")));
        let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
        out[k] = format!("markers = [{}]", items.join(", "));
        let mut s = out.join("\n");
        s.push('\n');
        return Ok(s);
    }
    let Some(close) = (k + 1..end).find(|&n| lines[n].trim() == "]") else {
        return Err(Error::Usage(
            "failed to register the markers in pyproject.toml: its \
             [tool.pytest.ini_options] markers array is in a form `fixgate init` does not \
             edit; add \"writes(*groups): ...\" and \"serial: ...\" to it by hand"
                .to_owned(),
        ));
    };
    let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    if close > k + 1 {
        let prev = &mut out[close - 1];
        if !prev.trim_end().ends_with(',') {
            prev.push(',');
        }
    }
    for (i, e) in entries.into_iter().enumerate() {
        out.insert(close + i, e);
    }
    let mut s = out.join("\n");
    s.push('\n');
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_markers_in_each_config_form_once() {
        let ini = "[pytest]\naddopts = -q\nmarkers =\n    slow: slow tests\n";
        let once = register_ini(ini, "[pytest]");
        assert!(
            once.contains("    slow: slow tests\n    writes(*groups)"),
            "{once}"
        );
        assert_eq!(register_ini(&once, "[pytest]"), once);

        let py = "[project]\nname = \"x\"\n\n[tool.pytest.ini_options]\nmarkers = [\"slow: s\"]\n";
        let once = register_pyproject(py).unwrap();
        assert!(
            once.contains("markers = [\"slow: s\", \"writes(*groups)"),
            "{once}"
        );
        assert_eq!(register_pyproject(&once).unwrap(), once);

        let multi = "[tool.pytest.ini_options]\nmarkers = [\n    \"slow: s\"\n]\n";
        let once = register_pyproject(multi).unwrap();
        assert!(once.contains("\"slow: s\",\n    \"writes"), "{once}");
        assert!(once.parse::<toml::Table>().is_ok(), "{once}");
    }
}
