//! The reasons of the report in words: why the verdict is what it is (a gate's drift, an
//! expired freeze entry, a finding that rejects, a breach of the budget), why an audit's orders
//! or collection ran in full, what a pair's search established. The audit hands over typed
//! reasons (`crate::audit`); this is the one place that says them.

use std::fmt;

use crate::audit::bisect::SearchOutcome;
use crate::audit::budget::Breach;
use crate::audit::footprint::Everything;
use crate::audit::itemize::Whole;
use crate::audit::scope::{Full, Gap, WholeWhy};
use crate::audit::spec_scope::{SpecReason, SpecRole};
use crate::audit::verdict::{Because, Reason};
use crate::pytest::events::StateChange;

/// One line of the verdict's reasons, as the report's `reasons` lists it.
impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Drift(d) => write!(
                f,
                "fixture differs from {}: {} ({})",
                d.lock,
                d.path,
                d.change.as_str()
            ),
            Reason::Expired(e) => write!(
                f,
                "freeze entry expired: {} (owner {}, expired {})",
                e.nodeid, e.owner, e.expires
            ),
            Reason::Rejects {
                kind,
                subject,
                because,
            } => {
                let why = match because {
                    Because::Introduced => "introduced by the patch",
                    Because::EditedItsTest => "the base has it too, but the patch edited its test",
                    Because::Strict => "the base has it too; rejected under --strict",
                };
                write!(f, "{kind} {subject}: {why}")
            }
            Reason::OverBudget(breach) => write!(f, "over budget: {breach}"),
            Reason::SourceCheck { kind, subject } => write!(
                f,
                "{kind} {subject}: the patch's source, read under --strict-source (or source-checks = \"block\")"
            ),
            Reason::Undecided(u) => {
                use crate::audit::source_replay::Undecided;
                let why = match &u.why {
                    Undecided::NotRun => "its base version did not run with the base's file".to_string(),
                    Undecided::Unconfirmed => "its base version failed once, and passed on a second run".to_string(),
                    Undecided::NameGone { name } => format!(
                        "its base version fails on {name}, which the head removed or renamed, and the test changed besides calling another name"
                    ),
                };
                write!(
                    f,
                    "replay undecided: the patch edited {}, and nothing could tell whether the edit moved what it expects ({why})",
                    u.nodeid
                )
            }
        }
    }
}

/// A breach of the budget, as the report's `budget.breaches` lists it.
impl fmt::Display for Breach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Breach::Seconds { used, limit } => {
                write!(f, "the audit took {used:.1}s (limit {limit}s)")
            }
            Breach::Tests { used, limit } => {
                write!(
                    f,
                    "{used} {} (limit {limit})",
                    plural(*used, "test", "tests")
                )
            }
            Breach::Frozen { used, limit } => write!(
                f,
                "{used} frozen {} (limit {limit})",
                plural(*used, "test", "tests")
            ),
            Breach::NewSkips { skips, limit } => {
                let n = skips.len() as u64;
                let names: Vec<&str> = skips.iter().map(|s| s.nodeid.as_str()).collect();
                write!(
                    f,
                    "{n} new {} (limit {limit}): {}",
                    plural(n, "skip", "skips"),
                    names.join(", ")
                )
            }
            Breach::Reruns { reruns, limit } => {
                let total: u64 = reruns.iter().map(|r| u64::from(r.count)).sum();
                let names: Vec<String> = reruns
                    .iter()
                    .map(|r| format!("{} ({})", r.nodeid, r.count))
                    .collect();
                write!(
                    f,
                    "{total} {} (limit {limit}): {}",
                    plural(total, "rerun", "reruns"),
                    names.join(", ")
                )
            }
        }
    }
}

fn plural<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

impl fmt::Display for Full {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Full::Asked => f.write_str("--full"),
            Full::NotAsked => f.write_str(
                "not scoped: --scoped or [tool.fixgate] scoped = true scopes the shuffled orders",
            ),
            Full::Footprint(why) => match why {
                Some(e) => e.fmt(f),
                None => Ok(()),
            },
            Full::RanAtCollection { path, line } => write!(
                f,
                "the function at {path}:{line} changed and ran while the suite was collected: \
                 what it computed may be held by any test"
            ),
            Full::ReadAtCollection(path) => write!(
                f,
                "{path} changed and was read while the suite was collected: what was made of \
                 it may be held by any test"
            ),
            Full::SharedState { test, change } => write!(
                f,
                "{test} leaves {} changed, which any test may read",
                describe_leak(change)
            ),
            Full::Incomplete { subject, gap } => {
                let subject = subject.as_deref().unwrap_or("the session");
                write!(f, "the recording of {subject} is incomplete: ")?;
                match gap {
                    Gap::Recording(why) => f.write_str(why),
                    Gap::SessionCode => f.write_str("the code that ran outside tests is not known"),
                    Gap::PluginError => {
                        f.write_str("the plugin hit an internal error while tracing")
                    }
                    Gap::Untraced(what) => {
                        write!(f, "it used {what}, which the trace cannot follow")
                    }
                    Gap::Network(what) => write!(f, "it used the network ({what})"),
                    Gap::Extension(path) => write!(
                        f,
                        "it imported the C extension {path}, whose state is not seen"
                    ),
                    Gap::Code => f.write_str("the code it ran is not known"),
                }
            }
        }
    }
}

impl fmt::Display for WholeWhy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WholeWhy::BaseRunFailed { order, error } => {
                write!(f, "the base's run of order {order} failed: {error}")
            }
            WholeWhy::Base(why) => write!(f, "the base's recording: {why}"),
            WholeWhy::Head(why) => write!(f, "the head's recording: {why}"),
            WholeWhy::Carried(id) => write!(
                f,
                "the head's recording puts {id}, which its runs carried from the base, in the \
                 scope"
            ),
        }
    }
}

impl fmt::Display for Whole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Whole::NotScoped(why) => why.fmt(f),
            Whole::BaseRuns(why) => why.fmt(f),
            Whole::ModuleLevel(path) => write!(
                f,
                "{path} changed at module level, or was added or removed: its import may \
                 change what other modules' items are made of"
            ),
            Whole::Listed { path, dir } => write!(
                f,
                "{path} was added or removed, and the suite's collection lists {}: what it \
                 makes of the listing may change",
                match dir.is_empty() {
                    true => "the repository's root",
                    false => dir.as_str(),
                }
            ),
            Whole::Signature(path) => write!(
                f,
                "a changed function of {path} has other decorators or another signature, \
                 which run when the module is imported"
            ),
            Whole::Hook { path, hook } => write!(
                f,
                "{path} defines {hook}, which would see only some modules' items"
            ),
            Whole::NothingCarried => {
                f.write_str("every test module is one the patch or the scope reaches")
            }
            Whole::Fresh => f.write_str(
                "the head's collection was made by a fresh pytest process, which makes every item \
                 (no warm interpreter could be had when it was made)",
            ),
            Whole::Unnamed => f.write_str(
                "the collection did not say, in order, where each module it was asked to carry \
                 stood",
            ),
            Whole::Twice(id) => write!(
                f,
                "{id} would be listed twice in the collection put together of the head's items \
                 and the base's"
            ),
            Whole::Unordered => f.write_str(
                "the collection's items are not in the order they were collected (a plugin \
                 reordered or took out some), so the base's items have no place in it",
            ),
        }
    }
}

impl fmt::Display for Everything {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Everything::Conftest(p) => {
                write!(f, "the patch changes {p}, which runs around every test")
            }
            Everything::Configuration(p) => write!(
                f,
                "the patch changes {p}, which configures pytest for every test"
            ),
            Everything::StartUp(p) => write!(
                f,
                "the patch changes {p}, which the interpreter runs at start-up"
            ),
        }
    }
}

/// What a pair's search established, or which invariant broke: one line.
pub(crate) fn search_outcome(outcome: SearchOutcome) -> String {
    match outcome {
        SearchOutcome::Found => "reproduced with a minimal set of culprits".to_owned(),
        SearchOutcome::NotReproduced => {
            "not explained: the victim behaves normally after its whole prefix, so the \
             anomalous run does not reproduce"
                .to_owned()
        }
        SearchOutcome::ReproducesAlone => {
            "not explained: the victim shows the anomaly with nothing before it, so no \
             earlier test is responsible"
                .to_owned()
        }
        SearchOutcome::CapReached { cap } => format!(
            "partial: delta debugging stopped after {cap} runs; the culprits reproduce the \
             anomaly but may not be minimal"
        ),
        SearchOutcome::Unstable { reproduced, of } => format!(
            "not proven: the culprits then the victim showed the anomaly on {reproduced} of \
             {of} reruns, and the victim alone must never show it; nondeterminism, not order"
        ),
    }
}

/// Why the base-suite replay ran, one line each, sorted.
pub(crate) fn spec_reasons(reasons: &[SpecReason]) -> Vec<String> {
    let mut lines: Vec<String> = reasons
        .iter()
        .map(|r| match r {
            SpecReason::Changed(c) => format!("{} changed: {}", spec_role(c.role), c.path),
            SpecReason::Gone(n) => format!(
                "{n} base test{} not collected at head",
                if *n == 1 { " is" } else { "s are" }
            ),
        })
        .collect();
    lines.sort();
    lines.dedup();
    lines
}

fn spec_role(role: SpecRole) -> &'static str {
    match role {
        SpecRole::Conftest => "a conftest.py",
        SpecRole::Config => "the pytest configuration",
        SpecRole::Hook => "a pytest_* hook",
        SpecRole::TestCode => "a helper module of the tests",
        SpecRole::ImportPatch => "a test module that patches what it imports",
        SpecRole::TestFile => "a test file",
    }
}

/// One change of shared state, as a finding names it.
pub(crate) fn describe_leak(change: &StateChange) -> String {
    match change {
        StateChange::Env(name) => format!("the environment variable {name}"),
        StateChange::Cwd => "the working directory".into(),
        StateChange::SysPath => "sys.path".into(),
        StateChange::SysModules(name) => format!("the module {name} in sys.modules"),
        StateChange::Global { path, name } => format!("the module global {name} of {path}"),
        StateChange::Cache { home, function, .. } => {
            format!("the lru_cache of {function} in {home}")
        }
        StateChange::Outside { module, name } => {
            format!("{module}.{name} (a global outside the repository)")
        }
        StateChange::Setting(name) => format!("the process setting {name}"),
        StateChange::Threads(n) => match n {
            1 => "a thread left running".into(),
            n => format!("{n} threads left running"),
        },
        StateChange::Extension(path) => {
            format!("the C extension {path}, whose state fixgate cannot see")
        }
        StateChange::Other(text) => text.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::budget::{Limits, NewSkip, Rerun, Usage};
    use crate::audit::finding::FindingKind;
    use crate::audit::gates::Expired;
    use crate::audit::lock::Drifted;
    use crate::audit::spec_scope::Changed;
    use crate::delta::Change;

    #[test]
    fn each_limit_breaches_with_a_readable_line() {
        let limits = Limits {
            max_seconds: Some(300),
            max_tests: Some(1000),
            max_frozen: Some(1),
            max_new_skips: 0,
            max_reruns: Some(1),
        };
        let skip = |id: &str| NewSkip {
            nodeid: id.into(),
            marker: "skip".into(),
            reason: None,
        };
        let rerun = |id: &str, count| Rerun {
            nodeid: id.into(),
            count,
        };
        let used = Usage {
            seconds: 312.44,
            tests: 1200,
            frozen: 2,
            new_skips: vec![
                skip("tests/test_x.py::test_a"),
                skip("tests/test_x.py::test_b"),
            ],
            reruns: vec![
                rerun("tests/test_y.py::test_c", 2),
                rerun("tests/test_y.py::test_d", 1),
            ],
        };
        let lines: Vec<String> = crate::audit::budget::check(&limits, &used)
            .iter()
            .map(|b| b.to_string())
            .collect();
        assert_eq!(
            lines,
            [
                "the audit took 312.4s (limit 300s)",
                "1200 tests (limit 1000)",
                "2 frozen tests (limit 1)",
                "2 new skips (limit 0): tests/test_x.py::test_a, tests/test_x.py::test_b",
                "3 reruns (limit 1): tests/test_y.py::test_c (2), tests/test_y.py::test_d (1)",
            ]
        );
        let one = Breach::NewSkips {
            skips: vec![skip("t::a")],
            limit: 0,
        };
        assert_eq!(one.to_string(), "1 new skip (limit 0): t::a");
    }

    #[test]
    fn the_verdicts_reasons_read_as_they_always_have() {
        let reasons = [
            Reason::Drift(Drifted {
                lock: "tests/fixtures.lock.json".into(),
                path: "tests/fixtures/a.json".into(),
                change: Change::Modified,
            }),
            Reason::Expired(Expired {
                nodeid: "tests/t.py::test_y".into(),
                owner: "ana".into(),
                expires: "2024-03-01".into(),
            }),
            Reason::Rejects {
                kind: FindingKind::Polluter,
                subject: "tests/t.py::test_x".into(),
                because: Because::Introduced,
            },
            Reason::Rejects {
                kind: FindingKind::OrderDependent,
                subject: "tests/t.py::test_x".into(),
                because: Because::EditedItsTest,
            },
            Reason::Rejects {
                kind: FindingKind::Failing,
                subject: "tests/t.py::test_x".into(),
                because: Because::Strict,
            },
            Reason::OverBudget(Breach::Tests { used: 2, limit: 1 }),
        ];
        let lines: Vec<String> = reasons.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            lines,
            [
                "fixture differs from tests/fixtures.lock.json: tests/fixtures/a.json (modified)",
                "freeze entry expired: tests/t.py::test_y (owner ana, expired 2024-03-01)",
                "polluter tests/t.py::test_x: introduced by the patch",
                "order-dependent tests/t.py::test_x: the base has it too, but the patch edited \
                 its test",
                "failing tests/t.py::test_x: the base has it too; rejected under --strict",
                "over budget: 2 tests (limit 1)",
            ]
        );
    }

    #[test]
    fn the_replays_reasons_are_sorted_lines() {
        let changed = |path: &str, role| {
            SpecReason::Changed(Changed {
                path: path.into(),
                role,
            })
        };
        let reasons = [
            changed("pyproject.toml", SpecRole::Config),
            changed("tests/test_a.py", SpecRole::TestFile),
            changed("tests/conftest.py", SpecRole::Conftest),
            SpecReason::Gone(2),
        ];
        assert_eq!(
            spec_reasons(&reasons),
            [
                "2 base tests are not collected at head",
                "a conftest.py changed: tests/conftest.py",
                "a test file changed: tests/test_a.py",
                "the pytest configuration changed: pyproject.toml",
            ]
        );
    }
}
