//! `[tool.fixgate]` in `pyproject.toml`: the one parser of it, whose errors name the line and
//! the dotted key, and the two settings read on their own (the remote cache, the fork server).

use std::collections::BTreeMap;
use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::config::groups::{check_glob, check_name, Declared};
use crate::config::model::{BudgetConfig, ConfigError, DepsMode, LimitsConfig, RemoteExecConfig};

/// The Python project file at the repository root; fixgate reads `[tool.fixgate]` from it.
pub(crate) const PYPROJECT_FILE: &str = "pyproject.toml";

const EXAMPLE_TOML: &str = "db = [\"tests/fixtures/db/*.sqlite\"]";

/// What `[tool.fixgate]` says.
#[derive(Debug, Default)]
pub(super) struct Pyproject {
    pub(super) groups: BTreeMap<String, Declared>,
    pub(super) deps: DepsMode,
    pub(super) budget: BudgetConfig,
    pub(super) limits: LimitsConfig,
    pub(super) lock: Option<String>,
    /// `remote-cache`: the URL of a shared cache (see `store`).
    pub(super) remote_cache: Option<String>,
    /// `fork = false`: every run in a fresh interpreter, no fork server.
    pub(super) fork: Option<bool>,
    /// `nio = true`: the nio order in every audit.
    pub(super) nio: bool,
    /// `scoped = true`: impact-scoped audits (docs/impact.md).
    pub(super) scoped: bool,
    /// `source-checks = "block"`: the source-side findings make the verdict unverified.
    pub(super) source_checks_block: bool,
    /// `remote-executor`, `remote-instance`, `remote-platform`.
    pub(super) remote_exec: RemoteExecConfig,
    /// Each with its line, for sorting.
    pub(super) warnings: Vec<(usize, String)>,
}

/// The text of `pyproject.toml`, to turn byte spans into line numbers.
struct Doc<'t> {
    text: &'t str,
}

impl Doc<'_> {
    fn line(&self, offset: usize) -> usize {
        line_at(self.text.as_bytes(), offset)
    }

    fn err(&self, span: Range<usize>, key: &str, message: String) -> ConfigError {
        ConfigError::Pyproject {
            line: self.line(span.start),
            key: key.to_owned(),
            message,
        }
    }

    /// A warning with its line, so warnings can be put back in file order: TOML tables iterate
    /// by key, not by position.
    fn warn_unknown(&self, span: Range<usize>, key: &str, known: &str) -> (usize, String) {
        let line = self.line(span.start);
        let message = format!(
            "pyproject.toml line {line}: unknown key {key:?} is ignored; known keys are {known}"
        );
        (line, message)
    }
}

/// The 1-based line of byte `offset`.
fn line_at(bytes: &[u8], offset: usize) -> usize {
    let end = offset.min(bytes.len());
    bytes[..end].iter().filter(|&&b| b == b'\n').count() + 1
}

/// A value's TOML type with its article, for "found ..." in messages.
fn a_type(value: &DeValue) -> String {
    let name = value.type_str();
    let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {name}")
}

/// A TOML key as it would be written in a dotted path: bare when it can be, quoted otherwise.
fn toml_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
    {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

type Entry<'a, 'i> = (
    &'a Spanned<toml::de::DeString<'i>>,
    &'a Spanned<DeValue<'i>>,
);

pub(super) fn parse_pyproject(bytes: &[u8]) -> Result<Pyproject, ConfigError> {
    let text = std::str::from_utf8(bytes).map_err(|e| ConfigError::PyprojectSyntax {
        line: line_at(bytes, e.valid_up_to()),
        message: "the file is not valid UTF-8; save pyproject.toml as UTF-8".to_owned(),
    })?;
    let doc = Doc { text };
    let root = DeTable::parse(text).map_err(|e| ConfigError::PyprojectSyntax {
        line: doc.line(e.span().map_or(0, |s| s.start)),
        message: format!(
            "invalid TOML: {}; fix the syntax so that the file parses",
            e.message().trim_end().replace('\n', "; ")
        ),
    })?;
    let mut out = Pyproject::default();

    // A `tool` that is not a table is the Python tooling's problem, not ours: there is simply
    // no `[tool.fixgate]` in it.
    let Some(DeValue::Table(tool)) = root.get_ref().get("tool").map(|v| v.get_ref()) else {
        return Ok(out);
    };
    let Some((fixgate_key, fixgate)) = tool.get_key_value("fixgate") else {
        return Ok(out);
    };
    let DeValue::Table(fixgate) = fixgate.get_ref() else {
        return Err(doc.err(
            fixgate_key.span(),
            "tool.fixgate",
            format!(
                "expected a table, found {}; write the settings under a [tool.fixgate] header",
                a_type(fixgate.get_ref())
            ),
        ));
    };

    for (key, value) in fixgate.iter() {
        match key.get_ref().as_ref() {
            "groups" => out.groups = parse_groups(&doc, (key, value))?,
            "deps" => out.deps = parse_deps(&doc, (key, value))?,
            "budget" => out.budget = parse_budget(&doc, (key, value), &mut out.warnings)?,
            "limits" => out.limits = parse_limits(&doc, (key, value), &mut out.warnings)?,
            "lock" => out.lock = Some(parse_lock(&doc, (key, value))?),
            "remote-cache" => match value.get_ref() {
                DeValue::String(url) => out.remote_cache = Some(url.to_string()),
                other => {
                    return Err(doc.err(
                        key.span(),
                        "tool.fixgate.remote-cache",
                        format!(
                            "expected a URL string, found {}; write remote-cache = \
                             \"grpc://cache.example:8980\" (or http://, https://, grpcs://)",
                            a_type(other)
                        ),
                    ))
                }
            },
            "fork" => {
                out.fork = Some(parse_bool(
                    &doc,
                    (key, value),
                    "tool.fixgate.fork",
                    "write fork = false to run every order in a fresh interpreter",
                )?)
            }
            "nio" => {
                out.nio = parse_bool(
                    &doc,
                    (key, value),
                    "tool.fixgate.nio",
                    "write nio = true to run every test twice in a row in one more order",
                )?
            }
            "scoped" => {
                out.scoped = parse_bool(
                    &doc,
                    (key, value),
                    "tool.fixgate.scoped",
                    "write scoped = true to run the shuffled orders over what the patch can affect",
                )?
            }
            "source-checks" => {
                out.source_checks_block = match parse_string(&doc, (key, value), "block")?.as_str()
                {
                    "warn" => false,
                    "block" => true,
                    other => {
                        return Err(doc.err(
                            key.span(),
                            "tool.fixgate.source-checks",
                            format!(
                                "expected \"warn\" or \"block\", found \"{other}\"; write \
                                 source-checks = \"block\" to make the source-side findings \
                                 (special-cased-input, eq-ignores-argument, swallowed-error) \
                                 unverify the audit"
                            ),
                        ))
                    }
                }
            }
            "remote-executor" => {
                out.remote_exec.executor =
                    Some(parse_string(&doc, (key, value), "grpc://host:8980")?)
            }
            "remote-instance" => {
                out.remote_exec.instance = Some(parse_string(&doc, (key, value), "main")?)
            }
            "remote-platform" => out.remote_exec.platform = parse_platform(&doc, (key, value))?,
            "read-paths" => out.limits.read_paths = parse_read_paths(&doc, (key, value))?,
            other => out.warnings.push(doc.warn_unknown(
                key.span(),
                &format!("tool.fixgate.{}", toml_key(other)),
                "\"groups\", \"deps\", \"budget\", \"limits\", \"lock\", \"remote-cache\", \"fork\", \
                 \"nio\", \"scoped\", \"source-checks\", \"remote-executor\", \"remote-instance\", \"remote-platform\" and \
                 \"read-paths\"",
            )),
        }
    }
    Ok(out)
}

/// `[tool.fixgate] remote-cache` of a `pyproject.toml`, if set.
pub(crate) fn remote_cache(pyproject: &[u8]) -> Result<Option<String>, ConfigError> {
    Ok(parse_pyproject(pyproject)?.remote_cache)
}

fn parse_groups(doc: &Doc, (key, value): Entry) -> Result<BTreeMap<String, Declared>, ConfigError> {
    let DeValue::Table(table) = value.get_ref() else {
        return Err(doc.err(
            key.span(),
            "tool.fixgate.groups",
            format!(
                "expected a table of groups, found {}; write a [tool.fixgate.groups] header \
                 followed by lines like {EXAMPLE_TOML}",
                a_type(value.get_ref())
            ),
        ));
    };
    let mut groups = BTreeMap::new();
    for (name_key, globs_value) in table.iter() {
        let name = name_key.get_ref().as_ref();
        let path = format!("tool.fixgate.groups.{}", toml_key(name));
        check_name(name).map_err(|m| doc.err(name_key.span(), &path, m))?;

        let wrong_type = |found: &str, span: Range<usize>| {
            doc.err(
                span,
                &path,
                format!(
                    "expected a glob string or an array of glob strings, found {found}; write \
                     it like {EXAMPLE_TOML}"
                ),
            )
        };
        let items: Vec<(&str, Range<usize>)> = match globs_value.get_ref() {
            DeValue::String(s) => vec![(s.as_ref(), globs_value.span())],
            DeValue::Array(array) => {
                let mut items = Vec::with_capacity(array.len());
                for item in array.iter() {
                    match item.get_ref() {
                        DeValue::String(s) => items.push((s.as_ref(), item.span())),
                        other => {
                            return Err(wrong_type(
                                &format!("an array holding {}", a_type(other)),
                                item.span(),
                            ))
                        }
                    }
                }
                items
            }
            other => return Err(wrong_type(&a_type(other), name_key.span())),
        };
        if items.is_empty() {
            return Err(doc.err(
                name_key.span(),
                &path,
                format!(
                    "group {name:?} has no globs; list at least one, for example {EXAMPLE_TOML}"
                ),
            ));
        }

        let mut declared = Declared {
            line: doc.line(name_key.span().start),
            globs: Vec::new(),
        };
        for (glob, span) in items {
            check_glob(glob).map_err(|m| doc.err(span, &path, m))?;
            declared.add(glob);
        }
        groups.insert(name.to_owned(), declared);
    }
    Ok(groups)
}

/// A string setting, e.g. `remote-executor = "grpc://host:8980"`.
fn parse_string(doc: &Doc, (key, value): Entry, example: &str) -> Result<String, ConfigError> {
    let name = format!("tool.fixgate.{}", key.get_ref());
    match value.get_ref() {
        DeValue::String(text) => Ok(text.to_string()),
        other => Err(doc.err(
            key.span(),
            &name,
            format!(
                "expected a string, found {}; write {} = \"{example}\"",
                a_type(other),
                key.get_ref()
            ),
        )),
    }
}

/// `read-paths = ["/data/corpus", ...]`: absolute paths, each a string.
fn parse_read_paths(
    doc: &Doc,
    (key, value): Entry,
) -> Result<Vec<std::path::PathBuf>, ConfigError> {
    let wrong = |found: String| {
        doc.err(
            key.span(),
            "tool.fixgate.read-paths",
            format!(
                "expected a list of absolute paths, found {found}; write read-paths = \
                 [\"/data/corpus\"]"
            ),
        )
    };
    let DeValue::Array(items) = value.get_ref() else {
        return Err(wrong(a_type(value.get_ref()).to_string()));
    };
    items
        .iter()
        .map(|item| match item.get_ref() {
            DeValue::String(p) if p.starts_with('/') => Ok(std::path::PathBuf::from(p.as_ref())),
            DeValue::String(p) => Err(wrong(format!("the relative path {p:?}"))),
            other => Err(wrong(a_type(other).to_string())),
        })
        .collect()
}

/// `remote-platform = { KEY = "VALUE", ... }`.
fn parse_platform(doc: &Doc, (key, value): Entry) -> Result<Vec<(String, String)>, ConfigError> {
    let wrong = |found: &str| {
        doc.err(
            key.span(),
            "tool.fixgate.remote-platform",
            format!(
                "expected a table of strings, found {found}; write remote-platform = \
                 {{ container-image = \"docker://python:3.12\" }}"
            ),
        )
    };
    let DeValue::Table(table) = value.get_ref() else {
        return Err(wrong(&a_type(value.get_ref())));
    };
    let mut out = Vec::new();
    for (k, v) in table.iter() {
        match v.get_ref() {
            DeValue::String(text) => out.push((k.get_ref().to_string(), text.to_string())),
            other => return Err(wrong(&a_type(other))),
        }
    }
    out.sort();
    Ok(out)
}

/// A boolean setting (`fork`, `nio`); the error says what writing it does.
fn parse_bool(doc: &Doc, (key, value): Entry, path: &str, hint: &str) -> Result<bool, ConfigError> {
    match value.get_ref() {
        DeValue::Boolean(b) => Ok(*b),
        other => Err(doc.err(
            key.span(),
            path,
            format!("expected true or false, found {}; {hint}", a_type(other)),
        )),
    }
}

/// `[tool.fixgate] fork` of a `pyproject.toml`: `Some(false)` turns the fork server off. A file
/// that does not parse says nothing here (loading the configuration reports it).
pub(crate) fn fork_setting(pyproject: &[u8]) -> Option<bool> {
    parse_pyproject(pyproject).ok().and_then(|p| p.fork)
}

fn parse_deps(doc: &Doc, (key, value): Entry) -> Result<DepsMode, ConfigError> {
    let found = match value.get_ref() {
        DeValue::String(s) => match s.as_ref() {
            "traced" => return Ok(DepsMode::Traced),
            "conservative" => return Ok(DepsMode::Conservative),
            other => format!("{other:?}"),
        },
        other => a_type(other),
    };
    Err(doc.err(
        key.span(),
        "tool.fixgate.deps",
        format!(
            "expected \"traced\" or \"conservative\", found {found}; write deps = \"traced\" \
             (the default) or deps = \"conservative\""
        ),
    ))
}

/// `lock = "tests/fixtures.lock.json"`: a relative path inside the repository, since the lock
/// is read from the snapshot (the base's copy in an audit), never from outside it.
fn parse_lock(doc: &Doc, (key, value): Entry) -> Result<String, ConfigError> {
    let found = match value.get_ref() {
        DeValue::String(s) => {
            let path = s.as_ref().trim_start_matches("./");
            let inside = !path.is_empty()
                && !path.starts_with('/')
                && path
                    .split('/')
                    .all(|c| !c.is_empty() && c != "." && c != "..");
            if inside {
                return Ok(path.to_owned());
            }
            format!("{:?}", s.as_ref())
        }
        other => a_type(other),
    };
    Err(doc.err(
        key.span(),
        "tool.fixgate.lock",
        format!(
            "expected a path relative to the repository root, found {found}; write e.g. \
             lock = \"tests/fixtures.lock.json\""
        ),
    ))
}

fn parse_budget(
    doc: &Doc,
    (key, value): Entry,
    warnings: &mut Vec<(usize, String)>,
) -> Result<BudgetConfig, ConfigError> {
    let DeValue::Table(table) = value.get_ref() else {
        return Err(doc.err(
            key.span(),
            "tool.fixgate.budget",
            format!(
                "expected a table, found {}; write a [tool.fixgate.budget] header followed by \
                 lines like max_seconds = 600",
                a_type(value.get_ref())
            ),
        ));
    };
    let mut budget = BudgetConfig::default();
    for (limit_key, limit) in table.iter() {
        let name = limit_key.get_ref().as_ref();
        let slot = match name {
            "max_seconds" => &mut budget.max_seconds,
            "max_tests" => &mut budget.max_tests,
            "max_frozen" => &mut budget.max_frozen,
            "max_new_skips" => &mut budget.max_new_skips,
            other => {
                warnings.push(doc.warn_unknown(
                    limit_key.span(),
                    &format!("tool.fixgate.budget.{}", toml_key(other)),
                    "\"max_seconds\", \"max_tests\", \"max_frozen\" and \"max_new_skips\"",
                ));
                continue;
            }
        };
        let path = format!("tool.fixgate.budget.{name}");
        let found = match limit.get_ref() {
            DeValue::Integer(n) => match u64::from_str_radix(n.as_str(), n.radix()) {
                Ok(n) => {
                    *slot = Some(n);
                    continue;
                }
                Err(_) if n.as_str().starts_with('-') => format!("{n}, which is negative"),
                Err(_) => format!("{n}, which is too large"),
            },
            other => a_type(other),
        };
        return Err(doc.err(
            limit_key.span(),
            &path,
            format!("expected a whole number of 0 or more, found {found}; write {name} = 10"),
        ));
    }
    Ok(budget)
}

fn parse_limits(
    doc: &Doc,
    (key, value): Entry,
    warnings: &mut Vec<(usize, String)>,
) -> Result<LimitsConfig, ConfigError> {
    let DeValue::Table(table) = value.get_ref() else {
        return Err(doc.err(
            key.span(),
            "tool.fixgate.limits",
            format!(
                "expected a table, found {}; write a [tool.fixgate.limits] header followed by \
                 lines like memory = \"4G\", processes = 4096 or disk = \"8G\"",
                a_type(value.get_ref())
            ),
        ));
    };
    let mut limits = LimitsConfig::default();
    for (limit_key, limit) in table.iter() {
        let name = limit_key.get_ref().as_ref();
        let (slot, count, example) = match name {
            "memory" => (&mut limits.memory, false, "memory = \"4G\""),
            "processes" => (&mut limits.processes, true, "processes = 4096"),
            "disk" => (&mut limits.disk, false, "disk = \"8G\""),
            other => {
                warnings.push(doc.warn_unknown(
                    limit_key.span(),
                    &format!("tool.fixgate.limits.{}", toml_key(other)),
                    "\"memory\", \"processes\" and \"disk\"",
                ));
                continue;
            }
        };
        let parsed = match limit.get_ref() {
            DeValue::Integer(n) => u64::from_str_radix(n.as_str(), n.radix())
                .ok()
                .filter(|&n| n > 0),
            DeValue::String(text) => crate::units::parse_bound(text, count),
            _ => None,
        };
        match parsed {
            Some(n) => *slot = Some(n),
            None => {
                let found = match limit.get_ref() {
                    DeValue::Integer(n) => n.as_str().to_owned(),
                    DeValue::String(text) => format!("{:?}", text.as_ref()),
                    other => a_type(other),
                };
                return Err(doc.err(
                    limit_key.span(),
                    &format!("tool.fixgate.limits.{name}"),
                    format!(
                        "expected {} or \"unlimited\", found {found}; write {example}",
                        if count {
                            "a whole number above 0"
                        } else {
                            "a size such as \"512M\" or \"4G\""
                        }
                    ),
                ));
            }
        }
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_cache_is_read_from_tool_fixgate_and_must_be_a_string() {
        let with = b"[tool.fixgate]\nremote-cache = \"grpc://cache.example:8980\"\n";
        assert_eq!(
            remote_cache(with).unwrap().as_deref(),
            Some("grpc://cache.example:8980")
        );
        assert!(parse_pyproject(with).unwrap().warnings.is_empty());
        assert_eq!(
            remote_cache(b"[tool.fixgate]\ndeps = \"traced\"\n").unwrap(),
            None
        );
        let err = remote_cache(b"[tool.fixgate]\nremote-cache = 8980\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("tool.fixgate.remote-cache"), "{err}");
        assert!(err.contains("expected a URL string"), "{err}");
    }

    #[test]
    fn pyproject_fork_is_a_boolean() {
        assert_eq!(fork_setting(b"[tool.fixgate]\nfork = false\n"), Some(false));
        assert_eq!(fork_setting(b"[tool.fixgate]\nfork = true\n"), Some(true));
        assert_eq!(fork_setting(b"[tool.fixgate]\ndeps = \"traced\"\n"), None);
        assert!(parse_pyproject(b"[tool.fixgate]\nfork = false\n")
            .unwrap()
            .warnings
            .is_empty());
        assert!(parse_pyproject(b"[tool.fixgate]\nfork = \"no\"\n")
            .unwrap_err()
            .to_string()
            .contains("expected true or false"));
    }
}
