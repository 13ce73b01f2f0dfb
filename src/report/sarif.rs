//! The audit as SARIF 2.1.0 (`--format sarif`), for code-scanning UIs: one rule per finding
//! kind, one result per finding, on its test's file and line where the report knows them, with
//! the finding's stable id as its fingerprint so that a UI follows it across audits.

use serde_json::{json, Value};

use super::{AuditReport, Finding};
use crate::audit::finding::FindingKind;

/// The schema SARIF files name (the OASIS standard's, as published by SchemaStore).
const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// Renders the SARIF log, pretty-printed.
pub(crate) fn render(r: &AuditReport) -> String {
    let rules: Vec<FindingKind> = FindingKind::ALL
        .into_iter()
        .filter(|k| r.findings.iter().any(|f| f.kind == *k))
        .collect();
    let results: Vec<Value> = r
        .findings
        .iter()
        .map(|f| result(f, rules.iter().position(|k| *k == f.kind).unwrap_or(0)))
        .collect();
    let log = json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "fixgate",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules.iter().map(|k| rule(*k)).collect::<Vec<_>>(),
            }},
            "originalUriBaseIds": {"SRCROOT": {"description": {"text": "The repository's root"}}},
            "invocations": [{
                "executionSuccessful": r.ran(),
                "exitCode": r.exit_code,
                "toolExecutionNotifications": r.reasons.iter().map(|reason| json!({
                    "level": "note",
                    "message": {"text": reason},
                })).collect::<Vec<_>>(),
            }],
            "results": results,
            "properties": {
                "verdict": r.verdict.as_str(),
                "base": r.base.commit.as_deref().unwrap_or(&r.base.rev),
                "head": r.head.commit.as_deref().unwrap_or(&r.head.rev),
            },
        }],
    });
    let mut text = serde_json::to_string_pretty(&log).unwrap_or_default();
    text.push('\n');
    text
}

fn rule(kind: FindingKind) -> Value {
    let (one, _) = kind.noun();
    json!({
        "id": kind.as_str(),
        "shortDescription": {"text": one},
    })
}

/// A blocking finding is an error, one the patch introduced that does not block a warning,
/// the base's debt a note.
fn result(f: &Finding, rule_index: usize) -> Value {
    let level = match (f.blocking, f.introduced) {
        (true, _) => "error",
        (false, true) => "warning",
        (false, false) => "note",
    };
    let mut text = f.message.trim().to_owned();
    if let Some(repro) = &f.repro {
        text.push_str("\nrepro: ");
        text.push_str(repro);
    }
    let mut result = json!({
        "ruleId": f.kind.as_str(),
        "ruleIndex": rule_index,
        "level": level,
        "message": {"text": text},
        "partialFingerprints": {"fixgateFindingId/v1": f.id},
        "properties": {
            "tests": f.tests,
            "introduced": f.introduced,
            "blocking": f.blocking,
        },
    });
    if let Some(file) = &f.file {
        let mut region = json!({});
        if let Some(line) = f.line.filter(|l| *l > 0) {
            region = json!({"startLine": line});
        }
        let mut location = json!({"artifactLocation": {"uri": file, "uriBaseId": "SRCROOT"}});
        if region != json!({}) {
            location["region"] = region;
        }
        result["locations"] = json!([{"physicalLocation": location}]);
    }
    result
}
