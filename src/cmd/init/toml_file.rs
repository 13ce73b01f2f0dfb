//! Editing a TOML file (`pyproject.toml`, `pytest.toml`) with toml_edit: what `init` adds goes
//! in, and the user's comments, order and layout stay as they were.

use toml_edit::{Array, DocumentMut, Item, Table, TableLike, Value};

use crate::error::{Error, Result};

/// The document of `file`'s `text`; an error saying where it is broken when it is not TOML.
pub(super) fn parse(file: &str, text: &str) -> Result<DocumentMut> {
    text.parse::<DocumentMut>().map_err(|e| {
        Error::Usage(format!(
            "failed to read {file}: {}; fix it, then run `fixgate init` again",
            e.to_string().trim_end()
        ))
    })
}

/// The table at `keys` (`["tool", "pytest", "ini_options"]`), made when missing: the tables
/// above it only as dotted headers, the table itself with its own header at the end of the
/// file. An error when a key on the way holds something else than a table.
pub(super) fn table<'d>(
    file: &str,
    doc: &'d mut DocumentMut,
    keys: &[&str],
) -> Result<&'d mut dyn TableLike> {
    let mut table: &mut dyn TableLike = doc.as_table_mut();
    for (i, key) in keys.iter().enumerate() {
        let last = i + 1 == keys.len();
        let item = table.entry(key).or_insert_with(|| {
            let mut new = Table::new();
            new.set_implicit(!last);
            Item::Table(new)
        });
        table = item.as_table_like_mut().ok_or_else(|| {
            Error::Usage(format!(
                "failed to edit {file}: `{}` is not a table; make it one, or make the change \
                 shown by `fixgate init` by hand",
                keys[..=i].join(".")
            ))
        })?;
    }
    Ok(table)
}

/// The array of `key` in `table`, made empty when missing; `None` when the key holds
/// something else.
pub(super) fn array<'t>(table: &'t mut dyn TableLike, key: &str) -> Option<&'t mut Array> {
    table
        .entry(key)
        .or_insert(Item::Value(Value::Array(Array::new())))
        .as_array_mut()
}

/// Appends `items` to `array` in its own layout: on a line each, indented like the last item,
/// when it is written one item a line (or is new: then four spaces and a trailing comma); after
/// the others on its line otherwise.
pub(super) fn push_strings(array: &mut Array, items: &[&str]) {
    let prefix_of = |v: &Value| {
        v.decor()
            .prefix()
            .and_then(|p| p.as_str())
            .map(str::to_owned)
    };
    let one_a_line = array.is_empty()
        || array
            .iter()
            .any(|v| prefix_of(v).is_some_and(|p| p.contains('\n')));
    if !one_a_line {
        for item in items {
            array.push(*item);
        }
        return;
    }
    // The last item's indentation, without the comment that may stand before it.
    let indent = array
        .iter()
        .last()
        .and_then(prefix_of)
        .and_then(|p| p.rsplit_once('\n').map(|(_, indent)| indent.to_owned()))
        .unwrap_or_else(|| "    ".to_owned());
    // What follows the last item (its line's end, a comment) stays before the closing bracket.
    let mut trailing = String::new();
    if let Some(last) = array.iter_mut().last() {
        let suffix = last.decor().suffix().and_then(|s| s.as_str()).unwrap_or("");
        trailing.push_str(suffix);
        last.decor_mut().set_suffix("");
    }
    trailing.push_str(array.trailing().as_str().unwrap_or(""));
    if !trailing.contains('\n') {
        trailing.insert(0, '\n');
    }
    for item in items {
        array.push(*item);
        if let Some(new) = array.iter_mut().last() {
            new.decor_mut().set_prefix(format!("\n{indent}"));
        }
    }
    array.set_trailing(trailing);
    array.set_trailing_comma(true);
}
