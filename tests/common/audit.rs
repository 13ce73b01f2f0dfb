//! An audit by the real binary, the one way the tests run one, and readers of its JSON report.

use std::path::Path;

use serde_json::{json, Value};

use super::{fixgate_at, fixgate_within_telling, python, Run, TestRepo};

impl TestRepo {
    /// The usual audit of this repository, with its own cache directory: `fixgate audit --base
    /// BASE --head HEAD --quiet` (see [`Audit`]).
    pub fn audit(&self, base: &str, head: &str) -> Audit<'_> {
        Audit::at(self.path(), self.cache.path())
            .sides(base, head)
            .quiet()
    }

    /// The work tree's audit against `base`, with the repository's own cache directory:
    /// `fixgate audit --base BASE --quiet` (see [`Audit`]).
    pub fn audit_tree(&self, base: &str) -> Audit<'_> {
        Audit::at(self.path(), self.cache.path())
            .args(&["--base", base])
            .quiet()
    }
}

/// One audit by the real binary, the one way the tests run one: `fixgate audit --format json
/// --python <the tests' interpreter>` in a work tree with a cache directory, and what the test
/// adds (the sides, `--quiet`, options, variables).
#[derive(Clone)]
pub struct Audit<'a> {
    cwd: &'a Path,
    cache: &'a Path,
    format: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl<'a> Audit<'a> {
    /// An audit in `cwd` with the cache directory `cache`, and no option yet.
    pub fn at(cwd: &'a Path, cache: &'a Path) -> Audit<'a> {
        Audit {
            cwd,
            cache,
            format: "json".into(),
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    /// `--base BASE --head HEAD`.
    pub fn sides(self, base: &str, head: &str) -> Audit<'a> {
        self.args(&["--base", base, "--head", head])
    }

    /// `--quiet`: no progress and no warnings on standard error.
    pub fn quiet(self) -> Audit<'a> {
        self.args(&["--quiet"])
    }

    /// `--seeds N`: how many shuffled orders.
    pub fn seeds(self, n: u32) -> Audit<'a> {
        self.args(&["--seeds", &n.to_string()])
    }

    /// `--format FORMAT` instead of `json`.
    pub fn format(mut self, format: &str) -> Audit<'a> {
        self.format = format.into();
        self
    }

    /// More options, after those given before.
    pub fn args(mut self, args: &[&str]) -> Audit<'a> {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Variables for the binary's environment.
    pub fn env(mut self, env: &[(&str, &str)]) -> Audit<'a> {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        self.env.extend(env);
        self
    }

    /// Runs `f` with the command line and the variables as `fixgate_at` takes them.
    fn with_argv<T>(&self, f: impl FnOnce(&[&str], &[(&str, &str)]) -> T) -> T {
        let python = python();
        let argv: Vec<&str> = ["audit", "--format", &self.format]
            .into_iter()
            .chain(self.args.iter().map(String::as_str))
            .chain([
                "--python",
                python.to_str().expect("a UTF-8 interpreter path"),
            ])
            .collect();
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        f(&argv, &env)
    }

    /// Runs the audit.
    pub fn run(&self) -> Run {
        self.with_argv(|argv, env| fixgate_at(self.cwd, self.cache, env, argv))
    }

    /// Runs the audit: the run and its JSON report.
    pub fn report(&self) -> (Run, Value) {
        let run = self.run();
        let report = run.json();
        (run, report)
    }

    /// Runs the audit, asserts that it exits with `code` (showing the run when not) and returns
    /// its JSON report.
    #[track_caller]
    pub fn report_exiting(&self, code: i32) -> Value {
        let (run, report) = self.report();
        assert_eq!(run.code, code, "{run:?}");
        report
    }

    /// Runs the audit, stopped and failed with what it wrote (and what `context` says then) if
    /// it is not done within `limit`.
    pub fn run_within(&self, limit: std::time::Duration, context: impl Fn() -> String) -> Run {
        self.with_argv(|argv, env| {
            fixgate_within_telling(self.cwd, self.cache, env, argv, limit, context)
        })
    }

    /// [`Audit::report`], and the same audit run the other way (scoped when it did not ask for
    /// `--scoped`, whole orders when it did) judging alike: the verdict, every bucket, every
    /// pair (issue 21: a scoped audit is sound wherever the traces are complete).
    pub fn report_both_ways(&self) -> (Run, Value) {
        let (run, first) = self.report();
        let scoped = self.args.iter().any(|a| a == "--scoped");
        let mut other = self.clone();
        other.args.retain(|a| a != "--scoped");
        if !scoped {
            other.args.push("--scoped".into());
        }
        let (_, second) = other.report();
        let (scoped_v, full_v) = match scoped {
            true => (&first, &second),
            false => (&second, &first),
        };
        assert_eq!(
            judgment(scoped_v),
            judgment(full_v),
            "the scoped audit (scope {}) and the whole orders disagree",
            scoped_v["scope"]
        );
        (run, first)
    }
}

/// The verdict, every test's bucket and every pair of an audit report: what a scoped audit and
/// `--full` must agree on (issue 21).
pub fn judgment(v: &Value) -> Value {
    let buckets: std::collections::BTreeMap<String, Value> = v["tests"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| {
                    (
                        t["nodeid"].as_str().unwrap_or("").to_string(),
                        t["bucket"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut pairs: Vec<Value> = v["pairs"]
        .as_array()
        .map(|p| {
            p.iter()
                .map(|p| json!([p["kind"], p["victim"], p["culprits"], p["introduced"]]))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort_by_key(|p| p.to_string());
    json!({"verdict": v["verdict"], "exit_code": v["exit_code"], "buckets": buckets, "pairs": pairs})
}

/// The report's entry for `nodeid`.
#[track_caller]
pub fn test<'a>(v: &'a Value, nodeid: &str) -> &'a Value {
    let tests = v["tests"].as_array().expect("tests is an array");
    tests
        .iter()
        .find(|t| t["nodeid"] == nodeid)
        .unwrap_or_else(|| {
            let ids: Vec<&str> = tests.iter().filter_map(|t| t["nodeid"].as_str()).collect();
            panic!("no test {nodeid} in the report; it has {ids:?}")
        })
}

/// The bucket of `nodeid`.
#[track_caller]
pub fn bucket(v: &Value, nodeid: &str) -> String {
    test(v, nodeid)["bucket"].as_str().unwrap().to_string()
}

/// The findings of one kind.
pub fn findings<'a>(v: &'a Value, kind: &str) -> Vec<&'a Value> {
    v["findings"]
        .as_array()
        .expect("findings is an array")
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect()
}

/// The report's warnings.
pub fn warnings(v: &Value) -> Vec<String> {
    v["warnings"]
        .as_array()
        .expect("warnings is an array")
        .iter()
        .map(|w| w.as_str().unwrap().to_owned())
        .collect()
}
