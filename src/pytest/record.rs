//! What a run records besides outcomes and file traces ([`Record`]): shared by the runner, which
//! asks it of a fresh process, and the fork server, which asks it of a forked child.

/// What a run records besides outcomes and file traces (`--fixgate-record`, the plugin's
/// `record.py`): the repository's code each test ran, and the shared state it left changed.
/// The audit asks it of its file-order run (both) and its reversed run (state). And, for the
/// replay on the base's fixture bytes, where a new case of a changed data file does not exist,
/// the tests of its order that its tree does not collect (`--fixgate-order-lenient`,
/// [`RunResult::uncollected`](crate::pytest::result::RunResult::uncollected)), where any other run fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) code: bool,
    pub(crate) state: bool,
    pub(crate) uncollected: bool,
}

impl Record {
    pub(crate) const NONE: Record = Record {
        code: false,
        state: false,
        uncollected: false,
    };
    pub(crate) const ALL: Record = Record {
        code: true,
        state: true,
        uncollected: false,
    };
    /// The replay's: only the tests not collected.
    pub(crate) const UNCOLLECTED: Record = Record {
        uncollected: true,
        ..Record::NONE
    };

    /// The plugin's options for it.
    pub(crate) fn options(self) -> Vec<String> {
        let mut out = Vec::new();
        if self.code || self.state {
            out.push(format!("--fixgate-record={}", self.arg()));
        }
        if self.uncollected {
            out.push("--fixgate-order-lenient".into());
        }
        out
    }

    /// What it is in a run's key.
    pub(crate) fn key(self) -> String {
        let mut key = self.arg();
        if self.uncollected {
            key.push_str("+uncollected");
        }
        key
    }

    /// The option's value: what the plugin records per test.
    pub(crate) fn arg(self) -> String {
        let mut parts = Vec::new();
        if self.code {
            parts.push("code");
        }
        if self.state {
            parts.push("state");
        }
        parts.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_record_is_its_options_its_key_and_the_forked_childs_argument() {
        assert_eq!(Record::NONE.options(), Vec::<String>::new());
        assert_eq!(
            (Record::NONE.key(), Record::NONE.arg()),
            (String::new(), String::new())
        );
        assert_eq!(Record::ALL.options(), ["--fixgate-record=code,state"]);
        assert_eq!(Record::ALL.key(), "code,state");
        let state = Record {
            state: true,
            ..Record::NONE
        };
        assert_eq!(state.options(), ["--fixgate-record=state"]);
        assert_eq!(Record::UNCOLLECTED.options(), ["--fixgate-order-lenient"]);
        assert_eq!(Record::UNCOLLECTED.key(), "+uncollected");
        let both = Record {
            code: true,
            ..Record::UNCOLLECTED
        };
        assert_eq!(
            both.options(),
            ["--fixgate-record=code", "--fixgate-order-lenient"]
        );
        assert_eq!(both.key(), "code+uncollected");
        // Two records that run differently never share a key.
        let all = [Record::NONE, Record::ALL, state, Record::UNCOLLECTED, both];
        let keys: std::collections::BTreeSet<String> = all.iter().map(|r| r.key()).collect();
        assert_eq!(keys.len(), all.len());
    }
}
