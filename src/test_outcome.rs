//! The outcome of one test in one run: the words every run, report and judgment of fixgate
//! shares. It lives at the top, below all of them: the run's bounds (src/limits.rs) name the
//! outcome a test that hit one gets, and the runs (src/pytest/) depend on those bounds.

use serde::{Deserialize, Serialize};

/// The outcome of one test in one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Outcome {
    Passed,
    Failed,
    /// Setup or teardown failed.
    Error,
    Skipped,
    Xfailed,
    Xpassed,
    /// The test killed the interpreter.
    Crashed,
    /// The test ran past `--test-timeout` and was killed.
    Timeout,
    /// The test hit one of the run's bounds (memory, processes, disk): see src/limits.rs.
    #[serde(rename = "resource-limit")]
    ResourceLimit,
}

impl Outcome {
    /// Every outcome (the tests walk them).
    #[cfg(test)]
    pub(crate) const ALL: [Outcome; 9] = [
        Outcome::Passed,
        Outcome::Failed,
        Outcome::Error,
        Outcome::Skipped,
        Outcome::Xfailed,
        Outcome::Xpassed,
        Outcome::Crashed,
        Outcome::Timeout,
        Outcome::ResourceLimit,
    ];

    pub(crate) fn parse(s: &str) -> Outcome {
        match s {
            "passed" => Outcome::Passed,
            "failed" => Outcome::Failed,
            "skipped" => Outcome::Skipped,
            "xfailed" => Outcome::Xfailed,
            "xpassed" => Outcome::Xpassed,
            _ => Outcome::Error,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::Error => "error",
            Outcome::Skipped => "skipped",
            Outcome::Xfailed => "xfailed",
            Outcome::Xpassed => "xpassed",
            Outcome::Crashed => "crashed",
            Outcome::Timeout => "timeout",
            Outcome::ResourceLimit => "resource-limit",
        }
    }

    /// One letter per outcome, for the reports' grids: `P` passed, `F` failed, `E` error, `S`
    /// skipped, `C` crashed, `T` timeout, `L` a resource limit (a run's bound), `X` xfailed or
    /// xpassed.
    pub(crate) fn letter(self) -> &'static str {
        match self {
            Outcome::Passed => "P",
            Outcome::Failed => "F",
            Outcome::Error => "E",
            Outcome::Skipped => "S",
            Outcome::Crashed => "C",
            Outcome::Timeout => "T",
            Outcome::ResourceLimit => "L",
            Outcome::Xfailed | Outcome::Xpassed => "X",
        }
    }

    /// Whether this outcome counts as green: the one rule, used by triage, the matrix, the
    /// search and every base check.
    pub(crate) fn is_green(self) -> bool {
        matches!(self, Outcome::Passed | Outcome::Skipped | Outcome::Xfailed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_is_written_as_its_word_in_reports_and_read_back_from_the_plugins() {
        for o in Outcome::ALL {
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, format!("\"{}\"", o.as_str()));
            assert_eq!(serde_json::from_str::<Outcome>(&json).unwrap(), o);
        }
        // The plugin reports the five outcomes of pytest's own; anything else is an error.
        for o in &Outcome::ALL[..6] {
            assert_eq!(Outcome::parse(o.as_str()), *o);
        }
        assert_eq!(Outcome::parse("crashed"), Outcome::Error);
        assert_eq!(Outcome::parse(""), Outcome::Error);
        let green: Vec<Outcome> = Outcome::ALL.into_iter().filter(|o| o.is_green()).collect();
        assert_eq!(green, [Outcome::Passed, Outcome::Skipped, Outcome::Xfailed]);
    }
}
