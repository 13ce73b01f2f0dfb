//! `fixtures.manifest`: `name: glob` per line, `#` comments, blank lines.

use std::collections::BTreeMap;

use crate::config::groups::{check_glob, check_name, Declared};
use crate::config::model::ConfigError;

/// The manifest file at the repository root.
pub(crate) const MANIFEST_FILE: &str = "fixtures.manifest";

const EXAMPLE_LINE: &str = "\"db: tests/fixtures/db/*.sqlite\"";

/// Parses `fixtures.manifest`: `name: glob` per line, `#` comments, blank lines.
pub(super) fn parse_manifest(bytes: &[u8]) -> Result<BTreeMap<String, Declared>, ConfigError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut groups: BTreeMap<String, Declared> = BTreeMap::new();
    for (index, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = index + 1;
        let err = |message: String| ConfigError::Manifest { line, message };
        let text = std::str::from_utf8(raw).map_err(|_| {
            err("the line is not valid UTF-8; save fixtures.manifest as UTF-8".to_owned())
        })?;
        let text = strip_comment(text).trim();
        if text.is_empty() {
            continue;
        }
        let Some((name, glob)) = text.split_once(':') else {
            return Err(err(format!(
                "expected \"name: glob\", found {text:?}; write one group per line, for example \
                 {EXAMPLE_LINE}"
            )));
        };
        let (name, glob) = (name.trim(), glob.trim());
        check_name(name).map_err(|m| err(format!("{m}, for example {EXAMPLE_LINE}")))?;
        check_glob(glob).map_err(|m| err(format!("group {name:?}: {m}")))?;
        groups
            .entry(name.to_owned())
            .or_insert_with(|| Declared {
                line,
                globs: Vec::new(),
            })
            .add(glob);
    }
    Ok(groups)
}

/// Drops a whole-line comment, or a trailing one: `#` after whitespace, so that a `#` inside a
/// file name (`tests/#1/*`) stays part of the glob.
fn strip_comment(line: &str) -> &str {
    if line.trim_start().starts_with('#') {
        return "";
    }
    match line
        .as_bytes()
        .windows(2)
        .position(|w| matches!(w[0], b' ' | b'\t') && w[1] == b'#')
    {
        // The position is an ASCII byte, so slicing there is on a char boundary.
        Some(i) => &line[..i],
        None => line,
    }
}
