//! The plugin's event stream: what one JSON line says (see docs/plugin-protocol.md).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What one line of the stream says. Unknown events are ignored, so the plugin may grow.
#[derive(Debug, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum Event {
    Start {
        /// The suite's options that fixgate neutralised in this process.
        #[serde(default)]
        neutralised: Vec<Neutralised>,
    },
    Collected {
        items: Vec<CollectedItem>,
        /// Collected, then taken out of the session (`-k`, `-m`, `--deselect`, a
        /// `pytest_collection_modifyitems` hook); written with `--collect-only` only.
        #[serde(default)]
        deselected: Vec<String>,
    },
    /// The modules of `--fixgate-carry-modules` that collection imported without making
    /// items, each with how many items were collected before it.
    Unitemized(Unitemized),
    /// Node ids of the order (`--fixgate-order-lenient`) that the process did not collect,
    /// left out of what it runs; written before any test.
    Uncollected {
        nodeids: Vec<String>,
    },
    CollectError {
        #[serde(default)]
        nodeid: String,
        #[serde(default)]
        message: String,
        /// pytest's whole report (the traceback, with the file and line).
        #[serde(default)]
        longrepr: String,
    },
    /// A module (or other collector) skipped while collecting: its tests never become items.
    CollectSkip {
        nodeid: String,
        #[serde(default)]
        reason: Option<String>,
    },
    TestStart {
        nodeid: String,
    },
    Test(Box<TestEvent>),
    SessionTrace {
        #[serde(default)]
        trace: Box<Trace>,
        /// A fork server's collection trace that misses what modules imported before the
        /// plugin could trace read (conftest.py files pytest loads first): it still names
        /// them as imported, as a fresh collection's does.
        #[serde(default)]
        partial: bool,
    },
    /// The repository's code that ran outside any test (`--fixgate-record` with `code`).
    SessionCode {
        #[serde(default)]
        code: Option<CodeRan>,
        /// Why it is not known, when it is not.
        #[serde(default)]
        unknown: Option<String>,
    },
    Finish {
        /// The test the session ended in (pytest.exit, KeyboardInterrupt); `None` when it
        /// ended between tests.
        #[serde(default)]
        running: Option<String>,
    },
    Error {
        #[serde(default)]
        kind: String,
        #[serde(default)]
        message: String,
    },
    #[serde(other)]
    Other,
}

impl Event {
    /// One line of the stream; `None` for a line that is not an event. The two events a run
    /// writes per test and per collected test are read straight into their types: serde reads
    /// an internally tagged enum through a buffered copy of the whole object first, a dozen
    /// allocations per test. The plugin writes `event` as the first key (docs/plugin-protocol.md).
    pub(crate) fn parse(line: &str) -> Option<Event> {
        if line.starts_with(r#"{"event":"test","#) {
            if let Ok(t) = serde_json::from_str::<TestEvent>(line) {
                return Some(Event::Test(Box::new(t)));
            }
        } else if line.starts_with(r#"{"event":"collected","#) {
            #[derive(Deserialize)]
            struct Collected {
                items: Vec<CollectedItem>,
                #[serde(default)]
                deselected: Vec<String>,
            }
            if let Ok(c) = serde_json::from_str::<Collected>(line) {
                return Some(Event::Collected {
                    items: c.items,
                    deselected: c.deselected,
                });
            }
        }
        serde_json::from_str::<Event>(line).ok()
    }
}

/// One of the suite's own options that fixgate must own (the order, the selection, one run per
/// test in this process), and what the plugin did with it (src/pytest/plugin/options.py).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub(crate) struct Neutralised {
    /// As the suite wrote it, value included: `-n 2`, `--reruns=2`.
    pub(crate) option: String,
    pub(crate) plugin: String,
    /// `removed` or `overridden`.
    pub(crate) treatment: String,
    pub(crate) why: String,
}

impl Neutralised {
    /// The run's warning about it.
    pub(crate) fn warning(&self) -> String {
        format!(
            "the suite's `{}` ({}) is {} in fixgate's runs: {}",
            self.option, self.plugin, self.treatment, self.why
        )
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub(crate) struct CollectedItem {
    pub(crate) nodeid: String,
    #[serde(default)]
    pub(crate) file: Option<String>,
    #[serde(default)]
    pub(crate) line: Option<u64>,
    #[serde(default)]
    pub(crate) markers: Vec<Marker>,
}

/// What collecting a snapshot found: its tests, and the collectors skipped as a whole (as
/// pseudo-items carrying a `skip` marker, so that a new module-level skip counts as a new skip).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub(crate) struct Collection {
    pub(crate) items: Vec<CollectedItem>,
    pub(crate) skipped_collectors: Vec<CollectedItem>,
    /// Node ids collected and then taken out of the session by a plugin, a conftest's hook or
    /// an option (`-k`, `-m`, `--deselect`).
    #[serde(default)]
    pub(crate) deselected: Vec<String>,
    /// A collection that made the items of some modules only (`--fixgate-carry-modules`):
    /// where the others' would go. Never part of an audit's collection, which is whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) unitemized: Option<Unitemized>,
}

/// The test modules a collection imported without making their items
/// (`--fixgate-carry-modules`), in collection order.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub(crate) struct Unitemized {
    pub(crate) modules: Vec<UnitemizedModule>,
    /// Whether the session's items are in the order they were collected, none taken out:
    /// else where the modules' items go is not known.
    pub(crate) in_order: bool,
}

/// One module imported without its items, and how many items were collected before it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub(crate) struct UnitemizedModule {
    pub(crate) nodeid: String,
    pub(crate) at: usize,
}

impl CollectedItem {
    /// A collector skipped as a whole (a `collect_skip` event), as a pseudo-item that carries
    /// a `skip` marker with its reason.
    pub(crate) fn skipped_collector(nodeid: String, reason: Option<String>) -> CollectedItem {
        CollectedItem {
            file: Some(nodeid.split("::").next().unwrap_or(&nodeid).to_string()),
            nodeid,
            line: None,
            markers: vec![Marker {
                name: "skip".into(),
                args: Vec::new(),
                kwargs: reason
                    .map(|r| [("reason".to_string(), serde_json::Value::String(r))].into())
                    .unwrap_or_default(),
            }],
        }
    }

    pub(crate) fn has_marker(&self, name: &str) -> bool {
        self.markers.iter().any(|m| m.name == name)
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub(crate) struct Marker {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) args: Vec<serde_json::Value>,
    #[serde(default)]
    pub(crate) kwargs: BTreeMap<String, serde_json::Value>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default)]
pub(crate) struct Trace {
    pub(crate) import: Vec<String>,
    pub(crate) list: Vec<String>,
    /// The directories among `list` that the suite's code listed, not pytest's own walk of
    /// the tree while collecting.
    pub(crate) list_code: Vec<String>,
    pub(crate) mkdir: Vec<String>,
    /// Addresses connected or sent to (the network, loopback included).
    pub(crate) network: Vec<String>,
    pub(crate) outside: Vec<OutsideAccess>,
    pub(crate) read: Vec<String>,
    pub(crate) remove: Vec<String>,
    pub(crate) rename: Vec<(String, String)>,
    pub(crate) sqlite: Vec<String>,
    pub(crate) unknown: Vec<String>,
    pub(crate) write: Vec<String>,
}

impl Trace {
    /// Adds what `from` recorded (a session's trace arrives in parts, one per process).
    pub(crate) fn merge(&mut self, from: Trace) {
        self.import.extend(from.import);
        self.list.extend(from.list);
        self.list_code.extend(from.list_code);
        self.mkdir.extend(from.mkdir);
        self.network.extend(from.network);
        self.outside.extend(from.outside);
        self.read.extend(from.read);
        self.remove.extend(from.remove);
        self.rename.extend(from.rename);
        self.sqlite.extend(from.sqlite);
        self.unknown.extend(from.unknown);
        self.write.extend(from.write);
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub(crate) struct OutsideAccess {
    pub(crate) op: String,
    pub(crate) path: String,
}

/// By path, then operation (the fields are declared in key order for the JSON, not this).
impl Ord for OutsideAccess {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&self.path, &self.op).cmp(&(&other.path, &other.op))
    }
}

impl PartialOrd for OutsideAccess {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub(crate) struct Phase {
    #[serde(default)]
    pub(crate) duration: f64,
    #[serde(default)]
    pub(crate) message: Option<String>,
    pub(crate) outcome: String,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub(crate) struct ChangedPath {
    pub(crate) change: String,
    pub(crate) path: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct TestEvent {
    pub(crate) nodeid: String,
    pub(crate) outcome: String,
    #[serde(default)]
    pub(crate) phases: BTreeMap<String, Phase>,
    #[serde(default)]
    pub(crate) skip_reason: Option<String>,
    #[serde(default)]
    pub(crate) message: Option<String>,
    /// What pytest's reports claimed, when a hook made them greener than what the test raised
    /// (`outcome` is then what it raised).
    #[serde(default)]
    pub(crate) reported: Option<String>,
    #[serde(default)]
    pub(crate) reruns: u32,
    #[serde(default)]
    pub(crate) writes_marker: Vec<String>,
    #[serde(default)]
    pub(crate) start: f64,
    #[serde(default)]
    pub(crate) end: f64,
    #[serde(default)]
    pub(crate) trace: Trace,
    #[serde(default)]
    pub(crate) changed: Vec<ChangedPath>,
    /// The repository's code the test ran (`--fixgate-record` with `code`).
    #[serde(default)]
    pub(crate) code: Option<CodeRan>,
    /// Code was to be recorded and is not known (something replaced the profiler or the trace
    /// function).
    #[serde(default)]
    pub(crate) code_unknown: bool,
    /// Shared state the test left changed (`--fixgate-record` with `state`).
    #[serde(default)]
    pub(crate) state: Vec<StateChange>,
}

/// The repository's code objects that ran: repo-relative file, then the first line of each code
/// object (its first decorator's line, as CPython numbers it; 0 for the module's body), sorted.
pub(crate) type CodeRan = BTreeMap<String, Vec<u32>>;

/// Shared state a test left changed behind it, as the plugin's `state` list spells it
/// (`kind:detail`, docs/plugin-protocol.md). Serialised in that spelling, in JSON and postcard.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum StateChange {
    /// An environment variable set, changed or removed.
    Env(String),
    /// The working directory.
    Cwd,
    SysPath,
    /// A module removed from `sys.modules` or replaced there.
    SysModules(String),
    /// A module-level value of the repository's own module (its file) rebound or changed in
    /// place.
    Global {
        path: String,
        name: String,
    },
    /// An `lru_cache` global `name` of the repository's module `path` filled or emptied in
    /// place, holding only values nothing can change in place (numbers, strings, tuples of
    /// them), whose function is `function` of the file `home`: no change when that function
    /// reads nothing but its arguments, a `Global` change of `name` otherwise.
    Cache {
        path: String,
        name: String,
        home: String,
        function: String,
    },
    /// A global of a module outside the repository (the standard library's, an installed
    /// package's) rebound or removed: `json.dumps` replaced for good.
    Outside {
        module: String,
        name: String,
    },
    /// A process setting changed in place, which no global's identity shows (a logger's level
    /// or handlers, decimal's context, a signal handler), by the name the plugin reads it by.
    Setting(String),
    /// Threads left running (how many more than before the test).
    Threads(u32),
    /// A C extension module of the repository, imported by the test: its state is not seen.
    Extension(String),
    /// A kind this fixgate does not know (a newer plugin's).
    Other(String),
}

impl StateChange {
    pub(crate) fn parse(text: &str) -> StateChange {
        let (kind, detail) = text.split_once(':').unwrap_or((text, ""));
        match kind {
            "env" => StateChange::Env(detail.to_string()),
            "cwd" => StateChange::Cwd,
            "sys.path" => StateChange::SysPath,
            "sys.modules" => StateChange::SysModules(detail.to_string()),
            "global" => match detail.rsplit_once(':') {
                Some((path, name)) => StateChange::Global {
                    path: path.to_string(),
                    name: name.to_string(),
                },
                None => StateChange::Other(text.to_string()),
            },
            // The plugin writes it only for paths without a colon.
            "cache" => match detail.split(':').collect::<Vec<_>>()[..] {
                [path, name, home, function] => StateChange::Cache {
                    path: path.to_string(),
                    name: name.to_string(),
                    home: home.to_string(),
                    function: function.to_string(),
                },
                _ => StateChange::Other(text.to_string()),
            },
            "outside" => match detail.rsplit_once(':') {
                Some((module, name)) => StateChange::Outside {
                    module: module.to_string(),
                    name: name.to_string(),
                },
                None => StateChange::Other(text.to_string()),
            },
            "setting" => StateChange::Setting(detail.to_string()),
            "threads" => StateChange::Threads(detail.parse().unwrap_or(1)),
            "extension" => StateChange::Extension(detail.to_string()),
            _ => StateChange::Other(text.to_string()),
        }
    }

    /// Whether any test at all may read it (the environment, the working directory, the
    /// import system, another module's global, a process setting, a thread that keeps
    /// running), as against a module's values or a file, whose readers the recording tells.
    pub(crate) fn read_by_anyone(&self) -> bool {
        !matches!(self, StateChange::Global { .. } | StateChange::Cache { .. })
    }
}

impl std::fmt::Display for StateChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateChange::Env(name) => write!(f, "env:{name}"),
            StateChange::Cwd => f.write_str("cwd:"),
            StateChange::SysPath => f.write_str("sys.path:"),
            StateChange::SysModules(name) => write!(f, "sys.modules:{name}"),
            StateChange::Global { path, name } => write!(f, "global:{path}:{name}"),
            StateChange::Cache {
                path,
                name,
                home,
                function,
            } => write!(f, "cache:{path}:{name}:{home}:{function}"),
            StateChange::Outside { module, name } => write!(f, "outside:{module}:{name}"),
            StateChange::Setting(name) => write!(f, "setting:{name}"),
            StateChange::Threads(n) => write!(f, "threads:{n}"),
            StateChange::Extension(path) => write!(f, "extension:{path}"),
            StateChange::Other(text) => f.write_str(text),
        }
    }
}

impl Serialize for StateChange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StateChange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<StateChange, D::Error> {
        let text = String::deserialize(d)?;
        Ok(StateChange::parse(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(line: &str) -> Option<Event> {
        serde_json::from_str::<Event>(line).ok()
    }

    #[test]
    fn the_direct_reads_give_what_the_tagged_enum_gives() {
        for line in [
            r#"{"event":"test","nodeid":"t.py::a[q\"x]","index":3,"outcome":"failed","phases":{"setup":{"outcome":"passed","duration":0.000133},"call":{"outcome":"failed","duration":0.5,"message":"assert 1 == 2"}},"start":1796033963.642333,"end":1796033963.643299,"message":"assert 1 == 2","writes_marker":["db"],"trace":{"read":["tests/fixtures/a.json"]},"changed":[{"path":"tests/fixtures/db.sqlite","change":"modified"}]}"#,
            r#"{"event":"test","nodeid":"t.py::b","index":0,"outcome":"passed","phases":{},"start":1.0,"end":2.0}"#,
            r#"{"event":"collected","items":[{"nodeid":"t.py::a"},{"nodeid":"t.py::b","file":"t.py","line":3,"markers":[{"name":"skip","args":[],"kwargs":{}}]}]}"#,
            r#"{"event":"finish","exitstatus":0,"running":null}"#,
        ] {
            let fast = Event::parse(line).expect(line);
            assert_eq!(format!("{fast:?}"), format!("{:?}", generic(line).unwrap()));
        }
    }

    #[test]
    fn a_setting_keeps_its_whole_name_and_any_test_may_read_it() {
        let text = "setting:logging.getLogger('app:db')";
        let change = StateChange::parse(text);
        assert_eq!(
            change,
            StateChange::Setting("logging.getLogger('app:db')".into())
        );
        assert_eq!(change.to_string(), text);
        assert!(change.read_by_anyone());
    }

    #[test]
    fn lines_that_are_not_events_are_none_and_unknown_events_are_other() {
        assert!(Event::parse("not json").is_none());
        assert!(Event::parse(r#"{"event":"test","nodeid":3}"#).is_none());
        assert!(matches!(
            Event::parse(r#"{"event":"something_new","x":1}"#),
            Some(Event::Other)
        ));
    }
}
