//! The budget: limits set outside the patch (the command line over the base's
//! `[tool.fixgate.budget]`), what the audit used, the breaches that make a patch unverified, and
//! the new skips found by comparing the markers of the base and head collections.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::audit::triage::Evidence;
use crate::config::BudgetConfig;
use crate::pytest::events::{CollectedItem, Collection, Marker};
use crate::pytest::result::Outcome;

/// The markers that stop a test from counting: each one added by a patch is a new skip.
const SKIP_MARKERS: [&str; 3] = ["skip", "skipif", "xfail"];

/// Limits given on the command line; each one set wins over the file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Overrides {
    pub(crate) max_seconds: Option<u64>,
    pub(crate) max_tests: Option<u64>,
    pub(crate) max_frozen: Option<u64>,
    pub(crate) max_new_skips: Option<u64>,
    pub(crate) max_reruns: Option<u64>,
}

/// The limits in force. `None` means no limit; new skips always have one (default 0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Limits {
    pub(crate) max_seconds: Option<u64>,
    pub(crate) max_tests: Option<u64>,
    pub(crate) max_frozen: Option<u64>,
    pub(crate) max_new_skips: u64,
    /// Only from the command line: `[tool.fixgate.budget]` has no such key yet.
    pub(crate) max_reruns: Option<u64>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::merge(&Overrides::default(), &BudgetConfig::default())
    }
}

impl Limits {
    /// The command line over the base's `[tool.fixgate.budget]` (read from the base, so that a
    /// patch cannot raise its own limits).
    pub(crate) fn merge(cli: &Overrides, file: &BudgetConfig) -> Limits {
        Limits {
            max_seconds: cli.max_seconds.or(file.max_seconds),
            max_tests: cli.max_tests.or(file.max_tests),
            max_frozen: cli.max_frozen.or(file.max_frozen),
            max_new_skips: cli.max_new_skips.or(file.max_new_skips).unwrap_or(0),
            max_reruns: cli.max_reruns,
        }
    }
}

/// A test that a rerun plugin (pytest-rerunfailures) ran again: counted, never folded into a
/// pass.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rerun {
    pub(crate) nodeid: String,
    pub(crate) count: u32,
}

/// What the audit used.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Usage {
    /// Wall seconds of the audit: a timing field.
    pub(crate) seconds: f64,
    /// Tests selected (collected minus frozen).
    pub(crate) tests: u64,
    /// Tests deselected by active freeze entries.
    pub(crate) frozen: u64,
    pub(crate) new_skips: Vec<NewSkip>,
    /// Tests with reruns, each listed once with its total.
    pub(crate) reruns: Vec<Rerun>,
}

impl Usage {
    /// What an audit used: its wall `seconds`, the `tests` it ran and those `frozen`, the new
    /// skips of the patch, and the reruns the suite's own plugins gave each test (`evidence`).
    pub(crate) fn of(
        seconds: f64,
        tests: u64,
        frozen: u64,
        new_skips: Vec<NewSkip>,
        evidence: &BTreeMap<String, Evidence>,
    ) -> Usage {
        Usage {
            seconds,
            tests,
            frozen,
            new_skips,
            reruns: (evidence.iter())
                .filter(|(_, e)| e.reruns > 0)
                .map(|(id, e)| Rerun {
                    nodeid: id.clone(),
                    count: e.reruns,
                })
                .collect(),
        }
    }

    pub(crate) fn rerun_total(&self) -> u64 {
        self.reruns.iter().map(|r| u64::from(r.count)).sum()
    }
}

/// A limit the audit went over (`report::reasons` says it in words).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum Breach {
    Seconds { used: f64, limit: u64 },
    Tests { used: u64, limit: u64 },
    Frozen { used: u64, limit: u64 },
    NewSkips { skips: Vec<NewSkip>, limit: u64 },
    Reruns { reruns: Vec<Rerun>, limit: u64 },
}

/// Every limit `used` goes over, in a fixed order: seconds, tests, frozen, new skips, reruns.
/// Reaching a limit exactly is within budget.
pub(crate) fn check(limits: &Limits, used: &Usage) -> Vec<Breach> {
    let mut breaches = Vec::new();
    if let Some(limit) = limits.max_seconds {
        // Compared as seconds: 300.4s is over a 300s budget.
        if used.seconds > limit as f64 {
            breaches.push(Breach::Seconds {
                used: used.seconds,
                limit,
            });
        }
    }
    if let Some(limit) = limits.max_tests.filter(|l| used.tests > *l) {
        breaches.push(Breach::Tests {
            used: used.tests,
            limit,
        });
    }
    if let Some(limit) = limits.max_frozen.filter(|l| used.frozen > *l) {
        breaches.push(Breach::Frozen {
            used: used.frozen,
            limit,
        });
    }
    if used.new_skips.len() as u64 > limits.max_new_skips {
        breaches.push(Breach::NewSkips {
            skips: used.new_skips.clone(),
            limit: limits.max_new_skips,
        });
    }
    if let Some(limit) = limits.max_reruns.filter(|l| used.rerun_total() > *l) {
        breaches.push(Breach::Reruns {
            reruns: used.reruns.clone(),
            limit,
        });
    }
    breaches
}

/// A head test that is skipped or expected to fail where the base's was not (or a new test born
/// that way).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NewSkip {
    pub(crate) nodeid: String,
    /// `skip`, `skipif` or `xfail`.
    pub(crate) marker: String,
    pub(crate) reason: Option<String>,
}

/// The new skips of a patch: new skip markers on the tests and the collectors the head skipped
/// ([`new_skips`]), and a skip inside the body of a test the base had (`pytest.skip(...)` is no
/// marker): a test the patch edited and that was skipped in every order counts too, with the
/// reason its run gave (`skip_reason`). Sorted by nodeid.
pub(crate) fn patch_skips(
    base: &Collection,
    head: &Collection,
    evidence: &BTreeMap<String, Evidence>,
    edited: &BTreeSet<String>,
    base_ids: &HashSet<&str>,
    skip_reason: impl Fn(&str) -> Option<String>,
) -> Vec<NewSkip> {
    let with_skipped = |c: &Collection| {
        c.items
            .iter()
            .chain(&c.skipped_collectors)
            .cloned()
            .collect::<Vec<_>>()
    };
    let mut skips = new_skips(&with_skipped(base), &with_skipped(head));
    for (id, e) in evidence {
        let skipped =
            !e.outcomes.is_empty() && e.outcomes.iter().all(|(_, o)| *o == Outcome::Skipped);
        let counted = skips.iter().any(|s| &s.nodeid == id);
        if skipped && edited.contains(id) && base_ids.contains(id.as_str()) && !counted {
            skips.push(NewSkip {
                nodeid: id.clone(),
                marker: "pytest.skip()".into(),
                reason: skip_reason(id),
            });
        }
    }
    skips.sort_by(|a, b| a.nodeid.cmp(&b.nodeid));
    skips
}

/// The new skips of `head` relative to `base`, one per test (its first new skip marker), sorted
/// by nodeid.
///
/// A marker is new when the base's test has no marker of the same name with the same conditions:
/// rewording a reason is not a new skip, but turning `skipif(False)` into `skipif(True)` is. A
/// `skipif` or `xfail` whose conditions are all literally `false` never applies and is ignored.
pub(crate) fn new_skips(
    base_items: &[CollectedItem],
    head_items: &[CollectedItem],
) -> Vec<NewSkip> {
    let mut base: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for item in base_items {
        let keys = base.entry(item.nodeid.as_str()).or_default();
        keys.extend(item.markers.iter().filter_map(skip_key));
    }
    let mut found: BTreeMap<&str, NewSkip> = BTreeMap::new();
    for item in head_items {
        if found.contains_key(item.nodeid.as_str()) {
            continue;
        }
        let known = base.get(item.nodeid.as_str());
        let new = item.markers.iter().find(|m| {
            skip_key(m).is_some_and(|key| !known.is_some_and(|keys| keys.contains(&key)))
        });
        if let Some(marker) = new {
            found.insert(
                &item.nodeid,
                NewSkip {
                    nodeid: item.nodeid.clone(),
                    marker: marker.name.clone(),
                    reason: reason(marker),
                },
            );
        }
    }
    found.into_values().collect()
}

/// What makes two skip markers the same: the name and the conditions (not the reason text).
/// `None` for markers that do not skip.
fn skip_key(marker: &Marker) -> Option<String> {
    if !SKIP_MARKERS.contains(&marker.name.as_str()) {
        return None;
    }
    if marker.name == "skip" {
        // `skip`'s only positional argument is its reason: every skip is the same skip.
        return Some("skip".to_owned());
    }
    let mut conditions: Vec<&serde_json::Value> = marker.args.iter().collect();
    conditions.extend(marker.kwargs.get("condition"));
    let inert = !conditions.is_empty()
        && conditions
            .iter()
            .all(|c| **c == serde_json::Value::Bool(false));
    if inert {
        return None;
    }
    // serde_json's text of a value is canonical here (its maps are sorted).
    let text = serde_json::to_string(&conditions).unwrap_or_default();
    Some(format!("{}{text}", marker.name))
}

fn reason(marker: &Marker) -> Option<String> {
    let positional = if marker.name == "skip" {
        marker.args.first()
    } else {
        None
    };
    let value = marker.kwargs.get("reason").or(positional)?;
    match value {
        serde_json::Value::String(s) if s.is_empty() => None,
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Null => None,
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn marker(name: &str, args: serde_json::Value, kwargs: serde_json::Value) -> Marker {
        let args = match args {
            serde_json::Value::Array(a) => a,
            _ => Vec::new(),
        };
        let kwargs = match kwargs {
            serde_json::Value::Object(m) => m.into_iter().collect(),
            _ => BTreeMap::new(),
        };
        Marker {
            name: name.into(),
            args,
            kwargs,
        }
    }

    fn item(nodeid: &str, markers: Vec<Marker>) -> CollectedItem {
        CollectedItem {
            nodeid: nodeid.into(),
            file: None,
            line: None,
            markers,
        }
    }

    fn skip(reason: &str) -> Marker {
        marker("skip", json!([]), json!({ "reason": reason }))
    }

    #[test]
    fn cli_wins_over_the_file_and_new_skips_default_to_zero() {
        let file = BudgetConfig {
            max_seconds: Some(600),
            max_tests: Some(100),
            max_frozen: None,
            max_new_skips: Some(2),
        };
        let cli = Overrides {
            max_seconds: Some(60),
            max_frozen: Some(3),
            max_reruns: Some(0),
            ..Overrides::default()
        };
        assert_eq!(
            Limits::merge(&cli, &file),
            Limits {
                max_seconds: Some(60),
                max_tests: Some(100),
                max_frozen: Some(3),
                max_new_skips: 2,
                max_reruns: Some(0),
            }
        );
        assert_eq!(
            Limits::default(),
            Limits {
                max_seconds: None,
                max_tests: None,
                max_frozen: None,
                max_new_skips: 0,
                max_reruns: None,
            }
        );
        let cli = Overrides {
            max_new_skips: Some(0),
            ..Overrides::default()
        };
        assert_eq!(Limits::merge(&cli, &file).max_new_skips, 0);
    }

    #[test]
    fn nothing_used_breaches_nothing() {
        assert!(check(&Limits::default(), &Usage::default()).is_empty());
    }

    #[test]
    fn each_limit_breaches_in_a_fixed_order() {
        let limits = Limits {
            max_seconds: Some(300),
            max_tests: Some(1000),
            max_frozen: Some(1),
            max_new_skips: 0,
            max_reruns: Some(1),
        };
        let used = Usage {
            seconds: 312.44,
            tests: 1200,
            frozen: 2,
            new_skips: vec![
                NewSkip {
                    nodeid: "tests/test_x.py::test_a".into(),
                    marker: "skip".into(),
                    reason: Some("later".into()),
                },
                NewSkip {
                    nodeid: "tests/test_x.py::test_b".into(),
                    marker: "xfail".into(),
                    reason: None,
                },
            ],
            reruns: vec![
                Rerun {
                    nodeid: "tests/test_y.py::test_c".into(),
                    count: 2,
                },
                Rerun {
                    nodeid: "tests/test_y.py::test_d".into(),
                    count: 1,
                },
            ],
        };
        let breaches = check(&limits, &used);
        assert_eq!(
            breaches,
            [
                Breach::Seconds {
                    used: 312.44,
                    limit: 300
                },
                Breach::Tests {
                    used: 1200,
                    limit: 1000
                },
                Breach::Frozen { used: 2, limit: 1 },
                Breach::NewSkips {
                    skips: used.new_skips.clone(),
                    limit: 0
                },
                Breach::Reruns {
                    reruns: used.reruns.clone(),
                    limit: 1
                },
            ]
        );
    }

    #[test]
    fn reaching_a_limit_exactly_is_within_budget() {
        let limits = Limits {
            max_seconds: Some(300),
            max_tests: Some(10),
            max_frozen: Some(1),
            max_new_skips: 1,
            max_reruns: Some(2),
        };
        let used = Usage {
            seconds: 300.0,
            tests: 10,
            frozen: 1,
            new_skips: vec![NewSkip {
                nodeid: "t::a".into(),
                marker: "skip".into(),
                reason: None,
            }],
            reruns: vec![Rerun {
                nodeid: "t::b".into(),
                count: 2,
            }],
        };
        assert!(check(&limits, &used).is_empty());
    }

    #[test]
    fn reruns_are_counted_but_only_breach_with_a_limit() {
        let used = Usage {
            reruns: vec![Rerun {
                nodeid: "t::b".into(),
                count: 5,
            }],
            ..Usage::default()
        };
        assert_eq!(used.rerun_total(), 5);
        assert!(check(&Limits::default(), &used).is_empty());
    }

    #[test]
    fn new_skip_markers_are_found() {
        let base = vec![
            item("t.py::plain", vec![]),
            item("t.py::already", vec![skip("old reason")]),
            item(
                "t.py::cond",
                vec![marker("skipif", json!([false]), json!({"reason": "win"}))],
            ),
            item("t.py::marked", vec![marker("slow", json!([]), json!({}))]),
        ];
        let head = vec![
            item(
                "t.py::plain",
                vec![marker("skip", json!(["not now"]), json!({}))],
            ),
            // Rewording an existing skip is not a new skip.
            item("t.py::already", vec![skip("new reason")]),
            // The condition changed from false to true: a new skip.
            item(
                "t.py::cond",
                vec![marker("skipif", json!([true]), json!({"reason": "always"}))],
            ),
            item(
                "t.py::marked",
                vec![
                    marker("slow", json!([]), json!({})),
                    marker(
                        "xfail",
                        json!([]),
                        json!({"reason": "bug 12", "strict": false}),
                    ),
                ],
            ),
            // Born skipped.
            item("t.py::brand_new", vec![skip("todo")]),
            // A brand-new test without skip markers is not a skip.
            item(
                "t.py::also_new",
                vec![marker("writes", json!(["db"]), json!({}))],
            ),
        ];
        assert_eq!(
            new_skips(&base, &head),
            vec![
                NewSkip {
                    nodeid: "t.py::brand_new".into(),
                    marker: "skip".into(),
                    reason: Some("todo".into()),
                },
                NewSkip {
                    nodeid: "t.py::cond".into(),
                    marker: "skipif".into(),
                    reason: Some("always".into()),
                },
                NewSkip {
                    nodeid: "t.py::marked".into(),
                    marker: "xfail".into(),
                    reason: Some("bug 12".into()),
                },
                NewSkip {
                    nodeid: "t.py::plain".into(),
                    marker: "skip".into(),
                    reason: Some("not now".into()),
                },
            ]
        );
    }

    #[test]
    fn inert_and_removed_markers_are_not_new_skips() {
        let base = vec![item("t.py::a", vec![skip("x")])];
        let head = vec![
            item("t.py::a", vec![]),
            item(
                "t.py::b",
                vec![marker("skipif", json!([false]), json!({"reason": "never"}))],
            ),
            item(
                "t.py::c",
                vec![marker("xfail", json!([]), json!({"condition": false}))],
            ),
        ];
        assert!(new_skips(&base, &head).is_empty());
        // A string condition is evaluated by pytest at run time: it counts.
        let head = vec![item(
            "t.py::d",
            vec![marker(
                "skipif",
                json!(["sys.platform != 'nope'"]),
                json!({}),
            )],
        )];
        assert_eq!(new_skips(&base, &head).len(), 1);
        assert_eq!(new_skips(&base, &head)[0].reason, None);
    }

    #[test]
    fn one_new_skip_per_test_and_odd_reasons() {
        let head = vec![
            item(
                "t.py::a",
                vec![
                    marker("xfail", json!([]), json!({"reason": 7})),
                    skip("also"),
                ],
            ),
            item("t.py::a", vec![skip("duplicate item")]),
            item(
                "t.py::b",
                vec![marker("skip", json!([]), json!({"reason": ""}))],
            ),
        ];
        let found = new_skips(&[], &head);
        assert_eq!(found.len(), 2);
        assert_eq!(
            (found[0].marker.as_str(), found[0].reason.as_deref()),
            ("xfail", Some("7"))
        );
        assert_eq!(found[1].reason, None);
    }

    #[test]
    fn a_second_skipif_with_another_condition_is_new() {
        let base = vec![item(
            "t.py::a",
            vec![marker("skipif", json!(["cond_a"]), json!({}))],
        )];
        let head = vec![item(
            "t.py::a",
            vec![
                marker("skipif", json!(["cond_a"]), json!({})),
                marker("skipif", json!(["cond_b"]), json!({"reason": "b"})),
            ],
        )];
        let found = new_skips(&base, &head);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].reason.as_deref(), Some("b"));
    }
}
