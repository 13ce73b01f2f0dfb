//! The JSON fixgate writes: every object's keys sorted, pretty-printed, one trailing newline, so
//! the same value is always the same bytes (reports, lock files, ledgers, graph dumps).

use serde::Serialize;

/// Sorted keys, two-space indentation, a trailing newline: byte-identical for equal values.
pub(crate) fn to_json<T: Serialize>(value: &T) -> String {
    // Going through `Value` sorts every object's keys (serde_json's map is a BTreeMap).
    let value = serde_json::to_value(value).expect("reports always serialize");
    let mut s = serde_json::to_string_pretty(&value).expect("a JSON value always serializes");
    s.push('\n');
    s
}
