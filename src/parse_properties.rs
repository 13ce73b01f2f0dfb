//! Property tests for every parser of input fixgate does not control: fixtures.manifest,
//! `[tool.fixgate]` in pyproject.toml, fixtures.lock, the freeze ledger and the plugin's event
//! stream. Each must answer every input with a value or an error, never a panic. Cases run
//! through the parsers' own entry points; `PROPTEST_CASES` raises the count for a longer hunt.

use crate::audit::freeze::{self, Date};
use crate::config::{self, ConfigInputs};
use crate::lock::Lock;
use crate::pytest::events::Event;
use crate::repo_path::RepoPath;
use proptest::prelude::*;

/// Text made mostly of the characters the parsers treat specially, so that random cases reach
/// past the first syntax check.
fn syntaxy(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just(":".to_string()),
            Just("#".to_string()),
            Just("\n".to_string()),
            Just("*".to_string()),
            Just("**".to_string()),
            Just("/".to_string()),
            Just("[".to_string()),
            Just("]".to_string()),
            Just("{".to_string()),
            Just("}".to_string()),
            Just("\"".to_string()),
            Just("=".to_string()),
            Just(",".to_string()),
            Just(" ".to_string()),
            Just("..".to_string()),
            Just("\\".to_string()),
            Just("\u{0}".to_string()),
            Just("é".to_string()),
            "[a-z_.-]{1,8}",
            "[0-9]{1,20}",
            "\\PC{0,4}",
        ],
        0..max,
    )
    .prop_map(|parts| parts.concat())
}

fn paths() -> impl Strategy<Value = Vec<RepoPath>> {
    proptest::collection::vec("[a-z]{1,3}(/[a-z*.]{1,4}){0,4}", 0..12).prop_map(|mut v| {
        v.sort();
        v.dedup();
        v.into_iter()
            .map(|p| RepoPath::from_bytes(p.into_bytes()))
            .collect()
    })
}

/// A pyproject.toml whose `[tool.fixgate]` tables hold values of every TOML type, in places the
/// loader expects other types.
fn pyproject() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        "[a-z*/.]{0,12}".prop_map(|s| format!("\"{s}\"")),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        Just("true".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        "[a-z*/.]{0,8}".prop_map(|s| format!("[\"{s}\", 3]")),
        Just("18446744073709551615".to_string()),
        Just("-9223372036854775808".to_string()),
        Just("1979-05-27".to_string()),
    ];
    let key = prop_oneof![
        Just("deps"),
        Just("groups"),
        Just("budget"),
        Just("max-seconds"),
        Just("max_seconds"),
        Just("max-tests"),
        Just("max-new-skips"),
        Just("db"),
        Just("unknown"),
    ];
    let table = prop_oneof![
        Just("[tool.fixgate]"),
        Just("[tool.fixgate.groups]"),
        Just("[tool.fixgate.budget]"),
        Just("[tool]"),
    ];
    proptest::collection::vec((table, proptest::collection::vec((key, value), 0..5)), 0..4)
        .prop_map(|tables| {
            let mut out = String::new();
            for (t, kvs) in tables {
                out.push_str(t);
                out.push('\n');
                for (k, v) in kvs {
                    out.push_str(&format!("{k} = {v}\n"));
                }
            }
            out
        })
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| n.into()),
        any::<u64>().prop_map(|n| n.into()),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f)
            .map_or(serde_json::Value::Null, serde_json::Value::Number)),
        "\\PC{0,12}".prop_map(serde_json::Value::String),
        prop_oneof![
            Just("passed"),
            Just("failed"),
            Just("tests/t.py::test_a"),
            Just("2026-11-30"),
            Just("9999-12-31"),
            Just("0000-00-00"),
            Just("read"),
            Just("write"),
        ]
        .prop_map(|s| serde_json::Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let keys = prop_oneof![
            Just("event"),
            Just("nodeid"),
            Just("outcome"),
            Just("phases"),
            Just("trace"),
            Just("items"),
            Just("outside"),
            Just("read"),
            Just("changed"),
            Just("start"),
            Just("end"),
            Just("reruns"),
            Just("frozen_on"),
            Just("expires"),
            Just("owner"),
            Just("reason"),
            Just("schema"),
            Just("files"),
            Just("markers"),
            Just("line"),
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            proptest::collection::btree_map(keys.prop_map(String::from), inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Event lines as the plugin starts them (`{"event":"test",` selects the fast path), followed
/// by arbitrary JSON members.
fn event_line() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        Just("test"),
        Just("collected"),
        Just("test_start"),
        Just("finish"),
        Just("session_trace"),
        Just("collect_error"),
        Just("collect_skip"),
        Just("error"),
        Just("start"),
        Just("nonsense"),
    ];
    (name, json_value(), any::<bool>()).prop_map(|(name, v, truncate)| {
        let body = match v {
            serde_json::Value::Object(m) if !m.is_empty() => {
                let text = serde_json::Value::Object(m).to_string();
                format!(",{}", &text[1..])
            }
            other => format!(",\"x\":{other}}}"),
        };
        let mut line = format!("{{\"event\":\"{name}\"{body}");
        if truncate {
            // A line cut anywhere, as when a test kills the interpreter mid-write.
            let cut = line.len() / 2;
            let cut = (0..=cut)
                .rev()
                .find(|&i| line.is_char_boundary(i))
                .unwrap_or(0);
            line.truncate(cut);
        }
        line
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(512)
    ))]

    #[test]
    fn fixtures_manifest_never_panics(text in syntaxy(40), paths in paths()) {
        let _ = config::load(&ConfigInputs {
            manifest_file: Some(text.as_bytes()),
            pyproject: None,
            paths: &paths,
        });
    }

    #[test]
    fn fixtures_manifest_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..200),
        paths in paths(),
    ) {
        let _ = config::load(&ConfigInputs {
            manifest_file: Some(&bytes),
            pyproject: None,
            paths: &paths,
        });
    }

    #[test]
    fn tool_fixgate_never_panics(
        toml in pyproject(),
        manifest in proptest::option::of(syntaxy(12)),
        paths in paths(),
    ) {
        let _ = config::load(&ConfigInputs {
            manifest_file: manifest.as_deref().map(str::as_bytes),
            pyproject: Some(toml.as_bytes()),
            paths: &paths,
        });
    }

    #[test]
    fn pyproject_text_never_panics(text in syntaxy(40), paths in paths()) {
        let _ = config::load(&ConfigInputs {
            manifest_file: None,
            pyproject: Some(text.as_bytes()),
            paths: &paths,
        });
    }

    #[test]
    fn fixtures_lock_never_panics(v in json_value(), raw in syntaxy(30)) {
        let _ = Lock::parse(v.to_string().as_bytes(), "fixtures.lock");
        let _ = Lock::parse(raw.as_bytes(), "fixtures.lock");
        let wrapped = serde_json::json!({"schema": 1, "files": v});
        let _ = Lock::parse(wrapped.to_string().as_bytes(), "fixtures.lock");
    }

    #[test]
    fn freeze_ledger_never_panics(v in json_value(), raw in syntaxy(30)) {
        let _ = freeze::parse(v.to_string().as_bytes(), ".fixgate/freeze.json");
        let _ = freeze::parse(raw.as_bytes(), ".fixgate/freeze.json");
        let entry = serde_json::json!({"tests/t.py::test_a": v});
        if let Ok(ledger) = freeze::parse(entry.to_string().as_bytes(), "ledger") {
            for day in [Date::MIN, Date::MAX] {
                let _ = ledger.expired(day);
                let _ = ledger.active(day);
            }
        }
    }

    #[test]
    fn freeze_dates_never_panic(s in "[0-9-]{0,12}", days in any::<i64>()) {
        if let Ok(d) = Date::parse(&s) {
            let _ = d.plus_days(days);
        }
        let _ = Date::MIN.plus_days(days).plus_days(days);
    }

    #[test]
    fn event_stream_never_panics(line in event_line(), raw in "\\PC{0,60}") {
        let _ = Event::parse(&line);
        let _ = Event::parse(&raw);
    }
}

/// Inputs that once broke parsers elsewhere, kept as fixed cases.
#[test]
fn hostile_fixed_inputs_are_errors_not_panics() {
    let no_paths: Vec<RepoPath> = Vec::new();
    for manifest in [
        &b"db:"[..],
        b":",
        b"db: ",
        b"db: /abs/path",
        b"db: ../outside",
        b"db: [",
        b"\xff\xfe: x",
        b"db: **/**/**/**/**/**/**/**/**/**/**/**/**/**/**",
    ] {
        let _ = config::load(&ConfigInputs {
            manifest_file: Some(manifest),
            pyproject: None,
            paths: &no_paths,
        });
    }
    for lock in [
        &b""[..],
        b"{",
        b"{\"schema\": 18446744073709551616}",
        b"{\"schema\": 1, \"files\": {\"a\": 1}}",
        b"[]",
    ] {
        assert!(Lock::parse(lock, "fixtures.lock").is_err());
    }
    for ledger in [
        &b""[..],
        b"{\"t\": {\"frozen_on\": \"2026-02-30\", \"expires\": \"2026-03-01\", \"owner\": \"a\", \"reason\": \"r\"}}",
        b"{\"t\": {\"frozen_on\": \"99999-01-01\", \"expires\": \"2026-03-01\", \"owner\": \"a\", \"reason\": \"r\"}}",
        b"{\"t\": null}",
    ] {
        assert!(freeze::parse(ledger, "ledger").is_err());
    }
    assert!(Event::parse("{\"event\":\"test\",\"nodeid\":").is_none());
    assert!(Event::parse(
        "{\"event\":\"test\",\"nodeid\":\"a\",\"outcome\":\"passed\",\"reruns\":-1}"
    )
    .is_none());
}
